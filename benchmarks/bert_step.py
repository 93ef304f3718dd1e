"""Cost of CPU float16 emulation on a BERT training step: emulated AMP step / float32 step.

The workload is gluonnlp 0.10.0's ``BERTClassifier`` built from its classes with random weights
(a vocabulary of 1000; nothing is downloaded), hybridized, one Adam step on a fixed batch, in
two sizes (:data:`SIZES`), measured one after the other in one run: 2 layers, 2 heads, 128
units, feed-forward 512, sequence 64, batch 16; and 4 layers, 8 heads, 512 units, feed-forward
2048, sequence 128, batch 8. Its float16 attention runs
through the emulated ``_contrib_interleaved_matmul_selfatt_*`` GEMMs. As in
``benchmarks/emulation.py``, two persistent worker processes (float32, emulated AMP: AMP cannot
be undone in a process) time blocks of steps in alternation; the ratio is taken per round, and
the median with its min-max is reported. It says nothing about GPU speed.

Usage: ``python benchmarks/bert_step.py [--rounds N] [--steps N] [--json PATH]``
"""
import argparse
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _workers import SETTLE, compare, print_ratios  # noqa: E402

SETUP = SETTLE + r"""
def setup(amp_on, batch=16, length=64, units=128, layers=2, heads=2, vocab_size=1000):
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluonnlp as nlp
    if amp_on:
        from mxnet.contrib import amp
        from mxmixed import emulation
        emulation.enable()
        amp.init()
    mx.random.seed(0)
    encoder = nlp.model.BERTEncoder(num_layers=layers, units=units, hidden_size=4 * units,
                                    max_length=length, num_heads=heads, dropout=0.0)
    bert = nlp.model.BERTModel(encoder, vocab_size=vocab_size, token_type_vocab_size=2,
                               units=units, embed_size=units, use_pooler=True,
                               use_decoder=False, use_classifier=False)
    net = nlp.model.BERTClassifier(bert, num_classes=2, dropout=0.0)
    net.initialize(mx.init.Normal(0.02))
    net.hybridize(static_alloc=True, static_shape=True)
    rng = np.random.RandomState(0)
    tokens = mx.nd.array(rng.randint(0, vocab_size, size=(batch, length)))
    types = mx.nd.zeros((batch, length))
    valid = mx.nd.array(rng.randint(length // 2, length + 1, size=batch))
    y = mx.nd.array(rng.randint(0, 2, size=batch))
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-4},
                            update_on_kvstore=False)
    if amp_on:
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCELoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(tokens, types, valid), y)
            if amp_on:
                with amp.scale_loss(loss, trainer) as scaled:
                    autograd.backward(scaled)
        if not amp_on:
            loss.backward()
        trainer.step(batch)
    if amp_on:
        settle(step, trainer)
    return step
"""


#: The two BERT sizes: (name, setup options, steps per block as a share of ``--steps``).
SIZES = (
    ("gluonnlp BERTClassifier, 2x128, seq 64, batch 16", {}, 1.0),
    ("gluonnlp BERTClassifier, 4x512, seq 128, batch 8",
     {"layers": 4, "units": 512, "heads": 8, "length": 128, "batch": 8}, 0.4),
)
GOAL = "<= 1.5"


def run(rounds=5, steps=5):
    """Measure the BERT step in both sizes; a list of result dicts (or one saying why they were
    skipped)."""
    if importlib.util.find_spec("gluonnlp") is None:
        return [{"workload": "gluonnlp BERTClassifier", "skipped": "gluonnlp is not installed "
                 "(pip install gluonnlp==0.10.0, the nlp extra)"}]
    figures = []
    for workload, options, share in SIZES:
        load = os.getloadavg()[0]
        figure = compare(SETUP, dict(options, amp_on=False), dict(options, amp_on=True),
                         rounds=rounds, steps=max(1, round(steps * share)))
        figure.update({"workload": workload, "figure": "emulated AMP step / float32 step (CPU)",
                       "goal": GOAL, "load_average": [load, os.getloadavg()[0]]})
        figures.append(figure)
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    print_ratios(run(args.rounds, args.steps), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
