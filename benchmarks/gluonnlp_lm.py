"""A gluonnlp LSTM language model under AMP: float32, float16 without loss scaling, float16 with
dynamic loss scaling (the three runs of NVIDIA's bigLSTM experiment, in miniature).

The model is ``gluonnlp.model.StandardRNN`` (an LSTM, no dropout, so the runs differ only in
precision), word level on the standard library's docstrings (``mxmixed.tutorial.text``: ships
with Python, nothing is downloaded), truncated BPTT with the state carried from window to
window, Adam, the loss the *mean* token cross-entropy (as bigLSTM and GluonNLP's language-model
scripts), gradients clipped to a global norm of 1 on the true gradients. The three runs share a
seed, the data and the loop; they run in one process through ``mxmixed.amp_scope``, on the CPU
emulation (float16 numerics, not speed). "Without loss scaling" is ``LossScaler.static(1.0)``.

Besides the losses (training: mean of the last 20 steps; validation: the held-out tenth of the
corpus), each run measures, on its last window, the share of the nonzero gradient values of the
logits (``(softmax - onehot) / tokens``, computed in float64) that round to zero in float16 at
the scale the run uses: the gradients the paper blames for bigLSTM's late divergence.

Usage: ``python benchmarks/gluonnlp_lm.py [--steps N] [--json PATH]`` (run by hand; the
figures are quoted in docs/gluon.md).
"""
import argparse
import json
import sys

import gluonnlp as nlp
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxmixed
from mxmixed.diagnostics import FLOAT16_ROUND_TO_ZERO
from mxmixed.tutorial.text import BPTTBatches, stdlib_corpus

MODES = ("float32", "float16-unscaled", "float16-scaled")


def detach(states):
    return states.detach() if isinstance(states, mx.nd.NDArray) else [detach(s) for s in states]


def logits_underflow(logits, y, scale):
    """Share of the nonzero logit gradients ``scale * (softmax - onehot) / tokens`` that round
    to zero in float16."""
    z = logits.astype("float32").asnumpy().astype(np.float64).reshape(-1, logits.shape[-1])
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(p)), y.asnumpy().reshape(-1).astype(int)] -= 1.0
    g = np.abs(p) * scale / len(p)
    nonzero = g[g > 0]
    return float((nonzero <= FLOAT16_ROUND_TO_ZERO).mean())


def valid_loss(net, corpus, batch_size, seq_len):
    batches = BPTTBatches(corpus.valid, batch_size, seq_len)
    loss_fn = gluon.loss.SoftmaxCELoss()
    states, total = net.begin_state(batch_size=batch_size, func=mx.nd.zeros), 0.0
    for i in range(len(batches)):
        x, y = batches[i]
        out, states = net(mx.nd.array(x), states)
        total += float(loss_fn(out.astype("float32"), mx.nd.array(y)).mean().asscalar())
    return total / len(batches)


def step(net, loss_fn, trainer, X, Y, states, amp):
    """One optimizer step on the mean token loss, clipped to a global norm of 1 (true gradients)."""
    with autograd.record():
        out, states = net(X, states)
        loss = loss_fn(out, Y).mean()
        if amp:
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        else:
            loss.backward()
    if amp:
        mxmixed.clip_global_norm(trainer, 1.0)
        mxmixed.step(trainer, 1)
    else:
        params = [p for p in trainer._params if p.grad_req != "null"]
        gluon.utils.clip_global_norm([p.grad() for p in params], 1.0)
        trainer.step(1)
    return out, loss, states


def train(mode, corpus, steps, batch_size=32, seq_len=35):
    """One run; its figures."""
    batches = BPTTBatches(corpus.train, batch_size, seq_len)
    with mxmixed.amp_scope(enabled=mode != "float32"):
        mx.random.seed(0)
        net = nlp.model.StandardRNN("lstm", len(corpus.vocab), 128, 512, 1, dropout=0.0,
                                    tie_weights=False)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 2e-3},
                                update_on_kvstore=False)
        scaler = None if mode == "float32" else mxmixed.init_trainer(
            trainer, mxmixed.LossScaler.static(1.0) if mode == "float16-unscaled" else "dynamic")
        loss_fn = gluon.loss.SoftmaxCELoss()
        losses, scales, underflow = [], [], []
        states = net.begin_state(batch_size=batch_size, func=mx.nd.zeros)
        for i in range(steps):
            x, y = batches[i % len(batches)]
            X, Y = mx.nd.array(x), mx.nd.array(y)
            states = detach(states)
            scales.append(scaler.loss_scale if scaler else None)
            out, loss, states = step(net, loss_fn, trainer, X, Y, states, scaler is not None)
            losses.append(float(loss.asscalar()))
            if i in (0, steps - 1):
                underflow.append(logits_underflow(out, Y, scales[-1] or 1.0))
        return {"mode": mode, "train_loss_first": float(np.mean(losses[:20])),
                "train_loss_last": float(np.mean(losses[-20:])),
                "valid_loss": valid_loss(net, corpus, batch_size, seq_len),
                "skipped": scaler.skipped_steps if scaler else 0,
                "scale_first": scales[0], "scale_last": scales[-1],
                "logits_underflow_first": underflow[0], "logits_underflow_last": underflow[-1],
                "out_dtype": np.dtype(out.dtype).name}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    corpus = stdlib_corpus("word", min_count=3)
    print("corpus %s: vocabulary %d, %d training and %d validation words"
          % (corpus.fingerprint, len(corpus.vocab), len(corpus.train), len(corpus.valid)))
    results = []
    for mode in MODES:
        results.append(train(mode, corpus, args.steps))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
