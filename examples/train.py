"""Train a classifier in float32, AMP or float16, with the flags of gluoncv's scripts.

Defaults run offline: scikit-learn's digits and the project's digits CNN. Examples::

    python examples/train.py --amp                              # digits CNN, AMP, dynamic scaling
    python examples/train.py --dtype float16 --static-loss-scale 128
    python examples/train.py --model cifar_resnet20_v1 --amp --epochs 1
    python examples/train.py --dataset cifar10 --data-dir ~/.mxnet/datasets/cifar10 --amp

``--amp`` uses ``mxnet.contrib.amp`` through mxmixed (float32 params, float16 compute).
``--dtype float16`` casts the net to float16 and trains with float32 master weights. On a CPU,
float16 is emulated: numerics, not speed.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="digits_cnn",
                        help="digits_cnn, or any gluoncv classification model name")
    parser.add_argument("--amp", action="store_true", help="automatic mixed precision")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                        help="float16: net.cast('float16') with float32 master weights")
    parser.add_argument("--static-loss-scale", type=float, default=None,
                        help="a static loss scale (default: dynamic for --amp, 128 for float16)")
    parser.add_argument("--kvstore", default="device")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", default="digits", choices=("digits", "cifar10"))
    parser.add_argument("--data-dir", default=None, help="where CIFAR-10 lies (never downloaded)")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as err:
        print("train.py: error: %s" % err, file=sys.stderr)
        return 2


def run(args):
    import mxnet as mx

    from mxmixed.tutorial import cifar10_loaders, digits_cnn, digits_loaders, train_precision

    if args.amp and args.dtype == "float16":
        raise ValueError("--amp and --dtype float16 are two ways of mixed precision; pick one")
    if args.epochs < 1 or args.batch_size < 1:
        raise ValueError("--epochs and --batch-size must be at least 1")
    if args.static_loss_scale is not None and not (args.amp or args.dtype == "float16"):
        raise ValueError("--static-loss-scale needs --amp or --dtype float16")
    precision = "amp" if args.amp else args.dtype
    ctx = mx.gpu() if mx.context.num_gpus() else mx.cpu()
    gluoncv_model = args.model != "digits_cnn"
    if args.dataset == "cifar10":
        loaders = cifar10_loaders(args.batch_size, root=args.data_dir, download=False)
        size, channels = 32, 3
    else:
        size, channels = (32, 3) if gluoncv_model else (8, 1)
        loaders = digits_loaders(args.batch_size, seed=args.seed, size=size, channels=channels)

    def build_net():
        mx.random.seed(args.seed)
        if not gluoncv_model:
            return digits_cnn(seed=args.seed, ctx=ctx, in_channels=channels,
                              image_size=size)
        from gluoncv.model_zoo import get_model

        try:
            net = get_model(args.model, pretrained=False, classes=10)
        except ValueError as err:
            raise ValueError("unknown --model %r: %s" % (args.model, str(err).splitlines()[0]))
        net.initialize(mx.init.Xavier(), ctx=ctx)
        return net

    print("training %s on %s in %s (%s)%s" % (
        args.model, args.dataset, precision, ctx,
        "; float16 is emulated on CPU (numerics, not speed)"
        if precision != "float32" and ctx.device_type == "cpu" else ""))
    result = train_precision(precision, build_net, loaders, epochs=args.epochs,
                             learning_rate=args.lr, scaler=args.static_loss_scale, ctx=ctx,
                             progress=not args.no_progress, kvstore=args.kvstore)
    scale = "-" if result["scales"] is None else "%g" % result["scales"][-1]
    print("final loss %.4f | loss scale %s | skipped steps %d | param bytes %d"
          % (result["losses"][-1], scale, result["skipped"], result["param_bytes"]))
    print("test accuracy: %.2f%%" % (100 * result["accuracy"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
