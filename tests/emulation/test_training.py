"""The digits CNN trains under ``amp.init()`` plus CPU emulation to float32 accuracy.

AMP's patches cannot be undone in MXNet 1.9.1, so the AMP runs happen in a fresh interpreter.
Its loss scaler is MXNet's own (``amp.init_trainer``), used exactly as MXNet documents it.
"""
import json

import numpy as np
import pytest

from conftest import run_python
from mxmixed.tutorial import digits_cnn, digits_loaders, fit

SEEDS = (0, 1, 2)
EPOCHS = 6

AMP_SCRIPT = """
import json, sys
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp
from mxmixed import emulation
from mxmixed.tutorial import digits_cnn, digits_loaders, evaluate

order = sys.argv[1] if len(sys.argv) > 1 else "emulation-first"
emulation.enable()
amp.init()
results = []
for hybridize in (False, True):
    for seed in %(seeds)r:
        train_loader, test_loader = digits_loaders(batch_size=64, seed=seed)
        net = digits_cnn(seed=seed)
        if hybridize:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": 0.1, "momentum": 0.9}, update_on_kvstore=False)
        amp.init_trainer(trainer)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        scales, dtypes = [], set()
        for epoch in range(%(epochs)d):
            for X, y in train_loader:
                with autograd.record():
                    out = net(X)
                    loss = loss_fn(out, y)
                    with amp.scale_loss(loss, trainer) as scaled:
                        autograd.backward(scaled)
                dtypes.add(str(out.dtype.__name__))
                trainer.step(X.shape[0])
                scales.append(trainer._amp_loss_scaler.loss_scale)
        results.append({"hybridize": hybridize, "seed": seed, "scales": scales,
                        "out_dtypes": sorted(dtypes),
                        "accuracy": evaluate(net, test_loader)})
print("RESULT=" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def amp_runs():
    proc = run_python(AMP_SCRIPT % {"seeds": SEEDS, "epochs": EPOCHS})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT=", 1)[1])


@pytest.fixture(scope="module")
def float32_accuracy():
    accs = []
    for seed in SEEDS:
        train_loader, test_loader = digits_loaders(batch_size=64, seed=seed)
        net = digits_cnn(seed=seed)
        net.hybridize()
        accs.append(fit(net, train_loader, test_loader, epochs=EPOCHS, progress=False)["accuracy"])
    return float(np.mean(accs))


@pytest.mark.slow
@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_amp_emulated_accuracy_not_a_point_below_float32(amp_runs, float32_accuracy, hybridize):
    """Above float32 is chance (one float32 seed alone moves 4 points, and CPUs whose float32
    kernels differ move the means by 1-2 points either way); below it by more than a point
    would be the precision's fault."""
    accs = [r["accuracy"] for r in amp_runs if r["hybridize"] == hybridize]
    assert len(accs) == len(SEEDS)
    gap = float32_accuracy - float(np.mean(accs))
    print("float32 %.4f, AMP+emulation (%s) %.4f, %.2f points below"
          % (float32_accuracy, "hybridized" if hybridize else "imperative", np.mean(accs),
             100 * gap))
    assert float32_accuracy > 0.9
    assert gap <= 0.01


@pytest.mark.slow
def test_amp_outputs_are_float16_under_emulation(amp_runs):
    assert all(r["out_dtypes"] == ["float16"] for r in amp_runs)


@pytest.mark.slow
def test_mxnet_loss_scaler_backs_off_from_2_pow_16_and_then_holds(amp_runs):
    for run in amp_runs:
        scales = run["scales"]
        assert scales[0] <= 2.0 ** 16
        # MXNet's rule: every change is a halving (overflow) or, after 2000 clean steps, a doubling.
        changes = [b / a for a, b in zip(scales, scales[1:]) if a != b]
        assert changes and all(c == 0.5 for c in changes)
        assert all(np.log2(s) == int(np.log2(s)) for s in scales)
        assert scales[-1] < 2.0 ** 16
