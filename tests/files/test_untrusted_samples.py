"""Samples from someone else (``.npy``, ``.npz``) are read by a strict header parser, with the zip
directory parsed once, and only the rows asked for are read, whatever the header declares.

NumPy's own reader evaluates the header with ``ast.literal_eval`` (a crafted header recursed
into a ``RecursionError``) and inflates a column-major array whole; ``mxmixed convert`` once
parsed an archive's zip directory once per member. Here every refusal is one
``SamplesFileError`` line, and the rows read equal NumPy's own reading of the same file.
"""
import io
import struct
import zipfile

import numpy as np
import pytest

from mxmixed._files import npz
from mxmixed._files.npz import NpzArchive, SamplesFileError, read_header, read_rows


def _saved(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    buffer.seek(0)
    return buffer


def _npy(header_text, version=(1, 0)):
    """A .npy of this header text and no data."""
    raw = header_text.encode("latin1")
    size = struct.pack("<H", len(raw)) if version == (1, 0) else struct.pack("<I", len(raw))
    return io.BytesIO(b"\x93NUMPY" + bytes(version) + size + raw)


RNG = np.random.RandomState(0)
ARRAYS = {
    "C float32 big-endian": RNG.rand(7, 3, 4).astype(">f4"),
    "Fortran float64": np.asfortranarray(RNG.rand(7, 3, 4)),
    "Fortran int64": np.asfortranarray(RNG.randint(-9, 9, (5, 2))),
    "Fortran 4-d": np.asfortranarray(RNG.rand(6, 3, 2, 5).astype(np.float16)),
    "1-d bool": RNG.rand(6) > 0.5,
    "empty rows": np.zeros((3, 0, 2)),
}


@pytest.mark.parametrize("name", list(ARRAYS))
@pytest.mark.parametrize("chunk", [npz._CHUNK, 16], ids=["whole columns", "column by column"])
def test_the_first_rows_are_numpys_own(monkeypatch, name, chunk):
    monkeypatch.setattr(npz, "_CHUNK", chunk)
    array = ARRAYS[name]
    for rows in range(array.shape[0] + 1):
        handle = _saved(array)
        header = read_header(handle, "x.npy")
        assert header.shape == array.shape and header.dtype == array.dtype
        got = read_rows(handle, header, rows, "x.npy")
        assert got.shape == array[:rows].shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, array[:rows])


class _Counting(io.BytesIO):
    """A file that counts the bytes it hands out."""

    handed = 0

    def read(self, size=-1):
        data = super().read(size)
        self.handed += len(data)
        return data


def test_a_column_major_array_is_read_a_bounded_chunk_at_a_time(monkeypatch):
    """Reading 2 rows of a (20000, 50) Fortran array never asks for more than one chunk at once,
    and skips the rest of each column."""
    monkeypatch.setattr(npz, "_CHUNK", 4096)
    array = np.asfortranarray(RNG.rand(20000, 50))
    handle = _Counting(_saved(array).getvalue())
    asked = []
    read = handle.read
    monkeypatch.setattr(handle, "read", lambda size=-1: asked.append(size) or read(size))
    header = read_header(handle, "f.npy")
    np.testing.assert_array_equal(read_rows(handle, header, 2, "f.npy"), array[:2])
    assert max(asked) <= 4096 and handle.handed < 2 * 50 * 8 + 1000, (max(asked), handle.handed)


HOSTILE_HEADERS = {
    "nested tuples": "{'descr': '<f4', 'fortran_order': False, 'shape': %s1%s, }"
                     % ("(" * 3000, ",)" * 3000),
    "unary minus chain": "{'descr': '<f4', 'fortran_order': False, 'shape': (%s1,), }"
                         % ("-" * 9000),
    "brackets only": "{" + "[" * 9990,
    "a sum": "{'descr': '<f4', 'fortran_order': False, 'shape': (1%s,), }" % ("+1" * 4900),
    "a call": "{'descr': '<f4', 'fortran_order': False, 'shape': (len('x'),), }",
    "negative": "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }",
    "structured": "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }",
    "extra key": "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 'y', }",
    "key twice": "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
}


@pytest.mark.parametrize("kind", list(HOSTILE_HEADERS))
def test_a_crafted_header_is_one_line_not_evaluated(kind):
    text = HOSTILE_HEADERS[kind][:npz.MAX_HEADER_BYTES]
    with pytest.raises(SamplesFileError) as err:
        read_header(_npy(text), "bad.npy")
    assert len(str(err.value).splitlines()) == 1 and str(err.value).startswith("bad.npy")


