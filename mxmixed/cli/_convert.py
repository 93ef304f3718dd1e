"""``mxmixed convert``: a float32 Symbol checkpoint to float16 (or bfloat16, or a float16 ONNX file),
with a report, an optional validation and an optional search for float32 layers."""
import argparse
import difflib
import os
import re
import sys
from typing import Callable, NamedTuple, Optional

from .._core.progress import bars_wanted
from ._args import DEFAULT_TOLERANCE, dtype, int_at_least, parse_shape, positive_float
from ._preflight import EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_WRITE_FAILED, CLIError, check_out_prefix
from ._samples import check_input_specs, convert_samples, input_spec


CONVERT_EPILOG = """\
output: OUTPREFIX is a file prefix, not a folder: --out somedir/ or --out . is refused
(write --out somedir/model16). Its folder must exist and be writable, and its file names fit
the filesystem (255 bytes on most); this is checked before any work. The input checkpoint is
never overwritten.

exit codes:
  0  converted (and, with --validate, within --tolerance) and written
  1  validation failed: converted outputs are non-finite or off by more than --tolerance;
     nothing written (with --keep-failed the files are written, and the exit code is still 1)
  2  bad command line or input: options, checkpoint files, output location, or samples and a
     forward pass that would not fit in the available memory; nothing written
  3  writing the converted pair (or ONNX file) failed (disk full, I/O error); an earlier
     pair at OUTPREFIX is left as it was
  130  interrupted (Ctrl-C); an earlier pair at OUTPREFIX is left as it was
"""


def add_parser(sub):
    conv = sub.add_parser(
        "convert", help="convert a float32 Symbol checkpoint to float16 (or bfloat16), with "
                        "a report",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=CONVERT_EPILOG,
        description="Convert PREFIX-symbol.json and PREFIX-EPOCH.params (float32, from the "
                    "Module API or a Gluon export) to float16 mixed precision. Writes "
                    "OUTPREFIX-symbol.json and OUTPREFIX-EPOCH.params (both or neither) and "
                    "prints what changed. Optional params are stored in float16 (MXNet's "
                    "default keeps them float32). --dtype bfloat16 converts for CPU serving "
                    "instead (see docs/bfloat16.md).")
    conv.add_argument("prefix", metavar="PREFIX", help="input checkpoint prefix")
    conv.add_argument("epoch", metavar="EPOCH", type=int_at_least(0),
                      help="epoch number of the params file")
    conv.add_argument("--out", required=True, metavar="OUTPREFIX",
                      help="output checkpoint prefix (same EPOCH); not a folder")
    _add_conversion_flags(conv)
    _add_validation_flags(conv)
    _add_sample_flags(conv)
    conv.set_defaults(func=command)


class OptionFlag(NamedTuple):
    """A flag of ``mxmixed convert`` that sets a field of ``symbolic.ConvertOptions``."""

    field: str
    flag: str
    argument: dict  # add_argument's keywords
    to_field: Optional[Callable] = None  # the field's value from the flag's; by default the same

    @property
    def dest(self):
        return self.flag[2:].replace("-", "_")

    def value(self, given):
        """The field's value for the flag's value ``given``."""
        return given if self.to_field is None else self.to_field(given)

    def spelled(self, value):
        """The flag as a user writes it to give the field ``value``."""
        if self.argument.get("action") is argparse.BooleanOptionalAction:
            return self.flag if self.value(True) == value else "--no-" + self.flag[2:]
        if self.argument.get("action") == "store_true":
            return self.flag
        return "%s %s" % (self.flag, value)


