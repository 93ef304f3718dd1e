"""``mxmixed convert``: a float32 Symbol checkpoint to float16 (or bfloat16, or a float16 ONNX file),
with a report, an optional validation and an optional search for float32 layers."""
import argparse
import difflib
import os
import re
import sys

from .._core.progress import bars_wanted
from ._args import DEFAULT_TOLERANCE, dtype, int_at_least, parse_shape, positive_float
from ._preflight import (EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_WRITE_FAILED, CLIError, check_memory,
                         check_out_prefix, estimate_convert_memory, load)


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
    conv.add_argument("--exclude", nargs="+", default=[], metavar="LAYER",
                      help="layer (node) names to keep in float32")
    conv.add_argument("--exclude-op", nargs="+", default=[], metavar="OP",
                      help="operator types to keep in float32, e.g. FullyConnected")
    conv.add_argument("--keep-io-types", action=argparse.BooleanOptionalAction, default=True,
                      help="keep inputs and outputs float32 (default: yes)")
    conv.add_argument("--keep-optional-params-float32", action="store_true",
                      help="MXNet's default: keep params float32 where float16 is optional")
    conv.add_argument("--fold-bn", action=argparse.BooleanOptionalAction, default=None,
                      help="fold each BatchNorm into the Convolution before it, in float32 "
                           "before the cast (an inference model; oneDNN then fuses no "
                           "Convolution+BatchNorm in low precision). Default: on for --dtype "
                           "bfloat16, off for float16")
    conv.add_argument("--dtype", default="float16", type=dtype,
                      choices=sorted(DEFAULT_TOLERANCE),
                      help="target dtype: float16 (GPUs; emulated on a CPU) or bfloat16 (CPU "
                           "serving through oneDNN, fast with AVX512-BF16 or AMX; load with "
                           "mxmixed.load_bfloat16). Default float16")
    conv.add_argument("--format", choices=["mxnet", "onnx"], default="mxnet",
                      help="mxnet: OUTPREFIX-symbol.json and OUTPREFIX-EPOCH.params; onnx: "
                           "OUTPREFIX.onnx, validated in onnxruntime on the CPU (needs "
                           "--input-shape or --inputs, and the onnx extra; float16 only)")
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
    conv.add_argument("--verbose", action="store_true",
                      help="name every layer kept in float32 (by default: counts per reason and "
                           "the first three names)")
    conv.add_argument("--search-tolerance", type=positive_float, default=None, metavar="T",
                      help="find layers to keep float32 so that max|y16-y32|/max|y32| <= T "
                           "(float16 only)")
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
    conv.set_defaults(func=command)


_SPEC_DTYPES = ("float32", "int32")


def input_spec(text):
    """``NAME:SHAPE[:DTYPE[:HIGH]]`` of ``--input``, as ``(name, shape, dtype, high)``."""
    parts = text.split(":")
    if len(parts) < 2 or len(parts) > 4 or not parts[0]:
        raise argparse.ArgumentTypeError("%r is not NAME:SHAPE[:DTYPE[:HIGH]] (e.g. "
                                         "data0:128:int32:30522, data2::float32)" % text)
    name, shape = parts[0], parts[1]
    shape = parse_shape(shape) if shape else ()
    dtype_name = parts[2] if len(parts) > 2 and parts[2] else "float32"
    if dtype_name not in _SPEC_DTYPES:
        raise argparse.ArgumentTypeError("%r: DTYPE must be one of %s, got %r"
                                         % (text, ", ".join(_SPEC_DTYPES), dtype_name))
    integer = dtype_name.startswith("int")
    if len(parts) < 4 or not parts[3]:
        if integer:
            raise argparse.ArgumentTypeError("%r: an integer input needs HIGH, the values are "
                                             "drawn in [0, HIGH) (the vocabulary size for "
                                             "token ids: %s:%s:%s:30522)"
                                             % (text, name, parts[1], dtype_name))
        return name, shape, dtype_name, 1.0
    try:
        high = int(parts[3]) if integer else float(parts[3])
    except ValueError:
        high = None
    if high is None or not high > 0 or (not integer and high == float("inf")):
        raise argparse.ArgumentTypeError("%r: HIGH must be a positive %s, got %r"
                                         % (text, "integer" if integer else "number", parts[3]))
    return name, shape, dtype_name, high


