"""The ``mxmixed`` command line (also ``python -m mxmixed``).

Every bad input is one line on stderr, ``mxmixed COMMAND: error: ...``, and a non-zero exit:
argparse checks the types and choices of the options, and :func:`parse_shape` reads shapes.
The heavy subcommands (``demo``, ``convert``) import MXNet and their modules only when run.
"""
import argparse
import importlib
import os
import re
import sys

from ._preflight import (CLIError, check_memory, check_out_prefix, estimate_convert_memory,
                         prepare_out_dir)
from ._progress import bars_wanted
from ._version import __version__

__all__ = ["main", "build_parser", "parse_shape", "EXIT_OK", "EXIT_VALIDATION_FAILED",
           "EXIT_USAGE", "EXIT_WRITE_FAILED"]

# The exit codes of `mxmixed convert`, explained in CONVERT_EPILOG (its --help).
EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_USAGE, EXIT_WRITE_FAILED = 0, 1, 2, 3

CONVERT_EPILOG = """\
output: OUTPREFIX is a file prefix, not a folder: --out somedir/ or --out . is refused
(write --out somedir/model16). Its folder must exist and be writable; this is checked before
any work. The input checkpoint is never overwritten. With --format onnx the one output file
is OUTPREFIX.onnx, and --validate runs it in onnxruntime on the CPU (docs/onnx.md).

exit codes:
  0  converted (and, with --validate, within --tolerance) and written
  1  validation failed: float16 outputs are non-finite or off by more than --tolerance;
     nothing written (with --keep-failed the files are written, and the exit code is still 1)
  2  bad command line or input: options, checkpoint files, output location, or samples and a
     forward pass that would not fit in the available memory; nothing written
  3  writing the converted pair (or ONNX file) failed (disk full, I/O error); nothing new
     was written
"""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block), exit code 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))


# ------------------------------------------------------------------ argument types
def parse_shape(text):
    """Read a shape written as comma-separated positive integers, e.g. ``"3,224,224"``.

    Parameters
    ----------
    text : str

    Returns
    -------
    tuple of int

    Raises
    ------
    argparse.ArgumentTypeError
        For anything else: ``""``, ``"3,x,224"``, ``"0,3"``, ``"-1,3"``, ``"3,,4"``.
    """
    if not isinstance(text, str) or not re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*", text):
        raise argparse.ArgumentTypeError(
            "must be positive integers separated by commas, such as 3,224,224 (one sample, "
            "without the batch axis), got %r" % (text,))
    shape = tuple(int(part) for part in text.split(","))
    if min(shape) < 1:
        raise argparse.ArgumentTypeError("every size must be at least 1, got %r" % (text,))
    return shape


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError("must be an integer, got %r" % (text,)) from None
        if value < minimum:
            raise argparse.ArgumentTypeError("must be at least %d, got %d" % (minimum, value))
        return value
    return parse


