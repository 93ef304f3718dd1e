"""The scaled-clipping trap: a script that clips its gradients by global norm while they still
carry the AMP loss scale (GluonNLP 0.10's ``finetune_classifier.py --dtype float16`` does) is
named by ``mxmixed run`` in one line and in its report, and ``--unscale-before-clip`` makes it
learn like float32 without editing it. The client is tests/data/clients/clip_scaled.py."""
import json
import os
import sys
import warnings

import mxnet as mx
import pytest
from mxnet import autograd, gluon

import mxmixed
from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = os.path.join(ROOT, "tests", "data", "clients", "clip_scaled.py")
STEPS = 40


def _line_of(text):
    """The line of the client that holds ``text`` (read from the client, not from mxmixed)."""
    with open(CLIENT) as f:
        found = [n for n, line in enumerate(f, 1) if text in line]
    assert len(found) == 1
    return found[0]


def _run(tmp_path, flags, args):
    """``mxmixed run FLAGS --report R clip_scaled.py ARGS``: (stderr lines, report, losses)."""
    report, losses = tmp_path / "report.json", tmp_path / "losses.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = run_command([sys.executable, "-m", "mxmixed.run"] + flags
                       + ["--report", str(report), CLIENT, "--save-losses", str(losses)]
                       + args, capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (proc.stderr.splitlines(), json.loads(report.read_text()),
            json.loads(losses.read_text()))


def _runner_lines(lines, about="clips gradients"):
    return [line for line in lines if line.startswith("mxmixed run:") and about in line]


@pytest.mark.slow
def test_clipping_scaled_gradients_warns_once_naming_the_line_and_the_report_counts_it(tmp_path):
    lines, report, losses = _run(tmp_path, [], ["--dtype", "float16", "--clip", "gluon"])
    line = _line_of("gluon.utils.clip_global_norm(")
    warned = _runner_lines(lines)
    assert len(warned) == 1, lines
    assert warned[0].startswith("mxmixed run: warning: %s:%d clips gradients that still carry "
                                "the loss scale 65536" % (CLIENT, line))
    assert "1 / 65536 = 1.53e-05" in warned[0] and "amp.unscale(trainer)" in warned[0]
    assert "--unscale-before-clip" in warned[0]
    site, = report["scaled_clipping"]
    assert (site["site"], site["function"], site["calls"]) == (
        "%s:%d" % (CLIENT, line), "gluon.utils.clip_global_norm", STEPS)
    assert (site["max_norm"], site["loss_scale"], site["unscaled"]) == (1.0, 65536.0, False)
    assert site["effective_max_norm"] == pytest.approx(1 / 65536)
    assert losses[-1] > 0.99 * losses[0]  # the trap: it learns nothing


@pytest.mark.slow
def test_unscale_before_clip_makes_the_unmodified_script_learn_like_float32(tmp_path):
    pytest.importorskip("gluonnlp")
    (tmp_path / "float16").mkdir()
    lines, report, losses = _run(tmp_path / "float16", ["--unscale-before-clip"],
                                 ["--dtype", "float16", "--clip", "gluonnlp"])
    plain_lines, _, plain = _run(tmp_path, [], ["--dtype", "float32", "--clip", "gluonnlp"])
    line = _line_of("nlp.utils.clip_grad_global_norm(")
    noted = _runner_lines(lines)
    assert noted == ["mxmixed run: %s:%d clips gradients that still carry the loss scale 65536 "
                     "(gluonnlp.utils.clip_grad_global_norm, max_norm 1); --unscale-before-clip "
                     "unscales them first (as amp.unscale(trainer) does), at every call"
                     % (CLIENT, line)]
    site, = report["scaled_clipping"]
    assert (site["calls"], site["unscaled"]) == (STEPS, True)
    # it learns as float32 does: both fall by more than a thousand times
    assert plain[-1] < 1e-3 * plain[0] and losses[-1] < 1e-3 * losses[0]
    assert report["summary"]["skipped"] < 10
    # the float16 run closes with what float16 did to its steps; the float32 run with a line
    # that says it never trained in float16
    closing, = _runner_lines(lines, "optimizer steps")
    assert closing == lines[-1]
    assert closing.startswith("mxmixed run: %d optimizer steps in float16 (emulated on the CPU"
                              % STEPS)
    assert ", %d skipped on overflow, loss scale 65536 -> " % report["summary"]["skipped"] \
        in closing
    assert _runner_lines(plain_lines, "optimizer steps") == [
        "mxmixed run: %d optimizer steps, all in float32: the script never trained in float16 "
        "(no AMP, no float16 parameters); --amp float16 trains it in float16" % STEPS]


