"""``mxmixed convert``'s samples from someone else are as bounded as its params: the names are
compared and the memory checked before any array is inflated, only the rows used are read, one
``--input`` names one input, HIGH stays within its dtype, and every refusal is one line, exit 2.

The memory a run takes is measured with ``tracemalloc`` (NumPy's arrays and Python's bytes are
traced): a crafted archive of a few hundred KB once inflated 3 GB before its one-line refusal.
"""
import io
import math
import os
import sys
import tracemalloc
import zipfile

import mxnet as mx
import numpy as np
import pytest

from conftest import ROOT, run_command, run_convert
from mxmixed import cli

WIDTH = 100
MB = 2 ** 20


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """A graph of two data inputs ``a`` and ``b``, each sample of WIDTH values."""
    a, b, w = mx.sym.var("a"), mx.sym.var("b"), mx.sym.var("w", shape=(1, 1))
    prefix = str(tmp_path_factory.mktemp("two") / "two")
    mx.model.save_checkpoint(prefix, 0, mx.sym.broadcast_mul(mx.sym.relu(a + b), w, name="out"),
                             {"w": mx.nd.ones((1, 1))}, {})
    return prefix


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """A graph of one data input ``data`` of 3 values a sample."""
    prefix = str(tmp_path_factory.mktemp("one") / "one")
    out = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=2, name="fc")
    mx.model.save_checkpoint(prefix, 0, out, {"fc_weight": mx.nd.ones((2, 3)),
                                              "fc_bias": mx.nd.zeros((2,))}, {})
    return prefix


