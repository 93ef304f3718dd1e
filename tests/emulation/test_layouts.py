"""Kept oneDNN layouts (the default) train 1-D, 2-D and 3-D convolutions with BatchNorm.

MXNet's oneDNN BatchNorm reads a 3-D or 5-D input through a 4-D reshape, a view, and a view of
a blocked array fails its check (``Check failed: !is_view``). The rounding op keeps the layout
of 4-D arrays only and rounds the others in plain layout. Each net takes AMP training steps
under the emulation on both routes, each in a fresh interpreter (AMP cannot be undone): the
losses are finite, the 2-D net's roundings did run on blocked arrays, and the outputs and
updated weights agree with the plain-layout route (``MXMIXED_EMULATION_KEEP_LAYOUTS=0``) within
a float16 rounding of their scale: the routes differ only in BatchNorm's float32 bits.
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN = r"""
import json, sys
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn
import mxmixed
from mxmixed.emulation import _round16

mxmixed.init()
results = {}
for dim in (1, 2, 3):
    mx.random.seed(0)
    conv = {1: nn.Conv1D, 2: nn.Conv2D, 3: nn.Conv3D}[dim]
    net = nn.HybridSequential()
    net.add(conv(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"),
            conv(8, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
            nn.Dense(4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    mxmixed.init_trainer(trainer, 128.0)
    rng = np.random.RandomState(dim)
    x = mx.nd.array(rng.standard_normal((4, 3) + (6,) * dim))
    y = mx.nd.array(rng.randint(0, 4, 4))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses, applied = [], 0
    for _ in range(4):
        with autograd.record():
            loss = loss_fn(net(x), y).mean()
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        applied += mxmixed.step(trainer, 1)
        losses.append(float(loss.asscalar()))
    out = net(x)
    weight = net[3].weight.data()
    results[dim] = {"losses": losses, "applied": applied, "dtype": np.dtype(out.dtype).name,
                    "out": out.astype("float32").asnumpy().tolist(),
                    "weight": weight.asnumpy().tolist(), "blocked": _round16.blocked_calls()}
results["status"] = _round16.status()
with open(sys.argv[1], "w") as handle:
    json.dump(results, handle)
"""


def train(tmp_path, keep):
    out = tmp_path / ("keep%s.json" % keep)
    env = dict(os.environ, MXMIXED_EMULATION_KEEP_LAYOUTS=keep, PYTHONPATH=ROOT)
    proc = run_command([sys.executable, "-c", TRAIN, str(out)], env=env, cwd=ROOT,
                       capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def routes(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("layouts")
    return train(tmp_path, "1"), train(tmp_path, "0")


@pytest.mark.slow
@pytest.mark.parametrize("dim", ["1", "2", "3"])
def test_amp_training_with_batchnorm_runs_on_kept_layouts(routes, dim):
    kept, plain = routes
    assert kept["status"] == "built and loaded; keeps oneDNN layouts"
    assert plain["status"] == "built and loaded; plain layouts"
    assert kept[dim]["dtype"] == "float16"
    assert np.isfinite(kept[dim]["losses"]).all()
    assert kept[dim]["applied"] == plain[dim]["applied"] >= 3  # the updates went through
    # the counter adds up over the nets, 1-D, 2-D, 3-D: only the 2-D net's roundings kept
    # oneDNN's layout, the others' arrays were rounded in plain layout
    assert kept["1"]["blocked"] == 0 < kept["2"]["blocked"] == kept["3"]["blocked"]
    for name in ("out", "weight"):
        a, b = np.asarray(kept[dim][name]), np.asarray(plain[dim][name])
        scale = np.abs(b).max()
        assert scale > 0
        # BatchNorm's float32 bits differ between layouts; a float16 rounding or a few
        # propagated through four steps, never more
        assert np.abs(a - b).max() <= 8 * 2.0 ** -11 * scale, (name, np.abs(a - b).max(), scale)