@pytest.mark.slow
def test_a_threshold_multiplied_by_the_loss_scale_is_left_alone(tmp_path):
    pytest.importorskip("gluonnlp")
    lines, report, losses = _run(tmp_path, ["--unscale-before-clip"],
                                 ["--dtype", "float16", "--clip", "scaled"])
    assert _runner_lines(lines) == [] and report["scaled_clipping"] == []
    assert losses[-1] < 1e-3 * losses[0]


def _mxmixed_step(clip):
    """One mxmixed-managed AMP step on a Dense layer, clipped by ``clip(trainer, params)``."""
    with mxmixed.amp_scope():
        net = gluon.nn.Dense(1, in_units=4)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        mxmixed.init_trainer(trainer, scaler=1024)
        with autograd.record():
            loss = net(mx.nd.ones((8, 4))).sum()
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        params = list(net.collect_params().values())
        clip(trainer, params)
        mxmixed.step(trainer, 8)


def test_the_gluon_clip_on_an_mxmixed_trainers_scaled_gradients_warns_at_the_call():
    def clip(trainer, params):
        for _ in range(2):  # one warning for the site
            gluon.utils.clip_global_norm([p.grad() for p in params], 1.0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _mxmixed_step(clip)
    ours = [w for w in caught if "loss scale" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert os.path.abspath(ours[0].filename) == os.path.abspath(__file__)
    assert "loss scale 1024" in str(ours[0].message)
    assert "0.000977" in str(ours[0].message)
    assert "mxmixed.clip_global_norm(trainer, max_norm)" in str(ours[0].message)


def test_the_gluon_clip_after_mxmixed_unscale_does_not_warn():
    def clip(trainer, params):
        mxmixed.unscale(trainer)
        gluon.utils.clip_global_norm([p.grad() for p in params], 1.0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _mxmixed_step(clip)
    assert not [w for w in caught if "loss scale" in str(w.message)]


@pytest.mark.parametrize("max_norm", [float("inf"), float("nan"), 0.0, -1.0])
def test_odd_max_norms_under_the_watch_give_what_mxnet_gives(max_norm):
    """``clip_global_norm(max_norm=inf)`` (nan, 0, negative) on scaled gradients under the run's
    watch: MXNet's own result, not an OverflowError from the watch."""
    import warnings

    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    import mxmixed
    from mxmixed._core.patches import Patches
    from mxmixed.training import ClipWatch

    mxnet_clip = gluon.utils.clip_global_norm
    with mxmixed.amp_scope():
        net = gluon.nn.Dense(2, in_units=3)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd")
        mxmixed.init_trainer(trainer, scaler=8)
        with autograd.record():
            with mxmixed.scale_loss(net(mx.nd.ones((4, 3))).sum(), trainer) as scaled:
                scaled.backward()
        grads = [p.grad() for p in net.collect_params().values()]
        copies = [g.copy() for g in grads]
        patches = Patches("test watch")
        watch = ClipWatch(say=lambda record, text: None).install(patches)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = mxnet_clip(copies, max_norm)
                got = gluon.utils.clip_global_norm(grads, max_norm)
        finally:
            patches.undo()
            watch.uninstall()
    assert got == want or (np.isnan(got) and np.isnan(want))
    for g, c in zip(grads, copies):
        np.testing.assert_array_equal(g.asnumpy(), c.asnumpy())