def _check_bfloat16_args(args):
    """One line for what a bfloat16 conversion cannot do, before any work."""
    if args.dtype != "bfloat16":
        return
    if args.format == "onnx":
        raise CLIError("--format onnx exports float16 models only; drop --dtype bfloat16")
    if args.search_tolerance is not None:
        raise CLIError("--search-tolerance searches float16 layers only; with --dtype bfloat16 "
                       "use --exclude / --exclude-op")
    if not args.keep_io_types:
        raise CLIError("--no-keep-io-types is for float16 only: a bfloat16 model takes and "
                       "returns float32")
    from .._core.state import BFLOAT16_EMULATED, bfloat16_native, bfloat16_support
    runs, why = bfloat16_support()
    # where bfloat16 cannot run, --validate runs it under the bfloat16 emulation (float32
    # arithmetic, bfloat16 rounding); the report's note goes to stderr once it has run
    if runs and bfloat16_native() is None:
        print("mxmixed convert: note: %s" % BFLOAT16_EMULATED, file=sys.stderr)


def command(args):
    import mxnet as mx

    _check_bfloat16_args(args)
    symbolic = load("symbolic")
    tolerance = args.tolerance or args.search_tolerance or DEFAULT_TOLERANCE[args.dtype]
    _check_convert_files(args, symbolic)
    try:
        sym, arg_params, aux_params = symbolic.load_checkpoint(args.prefix, args.epoch)
        _check_excluded_layers(args, sym)
        samples, shape, types = _convert_samples(args, symbolic, sym, arg_params, aux_params)
        model = _convert_model(args, symbolic, sym, arg_params, aux_params, samples, types)
        check = exported = None
        if args.format == "onnx":
            exported = symbolic.export_onnx(model, shape, (sym, arg_params, aux_params),
                                            input_types=types)
            _say(exported)
        if args.validate > 0 and exported is not None:
            check = symbolic.validate_onnx((sym, arg_params, aux_params), exported, samples,
                                           batch_size=args.batch_size, progress=bars_wanted())
            _say(check)
        elif args.validate > 0:
            check = symbolic.validate((sym, arg_params, aux_params), model, samples,
                                      batch_size=args.batch_size, progress=bars_wanted(),
                                      reference=model.calibration_outputs)
            _say(check)
            if check.emulation:
                print("mxmixed convert: note: %s" % check.emulation, file=sys.stderr)
            if check.inconclusive:
                print("mxmixed convert: warning: validation is inconclusive: %s"
                      % check.inconclusive, file=sys.stderr)
    except symbolic.ConversionError as err:
        raise CLIError(str(err)) from None
    except mx.base.MXNetError as err:
        raise CLIError("MXNet failed: %s" % load("_core.errors").one_line(err)) from None
    return _write_converted(args, model, check, tolerance, samples, exported)


def _say(*parts):
    """Print a part of the output at once (blank line first), even when stdout is a pipe."""
    print()
    print(*parts)
    sys.stdout.flush()


def _check_convert_files(args, symbolic):
    """Options that need samples, a PREFIX given as a file name, and the output location."""
    wants_samples = args.validate > 0 or args.search_tolerance is not None
    if wants_samples and not (args.inputs or args.input_shape or args.input_specs):
        raise CLIError("--validate and --search-tolerance need samples: give --inputs FILE.npy "
                       "or --input-shape C,H,W (several data inputs: --inputs FILE.npz or "
                       "--input NAME:SHAPE[:DTYPE[:HIGH]] per input)")
    in_files = symbolic.checkpoint_paths(args.prefix, args.epoch)
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
            symbolic.check_onnx()
        except symbolic.ConversionError as err:
            raise CLIError(str(err)) from None
    out_files = ([args.out + ".onnx"] if to_onnx
                 else symbolic.checkpoint_paths(args.out, args.epoch))
    check_out_prefix(args.out, in_files, out_files)


