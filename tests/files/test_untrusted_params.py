"""A ``.params`` file from someone else is walked as MXNet 1.9.1 reads it, before it does.

MXNet's ``NDArray::Load`` allocates what the file declares before it reads it: arrays, names
and data. The walk (``check_nd_bytes``) must read exactly the bytes MXNet reads, so that what
it passes cannot make MXNet allocate more than the file holds. The crafted files here are the
ones that fooled the walk on main; the fuzz test mutates valid files and loads every file the
walk passes in a subprocess under a memory limit.
"""
import random
import struct
import sys

import mxnet as mx
import numpy as np
import pytest

from conftest import ROOT, run_command
from mxmixed import symbolic
from mxmixed._files.untrusted import UnsafeFileError, check_nd_bytes, nd_bytes

V2, V3 = 0xF993FAC9, 0xF993FACA


def _header(count):
    return struct.pack("<QQQ", 0x112, 0, count)


def _array(dims, type_flag=0, data=b"", magic=V2, stype=0, ndim=None):
    """One array as mx.nd.save writes it: magic, storage type, shape, context, dtype, data."""
    return (struct.pack("<Iii", magic, stype, len(dims) if ndim is None else ndim)
            + struct.pack("<%dq" % len(dims), *dims) + struct.pack("<iii", 1, 0, type_flag) + data)


def _names(*names):
    return struct.pack("<Q", len(names)) + b"".join(struct.pack("<Q", len(n)) + n for n in names)


# Run in a subprocess: mx.nd.load_frombuffer on each file of a list under an address-space limit.
_LOADER = r"""
import resource, struct, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import mxnet as mx
blob = sys.stdin.buffer.read()
pos = 0
while pos < len(blob):
    (size,) = struct.unpack_from("<Q", blob, pos)
    data = blob[pos + 8:pos + 8 + size]
    pos += 8 + size
    try:
        loaded = mx.nd.load_frombuffer(data)
        items = loaded.items() if isinstance(loaded, dict) else enumerate(loaded)
        summary = [(key, arr.shape, arr.dtype, arr.stype, len(arr.asnumpy().tobytes()))
                   for key, arr in items]
        print("ok", len(summary), flush=True)
    except Exception as err:
        print("error", type(err).__name__, str(err).strip().splitlines()[-1][:200], flush=True)
"""


def _load_in_subprocess(files, limit=1 << 31):
    """MXNet's verdict on each file: 'ok' or 'error ...'; a crash or a kill fails the test."""
    blob = b"".join(struct.pack("<Q", len(f)) + f for f in files)
    proc = run_command([sys.executable, "-c", _LOADER, str(limit)], input=blob,
                       capture_output=True, cwd=ROOT)
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and len(lines) == len(files), (
        "MXNet crashed or was killed on file %d: rc=%d %s"
        % (len(lines), proc.returncode, proc.stderr.decode()[-1000:]))
    return lines


def _refused(data, match):
    with pytest.raises(UnsafeFileError, match=match) as info:
        check_nd_bytes(data, "params file x.params")
    assert "\n" not in str(info.value) and "x.params" in str(info.value)


def test_an_empty_array_with_a_0_in_its_shape_is_walked_as_mxnet_reads_it():
    # MXNet reads the context and dtype of a (0, 3) array too; main's walk stopped at the shape
    data = _header(2) + _array([0, 3]) + _array([2], data=b"\0" * 8) + _names(b"empty", b"b")
    assert check_nd_bytes(data, "f") == 2
    loaded = mx.nd.load_frombuffer(data)
    assert loaded["empty"].shape == (0, 3) and loaded["b"].shape == (2,)


def _desync_file(names_high_word=1):
    """64 bytes that main's walk passed: it skipped the context and dtype of the (0,) array and
    read them as the count and length of the names, while MXNet reads 2^32 names from the end."""
    return (_header(1) + struct.pack("<Iii", V2, 0, 1) + struct.pack("<q", 0)
            + struct.pack("<iii", 1, 0, 4) + struct.pack("<I", 0)
            + struct.pack("<I", names_high_word))


@pytest.mark.slow
def test_a_crafted_0_in_a_shape_cannot_make_mxnet_allocate_names_for_gigabytes():
    data = _desync_file()
    _refused(data, "it names 4294967296 of its 1 arrays")
    # what MXNet does with it: 2^32 names, 128 GB, refused only by the memory limit
    (verdict,) = _load_in_subprocess([data], limit=1 << 31)
    assert verdict.startswith("error") and "bad_alloc" in verdict


