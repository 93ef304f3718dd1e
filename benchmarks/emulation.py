"""Cost of CPU float16 emulation: emulated AMP step time against the float32 step, side by side.

This measures what emulation costs on a CPU. It says nothing about GPU speed: emulation
reproduces float16 numerics, not float16 speed, and on a CPU it is always slower than float32.

Workloads: the tutorial digits CNN (batch 64, 8x8) and gluoncv's ``cifar_resnet20_v1``
(hybridized, batch 64, 3x32x32), one SGD training step each. Goals (issue 27): the emulated
step costs at most 1.8x the float32 step for the digits CNN and 1.25x for cifar_resnet20_v1
(issue 36).

Each workload is measured twice, each time side by side with a float32 worker of its own: the
default emulation (the rounding op keeps oneDNN's blocked layouts, so BatchNorm runs on them
as in the float32 model), and ``MXMIXED_EMULATION_KEEP_LAYOUTS=0`` (plain layouts: the bits
of results recorded before kept layouts became the default; see docs/emulation.md).

Usage: ``python benchmarks/emulation.py [--rounds N] [--steps N] [--json PATH]``
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _workers import SETTLE, compare, print_ratios  # noqa: E402

SETUP = SETTLE + r"""
def setup(model, amp_on, keep_layouts=True, batch=64):
    import os
    if not keep_layouts:  # read when the rounding op is first loaded
        os.environ["MXMIXED_EMULATION_KEEP_LAYOUTS"] = "0"
    import mxnet as mx
    from mxnet import autograd, gluon
    if amp_on:
        from mxnet.contrib import amp
        from mxmixed import emulation
        emulation.enable()
        amp.init()
    mx.random.seed(0)
    if model == "digits_cnn":
        from mxmixed.tutorial import digits_cnn
        net = digits_cnn(seed=0)
        X = mx.nd.random.uniform(shape=(batch, 1, 8, 8))
    else:
        from gluoncv.model_zoo import get_model
        net = get_model(model, pretrained=False, classes=10)
        net.initialize(mx.init.Xavier())
        X = mx.nd.random.uniform(shape=(batch, 3, 32, 32))
    y = mx.nd.array(mx.nd.random.randint(0, 10, shape=(batch,)).asnumpy())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                            update_on_kvstore=False)
    if amp_on:
        amp.init_trainer(trainer)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(X), y)
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

WORKLOADS = ("digits_cnn", "cifar_resnet20_v1")
GOALS = {"digits_cnn": "<= 1.8", "cifar_resnet20_v1": "<= 1.25"}
# A digits step takes a few milliseconds: its blocks take 20 times the steps, so that a block
# lasts a good part of a second, like a cifar_resnet20_v1 block, and a scheduler hiccup does
# not decide a round.
STEPS_FACTOR = {"digits_cnn": 20, "cifar_resnet20_v1": 1}


def run(rounds=5, steps=5):
    """Measure every workload; return a list of result dicts."""
    results = []
    for model in WORKLOADS:
        for keep, label in ((True, ""), (False, " (KEEP_LAYOUTS=0, plain layouts)")):
            figure = compare(SETUP, {"model": model, "amp_on": False},
                             {"model": model, "amp_on": True, "keep_layouts": keep},
                             rounds=rounds, steps=steps * STEPS_FACTOR[model])
            figure.update({"workload": model + label,
                           "figure": "emulated AMP step / float32 step (CPU)",
                           "goal": GOALS[model] if keep else None})
            results.append(figure)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5,
                        help="steps per block (the digits CNN: 20 times as many)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    print_ratios(run(args.rounds, args.steps), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
