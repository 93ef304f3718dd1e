"""Files from someone else, looked at before a parser sees them: nothing runs, nothing explodes.

:func:`check_json_depth` refuses JSON nested deeper than a limit (Python's parser recurses once
per level and ends in a ``RecursionError``), in time linear in the text. :func:`check_nd_bytes`
walks a file in the format of ``mx.nd.save`` exactly as MXNet 1.9.1 reads it and refuses
anything MXNet would crash on, refuse, or allocate more than the file holds for.
:func:`nd_bytes` writes that format in memory. Every refusal is an :class:`UnsafeFileError` of
one line that names the file and what is wrong.
"""
import re
import struct

import numpy as np

import mxnet as mx

__all__ = ["UnsafeFileError", "MAX_JSON_DEPTH", "check_json_depth", "check_nd_bytes", "nd_bytes"]


class UnsafeFileError(ValueError):
    """A file from someone else breaks a limit that is checked before it is parsed."""


# ------------------------------------------------------------------ JSON
MAX_JSON_DEPTH = 100
"""The deepest nesting of arrays and objects accepted in a JSON file from someone else (Python's
parser recurses once per level; MXNet's symbol files nest 5 deep, checkpoint manifests about 10)."""

_ESCAPE = re.compile(rb"\\.", re.S)  # a backslash and the character it escapes
_STRING = re.compile(rb'"[^"]*"')  # a string, once its escapes are gone
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[{]}")


def check_json_depth(text, source, limit=MAX_JSON_DEPTH):
    """Refuse JSON text nested deeper than ``limit``, before a recursive parser sees it.

    Linear in the length of the text: three passes that never look back (the escapes, read
    left to right; the strings, which hold no quote once their escapes are gone; the brackets
    left, summed as +1 and -1), so that no input makes the check slow.

    Parameters
    ----------
    text : str or bytes
    source : str
        How to name the file in the message (its path).
    limit : int

    Raises
    ------
    UnsafeFileError
        One line naming ``source`` and the limit.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    # outside a string a backslash is not JSON: the parser stops there, so dropping it (and
    # the next character) changes nothing before the point where the parser would stop
    brackets = _STRING.sub(b"", _ESCAPE.sub(b"", data)).translate(_BRACKETS, _NOT_BRACKETS)
    steps = np.frombuffer(brackets, dtype=np.int8)
    level = depth = 0
    for start in range(0, steps.size, 1 << 20):  # 8 MB of running sums at a time
        run = steps[start:start + (1 << 20)].cumsum(dtype=np.int64) + level
        level, depth = int(run[-1]), max(depth, int(run.max()))
    if depth > limit:
        raise UnsafeFileError("%s nests JSON %d levels deep, more than the limit of %d; "
                              "refusing to parse it" % (source, depth, limit))


# ------------------------------------------------------------------ arrays (.params)
_ND_LIST_MAGIC = 0x112
_ND_V2, _ND_V3 = 0xF993FAC9, 0xF993FACA
# the dtypes MXNet 1.9.1 reads (8 to 11 are "Unknown type enum"): float32, float64, float16,
# uint8, int32, int8, int64, bool, bfloat16
_ND_ITEMSIZE = {0: 4, 1: 8, 2: 2, 3: 1, 4: 4, 5: 1, 6: 8, 7: 1, 12: 2}
_ND_MAX_DIMS = 32
_ND_MAX_ELEMENTS = 2 ** 31 - 1  # one tensor of MXNet 1.9.1 built without INT64_TENSOR_SIZE


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
    bytes left, since MXNet makes that many arrays before reading one); per array the format
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
    view, pos = memoryview(data), 0
    np_shape = mx.util.is_np_shape()

    def bad(detail):
        return UnsafeFileError("%s cannot be loaded: it is not a valid MXNet array file (%s)"
                               % (source, detail))

    def take(fmt):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(view):
            raise bad("it ends inside a header (at byte %d)" % pos)
        values = struct.unpack_from(fmt, view, pos)
        pos += size
        return values

    magic, _, count = take("<QQQ")
    if magic != _ND_LIST_MAGIC:
        raise bad("it does not start with the magic number of mx.nd.save")
    if count * 12 > len(view) - pos:
        raise bad("it declares %d arrays in %d bytes" % (count, len(view)))
    for index in range(count):
        magic, stype, ndim = take("<Iii")
        if magic not in (_ND_V2, _ND_V3):
            raise bad("array %d has an unsupported format (magic 0x%08x)" % (index, magic))
        if (magic == _ND_V3) != np_shape:
            raise bad("array %d was saved %s NumPy shape semantics, and they are %s in this "
                      "process" % (index, "with" if magic == _ND_V3 else "without",
                                   "on" if np_shape else "off"))
        if stype != 0:
            raise bad("array %d is sparse or of an unknown storage type (%d), which is not "
                      "supported" % (index, stype))
        if not (0 if np_shape else 1) <= ndim <= _ND_MAX_DIMS:
            raise bad("array %d has no shape" % index if ndim in (0, -1)
                      else "array %d declares %d dimensions" % (index, ndim))
        dims = take("<%dq" % ndim)
        if not all(0 <= d <= _ND_MAX_ELEMENTS for d in dims):  # MXNet's API reads them as int32
            raise bad("array %d declares the shape %s" % (index, dims))
        _, _, type_flag = take("<iii")  # the context (ignored: MXNet loads to the CPU), the dtype
        if type_flag not in _ND_ITEMSIZE:
            raise bad("array %d has the unknown dtype flag %d" % (index, type_flag))
        elements = 1
        for d in dims:
            elements *= d
        size = elements * _ND_ITEMSIZE[type_flag]
        if size > len(view) - pos:
            raise UnsafeFileError("%s cannot be loaded: array %d declares the shape %s (%d bytes), "
                                  "more than the %d bytes left in the file (truncated, or "
                                  "crafted)" % (source, index, tuple(dims), size, len(view) - pos))
        if elements > _ND_MAX_ELEMENTS:
            raise bad("array %d has %d elements, more than MXNet's 2^31 - 1 for one tensor"
                      % (index, elements))
        pos += size
    (names,) = take("<Q")
    if names not in (0, count):
        raise bad("it names %d of its %d arrays" % (names, count))
    for index in range(names):
        (size,) = take("<Q")
        if size > len(view) - pos:
            raise bad("the name of array %d declares %d bytes" % (index, size))
        try:
            bytes(view[pos:pos + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise bad("the name of array %d is not UTF-8 text" % index) from None
        pos += size
    if pos != len(view):
        raise bad("%d bytes follow its last array" % (len(view) - pos))
    return count
