"""The samples of ``mxmixed convert``: ``--inputs FILE.npy`` or ``FILE.npz``, ``--input
NAME:SHAPE[:DTYPE[:HIGH]]`` or ``--input-shape``, checked against the graph's data inputs and the
available memory before any array is drawn or read. The files are read by
:mod:`mxmixed._files.npz`: names from the zip directory, shapes from each array's header, then
only the rows used; nothing is unpickled."""
import argparse
import difflib
import os

from ._args import parse_shape
from ._preflight import CLIError, check_memory, estimate_convert_memory

__all__ = ["input_spec", "check_input_specs", "convert_samples"]


_SPEC_DTYPES = ("float32", "int32")
# the names a one-line refusal lists before "(N in all)"
_SHOWN = 8


def _spec_high(dtype_name):
    """The largest HIGH of an ``--input`` dtype: the values drawn in [0, HIGH) are finite and
    fit it."""
    from .._core.dtypes import FLOAT32_MAX

    return 2 ** 31 if dtype_name == "int32" else FLOAT32_MAX


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
    if high is None or not 0 < high <= _spec_high(dtype_name):  # NaN fails the comparison
        raise argparse.ArgumentTypeError(
            "%r: HIGH must be a positive %s of at most %s (%s's range), got %r"
            % (text, "integer" if integer else "finite number",
               "2^31" if integer else "3.4e38", dtype_name, parts[3]))
    return name, shape, dtype_name, high


def check_input_specs(specs):
    """Refuse, in one line, a data input named by two ``--input`` specs (before any work).

    Parameters
    ----------
    specs : list of tuple or None
        ``--input``'s ``(name, shape, dtype, high)`` specs.

    Raises
    ------
    CLIError
    """
    seen = set()
    for name, *_ in specs or ():
        if name in seen:
            raise CLIError("--input %s is given twice; give one --input per data input" % name)
        seen.add(name)


def _listed(names):
    """``names`` for a one-line message: the first few, and how many in all."""
    shown = ", ".join(names[:_SHOWN])
    return shown + (", ... (%d in all)" % len(names) if len(names) > _SHOWN else "")


def convert_samples(args, sym, arg_params, aux_params):
    """The samples for calibration, validation and the search (None when none is asked),
    the shape of one (None when no shape is given), and the dtypes of integer inputs: an
    array and a shape, or with several named inputs a dict of arrays and one of shapes."""
    from ..symbolic import check_params, data_inputs

    data_names = data_inputs(sym, arg_params, aux_params)
    if not data_names:
        raise CLIError("the graph has no data input: every input is a parameter")
    wants_samples = args.validate > 0 or args.search_tolerance is not None
    if not (wants_samples or args.format == "onnx"):
        return None, None, _declared_types(args)
    if args.input_specs or (args.inputs and _is_npz(args.inputs)):
        samples, shapes = _named_samples(args, sym, arg_params, aux_params, args.validate or 8,
                                         strict=args.validate > 0)
        types = {n: a.dtype for n, a in samples.items() if a.dtype.kind in "iu"}
        return (samples if wants_samples else None), shapes, types
    _check_one_input(args, sym, arg_params, aux_params)
    shape, header = _sample_shape(args)
    axis = _npy_batch_axis(sym, arg_params, aux_params, data_names[0], header)
    if axis:
        return _npy_along(args, (sym, arg_params, aux_params), data_names[0], header, axis,
                          wants_samples)
    check_params(sym, arg_params, aux_params, source="the params",
                 data_shapes={data_names[0]: (1,) + shape})
    count = args.validate or 8
    rows = count if header is None or args.validate > 0 else min(count, header.shape[0])
    read = 0 if header is None else rows * header.row_items * header.dtype.itemsize
    check_memory(estimate_convert_memory(sym, data_names[0], shape, count, args.batch_size)
                 + read, "%d samples of shape %s and a forward pass at batch size %d"
                 % (count, ",".join(map(str, shape)), args.batch_size))
    if not wants_samples:
        return None, shape, {}
    return _samples(args, shape, header, count, strict=args.validate > 0), shape, {}


