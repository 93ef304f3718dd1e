"""A file in the format of ``mx.nd.save`` from someone else, walked before MXNet loads it.

:func:`check_nd_bytes` walks it exactly as MXNet 1.9.1 reads it and refuses anything MXNet
would crash on, refuse, or allocate more than the file holds for. :func:`nd_bytes` writes that
format in memory. Imported from :mod:`mxmixed._files.untrusted`.
"""
import struct

import mxnet as mx

from ..._core.dtypes import MXNET_CODES
from ._json import UnsafeFileError

__all__ = ["check_nd_bytes", "nd_bytes"]

_ND_LIST_MAGIC = 0x112
_ND_V2, _ND_V3 = 0xF993FAC9, 0xF993FACA
# the dtypes MXNet 1.9.1 reads (8 to 11 are "Unknown type enum")
_ND_ITEMSIZE = {code: dtype.itemsize for code, dtype in MXNET_CODES.items()}
_ND_MAX_DIMS = 32
_ND_MAX_ELEMENTS = 2 ** 31 - 1  # one tensor of MXNet 1.9.1 built without INT64_TENSOR_SIZE
# MXNet and Python spend about 950 bytes on each array loaded (measured: 65,536 one-byte arrays,
# a 3 MB file, cost 62 MB), 20 times what a tiny array takes in the file. At most 65,536 arrays
# plus one per KiB keeps that under the file's size plus 62 MB (a BERT-large has 400 arrays).
_ND_MAX_ARRAYS = 65536


def nd_bytes(arrays):
    """The bytes ``mx.nd.save(file, arrays)`` writes, made in memory (no file, no MXNet error).

    Parameters
    ----------
    arrays : dict of str to mxnet.nd.NDArray

    Returns
    -------
    bytes
    """
    names = list(arrays)
    parts = [struct.pack("<QQQ", _ND_LIST_MAGIC, 0, len(names))]
    parts += [arrays[name].__getstate__()["handle"] for name in names]
    parts.append(struct.pack("<Q", len(names)))
    for name in names:
        raw = name.encode("utf-8")
        parts += [struct.pack("<Q", len(raw)), raw]
    return b"".join(parts)


def check_nd_bytes(data, source):
    """Walk an MXNet array file (``mx.nd.save``'s format) as MXNet 1.9.1 reads it, before it does.

    The walk follows ``NDArray::Load``: the list header (its count of arrays bounded by the
    bytes left, since MXNet makes that many arrays before reading one, and by 65,536 plus one
    per KiB, since each array costs about 950 bytes once loaded); per array the format
    magic (V2, or V3 when NumPy shape semantics are on, as MXNet requires), a dense storage
    type, a shape (at least one dimension, or a 0-d array under NumPy semantics: MXNet reads
    no more for a shapeless array and the caller gets an array it cannot use), the context,
    the dtype (one MXNet knows) and the data, which must be within the bytes left (MXNet
    allocates it before reading it); then the names (as many as the arrays, or none), each
    within the bytes left and valid UTF-8. Nothing may follow. What passes makes MXNet allocate
    the data the file holds plus a bounded overhead per array and name.

    Parameters
    ----------
    data : bytes
    source : str
        How to name the file in the message (its path, or a member of an archive).

    Returns
    -------
    int
        The number of arrays.

    Raises
    ------
    UnsafeFileError
        One line naming ``source`` and what is wrong.
    """
    read = _NdReader(data, source)
    magic, _, count = read.take("<QQQ")
    if magic != _ND_LIST_MAGIC:
        raise read.bad("it does not start with the magic number of mx.nd.save")
    if count * 12 > read.left() or count > _ND_MAX_ARRAYS + len(read.view) // 1024:
        raise read.bad("it declares %d arrays in %d bytes (at most 65536 and one per KiB)"
                       % (count, len(read.view)))
    np_shape = mx.util.is_np_shape()
    for index in range(count):
        _nd_array(read, index, np_shape)
    _nd_names(read, count)
    if read.left():
        raise read.bad("%d bytes follow its last array" % read.left())
    return count


class _NdReader:
    """A position in the bytes of an array file, and the refusal that names the file."""

    def __init__(self, data, source):
        self.view, self.pos, self.source = memoryview(data), 0, source

    def left(self):
        return len(self.view) - self.pos

    def bad(self, detail):
        return UnsafeFileError("%s cannot be loaded: it is not a valid MXNet array file (%s)"
                               % (self.source, detail))

    def take(self, fmt):
        size = struct.calcsize(fmt)
        if size > self.left():
            raise self.bad("it ends inside a header (at byte %d)" % self.pos)
        values = struct.unpack_from(fmt, self.view, self.pos)
        self.pos += size
        return values


def _nd_array(read, index, np_shape):
    """Walk array ``index``: its header (format, storage, shape, context, dtype), then its data."""
    magic, stype, ndim = read.take("<Iii")
    if magic not in (_ND_V2, _ND_V3):
        raise read.bad("array %d has an unsupported format (magic 0x%08x)" % (index, magic))
    if (magic == _ND_V3) != np_shape:
        raise read.bad("array %d was saved %s NumPy shape semantics, and they are %s in this "
                       "process" % (index, "with" if magic == _ND_V3 else "without",
                                    "on" if np_shape else "off"))
    if stype != 0:
        raise read.bad("array %d is sparse or of an unknown storage type (%d), which is not "
                       "supported" % (index, stype))
    if not (0 if np_shape else 1) <= ndim <= _ND_MAX_DIMS:
        raise read.bad("array %d has no shape" % index if ndim in (0, -1)
                       else "array %d declares %d dimensions" % (index, ndim))
    dims = read.take("<%dq" % ndim)
    if not all(0 <= d <= _ND_MAX_ELEMENTS for d in dims):  # MXNet's API reads them as int32
        raise read.bad("array %d declares the shape %s" % (index, dims))
    _, _, type_flag = read.take("<iii")  # the context (ignored: MXNet loads to the CPU), the dtype
    if type_flag not in _ND_ITEMSIZE:
        raise read.bad("array %d has the unknown dtype flag %d" % (index, type_flag))
    elements = 1
    for d in dims:
        elements *= d
    size = elements * _ND_ITEMSIZE[type_flag]
    if size > read.left():
        raise UnsafeFileError("%s cannot be loaded: array %d declares the shape %s (%d bytes), "
                              "more than the %d bytes left in the file (truncated, or "
                              "crafted)" % (read.source, index, tuple(dims), size, read.left()))
    if elements > _ND_MAX_ELEMENTS:
        raise read.bad("array %d has %d elements, more than MXNet's 2^31 - 1 for one tensor"
                       % (index, elements))
    read.pos += size


def _nd_names(read, count):
    """Walk the names: as many as the arrays, or none; each within the bytes left, UTF-8."""
    (names,) = read.take("<Q")
    if names not in (0, count):
        raise read.bad("it names %d of its %d arrays" % (names, count))
    for index in range(names):
        (size,) = read.take("<Q")
        if size > read.left():
            raise read.bad("the name of array %d declares %d bytes" % (index, size))
        try:
            bytes(read.view[read.pos:read.pos + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise read.bad("the name of array %d is not UTF-8 text" % index) from None
        read.pos += size
