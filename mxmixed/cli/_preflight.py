"""Checks made before any expensive work: output locations and memory (``mxmixed`` commands).

Each check fails with a one-line :class:`CLIError` before a model is loaded or a sample is
allocated, so that a bad location or an impossible size never costs a validation run.
"""
import contextlib
import io
import math
import os
import tempfile
import warnings

from .._core.errors import one_line
from .._files.atomic import check_writable, name_too_long, special_file

__all__ = ["CLIError", "prepare_out_dir", "check_out_prefix", "available_memory",
           "estimate_convert_memory", "check_memory", "EXIT_OK", "EXIT_VALIDATION_FAILED",
           "EXIT_USAGE", "EXIT_WRITE_FAILED", "EXIT_INTERRUPTED"]

# The exit codes of the `mxmixed` commands (their meaning: cli._convert.CONVERT_EPILOG, the README).
EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_USAGE, EXIT_WRITE_FAILED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT (128 + 2)


class CLIError(Exception):
    """A bad command-line input, reported as one line and exit code ``code``."""

    def __init__(self, message, code=EXIT_USAGE):
        super().__init__(message)
        self.code = code



# ------------------------------------------------------------------ output locations
def _probe_writable(folder, what):
    """Create and remove a file in ``folder``: catches read-only mounts, /proc and permissions."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".mxmixed-probe-", dir=folder)
        os.close(handle)
        os.remove(probe)
    except OSError as err:
        raise CLIError("cannot write in %s %s: %s" % (what, folder, err.strerror or err)) from None


def prepare_out_dir(path, what="results folder"):
    """Create ``path`` if missing and check that files can be written in it.

    Raises
    ------
    CLIError
        One line, when ``path`` is a file, cannot be created or is not writable.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise CLIError("%s %s exists and is not a folder" % (what, path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise CLIError("cannot create %s %s: %s" % (what, path, err.strerror or err)) from None
    _probe_writable(path, what)


def check_out_prefix(out, in_files, out_files):
    """Check the rules for ``--out`` (see ``mxmixed convert --help``) before any expensive work.

    Parameters
    ----------
    out : str
        The output prefix.
    in_files, out_files : list of str
        The input and output checkpoint files.

    Raises
    ------
    CLIError
        One line, when ``out`` is a folder, would overwrite the input, or cannot be written.
    """
    name = os.path.basename(out)
    if name in ("", ".", "..") or os.path.isdir(out):
        raise CLIError("--out %r is a folder; give a file prefix inside it, such as %s"
                       % (out, os.path.join(out, "model16")))
    if any(os.path.realpath(i) == os.path.realpath(o) for i in in_files for o in out_files):
        raise CLIError("the output prefix %r would overwrite the input checkpoint; choose "
                       "another --out" % out)
    folder = os.path.dirname(os.path.abspath(out_files[0]))
    if not os.path.isdir(folder):
        raise CLIError("output folder %s does not exist" % folder
                       if not os.path.exists(folder) else "%s is not a folder" % folder)
    for path in out_files:
        if os.path.isdir(path):
            raise CLIError("%s is a folder; it cannot be replaced by the converted file" % path)
        kind = special_file(path)
        if kind is not None:  # renaming over it would replace the link or device by a file
            raise CLIError("%s is %s, not a regular file; mxmixed never writes over one (remove "
                           "it, or choose another --out)" % (path, kind))
        too_long = name_too_long(path)
        if too_long:
            raise CLIError("the output file name %s is %d bytes, too long: the filesystem holds "
                           "names of at most %d bytes; choose a shorter --out"
                           % ((os.path.basename(path),) + too_long))
    _probe_writable(folder, "output folder")
    try:  # the temporary files, named as the writer names them, can be created beside them
        check_writable(out_files)
    except OSError as err:
        raise CLIError("cannot write %s: %s" % (err.filename or out, err.strerror or err)) \
            from None


# ------------------------------------------------------------------ memory
def available_memory():
    """Bytes of memory available to a new allocation: MemAvailable, else free pages.

    Returns
    -------
    int or None
        None when neither ``/proc/meminfo`` nor ``os.sysconf`` tells.
    """
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _size(shape):
    return math.prod(int(dim) for dim in shape)


def estimate_convert_memory(sym, data_name, sample_shape, count, batch_size, axes=None):
    """Bytes that ``convert`` with ``count`` samples would need, from shape inference alone.

    The float32 samples, plus, for each of the float32 and the float16 model: every
    intermediate output of one batch in float32 (what the CPU emulation computes in) and the
    outputs kept for all samples.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    data_name : str or dict of str to tuple of int
        The data input; or, for a graph of several, ``{name: one sample's shape}`` (then
        ``sample_shape`` is None).
    sample_shape : tuple of int
        One sample, without the batch axis.
    count, batch_size : int
    axes : dict of str to int, optional
        The batch axis of each named input (time-major inputs and recurrent states: 1); by
        default 0.

    Returns
    -------
    int
    """
    shapes = dict(data_name) if isinstance(data_name, dict) else {data_name: sample_shape}
    shapes = {n: tuple(s) for n, s in shapes.items()}
    batch = min(batch_size, count)
    axes = axes or {}

    def batched(name, shape):
        axis = axes.get(name, 0)
        return shape if axis is None else shape[:axis] + (batch,) + shape[axis:]

    internals = sym.get_internals()
    # MXNet prints "infer_shape error. Arguments: ..." to stdout before it raises, and warns
    # of each parameter whose shape the data alone does not decide (the file gives it)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _, inner, _ = internals.infer_shape(**{n: batched(n, s) for n, s in shapes.items()})
            # at the batch checked, never at 1: a time-major sample is one time step, and a
            # convolution over time refuses a single step (ConvolutionalEncoder)
            _, outputs, _ = sym.infer_shape(**{n: batched(n, s) for n, s in shapes.items()})
    except Exception as err:  # MXNetError; a bare Exception for a tensor over 2^31 elements
        raise CLIError("samples of shape %s at batch size %d do not fit the graph: %s"
                       % (", ".join(",".join(map(str, s)) or "()" for s in shapes.values()),
                          batch, one_line(err))) from None
    activations = sum(_size(s) for s in inner or ())
    kept = count * sum(_size(s) for s in outputs or ()) // batch
    return 4 * (count * sum(_size(s) for s in shapes.values()) + 2 * (activations + kept))


def check_memory(needed, what):
    """Refuse, in one line, work that needs more than the available memory.

    Parameters
    ----------
    needed : int
        Bytes, e.g. from :func:`estimate_convert_memory`.
    what : str
        What needs them, for the message.

    Raises
    ------
    CLIError
    """
    available = available_memory()
    if available is not None and needed > available:
        raise CLIError("%s need about %.3g GB of memory, more than the %.3g GB available; use "
                       "fewer --validate samples or a smaller --input-shape / --batch-size"
                       % (what, needed / 1e9, available / 1e9))