# The flags of the ConvertOptions fields, in the order --help shows them: the parser's
# arguments and the command's ConvertOptions are both made from this table. A new field needs
# its row here, or a place in tests/symbolic/test_convert_options.py's set of fields the CLI
# does not offer.
OPTION_FLAGS = (
    OptionFlag("exclude_layers", "--exclude", dict(
        nargs="+", default=[], metavar="LAYER", help="layer (node) names to keep in float32")),
    OptionFlag("exclude_ops", "--exclude-op", dict(
        nargs="+", default=[], metavar="OP",
        help="operator types to keep in float32, e.g. FullyConnected")),
    OptionFlag("keep_io_types", "--keep-io-types", dict(
        action=argparse.BooleanOptionalAction, default=True,
        help="keep inputs and outputs float32 (default: yes)")),
    OptionFlag("cast_optional_params", "--keep-optional-params-float32", dict(
        action="store_true",
        help="MXNet's default: keep params float32 where float16 is optional"),
        to_field=lambda kept: not kept),
    OptionFlag("fold_batchnorm", "--fold-bn", dict(
        action=argparse.BooleanOptionalAction, default=None,
        help="fold each BatchNorm into the Convolution before it, in float32 before the cast "
             "(an inference model; oneDNN then fuses no Convolution+BatchNorm in low "
             "precision). Default: on for --dtype bfloat16, off for float16")),
    OptionFlag("target_dtype", "--dtype", dict(
        default="float16", type=dtype, choices=sorted(DEFAULT_TOLERANCE),
        help="target dtype: float16 (GPUs; emulated on a CPU) or bfloat16 (CPU serving "
             "through oneDNN, fast with AVX512-BF16 or AMX; load with "
             "mxmixed.load_bfloat16). Default float16")),
)


def _add_conversion_flags(conv):
    """What is converted to what, and the output format."""
    for option in OPTION_FLAGS:
        conv.add_argument(option.flag, **option.argument)
    conv.add_argument("--format", choices=["mxnet", "onnx"], default="mxnet",
                      help="mxnet: OUTPREFIX-symbol.json and OUTPREFIX-EPOCH.params; onnx: "
                           "OUTPREFIX.onnx, validated in onnxruntime on the CPU (needs "
                           "--input-shape or --inputs, and the onnx extra; float16 only)")


def _add_validation_flags(conv):
    """The comparison with float32, its tolerance, and the float32-layer search."""
    conv.add_argument("--validate", type=int_at_least(0), default=0, metavar="N",
                      help="compare the converted model with float32 on N samples; fail "
                           "(exit 1) beyond --tolerance. A bfloat16 model on a CPU that "
                           "cannot run MXNet's bfloat16 (no AVX-512) is validated under a "
                           "bfloat16 emulation (float32 arithmetic, bfloat16 rounding), "
                           "said on stderr")
    conv.add_argument("--tolerance", type=positive_float, default=None, metavar="T",
                      help="largest max|y16-y32|/max|y32| that --validate accepts (default: "
                           "--search-tolerance if given, else 0.01 for float16 and 0.1 for "
                           "bfloat16, whose 8-bit significand rounds 8x coarser)")
    conv.add_argument("--keep-failed", action="store_true",
                      help="write the converted files even when the validation fails")
    conv.add_argument("--speed-rounds", type=int_at_least(0), default=3, metavar="R",
                      help="after a --validate that passes, a bfloat16 model that runs "
                           "natively is timed against float32 on one batch, R rounds in "
                           "alternation (default 3; 0: not timed); a warning names the "
                           "figure where bfloat16 is slower")
    conv.add_argument("--verbose", action="store_true",
                      help="name every layer kept in float32 (by default: counts per reason and "
                           "the first three names)")
    conv.add_argument("--search-tolerance", type=positive_float, default=None, metavar="T",
                      help="find layers to keep float32 so that max|y16-y32|/max|y32| <= T "
                           "(float16 only)")


def _add_sample_flags(conv):
    """The samples that the validation and the search run on."""
    samples = conv.add_mutually_exclusive_group()
    samples.add_argument("--inputs", metavar="FILE.npy|FILE.npz",
                         help="samples (N, ...) for --validate and the search: one .npy array "
                              "for a graph with one data input, or a .npz of one array per "
                              "data input, named as in PREFIX-symbol.json (e.g. data0, data1, "
                              "data2 of a gluonnlp BERT), all with N samples; integer arrays "
                              "(token ids) are passed as int32, the others as float32")
    samples.add_argument("--input-shape", type=parse_shape, metavar="C,H,W",
                         help="shape of one sample, for random uniform [0, 1) samples")
    samples.add_argument("--input", action="append", type=input_spec, dest="input_specs",
                         metavar="NAME:SHAPE[:DTYPE[:HIGH]]",
                         help="random samples for the data input NAME, once per data input: "
                              "SHAPE of one sample (comma-separated, empty for a scalar per "
                              "sample), DTYPE float32 (default) or int32, values in [0, HIGH): "
                              "uniform floats (HIGH default 1) or integers (HIGH required), "
                              "e.g. a BERT: --input data0:128:int32:30522 --input "
                              "data1:128:int32:2 --input data2::float32:128")
    conv.add_argument("--batch-size", type=int_at_least(1), default=8,
                      help="batch size of validation and search")
    conv.add_argument("--seed", type=int_at_least(0), default=0,
                      help="seed of the random samples")