def _convert_samples(args, symbolic, sym, arg_params, aux_params):
    """The samples for calibration, validation and the search (None when none is asked),
    the shape of one (None when no shape is given), and the dtypes of integer inputs: an
    array and a shape, or with several named inputs a dict of arrays and one of shapes."""
    data_names = symbolic.data_inputs(sym, arg_params, aux_params)
    if not data_names:
        raise CLIError("the graph has no data input: every input is a parameter")
    wants_samples = args.validate > 0 or args.search_tolerance is not None
    if not (wants_samples or args.format == "onnx"):
        return None, None, _declared_types(args)
    if args.input_specs or (args.inputs and _is_npz(args.inputs)):
        samples, shapes = _named_samples(args, symbolic, sym, arg_params, aux_params,
                                         args.validate or 8, strict=args.validate > 0)
        types = {n: a.dtype for n, a in samples.items() if a.dtype.kind in "iu"}
        return (samples if wants_samples else None), shapes, types
    shape, mapped = _sample_shape(args)
    symbolic.check_params(sym, arg_params, aux_params, source="the params",
                          data_shapes={data_names[0]: (1,) + shape})
    count = args.validate or 8
    check_memory(estimate_convert_memory(sym, data_names[0], shape, count, args.batch_size),
                 "%d samples of shape %s and a forward pass at batch size %d"
                 % (count, ",".join(map(str, shape)), args.batch_size))
    if not wants_samples:
        return None, shape, {}
    return _samples(args, shape, mapped, count, strict=args.validate > 0), shape, {}


def _declared_types(args):
    """The dtypes of the integer inputs that --input or --inputs FILE.npz declare, read without
    drawing or reading a sample (the report of a conversion without samples names them)."""
    import numpy as np

    if args.input_specs:
        return {name: np.dtype(kind) for name, _, kind, _ in args.input_specs
                if kind.startswith("int")}
    if args.inputs and _is_npz(args.inputs):  # integers are passed as int32 (_npz_arrays)
        return {name: np.dtype(np.int32) for name, (_, _, kind, _)
                in _npz_members(args.inputs).items() if kind.kind in "iub"}
    return {}


def _check_named_memory(inference, shapes, count, batch_size):
    """Refuse, in one line, named samples whose forward passes would not fit in memory."""
    check_memory(estimate_convert_memory(inference, shapes, None, count, batch_size),
                 "%d samples of %s and a forward pass at batch size %d"
                 % (count, ", ".join("%s %s" % (n, ",".join(map(str, s)) or "()")
                                     for n, s in shapes.items()), batch_size))


def _is_npz(path):
    """Whether ``path`` is a .npz archive (a zip file), whatever its name."""
    import zipfile

    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


def _graph_inputs(sym, arg_params, aux_params):
    """The data inputs an inference run needs (labels of Module API outputs dropped)."""
    inference = load("symbolic._inference").inference_graph(sym)
    params = set(arg_params) | set(aux_params)
    return inference, [n for n in inference.list_inputs() if n not in params]