def _member(archive, name, shape, value=0.0, fortran=False):
    """Write ``name.npy`` of float64 ``value``s, ``shape``, streamed: no array in memory."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": fortran,
                                                  "shape": shape})
    chunk = np.full(MB, value).tobytes()
    left = math.prod(shape) * 8
    with archive.open(name + ".npy", "w", force_zip64=True) as handle:
        handle.write(header.getvalue())
        while left:
            handle.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))


def _deflated(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, (shape, value, fortran) in members.items():
            _member(archive, name, shape, value, fortran)
    return path


def _compressed(path, members, compression):
    with zipfile.ZipFile(path, "w", compression, compresslevel=9) as archive:
        for name, (shape, value, fortran) in members.items():
            _member(archive, name, shape, value, fortran)
    return path


def _convert(prefix, tmp_path, capsys, args):
    """(exit code, stdout, stderr, peak bytes traced) of ``mxmixed convert`` in this process."""
    tracemalloc.start()
    try:
        code, out, err = run_convert([prefix, "0", "--out", str(tmp_path / "out")] + args,
                                     capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return code, out, err, peak


def _refused(result):
    code, out, err, _ = result
    assert code == cli.EXIT_USAGE, err
    assert "Traceback" not in err and not out.strip()
    line, = err.strip().splitlines()
    return line


def test_an_extra_array_is_refused_by_name_before_it_is_inflated(two, tmp_path, capsys):
    """The archive of the issue: a and b, and zzz, 320 MB of zeros in a few hundred KB."""
    path = _deflated(str(tmp_path / "extra.npz"), {
        "a": ((8, WIDTH), 0.5, False), "b": ((8, WIDTH), 0.5, False),
        "zzz": ((8, 5 * 10 ** 6), 0.0, False)})
    assert os.path.getsize(path) < 2 * MB
    result = _convert(two, tmp_path, capsys, ["--validate", "8", "--inputs", path])
    assert "no data input named 'zzz'; the graph's data inputs are a, b" in _refused(result)
    assert result[3] < 16 * MB, result[3]


def test_a_fortran_order_array_is_read_within_the_rows_used(two, tmp_path, capsys):
    """a and b hold 400,000 rows in column-major order (320 MB each); 8 are used."""
    rows = 400000
    path = _deflated(str(tmp_path / "fortran.npz"), {
        "a": ((rows, WIDTH), 0.5, True), "b": ((rows, WIDTH), 0.25, True)})
    code, out, err, peak = _convert(two, tmp_path, capsys, ["--validate", "8", "--inputs", path])
    assert code == cli.EXIT_OK, err
    assert "samples             8" in out
    assert peak < 64 * MB, peak


@pytest.mark.parametrize("compression, codec", [(zipfile.ZIP_BZIP2, "bzip2"),
                                                (zipfile.ZIP_LZMA, "lzma")])
@pytest.mark.parametrize("fortran", [False, True])
def test_a_member_compressed_with_another_codec_is_refused_before_it_is_inflated(
        two, tmp_path, capsys, compression, codec, fortran):
    """zipfile inflates a bzip2 or lzma member without a bound: a 2.2 KB archive once took 5.5 GB.
    Here a and b hold 32 MB of zeros each, in a few KB."""
    path = _compressed(str(tmp_path / "codec.npz"), {
        "a": ((2048, 2048), 0.0, fortran), "b": ((2048, 2048), 0.0, fortran)}, compression)
    assert os.path.getsize(path) < 64 * 1024
    result = _convert(two, tmp_path, capsys, ["--validate", "8", "--inputs", path])
    line = _refused(result)
    assert "member 'a.npy' is compressed with %s" % codec in line and path in line, line
    assert result[3] < 16 * MB, result[3]


def test_thousands_of_members_are_refused_in_one_line(two, tmp_path, capsys):
    path = str(tmp_path / "many.npz")
    member = io.BytesIO()
    np.save(member, np.zeros((8, WIDTH)))
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(8000):
            archive.writestr("m%d.npy" % i, member.getvalue())
    line = _refused(_convert(two, tmp_path, capsys, ["--validate", "8", "--inputs", path]))
    assert "no data input named 'm0', 'm1'" in line and "(8000 in all)" in line, line


def test_an_array_declaring_more_rows_than_memory_is_refused_before_it_is_read(
        two, tmp_path, capsys, monkeypatch):
    from mxmixed.cli import _preflight

    path = _deflated(str(tmp_path / "wide.npz"), {"a": ((8, 2 ** 20), 0.5, False),
                                                  "b": ((8, 2 ** 20), 0.5, False)})
    monkeypatch.setattr(_preflight, "available_memory", lambda: 32 * MB)
    result = _convert(two, tmp_path, capsys, ["--validate", "8", "--inputs", path])
    assert "of memory" in _refused(result)
    assert result[3] < 8 * MB, result[3]


NPY_HEADERS = {
    "shape (10**18, 3)": "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 3), }"
                         % 10 ** 18,
    "a shape beyond int64": "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 3), }"
                            % 2 ** 70,
    "nested header": "{'descr': '<f4', 'fortran_order': False, 'shape': %s8, 3%s, }"
                     % ("(" * 3000, ")" * 3000),
    "unary minus chain": "{'descr': '<f4', 'fortran_order': False, 'shape': (%s8, 3), }"
                         % ("-" * 9000),
    "pickled objects": "{'descr': '|O', 'fortran_order': False, 'shape': (8, 3), }",
}


@pytest.mark.parametrize("kind", list(NPY_HEADERS))
@pytest.mark.parametrize("container", [".npy", ".npz member"])
def test_a_crafted_header_is_one_line(one, two, tmp_path, capsys, kind, container):
    text = NPY_HEADERS[kind][:9999].encode("latin1")
    data = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + bytes(96)
    if container == ".npy":
        path, prefix = str(tmp_path / "crafted.npy"), one
        with open(path, "wb") as handle:
            handle.write(data)
    else:
        path, prefix = str(tmp_path / "crafted.npz"), two
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("a.npy", data)
            archive.writestr("b.npy", data)
    line = _refused(_convert(prefix, tmp_path, capsys, ["--validate", "8", "--inputs", path]))
    assert "crafted.np" in line, line


def test_the_first_rows_of_a_npy_are_read_not_the_file(one, tmp_path, capsys):
    """A .npy whose header declares 2^40 rows and which holds 8: the 8 used are read."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2 ** 40, 3)})
    path = str(tmp_path / "declared.npy")
    with open(path, "wb") as handle:
        handle.write(header.getvalue() + np.ones((8, 3), np.float32).tobytes())
    code, out, err, _ = _convert(one, tmp_path, capsys, ["--validate", "8", "--inputs", path])
    assert code == cli.EXIT_OK, err
    code, out, err, _ = _convert(one, tmp_path, capsys, ["--validate", "9", "--inputs", path])
    assert code == cli.EXIT_USAGE and "is cut short" in err and len(err.splitlines()) == 1, err


