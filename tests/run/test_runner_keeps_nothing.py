"""``mxmixed run`` keeps nothing of what a script drops: a script that trains fold after fold and
drops each fold's model and Trainer gets them freed, as under plain python (the runner's step
record once held every Trainer, and through it every model and optimizer state: +66 MB a fold
for 9 folds). Counted by weak references after ``gc.collect()``, inside the script."""
import os
import sys
import textwrap

import pytest

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Three folds, each with its own model and Trainer (with MXNet's AMP loss scaler under
# --amp-script), a few steps and a clip by global norm (the runner's clipping watch); each fold
# is dropped before the next one starts.
FOLDS = """
    import gc, sys, weakref
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp

    scaled = "--amp-script" in sys.argv
    if scaled:
        amp.init()
    refs = []
    for fold in range(3):
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
        net.initialize()
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01},
                                update_on_kvstore=False)
        if scaled:
            amp.init_trainer(trainer)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        X, y = mx.nd.random.uniform(shape=(8, 5)), mx.nd.array([1] * 8)
        for _ in range(3):
            with autograd.record():
                loss = loss_fn(net(X), y)
                if scaled:
                    with amp.scale_loss(loss, trainer) as scaled_loss:
                        scaled_loss.backward()
                else:
                    loss.backward()
            trainer.step(8)
        gluon.utils.clip_global_norm([p.grad() for p in net.collect_params().values()], 1e9)
        refs.append([weakref.ref(net), weakref.ref(trainer), weakref.ref(net[0].weight)])
        if scaled and trainer._amp_loss_scaler is not amp.amp._loss_scaler:
            # (MXNet gives the first Trainer its global scaler, and keeps that)
            refs[-1].append(weakref.ref(trainer._amp_loss_scaler))
        del net, trainer, loss_fn, loss, X, y
    mx.nd.waitall()
    gc.collect()
    print("alive", sum(ref() is not None for fold in refs for ref in fold), "of",
          sum(len(fold) for fold in refs))
"""


@pytest.mark.slow
@pytest.mark.parametrize("runner, script_args", [
    ([], []),
    (["--report", "{report}"], []),
    (["--report", "{report}"], ["--amp-script"]),
    (["--no-emulation", "--report", "{report}"], []),
    (["--amp", "float16", "--report", "{report}"], []),
])
def test_the_models_and_trainers_a_script_drops_are_freed_under_the_runner(
        tmp_path, runner, script_args):
    script = tmp_path / "folds.py"
    script.write_text(textwrap.dedent(FOLDS))
    runner = [arg.format(report=tmp_path / "r.json") for arg in runner]
    proc = run_command([sys.executable, "-m", "mxmixed.run"] + runner + [str(script)]
                       + script_args, capture_output=True, text=True, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    total = 11 if script_args else 9
    assert proc.stdout.split() == ["alive", "0", "of", str(total)], proc.stderr[-3000:]