def _named_samples(args, symbolic, sym, arg_params, aux_params, count, strict):
    """Samples as a dict of named arrays (from --inputs FILE.npz or --input specs), checked
    against the graph's data inputs, and the shape of one sample of each."""
    import numpy as np

    inference, names = _graph_inputs(sym, arg_params, aux_params)
    source = "--inputs %s" % args.inputs if args.inputs else "--input"
    declared = ({n: tuple(m[0][1:]) for n, m in _npz_members(args.inputs).items()}
                if args.inputs else {spec[0]: spec[1] for spec in args.input_specs})
    if set(declared) == set(names):  # otherwise the names are refused below, before any work
        _check_named_memory(inference, declared, count, args.batch_size)
    if args.inputs:
        arrays = _npz_arrays(args.inputs, count, strict)
    else:
        rng = np.random.RandomState(args.seed)
        arrays = {}
        for name, shape, dtype_name, high in args.input_specs:
            if name in arrays:
                raise CLIError("--input %s is given twice; the graph's data inputs are %s"
                               % (name, ", ".join(names)))
            if name not in names:
                continue  # named in the one-line refusal below; no sample is drawn for it
            if dtype_name.startswith("int"):
                arrays[name] = rng.randint(0, high, size=(count,) + shape).astype(dtype_name)
            else:
                arrays[name] = rng.uniform(0.0, high, size=(count,) + shape).astype(dtype_name)
    unknown = [n for n in declared if n not in names]
    missing = [n for n in names if n not in arrays]
    if unknown or missing:
        raise CLIError("%s: %s; the graph's data inputs are %s (one %s each)"
                       % (source, "no data input named %s%s" % (
                           ", ".join(map(repr, unknown)),
                           " (did you mean %r?)" % difflib.get_close_matches(
                               unknown[0], names, n=1)[0]
                           if difflib.get_close_matches(unknown[0], names, n=1) else "")
                          if unknown else "no samples for %s" % ", ".join(missing),
                          ", ".join(names), "array" if args.inputs else "--input"))
    arrays = {n: arrays[n] for n in names}
    dtypes = {n: np.dtype(a.dtype) for n, a in arrays.items()}
    graph = load("_core.graph")
    try:
        graph.infer_types(inference, dtypes)
    except graph.GraphTypeError as err:
        raise CLIError("%s: the graph does not take these input dtypes (%s): %s; its data "
                       "inputs are %s" % (source, ", ".join("%s %s" % (n, t.name)
                                                           for n, t in dtypes.items()),
                                          err.reason.rsplit("): ", 1)[-1], ", ".join(names))
                       ) from None
    shapes = {n: tuple(a.shape[1:]) for n, a in arrays.items()}
    symbolic.check_params(sym, arg_params, aux_params, source="the params",
                          data_shapes={n: (1,) + s for n, s in shapes.items()})
    return arrays, shapes


def _npz_members(path):
    """``{name: (shape, fortran_order, dtype, zip member)}`` of a .npz, from each array's header.

    Nothing but the headers is read, and no pickled (object) array is accepted, so a crafted
    archive can neither run code nor make this allocate what it declares.
    """
    import zipfile

    import numpy as np

    members = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError("member %r is not a .npy array" % info.filename)
                with archive.open(info) as handle:
                    version = np.lib.format.read_magic(handle)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read(handle)
                if dtype.hasobject:
                    raise ValueError("array %r holds Python objects (a pickle), which are "
                                     "never loaded" % info.filename[:-4])
                members[info.filename[:-4]] = (shape, fortran, dtype, info)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise CLIError("cannot read inputs file %s as a NumPy .npz archive: %s"
                       % (path, str(err).splitlines()[0] if str(err) else type(err).__name__)
                       ) from None
    return members


