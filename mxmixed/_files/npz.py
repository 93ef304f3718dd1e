"""Samples from someone else: a NumPy ``.npy`` array or a ``.npz`` archive of them, read without
running code and without reading more than the rows asked for.

A ``.npy`` header is read by a strict parser of its one form (a dict of ``descr``, a plain
numeric type; ``fortran_order``; ``shape``, a tuple of integers) within NumPy's own limit of
10,000 bytes: NumPy's ``ast.literal_eval`` of a crafted header recurses until a
``RecursionError``, and a shape it accepts may overflow the sizes computed from it. Only the
first rows asked for are read (:func:`read_rows`), in C order or column by column in Fortran
order, so the memory a read takes is the size of those rows, whatever the header declares.

A ``.npz`` (:class:`NpzArchive`) has its zip directory parsed once; its members' names are
known from the directory before any member is inflated, and a member's header is read only
when asked for. A member that is not ``.npy``, a name given twice, a damaged or encrypted
member, a compression other than stored or deflated (NumPy writes only those; zipfile inflates
bzip2 and lzma members without a bound): each is a :class:`SamplesFileError` of one line that
names the file.
"""
import io
import lzma
import math
import re
import struct
import zipfile
import zlib
from typing import NamedTuple, Tuple

import numpy as np

__all__ = ["SamplesFileError", "MAX_HEADER_BYTES", "NpyHeader", "read_header", "read_rows",
           "NpzArchive"]

MAX_HEADER_BYTES = 10000
"""The longest ``.npy`` header read: NumPy's own default ``max_header_size``."""

_MAGIC = b"\x93NUMPY"
# the plain numeric types (``dtype.str``): bool, integers, floats, any byte order
_DESCR = re.compile(r"[<>|=]?[biuf][1-8]\Z")
_TOKEN = re.compile(r"\s*(?:('[^'\\]*'|\"[^\"\\]*\")|(True|False)|(\d+)L?|([{}():,]))")
_CHUNK = 1 << 22  # bytes read at a time from a column-major array
# what zipfile, zlib, bz2 (OSError) and lzma raise on a damaged, encrypted (RuntimeError) or
# unsupported (NotImplementedError) member
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, lzma.LZMAError, EOFError,
               OSError, NotImplementedError, RuntimeError, ValueError, struct.error)


# the members read: zipfile inflates a deflated member a bounded step at a time, but hands a
# bzip2 or lzma member's whole input to the decompressor at once (a 2 KB member inflated 5.5 GB)
_CODECS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_CODEC_NAMES = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}


class SamplesFileError(ValueError):
    """A samples file that cannot be read as one: one line that names the file."""


class NpyHeader(NamedTuple):
    """What a ``.npy`` header declares: ``shape``, ``fortran_order`` and ``dtype``."""

    shape: Tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype

    @property
    def row_items(self):
        """The number of values in one row (one sample), the first axis left out."""
        return math.prod(self.shape[1:])


def _first_line(err):
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _read_exact(handle, size, source, what):
    data = handle.read(size)
    if len(data) != size:
        raise SamplesFileError("%s is cut short: %s" % (source, what))
    return data


def _parse_header(text, source):
    """``{'descr': ..., 'fortran_order': ..., 'shape': (...)}`` read token by token: nothing
    recurses, nothing is evaluated."""
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise SamplesFileError("%s: its header is not a plain NumPy array header (at %r)"
                                   % (source, text[pos:pos + 20]))
        string, boolean, number, mark = match.groups()
        tokens.append(("s", string[1:-1]) if string is not None
                      else ("b", boolean == "True") if boolean is not None
                      else ("i", int(number)) if number is not None else ("p", mark))
        pos = match.end()
    pairs, i = {}, 1
    bad = SamplesFileError("%s: its header is not a plain NumPy array header: %r"
                           % (source, text.strip()[:60]))
    if not tokens or tokens[0] != ("p", "{"):
        raise bad
    while i < len(tokens) and tokens[i] != ("p", "}"):
        if tokens[i][0] != "s" or tokens[i + 1:i + 2] != [("p", ":")]:
            raise bad
        key, i = tokens[i][1], i + 2
        if tokens[i:i + 1] == [("p", "(")]:
            end = i + 1
            while end < len(tokens) and tokens[end] != ("p", ")"):
                end += 1
            inner = tokens[i + 1:end]
            if end == len(tokens) or any(kind != ("i" if k % 2 == 0 else "p")
                                         or (kind == "p" and value != ",")
                                         for k, (kind, value) in enumerate(inner)):
                raise bad
            value, i = tuple(v for kind, v in inner if kind == "i"), end + 1
        elif i < len(tokens) and tokens[i][0] in "sb":
            value, i = tokens[i][1], i + 1
        else:
            raise bad
        if key in pairs:
            raise bad
        pairs[key] = value
        if tokens[i:i + 1] == [("p", ",")]:
            i += 1
        elif tokens[i:i + 1] != [("p", "}")]:
            raise bad
    if i != len(tokens) - 1:
        raise bad
    return pairs