def _checked_options(args):
    """The command's ConvertOptions, and one line for what a bfloat16 conversion cannot do,
    before any work."""
    if args.dtype == "bfloat16" and args.format == "onnx":
        raise CLIError("--format onnx exports float16 models only; drop --dtype bfloat16")
    if args.dtype == "bfloat16" and args.search_tolerance is not None:
        raise CLIError("--search-tolerance searches float16 layers only; with --dtype bfloat16 "
                       "use --exclude / --exclude-op")
    options = convert_options(args)
    if args.dtype != "bfloat16":
        return options
    from .._core.devices import BFLOAT16_EMULATED, bfloat16_native, bfloat16_support
    runs, why = bfloat16_support()
    # where bfloat16 cannot run, --validate runs it under the bfloat16 emulation (float32
    # arithmetic, bfloat16 rounding); the report's note goes to stderr once it has run
    if runs and bfloat16_native() is None:
        print("mxmixed convert: note: %s" % BFLOAT16_EMULATED, file=sys.stderr)
    return options


def convert_options(args):
    """The one ConvertOptions of this command, made from its flags (``OPTION_FLAGS``); a value
    that the other flags rule out is one line naming its flag."""
    from ..symbolic import ConvertOptions

    fields = {option.field: option.value(getattr(args, option.dest))
              for option in OPTION_FLAGS}
    ruled_out = ConvertOptions.conflict(**fields)
    if ruled_out is not None:
        field, value, why = ruled_out
        flag = next(option for option in OPTION_FLAGS if option.field == field)
        raise CLIError("%s %s" % (flag.spelled(value), why))
    return ConvertOptions(**fields)


def command(args):
    import mxnet as mx

    options = _checked_options(args)
    from .._core.errors import one_line
    from ..symbolic import ConversionError, export_onnx, load_checkpoint

    tolerance = args.tolerance or args.search_tolerance or DEFAULT_TOLERANCE[args.dtype]
    _check_convert_files(args)
    try:
        given = load_checkpoint(args.prefix, args.epoch)
        _check_excluded_layers(args, given[0])
        samples, shape, types = convert_samples(args, *given)
        model = _convert_model(args, options, *given, samples, types)
        nothing = model.report.converts_nothing()
        if nothing:  # float16 only: a bfloat16 conversion that converts nothing is refused
            print("mxmixed convert: warning: %s" % nothing, file=sys.stderr)
        exported = None
        if args.format == "onnx":
            shape, axes = _onnx_shapes(given, samples, shape)
            exported = export_onnx(model, shape, given, input_types=types, batch_axes=axes)
            _say(exported)
        elif ((args.validate == 0 or model.calibration_outputs is not None)
              and not _times_speed(args)):
            # not run again (the validation compares with the calibration's float32 outputs):
            # the model given, its graph many times its file for a long one, goes before the
            # float16 run and the write
            given = None
        check = (_validate(args, given, model, exported, samples)
                 if args.validate > 0 else None)
        if _times_speed(args) and check.emulation is None and check.passes(tolerance):
            _speed(args, given, model, samples)
        given = None
    except ConversionError as err:
        raise CLIError(str(err)) from None
    except mx.base.MXNetError as err:
        raise CLIError("MXNet failed: %s" % one_line(err)) from None
    return _write_converted(args, model, check, tolerance, samples, exported)


