"""Overhead of mxmixed's Gluon helpers over raw ``mxnet.contrib.amp``, side by side.

Both loops train the same digits CNN (hybridized, batch 64) with AMP and the same CPU float16
emulation: one through ``mxnet.contrib.amp`` (init, init_trainer, scale_loss, trainer.step),
the other through ``mxmixed`` (init, init_trainer, scale_loss, step). The small net makes the
helpers' fixed per-step cost as visible as it can be. Goal: at most 3% overhead, median per-step
time over at least 50 steps.

Usage: ``python benchmarks/overhead.py [--rounds N] [--steps N] [--json PATH]``
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _workers import compare  # noqa: E402

SETUP = r"""
def setup(helpers, batch=64):
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp
    import mxmixed
    from mxmixed.tutorial import digits_cnn
    if helpers:
        mxmixed.init(emulate=True)
    else:
        mxmixed.emulation.enable()
        amp.init()
    net = digits_cnn(seed=0)
    net.hybridize(static_alloc=True, static_shape=True)
    X = mx.nd.random.uniform(shape=(batch, 1, 8, 8))
    y = mx.nd.array(mx.nd.random.randint(0, 10, shape=(batch,)).asnumpy())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                            update_on_kvstore=False)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if helpers:
        mxmixed.init_trainer(trainer)
        def step():
            with autograd.record():
                loss = loss_fn(net(X), y)
                with mxmixed.scale_loss(loss, trainer) as scaled:
                    scaled.backward()
            mxmixed.step(trainer, batch)
    else:
        amp.init_trainer(trainer)
        def step():
            with autograd.record():
                loss = loss_fn(net(X), y)
                with amp.scale_loss(loss, trainer) as scaled:
                    scaled.backward()
            trainer.step(batch)
    return step
"""


def run(rounds=6, steps=25):
    """Return the side-by-side result (ratio = mxmixed / raw AMP step time)."""
    figure = compare(SETUP, {"helpers": False}, {"helpers": True}, rounds=rounds, steps=steps)
    figure.update({"workload": "digits_cnn", "goal": "<= 1.03",
                   "figure": "mxmixed helpers step / mxnet.contrib.amp step (CPU, emulated)"})
    return figure


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    r = run(args.rounds, args.steps)
    print("Helper overhead: mxmixed step / raw mxnet.contrib.amp step, %d x %d steps each"
          % (r["rounds"], r["steps_per_round"]))
    print("raw amp %.4f s/step | mxmixed %.4f s/step | ratio %.3f (spread %.3f-%.3f) | goal %s"
          % (r["baseline_s_per_step"], r["variant_s_per_step"], r["ratio_median"], r["ratio_min"],
             r["ratio_max"], r["goal"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([r], handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
