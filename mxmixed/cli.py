"""The ``mxmixed`` command line (also ``python -m mxmixed``)."""
import argparse
import os
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
    from .tutorial.demo import run_demo

    if args.epochs < 1:
        raise CLIError("--epochs must be at least 1")
    run_demo(out_dir=args.out, epochs=args.epochs, seed=args.seed)
    return 0


def _parse_int(value, what, minimum=0):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise CLIError("%s must be an integer, got %r" % (what, value)) from None
    if number < minimum:
        raise CLIError("%s must be at least %d, got %d" % (what, minimum, number))
    return number


def _parse_shape(text):
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise CLIError("--input-shape must be positive integers such as 3,224,224 (one "
                       "sample, without the batch axis), got %r" % (text,))
    return shape


def _same_file(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def _convert_inputs(args, count, data_shape_check, strict=True):
    """The samples for validation and search: from --inputs (.npy) or random --input-shape.

    With ``strict=False`` (the search without --validate) fewer samples than ``count`` do.
    """
    import numpy as np

    if args.inputs:
        if not os.path.isfile(args.inputs):
            raise CLIError("inputs file %s does not exist" % args.inputs)
        try:
            samples = np.load(args.inputs, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise CLIError("cannot read inputs file %s as a NumPy .npy array: %s"
                           % (args.inputs, str(err).splitlines()[0])) from None
        if samples.ndim < 2 or not np.issubdtype(samples.dtype, np.number):
            raise CLIError("inputs file %s must hold a numeric array of samples (N, ...), "
                           "got shape %s" % (args.inputs, samples.shape))
        if not strict:
            count = min(count, len(samples))
        if len(samples) < count:
            raise CLIError("inputs file %s holds %d samples, fewer than the %d asked for"
                           % (args.inputs, len(samples), count))
        samples = samples[:count].astype(np.float32)
    else:
        shape = _parse_shape(args.input_shape)
        samples = np.random.RandomState(_parse_int(args.seed, "--seed")).uniform(
            0.0, 1.0, size=(count,) + shape).astype(np.float32)
    data_shape_check(samples.shape[1:])
    return samples


def _cmd_convert(args):
    import mxnet as mx

    from . import symbolic

    epoch = _parse_int(args.epoch, "EPOCH")
    validate_n = _parse_int(args.validate, "--validate")
    batch_size = _parse_int(args.batch_size, "--batch-size", minimum=1)
    if args.dtype != "float16":
        raise CLIError("unsupported dtype %r: mxmixed converts to float16 only%s"
                       % (args.dtype, " (bfloat16 AMP needs AVX512-BF16)"
                          if args.dtype == "bfloat16" else ""))
    tolerance = None
    if args.search_tolerance is not None:
        try:
            tolerance = float(args.search_tolerance)
        except ValueError:
            tolerance = -1.0
        if not tolerance > 0:
            raise CLIError("--search-tolerance must be a positive number, got %r"
                           % (args.search_tolerance,))
    wants_samples = validate_n > 0 or tolerance is not None
    if wants_samples and not (args.inputs or args.input_shape):
        raise CLIError("--validate and --search-tolerance need samples: give --inputs FILE.npy "
                       "or --input-shape C,H,W")
    if args.inputs and args.input_shape:
        raise CLIError("give --inputs or --input-shape, not both")
    in_files = symbolic.checkpoint_paths(args.prefix, epoch)
    out_files = symbolic.checkpoint_paths(args.out, epoch)
    if any(_same_file(i, o) for i in in_files for o in out_files):
        raise CLIError("the output prefix %r would overwrite the input checkpoint; choose "
                       "another --out" % args.out)
    out_dir = os.path.dirname(os.path.abspath(out_files[0]))
    if not os.path.isdir(out_dir):
        raise CLIError("output folder %s does not exist" % out_dir)
    try:
        sym, arg_params, aux_params = symbolic.load_checkpoint(args.prefix, epoch)
        data_names = symbolic.data_inputs(sym, arg_params, aux_params)
        if not data_names:
            raise CLIError("the graph has no data input: every input is a parameter")

        def check_shape(shape):
            symbolic.check_params(sym, arg_params, aux_params, source="the params",
                                  data_shapes={data_names[0]: (1,) + tuple(shape)})

        samples = None
        if wants_samples:
            samples = _convert_inputs(args, validate_n or 8, check_shape, strict=validate_n > 0)
        settings = dict(exclude_layers=args.exclude, exclude_ops=args.exclude_op,
                        keep_io_types=args.keep_io_types,
                        cast_optional_params=not args.keep_optional_params_float32)
        search = None
        if tolerance is not None:
            search = symbolic.search_fp32_layers(sym, arg_params, aux_params, samples,
                                                 tolerance=tolerance, batch_size=batch_size,
                                                 **settings)
            model = search.model
        else:
            model = symbolic.convert(sym, arg_params, aux_params, **settings)
        check = None
        if validate_n > 0:
            check = symbolic.validate((sym, arg_params, aux_params), model, samples,
                                      batch_size=batch_size)
        try:
            written = model.save(args.out, epoch)
        except OSError as err:
            raise CLIError("cannot write the checkpoint to %s: %s"
                           % (args.out, err.strerror or err)) from None
    except symbolic.ConversionError as err:
        raise CLIError(str(err)) from None
    except mx.base.MXNetError as err:
        raise CLIError("MXNet failed: %s" % symbolic._last_line(err)) from None
    print(model.report)
    if search is not None:
        print()
        print(search)
    if check is not None:
        print()
        print(check)
    print()
    print("wrote %s and %s" % written)
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
    demo = sub.add_parser("demo", help="the whole story on the offline digits: float32 vs AMP, "
                                       "conversion to float16, validation, plots")
    demo.add_argument("--epochs", type=int, default=5)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default=os.path.join("results", "demo"),
                      help="results folder (default: results/demo)")
    demo.set_defaults(func=_cmd_demo)
    conv = sub.add_parser(
        "convert", help="convert a float32 Symbol checkpoint to float16, with a report",
        description="Convert PREFIX-symbol.json and PREFIX-EPOCH.params (float32, from the "
                    "Module API or a Gluon export) to float16 mixed precision. Writes "
                    "OUTPREFIX-symbol.json and OUTPREFIX-EPOCH.params (both or neither) and "
                    "prints what changed. Optional params are stored in float16 (MXNet's "
                    "default keeps them float32).")
    conv.add_argument("prefix", metavar="PREFIX", help="input checkpoint prefix")
    conv.add_argument("epoch", metavar="EPOCH", help="epoch number of the params file")
    conv.add_argument("--out", required=True, metavar="OUTPREFIX",
                      help="output checkpoint prefix (same EPOCH)")
    conv.add_argument("--exclude", nargs="+", default=[], metavar="LAYER",
                      help="layer (node) names to keep in float32")
    conv.add_argument("--exclude-op", nargs="+", default=[], metavar="OP",
                      help="operator types to keep in float32, e.g. FullyConnected")
    conv.add_argument("--keep-io-types", action=argparse.BooleanOptionalAction, default=True,
                      help="keep inputs and outputs float32 (default: yes)")
    conv.add_argument("--keep-optional-params-float32", action="store_true",
                      help="MXNet's default: keep params float32 where float16 is optional")
    conv.add_argument("--dtype", default="float16", help="target dtype (float16 only)")
    conv.add_argument("--validate", default="0", metavar="N",
                      help="compare float16 with float32 on N samples")
    conv.add_argument("--search-tolerance", default=None, metavar="T",
                      help="find layers to keep float32 so that max|y16-y32|/max|y32| <= T")
    conv.add_argument("--inputs", metavar="FILE.npy",
                      help="samples (N, ...) for --validate and the search")
    conv.add_argument("--input-shape", metavar="C,H,W",
                      help="shape of one sample, for random uniform [0, 1) samples")
    conv.add_argument("--batch-size", default="8", help="batch size of validation and search")
    conv.add_argument("--seed", default="0", help="seed of the random samples")
    conv.set_defaults(func=_cmd_convert)
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