def _npy_batch_axis(sym, arg_params, aux_params, name, header):
    """The batch axis of a .npy's array as the graph defines it (1 for time-major ``(T, N)``
    ids); 0 for --input-shape, and where the graph cannot tell."""
    from ..symbolic import batch_axes

    if header is None:
        return 0
    inference, _ = _graph_inputs(sym, arg_params, aux_params)
    return batch_axes(inference, {name: tuple(header.shape)}).input_axis(name) or 0


def _npy_along(args, model, name, header, axis, wants_samples):
    """:func:`convert_samples` for a .npy whose samples lie along ``axis``: the whole array is
    read (its rows are not samples), then the first samples along that axis are kept."""
    import numpy as np

    from .._files.npz import SamplesFileError, read_header, read_rows
    from ..symbolic import check_params

    check_params(*model, source="the params", data_shapes={name: tuple(header.shape)})
    held = header.shape[axis]
    count = args.validate or 8
    if args.validate > 0 and held < count:
        raise CLIError("inputs file %s holds %d samples along its batch axis %d (shape %s), "
                       "fewer than the %d asked for"
                       % (args.inputs, held, axis, ",".join(map(str, header.shape)), count))
    count = min(count, held)
    shape = tuple(d for k, d in enumerate(header.shape) if k != axis)
    read = header.shape[0] * header.row_items * header.dtype.itemsize
    check_memory(estimate_convert_memory(inference_of(model), name, shape, count,
                                         args.batch_size, {name: axis}) + read,
                 "%d samples of shape %s (batch axis %d) and a forward pass at batch size %d"
                 % (count, ",".join(map(str, header.shape)), axis, args.batch_size))
    if not wants_samples:
        return None, shape, {}
    try:
        with open(args.inputs, "rb") as handle:
            read_header(handle, args.inputs)
            whole = read_rows(handle, header, header.shape[0], args.inputs)
    except SamplesFileError as err:
        raise CLIError("--inputs: %s" % err) from None
    except OSError as err:
        raise CLIError("cannot read inputs file %s: %s" % (args.inputs, err.strerror or err)
                       ) from None
    samples = _model_dtype(np.take(whole, np.arange(count), axis=axis),
                           "inputs file %s" % args.inputs)
    return samples, shape, ({name: samples.dtype} if samples.dtype.kind == "i" else {})


def _model_dtype(value, source):
    """``value`` as the model reads it: integers (token ids) as int32, refused beyond its
    range rather than wrapped; floats as float32, refused where inf or NaN (relu(NaN) is 0 on
    oneDNN: NaN samples can even pass a validation). ``source`` names it in the one line."""
    import numpy as np

    if value.dtype.kind in "iub":
        if value.size and (value.min() < -2 ** 31 or value.max() >= 2 ** 31):
            raise CLIError("%s holds integers beyond int32" % source)
        return value.astype(np.int32)
    value = value.astype(np.float32)
    bad = value.size - int(np.isfinite(value).sum())
    if bad:
        raise CLIError("%s: %d of the %d values used are inf or NaN (as float32); a validation "
                       "on them proves nothing" % (source, bad, value.size))
    return value


def inference_of(model):
    """The inference graph of a (sym, args, auxs) model."""
    from ..symbolic import inference_graph

    return inference_graph(model[0])


def _declared_types(args):
    """The dtypes of the integer inputs that --input or --inputs FILE.npz declare, read without
    drawing or reading a sample (the report of a conversion without samples names them)."""
    import numpy as np

    from .._files.npz import NpzArchive, SamplesFileError

    if args.input_specs:
        return {name: np.dtype(kind) for name, _, kind, _ in args.input_specs
                if kind.startswith("int")}
    if args.inputs and _is_npz(args.inputs):  # integers are passed as int32 (_npz_arrays)
        try:
            with NpzArchive(args.inputs) as archive:
                return {name: np.dtype(np.int32) for name in archive.names
                        if archive.header(name).dtype.kind in "iub"}
        except SamplesFileError as err:
            raise CLIError("--inputs: %s" % err) from None
    return {}


def _check_one_input(args, sym, arg_params, aux_params):
    """Refuse, in one line naming the flags that fit, one sample shape for several inputs."""
    _, names = _graph_inputs(sym, arg_params, aux_params)
    if len(names) > 1:
        flag = "--input-shape" if args.input_shape else "--inputs %s" % args.inputs
        raise CLIError("this model has %d data inputs (%s), and %s gives samples for one: give "
                       "--inputs FILE.npz with one array per input, named as the inputs, or "
                       "one --input NAME:SHAPE[:DTYPE[:HIGH]] per input (%s)"
                       % (len(names), _listed(names), flag,
                          " ".join("--input %s:SHAPE" % n for n in names[:_SHOWN])
                          + (" ..." if len(names) > _SHOWN else "")))