def _positive_float(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number, got %r" % (text,))
    return value


def _dtype(text):
    if text != "float16":
        raise argparse.ArgumentTypeError(
            "unsupported dtype %r: mxmixed converts to float16 only%s" % (text, (
                "; MXNet's own amp.convert_model(target_dtype='bfloat16') does bfloat16 "
                "(`mxmixed info` says whether this machine can run it)")
                if text == "bfloat16" else ""))
    return text


# ------------------------------------------------------------------ commands
def _subcommand(module):
    """Import ``mxmixed.<module>`` when its command runs, so that ``--help`` and ``--version``
    load no MXNet; the one place where the CLI imports mxmixed modules lazily."""
    return importlib.import_module("mxmixed." + module)


def _cmd_info(args):
    sysinfo = _subcommand("sysinfo")
    print(sysinfo.format_info(sysinfo.collect()))
    return EXIT_OK


def _cmd_demo(args):
    prepare_out_dir(args.out)
    _subcommand("tutorial.demo").run_demo(out_dir=args.out, epochs=args.epochs, seed=args.seed, progress=bars_wanted())
    return EXIT_OK


def _sample_shape(args):
    """The shape of one sample: from --input-shape, or read from the .npy header."""
    import numpy as np

    if args.input_shape:
        return args.input_shape, None
    if not os.path.isfile(args.inputs):
        raise CLIError("inputs file %s does not exist" % args.inputs)
    try:
        samples = np.load(args.inputs, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise CLIError("cannot read inputs file %s as a NumPy .npy array: %s"
                       % (args.inputs, str(err).splitlines()[0])) from None
    if samples.ndim < 2 or not np.issubdtype(samples.dtype, np.number):
        raise CLIError("inputs file %s must hold a numeric array of samples (N, ...), got "
                       "shape %s" % (args.inputs, samples.shape))
    return tuple(samples.shape[1:]), samples


def _samples(args, shape, mapped, count, strict):
    """``count`` float32 samples: the first of --inputs, or random uniform [0, 1)."""
    import numpy as np

    if mapped is None:
        return np.random.RandomState(args.seed).uniform(
            0.0, 1.0, size=(count,) + shape).astype(np.float32)
    if not strict:
        count = min(count, len(mapped))
    if len(mapped) < count:
        raise CLIError("inputs file %s holds %d samples, fewer than the %d asked for"
                       % (args.inputs, len(mapped), count))
    samples = np.array(mapped[:count], dtype=np.float32)
    bad = samples.size - int(np.isfinite(samples).sum())
    if bad:  # relu(NaN) is 0 on oneDNN: NaN samples can even pass a validation
        raise CLIError("inputs file %s: %d of the %d values used are inf or NaN (as float32); "
                       "a validation on them proves nothing" % (args.inputs, bad, samples.size))
    return samples


def _cmd_convert(args):
    import mxnet as mx

    symbolic = _subcommand("symbolic")
    tolerance = args.tolerance or args.search_tolerance or 0.01
    wants_samples = args.validate > 0 or args.search_tolerance is not None
    if wants_samples and not (args.inputs or args.input_shape):
        raise CLIError("--validate and --search-tolerance need samples: give --inputs FILE.npy "
                       "or --input-shape C,H,W")
    in_files = symbolic.checkpoint_paths(args.prefix, args.epoch)
    meant = re.sub(r"-(symbol\.json|\d{4}\.params)$", "", args.prefix)
    if meant != args.prefix and not os.path.exists(in_files[0]):
        raise CLIError("PREFIX is the checkpoint's name without -symbol.json or -EPOCH.params: "
                       "did you mean %s?" % meant)
    to_onnx = args.format == "onnx"
    if to_onnx and not (args.inputs or args.input_shape):
        raise CLIError("--format onnx needs the input shape: give --input-shape C,H,W or "
                       "--inputs FILE.npy")
    if to_onnx:
        try:
            symbolic.check_onnx()
        except symbolic.ConversionError as err:
            raise CLIError(str(err)) from None
    out_files = ([args.out + ".onnx"] if to_onnx
                 else symbolic.checkpoint_paths(args.out, args.epoch))
    check_out_prefix(args.out, in_files, out_files)
    try:
        sym, arg_params, aux_params = symbolic.load_checkpoint(args.prefix, args.epoch)
        data_names = symbolic.data_inputs(sym, arg_params, aux_params)
        if not data_names:
            raise CLIError("the graph has no data input: every input is a parameter")
        samples = exported = None
        if wants_samples or to_onnx:
            shape, mapped = _sample_shape(args)
            symbolic.check_params(sym, arg_params, aux_params, source="the params",
                                  data_shapes={data_names[0]: (1,) + shape})
            count = args.validate or 8
            check_memory(estimate_convert_memory(sym, data_names[0], shape, count,
                                                  args.batch_size),
                          "%d samples of shape %s and a forward pass at batch size %d"
                          % (count, ",".join(map(str, shape)), args.batch_size))
            if wants_samples:
                samples = _samples(args, shape, mapped, count, strict=args.validate > 0)
        settings = dict(exclude_layers=args.exclude, exclude_ops=args.exclude_op,
                        keep_io_types=args.keep_io_types,
                        cast_optional_params=not args.keep_optional_params_float32)
        search = check = None
        if args.search_tolerance is not None:
            search = symbolic.search_fp32_layers(sym, arg_params, aux_params, samples,
                                                 tolerance=args.search_tolerance,
                                                 batch_size=args.batch_size,
                                                 progress=bars_wanted(), **settings)
            model = search.model
        else:
            model = symbolic.convert(sym, arg_params, aux_params, calibration=samples,
                                     batch_size=args.batch_size, **settings)
        if to_onnx:
            exported = symbolic.export_onnx(model, shape, (sym, arg_params, aux_params))
        if args.validate > 0 and to_onnx:
            check = symbolic.validate_onnx((sym, arg_params, aux_params), exported, samples,
                                           batch_size=args.batch_size, progress=bars_wanted())
        elif args.validate > 0:
            check = symbolic.validate((sym, arg_params, aux_params), model, samples,
                                      batch_size=args.batch_size, progress=bars_wanted())
    except symbolic.ConversionError as err:
        raise CLIError(str(err)) from None
    except mx.base.MXNetError as err:
        raise CLIError("MXNet failed: %s" % symbolic._last_line(err)) from None
    print(model.report)
    for part in (exported, search, check):
        if part is not None:
            print()
            print(part)
    failed = check is not None and not check.passes(tolerance)
    if not failed or args.keep_failed:
        try:
            written = ((exported.save(out_files[0]),) if to_onnx
                       else model.save(args.out, args.epoch))
        except OSError as err:
            raise CLIError("cannot write the checkpoint to %s: %s"
                           % (args.out, err.strerror or err), EXIT_WRITE_FAILED) from None
        print()
        print("wrote " + " and ".join(written))
    if failed:
        top1 = ("" if check.top1_agreement is None
                else ", top-1 agreement %.1f%%" % (100 * check.top1_agreement))
        raise CLIError(
            "validation failed: max rel error %.3g > --tolerance %g, non-finite outputs %.1f%%%s; "
            "%s; next: --search-tolerance %g finds layers to keep in float32"
            % (check.max_rel_error, tolerance, 100 * check.nonfinite_share, top1,
               "files kept (--keep-failed)" if args.keep_failed
               else "nothing written (--keep-failed writes anyway)", tolerance),
            EXIT_VALIDATION_FAILED)
    return EXIT_OK


def _cmd_run(args):
    return _subcommand("run").run_script(args.script, args.args, report=args.report,
                                         emulation=not args.no_emulation)


# ------------------------------------------------------------------ parser
def build_parser():
    """Build the argument parser.

    Returns
    -------
    argparse.ArgumentParser
    """
    parser = _Parser(
        prog="mxmixed",
        description="Float16 mixed precision for Apache MXNet 1.9.1 (Gluon and Symbol APIs).")
    parser.add_argument("--version", action="version", version="mxmixed %s" % __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="MXNet build, GPUs, float16 support, package layout "
                                       "and pinned versions")
    info.set_defaults(func=_cmd_info)
    demo = sub.add_parser("demo", help="the whole story on the offline digits: float32 vs AMP, "
                                       "conversion to float16, validation, plots")
    demo.add_argument("--epochs", type=_int_at_least(1), default=5)
    demo.add_argument("--seed", type=_int_at_least(0), default=0)
    demo.add_argument("--out", default=os.path.join("results", "demo"),
                      help="results folder, created if missing (default: results/demo)")
    demo.set_defaults(func=_cmd_demo)
    conv = sub.add_parser(
        "convert", help="convert a float32 Symbol checkpoint to float16, with a report",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=CONVERT_EPILOG,
        description="Convert PREFIX-symbol.json and PREFIX-EPOCH.params (float32, from the "
                    "Module API or a Gluon export) to float16 mixed precision. Writes "
                    "OUTPREFIX-symbol.json and OUTPREFIX-EPOCH.params (both or neither) and "
                    "prints what changed. Optional params are stored in float16 (MXNet's "
                    "default keeps them float32).")
    conv.add_argument("prefix", metavar="PREFIX", help="input checkpoint prefix")
    conv.add_argument("epoch", metavar="EPOCH", type=_int_at_least(0),
                      help="epoch number of the params file")
    conv.add_argument("--out", required=True, metavar="OUTPREFIX",
                      help="output checkpoint prefix (same EPOCH); not a folder")
    conv.add_argument("--exclude", nargs="+", default=[], metavar="LAYER",
                      help="layer (node) names to keep in float32")
    conv.add_argument("--exclude-op", nargs="+", default=[], metavar="OP",
                      help="operator types to keep in float32, e.g. FullyConnected")
    conv.add_argument("--keep-io-types", action=argparse.BooleanOptionalAction, default=True,
                      help="keep inputs and outputs float32 (default: yes)")
    conv.add_argument("--keep-optional-params-float32", action="store_true",
                      help="MXNet's default: keep params float32 where float16 is optional")
    conv.add_argument("--dtype", default="float16", type=_dtype, choices=["float16"],
                      help="target dtype (float16 only)")
    conv.add_argument("--format", choices=["mxnet", "onnx"], default="mxnet",
                      help="mxnet: OUTPREFIX-symbol.json and OUTPREFIX-EPOCH.params; onnx: "
                           "OUTPREFIX.onnx, validated in onnxruntime on the CPU (needs "
                           "--input-shape or --inputs, and the onnx extra)")
    conv.add_argument("--validate", type=_int_at_least(0), default=0, metavar="N",
                      help="compare float16 with float32 on N samples; fail (exit 1) beyond "
                           "--tolerance")
    conv.add_argument("--tolerance", type=_positive_float, default=None, metavar="T",
                      help="largest max|y16-y32|/max|y32| that --validate accepts (default: "
                           "--search-tolerance if given, else 0.01)")
    conv.add_argument("--keep-failed", action="store_true",
                      help="write the converted files even when the validation fails")
    conv.add_argument("--search-tolerance", type=_positive_float, default=None, metavar="T",
                      help="find layers to keep float32 so that max|y16-y32|/max|y32| <= T")
    samples = conv.add_mutually_exclusive_group()
    samples.add_argument("--inputs", metavar="FILE.npy",
                         help="samples (N, ...) for --validate and the search")
    samples.add_argument("--input-shape", type=parse_shape, metavar="C,H,W",
                         help="shape of one sample, for random uniform [0, 1) samples")
    conv.add_argument("--batch-size", type=_int_at_least(1), default=8,
                      help="batch size of validation and search")
    conv.add_argument("--seed", type=_int_at_least(0), default=0,
                      help="seed of the random samples")
    conv.set_defaults(func=_cmd_convert)
    run = sub.add_parser(
        "run", help="run any MXNet training script with the CPU float16 emulation",
        description="Run SCRIPT as __main__ with ARGS, as 'python SCRIPT ARGS' would, with the "
                    "CPU float16 emulation switched on when no GPU is visible. Returns the "
                    "script's exit code. The script is never modified.")
    run.add_argument("--report", metavar="FILE",
                     help="write the float16 story as JSON: AMP loss scale per step, skipped "
                          "steps, the first non-finite gradient, step times")
    run.add_argument("--no-emulation", action="store_true",
                     help="run as plain MXNet, as a baseline")
    run.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="the script's arguments (all of them, options included)")
    run.set_defaults(func=_cmd_run)
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
        The exit status: 0 on success; for ``convert`` see its ``--help`` (1 validation
        failed, 2 bad command line or input, 3 write failed).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a one-line usage error
        return stop.code if isinstance(stop.code, int) else EXIT_OK
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.func(args)
    except CLIError as err:
        print("mxmixed %s: error: %s" % (args.command, err), file=sys.stderr)
        return err.code


if __name__ == "__main__":
    sys.exit(main())