def _npz_rows(path, member, count):
    """The first ``count`` rows of one array of a .npz, reading no more of it than they take."""
    import zipfile

    import numpy as np

    shape, fortran, dtype, info = member
    rows = min(count, shape[0])
    row_items = int(np.prod(shape[1:], dtype=np.int64))
    with zipfile.ZipFile(path) as archive, archive.open(info) as handle:
        version = np.lib.format.read_magic(handle)
        (np.lib.format.read_array_header_1_0 if version == (1, 0)
         else np.lib.format.read_array_header_2_0)(handle)
        if fortran and len(shape) > 1:  # column-major: the first rows are not contiguous
            data = handle.read(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
            full = np.frombuffer(data, dtype=dtype).reshape(shape, order="F")
            return np.ascontiguousarray(full[:rows])
        data = handle.read(rows * row_items * dtype.itemsize)
    if len(data) != rows * row_items * dtype.itemsize:
        raise CLIError("inputs file %s: array %r is cut short" % (path, info.filename[:-4]))
    return np.frombuffer(data, dtype=dtype).reshape((rows,) + tuple(shape[1:]))


def _npz_arrays(path, count, strict):
    """The first ``count`` samples of each array of a .npz: int32 for integers, else float32."""
    import numpy as np

    members = _npz_members(path)
    if not members:
        raise CLIError("inputs file %s is a .npz archive with no arrays" % path)
    for name, (shape, _, kind, _) in members.items():
        if len(shape) < 1 or kind.kind not in "fiub":
            raise CLIError("inputs file %s: array %r must hold numbers, one sample per row "
                           "(N, ...), got %s of shape %s" % (path, name, kind, shape))
        if shape[0] < count and strict:
            raise CLIError("inputs file %s: array %r holds %d samples, fewer than the %d asked "
                           "for" % (path, name, shape[0], count))
    lengths = {shape[0] for shape, _, _, _ in members.values()}
    if len(lengths) > 1:
        raise CLIError("inputs file %s: the arrays hold different numbers of samples (%s)"
                       % (path, ", ".join("%s %d" % (n, m[0][0]) for n, m in members.items())))
    out = {}
    for name, member in members.items():
        value = _npz_rows(path, member, count)
        if value.dtype.kind in "iub":
            if value.size and (value.min() < -2 ** 31 or value.max() >= 2 ** 31):
                raise CLIError("inputs file %s: array %r holds integers beyond int32"
                               % (path, name))
            out[name] = value.astype(np.int32)
        else:
            value = value.astype(np.float32)
            bad = value.size - int(np.isfinite(value).sum())
            if bad:
                raise CLIError("inputs file %s: array %r: %d of its %d values used are inf or "
                               "NaN (as float32); a validation on them proves nothing"
                               % (path, name, bad, value.size))
            out[name] = value
    return out


def _sample_shape(args):
    """The shape of one sample: from --input-shape, or read from the .npy header."""
    import zipfile

    import numpy as np

    if args.input_shape:
        return args.input_shape, None
    if not os.path.isfile(args.inputs):
        raise CLIError("inputs file %s does not exist" % args.inputs)
    try:
        samples = np.load(args.inputs, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise CLIError("cannot read inputs file %s as a NumPy .npy array: %s"
                       % (args.inputs, str(err).splitlines()[0] if str(err)
                          else type(err).__name__)) from None
    if not isinstance(samples, np.ndarray):  # np.load opens a .npz archive as an NpzFile
        names = list(samples.files)
        samples.close()
        raise CLIError("--inputs takes one .npy array; %s is a .npz archive of %d arrays (%s): "
                       "save the samples the model takes as one, e.g. "
                       "np.save('samples.npy', np.load('%s')['%s'])"
                       % (args.inputs, len(names), ", ".join(names[:5]) or "none",
                          os.path.basename(args.inputs), names[0] if names else "x"))
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


def _check_excluded_layers(args, sym):
    """An --exclude name the graph lacks, in one line that says where layer names are."""
    nodes = load("_core.graph").as_graph(sym).nodes
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


# How each ConvertOptions field is set from the command line: field -> (flag, value of args).
# A new field needs its flag here, or a place in tests/test_convert_options.py's set of fields
# the CLI does not offer.
OPTION_FLAGS = {
    "target_dtype": ("--dtype", lambda args: args.dtype),
    "exclude_layers": ("--exclude", lambda args: args.exclude),
    "exclude_ops": ("--exclude-op", lambda args: args.exclude_op),
    "keep_io_types": ("--keep-io-types", lambda args: args.keep_io_types),
    "cast_optional_params": ("--keep-optional-params-float32",
                             lambda args: not args.keep_optional_params_float32),
    "fold_batchnorm": ("--fold-bn", lambda args: args.fold_bn),
}


def convert_options(symbolic, args):
    """The one ConvertOptions of this command, built from its flags."""
    return symbolic.ConvertOptions(**{field: value(args)
                                      for field, (_, value) in OPTION_FLAGS.items()})


def _convert_model(args, symbolic, sym, arg_params, aux_params, samples, types=None):
    """Convert (or search, then convert); print the report as soon as it exists."""
    options = convert_options(symbolic, args)
    if args.search_tolerance is not None:
        search = symbolic.search_fp32_layers(sym, arg_params, aux_params, samples,
                                             tolerance=args.search_tolerance,
                                             batch_size=args.batch_size,
                                             progress=bars_wanted(), options=options)
        print(search.model.report.format(verbose=args.verbose))
        _say(search)
        return search.model
    model = symbolic.convert(sym, arg_params, aux_params, calibration=samples,
                             batch_size=args.batch_size, progress=bars_wanted(),
                             options=options, input_types=types or None)
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

    diagnostics = load("diagnostics")
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