def _check_named_memory(inference, shapes, count, batch_size, read=0, axes=None):
    """Refuse, in one line, named samples whose forward passes (and the ``read`` bytes of
    their files) would not fit in memory. ``shapes`` are one sample's, without the batch
    axis, which ``axes`` places (default 0)."""
    check_memory(estimate_convert_memory(inference, shapes, None, count, batch_size, axes)
                 + read,
                 "%d samples of %s and a forward pass at batch size %d"
                 % (count, ", ".join("%s %s" % (n, ",".join(map(str, s)) or "()")
                                     for n, s in shapes.items()), batch_size))


def _is_npz(path):
    """Whether ``path`` is a .npz archive (a zip file, or starts as one), whatever its name."""
    import zipfile

    if not os.path.isfile(path):  # a FIFO would block; the .npy reader names what it is
        return False
    try:
        with open(path, "rb") as handle:
            start = handle.read(4)
        return start in (b"PK\x03\x04", b"PK\x05\x06") or zipfile.is_zipfile(path)
    except OSError:
        return False


def _graph_inputs(sym, arg_params, aux_params):
    """The data inputs an inference run needs (labels of Module API outputs dropped)."""
    from ..symbolic import inference_graph

    inference = inference_graph(sym)
    params = set(arg_params) | set(aux_params)
    return inference, [n for n in inference.list_inputs() if n not in params]


def _named_samples(args, sym, arg_params, aux_params, count, strict):
    """Samples as a dict of named arrays (from --inputs FILE.npz or --input specs), checked
    against the graph's data inputs, and the shape of one sample of each.

    The names are compared, and the memory the samples, the file's rows and the forward passes
    take is checked, before any array is read or drawn.
    """
    import numpy as np

    from .._files.npz import NpzArchive, SamplesFileError
    from ..symbolic import check_params

    inference, names = _graph_inputs(sym, arg_params, aux_params)
    if args.inputs:
        try:
            with NpzArchive(args.inputs) as archive:
                if not archive.names:
                    raise CLIError("inputs file %s is a .npz archive with no arrays; the "
                                   "graph's data inputs are %s (one array each)"
                                   % (args.inputs, _listed(names)))
                _check_names("--inputs %s" % args.inputs, archive.names, names, "array")
                arrays = _npz_arrays(args, archive, names, inference, count, strict)
        except SamplesFileError as err:
            raise CLIError("--inputs: %s" % err) from None
    else:
        specs = {spec[0]: spec for spec in args.input_specs}
        _check_names("--input", list(specs), names, "--input")
        _check_named_memory(inference, {n: specs[n][1] for n in names}, count, args.batch_size)
        rng = np.random.RandomState(args.seed)
        arrays = {}
        for name in names:
            _, shape, dtype_name, high = specs[name]
            if dtype_name.startswith("int"):
                arrays[name] = rng.randint(0, high, size=(count,) + shape).astype(dtype_name)
            else:
                arrays[name] = rng.uniform(0.0, high, size=(count,) + shape).astype(dtype_name)
    source = "--inputs %s" % args.inputs if args.inputs else "--input"
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
    # the arrays as they are: their batch axis is the graph's, not always the first
    check_params(sym, arg_params, aux_params, source="the params",
                 data_shapes={n: tuple(a.shape) for n, a in arrays.items()})
    return arrays, shapes


def _check_names(source, given, names, each):
    """Refuse, in one line, samples named otherwise than the graph's data inputs."""
    unknown = [n for n in given if n not in names]
    missing = [n for n in names if n not in given]
    if not (unknown or missing):
        return
    if unknown:
        close = difflib.get_close_matches(unknown[0], names, n=1)
        what = "no data input named %s%s" % (_listed(list(map(repr, unknown))),
                                              " (did you mean %r?)" % close[0] if close else "")
    else:
        what = "no samples for %s" % _listed(missing)
    raise CLIError("%s: %s; the graph's data inputs are %s (one %s each)"
                   % (source, what, _listed(names), each))


