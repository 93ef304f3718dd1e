"""Train a small CIFAR-10-shaped network with the Module API, in the style of MXNet's
example/image-classification/train_cifar10.py: ``--dtype float16`` casts the data and the
network to float16 and trains with multi-precision SGD through ``Module.fit``.

This is the project's own client script, not a copy of MXNet's. It knows nothing about
mxmixed and trains on random data (``--num-examples``), so nothing is downloaded.
"""
import argparse
import json
import logging

import mxnet as mx
import numpy as np


def get_symbol(num_classes, dtype):
    data = mx.sym.var("data")
    if dtype == "float16":
        data = mx.sym.Cast(data, dtype="float16")
    x = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv0")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn0")
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    x = mx.sym.FullyConnected(x, num_hidden=num_classes, name="fc")
    if dtype == "float16":
        x = mx.sym.Cast(x, dtype="float32")
    return mx.sym.SoftmaxOutput(x, name="softmax")


def main():
    parser = argparse.ArgumentParser(description="train cifar10 (Module API)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-examples", type=int, default=32)
    parser.add_argument("--num-epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=2)
    parser.add_argument("--save-metrics", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)

    rng = np.random.RandomState(0)
    data = rng.uniform(-1, 1, (args.num_examples, 3, 16, 16)).astype(np.float32)
    label = rng.randint(0, 10, args.num_examples).astype(np.float32)
    train = mx.io.NDArrayIter(data, label, args.batch_size, shuffle=False)

    mod = mx.mod.Module(get_symbol(10, args.dtype), context=mx.cpu())
    metric = mx.metric.create("ce")
    mod.fit(train, eval_metric=metric, optimizer="sgd", num_epoch=args.num_epochs,
            optimizer_params={"learning_rate": args.lr, "momentum": 0.9,
                              "multi_precision": args.dtype == "float16"},
            initializer=mx.init.Xavier(),
            batch_end_callback=mx.callback.Speedometer(args.batch_size, args.log_interval))
    score = dict(mod.score(train, "ce"))  # the Speedometer resets the training metric
    if args.save_metrics:
        with open(args.save_metrics, "w") as f:
            json.dump({"train_ce": score["cross-entropy"]}, f)


if __name__ == "__main__":
    main()