def _onnx_shapes(given, samples, shape):
    """One sample's shape per data input without its batch axis, and where that axis goes,
    as the graph defines it (time-major inputs, recurrent states: axis 1); ``shape`` and
    None (batch first) where no samples were read."""
    from ..symbolic import model_batch_axes

    if samples is None:
        return shape, None
    arrays = samples if isinstance(samples, dict) else {None: samples}
    axes = model_batch_axes(given, {n: a.shape for n, a in arrays.items()})
    found = {}
    for name, value in arrays.items():
        axis = axes.input_axis(name) if name is not None else next(
            iter(axes.inputs.values()), 0)
        found[name] = axis or 0
    shapes = {n: tuple(d for k, d in enumerate(a.shape) if k != found[n])
              for n, a in arrays.items()}
    if not isinstance(samples, dict):
        return shapes[None], None if not found[None] else {
            n: found[None] for n in axes.inputs}
    return shapes, found


def _validate(args, given, model, exported, samples):
    """The converted model (or ONNX file) against the model given, or against the float32
    outputs of the calibration where ``given`` is None; printed as it is known."""
    from ..symbolic import validate, validate_onnx

    if exported is not None:
        check = validate_onnx(given, exported, samples, batch_size=args.batch_size,
                              progress=bars_wanted())
        _say(check)
        return check
    check = validate(given, model, samples, batch_size=args.batch_size, progress=bars_wanted(),
                     reference=model.calibration_outputs)
    _say(check)
    if check.emulation:
        print("mxmixed convert: note: %s" % check.emulation, file=sys.stderr)
    if check.inconclusive:
        print("mxmixed convert: warning: validation is inconclusive: %s"
              % check.inconclusive, file=sys.stderr)
    return check


def _times_speed(args):
    """A bfloat16 conversion validated here gets its speed timed against float32 (when the
    validation passes natively, not under the bfloat16 emulation)."""
    return (args.dtype == "bfloat16" and args.speed_rounds > 0 and args.format == "mxnet"
            and args.validate > 0)


def _speed(args, given, model, samples):
    """bfloat16 against the float32 model given, on one batch: the figure, and a warning
    naming it where bfloat16 is slower."""
    from ..symbolic import compare_speed

    speed = compare_speed(given, model, samples, batch_size=args.batch_size,
                          rounds=args.speed_rounds)
    _say(speed)
    if speed.warning():
        print("mxmixed convert: warning: %s" % speed.warning(), file=sys.stderr)


def _say(*parts):
    """Print a part of the output at once (blank line first), even when stdout is a pipe."""
    print()
    print(*parts)
    sys.stdout.flush()


def _check_convert_files(args):
    """Options that need samples, a PREFIX given as a file name, and the output location."""
    from ..symbolic import ConversionError, check_onnx, checkpoint_paths

    wants_samples = args.validate > 0 or args.search_tolerance is not None
    if wants_samples and not (args.inputs or args.input_shape or args.input_specs):
        raise CLIError("--validate and --search-tolerance need samples: give --inputs FILE.npy "
                       "or --input-shape C,H,W (several data inputs: --inputs FILE.npz or "
                       "--input NAME:SHAPE[:DTYPE[:HIGH]] per input)")
    check_input_specs(args.input_specs)
    in_files = checkpoint_paths(args.prefix, args.epoch)
    meant = re.sub(r"-(symbol\.json|\d{4}\.params)$", "", args.prefix)
    if meant != args.prefix and not os.path.exists(in_files[0]):
        raise CLIError("PREFIX is the checkpoint's name without -symbol.json or -EPOCH.params: "
                       "did you mean %s?" % meant)
    to_onnx = args.format == "onnx"
    if to_onnx and not (args.inputs or args.input_shape or args.input_specs):
        raise CLIError("--format onnx needs the input shape: give --input-shape C,H,W or "
                       "--inputs FILE.npy")
    if to_onnx:
        try:
            check_onnx()
        except ConversionError as err:
            raise CLIError(str(err)) from None
    out_files = [args.out + ".onnx"] if to_onnx else checkpoint_paths(args.out, args.epoch)
    check_out_prefix(args.out, in_files, out_files)