def _npz_arrays(args, archive, names, inference, count, strict):
    """The first ``count`` samples of each array of a .npz named as the graph's data inputs:
    int32 for integers, else float32. Their headers and the memory are checked first."""
    import numpy as np

    path = args.inputs
    headers = {name: archive.header(name) for name in names}
    for name, header in headers.items():
        if len(header.shape) < 1:
            raise CLIError("inputs file %s: array %r must hold one sample per row (N, ...), "
                           "got a scalar" % (path, name))
    from ..symbolic import batch_axes

    # the samples lie along each array's batch axis as the graph defines it: axis 1 of a
    # time-major (T, N) input and of recurrent states (layers, N, hidden)
    axes = batch_axes(inference, {n: h.shape for n, h in headers.items()})
    axis = {n: axes.input_axis(n) for n in names}
    for name, header in headers.items():
        held = header.shape[axis[name] or 0]
        if held < count and strict:
            raise CLIError("inputs file %s: array %r holds %d samples%s, fewer than the %d "
                           "asked for" % (path, name, held, " (along its batch axis %d)"
                                          % axis[name] if axis[name] else "", count))
    lengths = {header.shape[axis[n] or 0] for n, header in headers.items()}
    if len(lengths) > 1:
        raise CLIError("inputs file %s: the arrays hold different numbers of samples (%s)"
                       % (path, ", ".join("%s %d" % (n, h.shape[axis[n] or 0])
                                          for n, h in headers.items())))
    rows = min(count, lengths.pop())
    sample = {n: tuple(d for k, d in enumerate(h.shape) if k != (axis[n] or 0))
              for n, h in headers.items()}
    _check_named_memory(inference, sample, rows, args.batch_size,
                        sum(rows * h.row_items * h.dtype.itemsize for h in headers.values()),
                        axis)
    out = {}
    for name in names:
        if axis[name]:  # read whole, then the first samples along the batch axis
            value = archive.rows(name, headers[name].shape[0])
            value = np.take(value, np.arange(rows), axis=axis[name])
        else:
            value = archive.rows(name, rows)
        out[name] = _model_dtype(value, "inputs file %s: array %r" % (path, name))
    return out


def _sample_shape(args):
    """The shape of one sample, from --input-shape or the .npy header, and that header (None
    for --input-shape)."""
    from .._files.npz import SamplesFileError, read_header

    if args.input_shape:
        return args.input_shape, None
    if not os.path.isfile(args.inputs):
        raise CLIError("inputs file %s %s" % (args.inputs, "is not a regular file"
                                              if os.path.exists(args.inputs)
                                              else "does not exist"))
    try:
        with open(args.inputs, "rb") as handle:
            header = read_header(handle, args.inputs)
    except SamplesFileError as err:
        raise CLIError("--inputs: %s" % err) from None
    except OSError as err:
        raise CLIError("cannot read inputs file %s: %s" % (args.inputs, err.strerror or err)
                       ) from None
    if len(header.shape) < 2 or header.dtype.kind not in "iuf":
        raise CLIError("inputs file %s must hold a numeric array of samples (N, ...), got "
                       "%s of shape %s" % (args.inputs, header.dtype, header.shape))
    return tuple(header.shape[1:]), header


def _samples(args, shape, header, count, strict):
    """``count`` float32 samples: the first rows of --inputs (its ``header``), or random
    uniform [0, 1)."""
    import numpy as np

    from .._files.npz import SamplesFileError, read_header, read_rows

    if header is None:
        return np.random.RandomState(args.seed).uniform(
            0.0, 1.0, size=(count,) + shape).astype(np.float32)
    if not strict:
        count = min(count, header.shape[0])
    if header.shape[0] < count:
        raise CLIError("inputs file %s holds %d samples, fewer than the %d asked for"
                       % (args.inputs, header.shape[0], count))
    try:
        with open(args.inputs, "rb") as handle:
            read_header(handle, args.inputs)
            samples = read_rows(handle, header, count, args.inputs).astype(np.float32)
    except SamplesFileError as err:
        raise CLIError("--inputs: %s" % err) from None
    except OSError as err:
        raise CLIError("cannot read inputs file %s: %s" % (args.inputs, err.strerror or err)
                       ) from None
    return _model_dtype(samples, "inputs file %s" % args.inputs)
