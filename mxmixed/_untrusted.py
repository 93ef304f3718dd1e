"""Files from someone else, looked at before a parser sees them: nothing runs, nothing explodes.

:func:`check_json_depth` refuses JSON nested deeper than a limit (Python's parser recurses once
per level and ends in a ``RecursionError``), in time linear in the text; :func:`check_nd_bytes`
walks a file in the format of ``mx.nd.save`` and refuses any array that declares more data than
the file holds (MXNet would try to allocate it). :func:`nd_bytes` writes that format in memory.
Every refusal is an :class:`UnsafeFileError` of one line that names the file and the limit.
"""
import math
import re
import struct

import numpy as np

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


_ND_LIST_MAGIC = 0x112
_ND_V2, _ND_V3 = 0xF993FAC9, 0xF993FACA
_ND_ITEMSIZE = {0: 4, 1: 8, 2: 2, 3: 1, 4: 4, 5: 1, 6: 8, 7: 1, 8: 2, 9: 2, 10: 4, 11: 8, 12: 2}
_ND_MAX_DIMS = 32


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
    """Walk an MXNet array file (``mx.nd.save``'s format) before MXNet reads it.

    Every array must be dense, of a known dtype, and declare no more data than the bytes left in
    the file, so that a crafted header cannot make MXNet allocate more than the file's size.

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
        if stype != 0:
            raise bad("array %d is sparse (storage type %d), which is not supported"
                      % (index, stype))
        unknown = 0 if magic == _ND_V2 else -1
        if ndim == unknown:
            continue  # an array without a shape: nothing more is stored
        if not 0 <= ndim <= _ND_MAX_DIMS:
            raise bad("array %d declares %d dimensions" % (index, ndim))
        dims = take("<%dq" % ndim)
        if unknown in dims:
            continue
        if any(d < 0 for d in dims):
            raise bad("array %d declares the shape %s" % (index, dims))
        _, _, type_flag = take("<iii")
        if type_flag not in _ND_ITEMSIZE:
            raise bad("array %d has the unknown dtype flag %d" % (index, type_flag))
        size = math.prod(dims) * _ND_ITEMSIZE[type_flag]
        if size > len(view) - pos:
            raise UnsafeFileError("%s cannot be loaded: array %d declares the shape %s (%d bytes), "
                                  "more than the %d bytes left in the file (truncated, or "
                                  "crafted)" % (source, index, tuple(dims), size, len(view) - pos))
        pos += size
    (names,) = take("<Q")
    if names not in (0, count):
        raise bad("it names %d of its %d arrays" % (names, count))
    for index in range(names):
        (size,) = take("<Q")
        if size > len(view) - pos:
            raise bad("the name of array %d declares %d bytes" % (index, size))
        pos += size
    if pos != len(view):
        raise bad("%d bytes follow its last array" % (len(view) - pos))
    return count
