"""``mxmixed convert`` and ``mxmixed demo`` never lose work or lie about it (issue 14, 8-13):
a failed validation exits 1 and writes nothing, the output location is checked before any
work, a folder is not a prefix, samples that cannot fit in memory are refused before they are
allocated, and ``demo --out`` errors are one line."""
import os
import sys

import pytest

import mxnet as mx
from mxnet.gluon import nn

from mxmixed import cli, symbolic
from mxmixed.cli import _preflight
from mxmixed.tutorial import digits_cnn

from conftest import run_command

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _tree(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, files in os.walk(str(folder)) for f in files)


@pytest.fixture
def checkpoint(tmp_path):
    """A small valid float32 checkpoint (untrained digits CNN) in tmp_path/model."""
    net = digits_cnn(seed=1, prefix="digits_")
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    net.export(str(tmp_path / "model"))
    return str(tmp_path / "model")


@pytest.fixture
def tiny_outputs(tmp_path):
    """A Dense net whose float32 outputs are about 1e-11: float16 underflows them to 0."""
    net = nn.Dense(4, in_units=8, prefix="tiny_")
    net.initialize()
    net.weight.set_data(mx.nd.full((4, 8), 2e-12))
    net.bias.set_data(mx.nd.zeros((4,)))
    net.hybridize()
    net(mx.nd.ones((1, 8)))
    net.export(str(tmp_path / "tiny"))
    return str(tmp_path / "tiny")


@pytest.fixture
def any_size(tmp_path):
    """A convolution and a global pooling: it accepts images of any size."""
    net = nn.HybridSequential(prefix="any_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, in_channels=1), nn.GlobalAvgPool2D(), nn.Flatten())
    net.initialize()
    net.hybridize()
    net(mx.nd.ones((1, 1, 8, 8)))
    net.export(str(tmp_path / "anysize"))
    return str(tmp_path / "anysize")


# ------------------------------------------------------------------ 8: failed validation
def test_failed_validation_exits_1_writes_nothing_and_names_the_next_step(tiny_outputs, tmp_path,
                                                                          capsys):
    before = _tree(tmp_path)
    code, out, err = _run(["convert", tiny_outputs, "0", "--out", str(tmp_path / "tiny16"),
                           "--validate", "8", "--input-shape", "8"], capsys)
    assert code == cli.EXIT_VALIDATION_FAILED == 1
    assert _tree(tmp_path) == before
    assert err.count("\n") == 1 and err.startswith("mxmixed convert: error: validation failed")
    assert "max rel error 1 > --tolerance 0.01" in err
    assert "nothing written" in err and "--search-tolerance" in err and "--keep-failed" in err
    assert "Validation: float16 against float32" in out  # the numbers behind the verdict
    assert "wrote" not in out


def test_keep_failed_writes_the_files_and_still_exits_1(tiny_outputs, tmp_path, capsys):
    out_prefix = str(tmp_path / "tiny16")
    code, out, err = _run(["convert", tiny_outputs, "0", "--out", out_prefix, "--validate", "8",
                           "--input-shape", "8", "--keep-failed"], capsys)
    assert code == 1
    assert os.path.isfile(out_prefix + "-symbol.json")
    assert os.path.isfile(out_prefix + "-0000.params")
    assert "files kept (--keep-failed)" in err and "wrote " in out


def test_a_looser_tolerance_accepts_the_model(tiny_outputs, tmp_path, capsys):
    code, _, err = _run(["convert", tiny_outputs, "0", "--out", str(tmp_path / "tiny16"),
                         "--validate", "8", "--input-shape", "8", "--tolerance", "2"], capsys)
    assert code == 0, err


def test_a_passing_validation_exits_0(checkpoint, tmp_path, capsys):
    code, out, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "m16"),
                           "--validate", "4", "--input-shape", "1,8,8"], capsys)
    assert code == 0, err
    assert "wrote " in out and err == ""


# ------------------------------------------------------------------ 9: output checked first
@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if convert reaches the checkpoint loading (the expensive work)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the output location must be checked before loading")

    monkeypatch.setattr(symbolic, "load_checkpoint", refuse)