def read_header(handle, source):
    """The header of the ``.npy`` array that starts at ``handle``'s position; the handle is
    left at its first data byte.

    Parameters
    ----------
    handle : binary file
    source : str
        How to name the array in messages (a path, or an archive and a member).

    Returns
    -------
    NpyHeader

    Raises
    ------
    SamplesFileError
        One line: not a ``.npy``, a header longer than :data:`MAX_HEADER_BYTES` or not of
        NumPy's form, a dtype that is not a plain number (an object array is a pickle, never
        loaded), a shape beyond what NumPy can hold.
    """
    start = _read_exact(handle, 8, source, "no .npy header")
    if start[:6] != _MAGIC:
        raise SamplesFileError("%s is not a NumPy .npy array (it does not start with "
                               "\\x93NUMPY)" % source)
    version = (start[6], start[7])
    if version == (1, 0):
        length, = struct.unpack("<H", _read_exact(handle, 2, source, "no .npy header"))
    elif version in ((2, 0), (3, 0)):
        length, = struct.unpack("<I", _read_exact(handle, 4, source, "no .npy header"))
    else:
        raise SamplesFileError("%s is a .npy of format version %d.%d, which NumPy does not "
                               "write" % ((source,) + version))
    if length > MAX_HEADER_BYTES:
        raise SamplesFileError("%s declares a .npy header of %d bytes, more than the %d "
                               "NumPy reads" % (source, length, MAX_HEADER_BYTES))
    raw = _read_exact(handle, length, source, "its .npy header")
    text = raw.decode("utf-8" if version == (3, 0) else "latin1", "replace")
    header = _parse_header(text, source)
    if set(header) != {"descr", "fortran_order", "shape"}:
        raise SamplesFileError("%s: its header has the keys %s, not descr, fortran_order and "
                               "shape" % (source, ", ".join(sorted(map(repr, header)))))
    descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
    if isinstance(descr, str) and "O" in descr:
        raise SamplesFileError("%s holds Python objects (a pickle), which are never loaded"
                               % source)
    if not isinstance(descr, str) or not _DESCR.match(descr):
        raise SamplesFileError("%s holds dtype %r, not numbers (bool, integers or floats)"
                               % (source, descr))
    if not isinstance(fortran, bool) or not isinstance(shape, tuple):
        raise SamplesFileError("%s: its header's fortran_order must be True or False and its "
                               "shape a tuple" % source)
    try:
        dtype = np.dtype(descr)
    except TypeError as err:
        raise SamplesFileError("%s: dtype %r: %s" % (source, descr, _first_line(err))) from None
    if len(shape) > 32 or math.prod(shape) * dtype.itemsize >= 2 ** 63:
        raise SamplesFileError("%s declares shape %s, more than a NumPy array can hold"
                               % (source, shape))
    return NpyHeader(shape, fortran, dtype)