def _check_excluded_layers(args, sym):
    """An --exclude name the graph lacks, in one line that says where layer names are."""
    from .._core.graph import as_graph

    nodes = as_graph(sym).nodes
    layers = [(n.name, n.op) for n in nodes if not n.is_variable]
    names = [name for name, _ in layers]
    for name in args.exclude:
        if name in names:
            continue
        close = difflib.get_close_matches(name, names, n=1)
        shown = ", ".join("%s (%s)" % layer for layer in layers[:8])
        raise CLIError("--exclude: no layer named %r in %s%s; the layer names are the \"name\" "
                       "of its nodes whose \"op\" is not \"null\": %s%s"
                       % (name, "%s-symbol.json" % args.prefix, " (did you mean %r?)" % close[0]
                          if close else "", shown,
                          ", ... (%d in all)" % len(layers) if len(layers) > 8 else ""))


def _convert_model(args, options, sym, arg_params, aux_params, samples, types=None):
    """Convert (or search, then convert); print the report as soon as it exists."""
    from ..symbolic import convert, search_fp32_layers

    if args.search_tolerance is not None:
        search = search_fp32_layers(sym, arg_params, aux_params, samples,
                                    tolerance=args.search_tolerance, batch_size=args.batch_size,
                                    progress=bars_wanted(), options=options)
        print(search.model.report.format(verbose=args.verbose))
        _say(search)
        return search.model
    model = convert(sym, arg_params, aux_params, calibration=samples, batch_size=args.batch_size,
                    progress=bars_wanted(), options=options, input_types=types or None)
    print(model.report.format(verbose=args.verbose))
    sys.stdout.flush()
    return model


def _write_converted(args, model, check, tolerance, samples, exported=None):
    """Write the pair (or the ONNX file) unless validation failed (or --keep-failed); the
    exit code."""
    failed = check is not None and not check.passes(tolerance)
    if not failed or args.keep_failed:
        try:
            written = ((exported.save(args.out + ".onnx"),) if exported is not None
                       else model.save(args.out, args.epoch))
        except OSError as err:
            raise CLIError("cannot write the checkpoint to %s: %s"
                           % (args.out, err.strerror or err), EXIT_WRITE_FAILED) from None
        _say("wrote " + " and ".join(written))
    if failed:
        top1 = ("" if check.top1_agreement is None
                else ", top-1 agreement %.1f%%" % (100 * check.top1_agreement))
        raise CLIError(
            "validation failed: max rel error %.3g > --tolerance %g, non-finite outputs %.1f%%%s; "
            "%s%s; next: %s"
            % (check.max_rel_error, tolerance, 100 * check.nonfinite_share, top1,
               "files kept (--keep-failed)" if args.keep_failed
               else "nothing written (--keep-failed writes anyway)",
               _first_overflow(model, samples, args),
               "--search-tolerance %g finds layers to keep in float32" % tolerance
               if args.dtype == "float16" else "--exclude layers to keep in float32"),
            EXIT_VALIDATION_FAILED)
    return EXIT_OK


def _first_overflow(model, samples, args):
    """Where the converted model's first inf or NaN appears on the first batch, as
    ``'; the first inf appears at ...: --exclude NAME keeps it float32'`` ('' if not found)."""
    import mxnet as mx

    from .. import diagnostics

    if isinstance(samples, dict):
        batches = {name: mx.nd.array(samples[name][:args.batch_size], dtype=dtype)
                   for name, dtype in model.report.input_dtypes.items() if name in samples}
    else:
        name, dtype = next(iter(model.report.input_dtypes.items()))
        batches = {name: mx.nd.array(samples[:args.batch_size], dtype=dtype)}
    try:
        found = diagnostics.find_overflow_symbol(model.symbol, batches, model.arg_params,
                                                 model.aux_params, precision="as_is")
    except (ValueError, TypeError, mx.base.MXNetError):
        return ""
    if not found or found.phase != "forward" or not found.node:
        return ""
    return ("; the first %s appears at layer '%s' (%s): --exclude %s keeps it float32"
            % ("inf" if found.kind == "overflow" else "NaN", found.node, found.op, found.node))