@pytest.mark.parametrize("where, message", [
    ("/proc/mxmixed-out16", "cannot write in output folder /proc"),
    ("file/out16", "is not a folder"),
])
def test_unwritable_output_location_is_refused_before_any_work(where, message, checkpoint,
                                                               tmp_path, capsys, no_work):
    (tmp_path / "file").write_text("not a folder")
    before = _tree(tmp_path)
    out = where if where.startswith("/") else str(tmp_path / where)
    code, _, err = _run(["convert", checkpoint, "0", "--out", out, "--validate", "4",
                         "--input-shape", "1,8,8"], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert _tree(tmp_path) == before


@pytest.mark.skipif(AS_ROOT, reason="root writes in read-only folders")
def test_read_only_output_folder_is_refused_before_any_work(checkpoint, tmp_path, capsys,
                                                            no_work):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        code, _, err = _run(["convert", checkpoint, "0", "--out", str(folder / "out16")], capsys)
    finally:
        folder.chmod(0o755)
    assert code == 2 and "cannot write in output folder" in err and err.count("\n") == 1


def test_an_output_file_that_is_a_folder_is_refused(checkpoint, tmp_path, capsys, no_work):
    (tmp_path / "out16-symbol.json").mkdir()
    code, _, err = _run(["convert", checkpoint, "0", "--out", str(tmp_path / "out16")], capsys)
    assert code == 2 and "is a folder; it cannot be replaced" in err


# ------------------------------------------------------------------ 10: a folder as --out
@pytest.mark.parametrize("out", ["somedir/", ".", "somedir", "somedir/.."])
def test_a_folder_as_out_is_refused_with_an_example_prefix(out, checkpoint, tmp_path, capsys,
                                                           monkeypatch, no_work):
    (tmp_path / "somedir").mkdir()
    monkeypatch.chdir(str(tmp_path))
    before = _tree(tmp_path)
    code, _, err = _run(["convert", checkpoint, "0", "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "is a folder; give a file prefix inside it, such as" in err and "model16" in err
    assert _tree(tmp_path) == before


# ------------------------------------------------------------------ 11/12: memory guard
def test_huge_input_shape_is_refused_before_allocating(any_size, tmp_path, capsys):
    before = _tree(tmp_path)
    code, out, err = _run(["convert", any_size, "0", "--out", str(tmp_path / "any16"),
                           "--validate", "2", "--input-shape", "1,100000,100000"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "10000000000 elements per sample, more than the 2147483647 (2^31 - 1)" in err
    assert "Traceback" not in err and out == ""
    # under MXNet's tensor limit per sample, over it inside the graph: still one line
    code, out, err = _run(["convert", any_size, "0", "--out", str(tmp_path / "any16"),
                           "--validate", "2", "--input-shape", "1,30000,30000"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "larger than 2^31 elements" in err or "GB of memory, more than the" in err, err
    assert "Traceback" not in err and out == ""
    assert _tree(tmp_path) == before


def test_memory_guard_uses_shape_inference_and_the_available_memory(any_size, tmp_path, capsys,
                                                                    monkeypatch):
    sym = mx.sym.load(any_size + "-symbol.json")
    small = _preflight.estimate_convert_memory(sym, "data", (1, 8, 8), count=4, batch_size=2)
    large = _preflight.estimate_convert_memory(sym, "data", (1, 80, 80), count=4, batch_size=2)
    # samples (4 x 64 floats) and two runs of the conv output (2 x 8 x 6 x 6) at least
    assert small >= 4 * (4 * 64 + 2 * 2 * 8 * 36)
    assert 50 < large / small < 200  # it grows with the image area
    monkeypatch.setattr(_preflight, "available_memory", lambda: small - 1)
    code, _, err = _run(["convert", any_size, "0", "--out", str(tmp_path / "any16"),
                         "--validate", "4", "--batch-size", "2", "--input-shape", "1,8,8"],
                        capsys)
    assert code == 2 and "more than the" in err
    monkeypatch.setattr(_preflight, "available_memory", lambda: small + 1)
    code, _, err = _run(["convert", any_size, "0", "--out", str(tmp_path / "any16"),
                         "--validate", "4", "--batch-size", "2", "--input-shape", "1,8,8"],
                        capsys)
    assert code == 0, err


def test_available_memory_reads_meminfo():
    available = _preflight.available_memory()
    assert available is not None and available > 0


# ------------------------------------------------------------------ 13: demo --out
@pytest.mark.parametrize("case", ["regular file", "under /proc"])
def test_demo_out_that_cannot_be_a_folder_is_a_one_line_error(case, tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    out = str(target) if case == "regular file" else "/proc/mxmixed-demo"
    code, stdout, err = _run(["demo", "--epochs", "1", "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("mxmixed demo: error: ") and "Traceback" not in err
    assert "not a folder" in err if case == "regular file" else "cannot" in err
    assert stdout == ""


@pytest.mark.skipif(AS_ROOT, reason="root writes in read-only folders")
def test_demo_out_in_a_read_only_folder_is_a_one_line_error(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        code, _, err = _run(["demo", "--out", str(folder / "demo")], capsys)
    finally:
        folder.chmod(0o755)
    assert code == 2 and err.count("\n") == 1 and "cannot create results folder" in err


def test_python_dash_m_demo_out_file_has_no_traceback(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    proc = run_command([sys.executable, "-m", "mxmixed", "demo", "--out", str(target)],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ documented exit codes
def test_convert_help_documents_the_exit_codes_and_the_out_rule():
    proc = run_command([sys.executable, "-m", "mxmixed", "convert", "--help"],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0
    for line in ("exit codes:", "  0  converted", "  1  validation failed",
                 "  2  bad command line or input", "  3  writing the converted pair",
                 "  130  interrupted (Ctrl-C)", "--out somedir/ or --out . is refused"):
        assert line in proc.stdout, line
    assert (cli.EXIT_OK, cli.EXIT_VALIDATION_FAILED, cli.EXIT_USAGE,
            cli.EXIT_WRITE_FAILED, cli.EXIT_INTERRUPTED) == (0, 1, 2, 3, 130)


@pytest.mark.parametrize("text, shape", [("3,224,224", (3, 224, 224)), ("8", (8,)),
                                         (" 1, 8 ,8", (1, 8, 8))])
def test_parse_shape_reads_positive_integers(text, shape):
    assert cli.parse_shape(text) == shape


@pytest.mark.parametrize("text", ["3,x,224", "", "0,3", "-1,3", "3,,4", "3x224x224", "1.5",
                                  "3,224,"])
def test_parse_shape_rejects_anything_else(text):
    with pytest.raises(Exception, match="must be|at least 1"):
        cli.parse_shape(text)