def read_rows(handle, header, rows, source):
    """The first ``rows`` rows of the array whose data starts at ``handle``'s position.

    Only those rows are read into memory: in C order they are the first bytes; in Fortran
    order each column's first values are read and the rest of it is skipped (a plain file
    seeks; a zip member is inflated and dropped 4 MiB at a time).

    Parameters
    ----------
    handle : binary file
    header : NpyHeader
    rows : int
        At most ``header.shape[0]``.
    source : str

    Returns
    -------
    numpy.ndarray
        Of shape ``(rows,) + header.shape[1:]``, in the file's dtype, C order.

    Raises
    ------
    SamplesFileError
        When the data is cut short.
    """
    shape, dtype = header.shape, header.dtype
    out_shape = (rows,) + tuple(shape[1:])
    items = header.row_items
    if rows == 0 or items == 0:
        return np.zeros(out_shape, dtype=dtype)
    cut = "its data ends before the %d samples it declares" % shape[0]
    if not header.fortran_order or len(shape) == 1:
        data = _read_exact(handle, rows * items * dtype.itemsize, source, cut)
        return np.frombuffer(data, dtype=dtype).reshape(out_shape)
    # column-major: column c holds the value of every row at one position of a sample
    total, column = shape[0], shape[0] * dtype.itemsize
    columns = np.empty((items, rows), dtype=dtype)
    if column <= _CHUNK:
        step = _CHUNK // column
        for first in range(0, items, step):
            count = min(step, items - first)
            data = _read_exact(handle, count * column, source, cut)
            columns[first:first + count] = np.frombuffer(data, dtype=dtype).reshape(
                count, total)[:, :rows]
    else:
        for index in range(items):
            columns[index] = np.frombuffer(
                _read_exact(handle, rows * dtype.itemsize, source, cut), dtype=dtype)
            if index + 1 < items:
                handle.seek((total - rows) * dtype.itemsize, io.SEEK_CUR)
    return np.ascontiguousarray(columns.reshape(tuple(reversed(shape[1:])) + (rows,)).T)


class NpzArchive:
    """A ``.npz`` archive of samples, its zip directory parsed once.

    Parameters
    ----------
    path : str

    Raises
    ------
    SamplesFileError
        When it is not a zip file, holds a member that is not a ``.npy`` array, or a name
        twice (one line).
    """

    def __init__(self, path):
        self.path = path
        self._headers = {}
        try:
            self._zip = zipfile.ZipFile(path)
        except _ZIP_ERRORS as err:
            raise SamplesFileError("cannot read %s as a NumPy .npz archive: %s"
                                   % (path, _first_line(err))) from None
        self._members = {}
        try:
            for info in self._zip.infolist():
                if not info.filename.endswith(".npy"):
                    raise SamplesFileError("%s: member %r is not a .npy array"
                                           % (path, info.filename))
                if info.compress_type not in _CODECS:
                    raise SamplesFileError(
                        "%s: member %r is compressed with %s; only stored and deflated members "
                        "are read (np.savez, np.savez_compressed), since Python inflates the "
                        "others without a bound on the size" % (
                            path, info.filename, _CODEC_NAMES.get(info.compress_type, "method %d"
                                                                  % info.compress_type)))
                name = info.filename[:-4]
                if name in self._members:
                    raise SamplesFileError("%s holds two arrays named %r" % (path, name))
                self._members[name] = info
        except SamplesFileError:
            self.close()
            raise

    @property
    def names(self):
        """The arrays' names, in the archive's order (from its directory; nothing inflated)."""
        return list(self._members)

    def _source(self, name):
        return "%s: array %r" % (self.path, name)

    def _open(self, name):
        return self._zip.open(self._members[name])

    def header(self, name):
        """The :class:`NpyHeader` of array ``name``: its first bytes inflated, no more."""
        if name not in self._headers:
            try:
                with self._open(name) as handle:
                    self._headers[name] = read_header(handle, self._source(name))
            except SamplesFileError:
                raise
            except _ZIP_ERRORS as err:
                raise SamplesFileError("%s cannot be read: %s" % (self._source(name),
                                                                   _first_line(err))) from None
        return self._headers[name]

    def rows(self, name, rows):
        """The first ``rows`` rows of array ``name`` (see :func:`read_rows`)."""
        header = self.header(name)
        try:
            with self._open(name) as handle:
                read_header(handle, self._source(name))
                return read_rows(handle, header, rows, self._source(name))
        except SamplesFileError:
            raise
        except _ZIP_ERRORS as err:
            raise SamplesFileError("%s cannot be read: %s" % (self._source(name),
                                                               _first_line(err))) from None

    def close(self):
        """Close the archive."""
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