@pytest.mark.parametrize("data, match", [
    # 12 bytes of array: V2 magic, dense, 0 dimensions. MXNet reads nothing more and makes an
    # array without storage ("unknown storage type: -1" on first use)
    (_header(1) + struct.pack("<Iii", V2, 0, 0) + _names(b"arg:w"), "array 0 has no shape"),
    (_header(1) + struct.pack("<Iii", V2, -1, 0) + _names(b"arg:w"),
     "array 0 is sparse or of an unknown storage type"),
    (_header(1) + _array([2], data=b"\0" * 8) + _names(b"arg:\xff\xfe"),
     "the name of array 0 is not UTF-8 text"),
    (_header(1) + _array([2], data=b"\0" * 8) + struct.pack("<QQ", 1, 1 << 40) + b"ab",
     "the name of array 0 declares 1099511627776 bytes"),
    (_header(1) + _array([2], data=b"\0" * 8) + struct.pack("<Q", 1 << 28),
     "it names 268435456 of its 1 arrays"),
    (_header(1 << 28) + _array([2], data=b"\0" * 8) + _names(b"a"),
     "it declares 268435456 arrays"),
    (_header(1) + _array([2], type_flag=8, data=b"\0" * 4) + _names(b"a"),
     "the unknown dtype flag 8"),  # int16 in MXNet 2, "Unknown type enum" in 1.9.1
    (_header(1) + _array([0, 3], magic=V3) + _names(b"a"),
     "saved with NumPy shape semantics, and they are off"),
    (_header(1) + _array([-1, 3]) + _names(b"a"), r"declares the shape \(-1, 3\)"),
    (_header(1) + _array([1 << 16, 1 << 16], type_flag=3) + _names(b"a"),
     r"declares the shape \(65536, 65536\) \(4294967296 bytes\), more than the 17 bytes left"),
    # no data (a 0 in the shape), but Python reads the dimensions as int32: -107742518
    (_header(1) + _array([V3, 0], type_flag=5) + _names(b"a"), r"declares the shape \(4187224778, 0\)"),
], ids=["shapeless", "unknown-storage", "name-not-utf8", "name-too-long", "names-count",
        "arrays-count", "dtype-8", "v3-without-np-shape", "negative-dim", "data-beyond-file",
        "dim-over-int32"])
def test_a_crafted_params_file_is_refused_in_one_line(data, match):
    _refused(data, match)


@pytest.mark.parametrize("data, match", [
    (_header(1) + struct.pack("<Iii", V2, 0, 0) + _names(b"arg:fc_weight"), "has no shape"),
    (_header(1) + _array([3, 4], data=b"\0" * 48) + _names(b"arg:fc_\xffweight"), "not UTF-8"),
], ids=["shapeless", "name-not-utf8"])
def test_load_checkpoint_refuses_them_with_a_conversion_error(tmp_path, data, match):
    # on main: a bare Exception ("unknown storage type: -1") and a UnicodeDecodeError
    prefix = str(tmp_path / "m")
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc", no_bias=True)
    mx.model.save_checkpoint(prefix, 0, sym, {"fc_weight": mx.nd.ones((3, 4))}, {})
    with open(prefix + "-0000.params", "wb") as handle:
        handle.write(data)
    with pytest.raises(symbolic.ConversionError, match=match) as info:
        symbolic.load_checkpoint(prefix, 0)
    assert "\n" not in str(info.value) and prefix + "-0000.params" in str(info.value)


def _tiny_arrays(count):
    array = _array([1], type_flag=3, data=b"\0")
    return _header(count) + array * count + _names(*(b"%06d" % k for k in range(count)))


def test_arrays_are_at_most_65536_and_one_per_kib():
    # each costs MXNet and Python about 950 bytes: 20 times what a one-byte array takes here
    assert check_nd_bytes(_tiny_arrays(65536 + 2500), "f") == 68036  # a 3.2 MB file
    _refused(_tiny_arrays(65536 + 4000), r"it declares 69536 arrays in \d+ bytes \(at most 65536 "
                                         r"and one per KiB\)")


def test_a_numpy_shape_file_is_walked_with_numpy_shape_semantics():
    with mx.util.np_shape(True):
        data = nd_bytes({"scalar": mx.nd.ones(()), "a": mx.nd.ones((0, 2))})
        assert check_nd_bytes(data, "f") == 2
        assert mx.nd.load_frombuffer(data)["scalar"].shape == ()
        _refused(nd_bytes({"a": mx.nd.ones((2,))}).replace(struct.pack("<I", V3),
                                                          struct.pack("<I", V2)),
                 "saved without NumPy shape semantics, and they are on")
    _refused(data, "saved with NumPy shape semantics, and they are off")