def _members(tmp_path, kind):
    """An archive of ``a`` and ``b`` (8 rows) whose ``b`` is damaged in one way."""
    path = str(tmp_path / "damaged.npz")
    good = io.BytesIO()
    np.save(good, np.full((8, WIDTH), 0.5))
    good = good.getvalue()
    compression = zipfile.ZIP_DEFLATED if kind == "bad deflate stream" else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("a.npy", good)
        archive.writestr("b.npy", good[:-16] if kind == "cut short" else good)
    data = bytearray(open(path, "rb").read())
    second = data.index(b"b.npy") + len(b"b.npy")
    if kind == "bad CRC":
        data[second + len(good) - 1] ^= 0xFF
    elif kind == "bad deflate stream":
        for at in range(second + 4, second + 40):
            data[at] ^= 0x55
    with open(path, "wb") as handle:
        handle.write(bytes(data))
    return path


@pytest.mark.parametrize("kind", ["cut short", "bad CRC", "bad deflate stream"])
def test_a_damaged_member_is_one_line(two, tmp_path, capsys, kind):
    path = _members(tmp_path, kind)
    line = _refused(_convert(two, tmp_path, capsys, ["--validate", "8", "--inputs", path]))
    assert "array 'b'" in line, line


def test_an_input_given_twice_is_refused_before_the_checkpoint_is_read(tmp_path, capsys):
    code, out, err = run_convert([str(tmp_path / "absent"), "0", "--out", str(tmp_path / "out"),
                                  "--validate", "8", "--input", "a:100", "--input", "b:100",
                                  "--input", "a:1000000000"], capsys)
    assert code == cli.EXIT_USAGE
    line, = err.strip().splitlines()
    assert "--input a is given twice; give one --input per data input" in line, line


@pytest.mark.parametrize("spec", ["a:100:int32:%d" % 2 ** 63, "a:100:int32:%d" % 2 ** 31 + "1",
                                  "a:100:int32:99999999999999999999999", "a:100:float32:1e308",
                                  "a:100:float32:inf", "a:100:float32:nan",
                                  "a:100:float32:3.5e38"])
def test_high_beyond_the_dtype_is_one_line(two, tmp_path, capsys, spec):
    code, out, err = run_convert([two, "0", "--out", str(tmp_path / "out"), "--validate", "8",
                                  "--input", spec, "--input", "b:100"], capsys)
    assert code == cli.EXIT_USAGE
    line, = err.strip().splitlines()
    assert "HIGH must be a positive" in line and "range" in line, line


def test_the_largest_high_of_each_dtype_draws_finite_values(two, tmp_path, capsys):
    code, out, err = run_convert([two, "0", "--out", str(tmp_path / "out"), "--validate", "8",
                                  "--input", "a:100:float32:3.4e38", "--input", "b:100"], capsys)
    assert code in (cli.EXIT_OK, cli.EXIT_VALIDATION_FAILED), err
    from mxmixed.cli._samples import input_spec
    assert input_spec("t:4:int32:%d" % 2 ** 31)[3] == 2 ** 31


def test_one_sample_shape_for_several_inputs_names_the_flags_without_mxnet_warnings(
        two, tmp_path):
    """The first-hour case: --input-shape on a model of two data inputs."""
    proc = run_command([sys.executable, "-m", "mxmixed", "convert", two, "0", "--out",
                        str(tmp_path / "out"), "--validate", "4", "--input-shape", "100"],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == cli.EXIT_USAGE, proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert ("this model has 2 data inputs (a, b), and --input-shape gives samples for one: "
            "give --inputs FILE.npz" in line and "--input a:SHAPE --input b:SHAPE" in line), line
