"""The ``mxmixed`` command line (also ``python -m mxmixed``)."""
import argparse
import sys

from ._version import __version__

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A bad command-line input, reported as one line and a non-zero exit."""


def _cmd_info(args):
    from .sysinfo import collect, format_info

    print(format_info(collect()))
    return 0


def _cmd_demo(args):
    import mxnet as mx

    from .data import digits_loaders
    from .fit import fit
    from .models import digits_cnn

    if args.epochs < 1:
        raise CLIError("--epochs must be at least 1")
    if args.batch_size < 1:
        raise CLIError("--batch-size must be at least 1")
    train_loader, test_loader = digits_loaders(batch_size=args.batch_size, seed=args.seed)
    net = digits_cnn(seed=args.seed)
    net.hybridize()
    print("Training the digits CNN in float32 on CPU for %d epochs (sklearn digits, offline)."
          % args.epochs)
    result = fit(net, train_loader, test_loader, epochs=args.epochs, ctx=mx.cpu())
    print("final training loss: %.4f" % result["losses"][-1])
    print("digits test accuracy (float32): %.2f%%" % (100 * result["accuracy"]))
    return 0


def build_parser():
    """Build the argument parser.

    Returns
    -------
    argparse.ArgumentParser
    """
    parser = argparse.ArgumentParser(
        prog="mxmixed",
        description="Float16 mixed precision for Apache MXNet 1.9.1 (Gluon and Symbol APIs).")
    parser.add_argument("--version", action="version", version="mxmixed %s" % __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="MXNet build, GPUs, float16 support and pinned versions")
    info.set_defaults(func=_cmd_info)
    demo = sub.add_parser("demo", help="train the digits CNN on the offline digits data")
    demo.add_argument("--epochs", type=int, default=5)
    demo.add_argument("--batch-size", type=int, default=64)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv=None):
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        The exit status.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except CLIError as err:
        print("mxmixed %s: error: %s" % (args.command, err), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
