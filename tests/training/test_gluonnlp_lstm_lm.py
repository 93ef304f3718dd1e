"""GluonNLP's LSTM language models (``gluonnlp.model.StandardRNN`` and ``AWDRNN``, weight drop
included) train under ``mxmixed.init()`` with dynamic loss scaling on the CPU emulation: their
decoder runs in float16, the scaler backs off from a scale that overflows and grows again after
clean steps, and they learn as their float32 runs do. The corpus is the source of Python's
``textwrap`` module, character by character; one fresh process (AMP cannot be undone) trains the
float32 runs first, then the AMP runs."""
import json
import os
import sys
import textwrap

import pytest

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent('''
    import gc, inspect, json, textwrap
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluonnlp as nlp
    import mxmixed

    T, N, STEPS, INIT_SCALE = 16, 16, 40, 2.0 ** 20
    text = inspect.getsource(textwrap)
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], dtype=np.float32)
    columns = ids[: len(ids) // N * N].reshape(N, -1).T


    def detach(states):
        if isinstance(states, mx.nd.NDArray):
            return states.detach()
        return [detach(s) for s in states]


    def build(kind):
        mx.random.seed(0)
        if kind == "StandardRNN":
            net = nlp.model.StandardRNN("lstm", len(chars), 16, 32, 1, dropout=0.0,
                                        tie_weights=False)
        else:
            net = nlp.model.AWDRNN("lstm", len(chars), 16, 32, 1, tie_weights=False, dropout=0.0,
                                   weight_drop=0.2, drop_h=0.0, drop_i=0.0, drop_e=0.0)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        return net


    def train(kind, amp):
        net = build(kind)
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-2},
                                update_on_kvstore=False)
        if amp:
            scaler = mxmixed.init_trainer(trainer, mxmixed.LossScaler(
                init_scale=INIT_SCALE, max_scale=2.0 ** 24, growth_interval=10))
        loss_fn = gluon.loss.SoftmaxCELoss()
        states = net.begin_state(batch_size=N, func=mx.nd.zeros)
        losses, scales = [], []
        for step in range(STEPS):
            start = step * T
            X = mx.nd.array(columns[start:start + T])
            y = mx.nd.array(columns[start + 1:start + T + 1])
            states = detach(states)
            with autograd.record():
                out, states = net(X, states)
                loss = loss_fn(out, y).mean()
                if amp:
                    with mxmixed.scale_loss(loss, trainer) as scaled:
                        scaled.backward()
                else:
                    loss.backward()
            if amp:
                scales.append(scaler.loss_scale)
                mxmixed.step(trainer, 1)
            else:
                trainer.step(1)
            losses.append(float(loss.asscalar()))
        return {"losses": losses, "scales": scales, "dtype": np.dtype(out.dtype).name,
                "skipped": scaler.skipped_steps if amp else 0}


    runs = {kind: {"float32": train(kind, False)} for kind in ("StandardRNN", "AWDRNN")}
    gc.collect()
    mxmixed.init()
    for kind in runs:
        runs[kind]["amp"] = train(kind, True)
    print(json.dumps({"runs": runs, "uniform_loss": float(np.log(len(chars))),
                      "init_scale": INIT_SCALE}))
''')


@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory):
    pytest.importorskip("gluonnlp")
    folder = tmp_path_factory.mktemp("lm")
    script = folder / "lm.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT, MXNET_HOME=str(folder / "mxnet_home"))
    proc = run_command([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       cwd=str(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tail(losses):
    return sum(losses[-5:]) / 5


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["StandardRNN", "AWDRNN"])
def test_gluonnlp_lstm_lm_runs_its_decoder_in_float16_under_amp(lm_runs, kind):
    assert lm_runs["runs"][kind]["amp"]["dtype"] == "float16"
    assert lm_runs["runs"][kind]["float32"]["dtype"] == "float32"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["StandardRNN", "AWDRNN"])
def test_the_loss_scale_backs_off_on_overflow_and_grows_after_clean_steps(lm_runs, kind):
    run = lm_runs["runs"][kind]["amp"]
    scales = run["scales"]
    assert scales[0] == lm_runs["init_scale"]
    assert run["skipped"] >= 1
    low = scales.index(min(scales))
    assert min(scales) < scales[0] and max(scales[low:]) > min(scales)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["StandardRNN", "AWDRNN"])
def test_gluonnlp_lstm_lm_learns_under_amp_as_in_float32(lm_runs, kind):
    amp, float32 = lm_runs["runs"][kind]["amp"], lm_runs["runs"][kind]["float32"]
    assert _tail(float32["losses"]) < 0.8 * lm_runs["uniform_loss"]
    assert abs(_tail(amp["losses"]) - _tail(float32["losses"])) < 0.05 * _tail(float32["losses"])