@pytest.mark.parametrize("shape, says", [
    ("(10**18,)", "not a plain NumPy array header"),
    ("(1000000000000000000, 3)", "more than a NumPy array can hold"),
    ("(4611686018427387904,)", "more than a NumPy array can hold"),
    ("(%s)" % ("1, " * 40), "more than a NumPy array can hold"),
])
def test_a_shape_beyond_numpy_is_refused(shape, says):
    with pytest.raises(SamplesFileError, match=says):
        read_header(_npy("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape),
                    "big.npy")


@pytest.mark.parametrize("descr, says", [("|O", r"Python objects \(a pickle\)"),
                                         ("<c8", "not numbers"), ("<M8[s]", "not numbers"),
                                         ("|V9999999999", "not numbers"), ("<f3", "dtype")])
def test_only_plain_numbers_are_read(descr, says):
    with pytest.raises(SamplesFileError, match=says):
        read_header(_npy("{'descr': %r, 'fortran_order': False, 'shape': (3,), }" % descr),
                    "x.npy")


def test_a_header_longer_than_numpys_limit_is_not_read():
    handle = _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", version=(2, 0))
    data = bytearray(handle.getvalue())
    data[8:12] = struct.pack("<I", 2 ** 31)
    with pytest.raises(SamplesFileError, match="header of 2147483648 bytes, more than the 10000"):
        read_header(io.BytesIO(bytes(data)), "long.npy")


def test_the_headers_numpy_2_writes_are_read():
    """NumPy 1.x wrote ``(3L, 3L)`` from Python 2; NumPy 2 writes the same form in 2.0 files."""
    header = read_header(_npy("{\"descr\": \"<f4\", \"fortran_order\": False, "
                              "\"shape\": (3L, 3L), }", version=(2, 0)), "x.npy")
    assert header.shape == (3, 3) and header.dtype == np.float32


def _archive(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_the_zip_directory_is_parsed_once_whatever_the_member_count(monkeypatch, tmp_path):
    path = str(tmp_path / "many.npz")
    one = _saved(np.zeros((2, 3), np.float32)).getvalue()
    _archive(path, {"m%d.npy" % i: one for i in range(2000)})
    parsed = []
    real = zipfile.ZipFile._RealGetContents
    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents",
                        lambda self: parsed.append(1) or real(self))
    with NpzArchive(path) as archive:
        assert len(archive.names) == 2000
        for name in archive.names:
            archive.rows(name, 1)
    assert len(parsed) == 1


def test_names_come_from_the_directory_without_inflating_a_member(monkeypatch, tmp_path):
    path = str(tmp_path / "two.npz")
    np.savez_compressed(path, a=np.zeros((2, 3)), zzz=np.zeros((2, 3)))
    opened = []
    real = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open",
                        lambda self, *args, **kwargs: opened.append(args) or real(self, *args,
                                                                                  **kwargs))
    with NpzArchive(path) as archive:
        assert archive.names == ["a", "zzz"]
    assert opened == []


def _damaged(tmp_path, kind):
    """A .npz whose member ``a`` (4 rows of 3 float32) is damaged in one way."""
    path = str(tmp_path / ("%s.npz" % kind.replace(" ", "-")))
    good = _saved(np.arange(12, dtype=np.float32).reshape(4, 3)).getvalue()
    if kind == "cut short":
        _archive(path, {"a.npy": good[:-8]})
    elif kind == "bad CRC":
        _archive(path, {"a.npy": good})
        data = bytearray(open(path, "rb").read())
        at = data.index(good) + len(good) - 1
        data[at] ^= 0xFF
        open(path, "wb").write(bytes(data))
    elif kind == "bad deflate stream":
        _archive(path, {"a.npy": good * 50}, zipfile.ZIP_DEFLATED)
        data = bytearray(open(path, "rb").read())
        start = data.index(b"a.npy") + 5
        for at in range(start + 4, start + 40):
            data[at] ^= 0x55
        open(path, "wb").write(bytes(data))
    elif kind == "unknown compression":
        _archive(path, {"a.npy": good})
        data = bytearray(open(path, "rb").read())
        for at in (8, data.index(b"PK\x01\x02") + 10):  # local and central method fields
            data[at:at + 2] = struct.pack("<H", 99)
        open(path, "wb").write(bytes(data))
    elif kind == "encrypted":
        _archive(path, {"a.npy": good})
        data = bytearray(open(path, "rb").read())
        for at in (6, data.index(b"PK\x01\x02") + 8):  # the general purpose flag's bit 0
            data[at] |= 1
        open(path, "wb").write(bytes(data))
    elif kind == "name twice":
        with zipfile.ZipFile(path, "w") as archive, pytest.warns(UserWarning, match="Duplicate"):
            archive.writestr("a.npy", good)
            archive.writestr(zipfile.ZipInfo("a.npy"), good)
    elif kind == "not an array":
        _archive(path, {"a.npy": good, "notes.txt": b"hello"})
    elif kind == "not a zip":
        open(path, "wb").write(b"PK\x03\x04 and nothing a zip file holds")
    return path


DAMAGE = ["cut short", "bad CRC", "bad deflate stream", "unknown compression", "encrypted",
          "name twice", "not an array", "not a zip"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_archive_is_one_line(tmp_path, kind):
    path = _damaged(tmp_path, kind)
    with pytest.raises(SamplesFileError) as err:
        with NpzArchive(path) as archive:
            archive.rows("a", 4)
    line = str(err.value)
    assert len(line.splitlines()) == 1 and path in line, line