_ITEMSIZE = {0: 4, 1: 8, 2: 2, 3: 1, 4: 4, 5: 1, 6: 8, 7: 1, 12: 2}


def _random_file(rng):
    """A valid file: 1 to 4 arrays of every dtype MXNet 1.9.1 reads, shapes with zeros in them,
    names with non-ASCII letters (mx.nd.zeros cannot make a (0, 3) array outside NumPy
    semantics, but MXNet reads one)."""
    arrays, names = [], []
    for k in range(rng.randint(1, 4)):
        dims = [rng.choice([0, 1, 2, 3]) for _ in range(rng.randint(1, 3))]
        flag = rng.choice(sorted(_ITEMSIZE))
        size = int(np.prod(dims)) * _ITEMSIZE[flag]
        data = bytes(rng.choice([0, 1]) for _ in range(size)) if flag == 7 else rng.randbytes(size)
        arrays.append(_array(dims, flag, data))
        names.append(("arg:%s%d" % (rng.choice(["w", "é", "权重", "x" * 40]), k)).encode("utf-8"))
    return _header(len(arrays)) + b"".join(arrays) + _names(*names)


def _positions(data):
    """The offsets of the integers in a file's headers: list count, and per array its magic,
    storage type, ndim, dims, context and dtype, then the name count and lengths."""
    spots, pos = [(16, 8)], 24
    for _ in range(struct.unpack_from("<Q", data, 16)[0]):
        ndim = struct.unpack_from("<i", data, pos + 8)[0]
        spots += [(pos, 4), (pos + 4, 4), (pos + 8, 4)]
        spots += [(pos + 12 + 8 * k, 8) for k in range(ndim)]
        dims = struct.unpack_from("<%dq" % ndim, data, pos + 12)
        pos += 12 + 8 * ndim
        spots += [(pos, 4), (pos + 4, 4), (pos + 8, 4)]
        flag = struct.unpack_from("<i", data, pos + 8)[0]
        pos += 12 + int(np.prod(dims)) * _ITEMSIZE[flag]
    spots.append((pos, 8))
    count, pos = struct.unpack_from("<Q", data, pos)[0], pos + 8
    for _ in range(count):
        spots.append((pos, 8))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
    return spots


_BIG = [0, 1, 2, 12, 255, -1, -2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 28, 1 << 31,
        1 << 40, (1 << 63) - 1, V2, V3]


def _names_span(data):
    pos = _positions(data)[-1]
    return pos[0] + 8, len(data)


def _mutants(valid, count, rng):
    for _ in range(count):
        data = bytearray(rng.choice(valid))
        kind = rng.choice(["flip", "flip", "name", "truncate", "integer", "integer", "integer",
                           "insert"])
        if kind == "flip":
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == "name":  # a byte of the names: often not UTF-8 any more
            start, end = _names_span(bytes(data))
            data[rng.randrange(start, end)] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            del data[rng.randrange(len(data)):]
        else:
            pos, size = rng.choice(_positions(bytes(data)))
            value = rng.choice(_BIG) & ((1 << (8 * size)) - 1)
            raw = value.to_bytes(size, "little")
            if kind == "integer":
                data[pos:pos + size] = raw
            else:
                data[pos:pos] = raw
        yield bytes(data)


@pytest.mark.slow
def test_the_walk_and_mxnet_agree_on_valid_files_and_their_mutants():
    rng = random.Random(35)
    valid = [_random_file(rng) for _ in range(40)]
    valid.append(nd_bytes({"arg:w": mx.nd.ones((3, 4)), "aux:m": mx.nd.ones((2,), dtype="float16")}))
    for data in valid:  # every valid file passes (main's walk refused a 0 in a shape)
        check_nd_bytes(data, "valid")
    passed, refused = list(valid), 0
    for data in _mutants(valid, 500, rng):
        try:
            check_nd_bytes(data, "mutant")
        except UnsafeFileError:
            refused += 1
        else:
            passed.append(data)
    assert refused > 100 and len(passed) > 150  # both verdicts are exercised
    # 2 GiB of address space for MXNet, its threads and every file passed: a passed file that
    # made MXNet allocate more than it holds would fail, crash, or be killed; a name that is
    # not UTF-8 fails in Python
    verdicts = _load_in_subprocess(passed, limit=2 << 30)
    failed = [(k, v) for k, v in enumerate(verdicts) if not v.startswith("ok")]
    assert not failed, failed[:5]
