"""The samples of ``mxmixed convert``: ``--inputs FILE.npy`` or ``FILE.npz``, ``--input
NAME:SHAPE[:DTYPE[:HIGH]]`` or ``--input-shape``, checked against the graph's data inputs and the
available memory before any array is drawn or read (a ``.npz`` is read from each array's header
first, and never unpickled)."""
import argparse
import difflib
import os

from ._args import parse_shape
from ._preflight import CLIError, check_memory, estimate_convert_memory

__all__ = ["input_spec", "convert_samples"]


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


def convert_samples(args, symbolic, sym, arg_params, aux_params):
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
    from ..symbolic._inference import inference_graph

    inference = inference_graph(sym)
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
    from .._core import graph

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
