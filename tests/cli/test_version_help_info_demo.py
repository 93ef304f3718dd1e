"""The ``mxmixed`` command line: version, help, info and the float32 demo."""
import sys

import pytest

import mxmixed
from mxmixed import cli, emulation
from mxmixed.diagnostics.machine import collect

from conftest import run_command


def test_version_flag_prints_the_package_version(capsys):
    try:
        cli.main(["--version"])
    except SystemExit as stop:
        assert stop.code == 0
    assert mxmixed.__version__ in capsys.readouterr().out


def test_python_dash_m_help_lists_the_commands():
    proc = run_command([sys.executable, "-m", "mxmixed", "--help"], capture_output=True,
                       text=True)
    assert proc.returncode == 0
    assert "info" in proc.stdout and "demo" in proc.stdout


def test_info_reports_build_gpus_float16_and_versions(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "mxnet" in out and "1.9.1" in out
    assert "CPU build" in out or "CUDA build" in out
    assert "GPUs seen" in out and "float16 GEMM" in out
    assert "numpy" in out and "1.23.5" in out


def test_info_names_the_onnx_and_onnxruntime_versions_that_convert_uses(capsys):
    from importlib import metadata

    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out.splitlines()
    for package in ("onnx", "onnxruntime"):
        assert any(line.replace(":", " ").split() == [package, metadata.version(package)]
                   for line in out), package


def test_info_says_a_cpu_build_has_no_float16_gemm_and_never_contradicts_the_emulation_line():
    info = collect()
    if info["build"] == "CPU":
        assert info["gpus"] == 0
        assert info["float16_gemm"].startswith("none on this CPU build")
        assert info["emulation"].startswith("inactive")  # both true at once, no contradiction
        with emulation.emulated():
            assert collect()["float16_gemm"] == info["float16_gemm"]


def test_info_reports_emulation_state():
    assert collect()["emulation"].startswith("inactive")
    with emulation.emulated():
        assert collect()["emulation"].startswith("active")


@pytest.mark.slow
def test_demo_tells_the_whole_story_and_writes_its_results(capsys, tmp_path):
    out_dir = tmp_path / "demo"
    assert cli.main(["demo", "--epochs", "2", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    table = [l.split() for l in out.splitlines()
             if l.startswith(("float32 ", "amp ")) and l.split()[1].endswith("%")]
    assert [row[0] for row in table] == ["float32", "amp"]
    assert all(float(row[1].rstrip("%")) > 80 for row in table)
    assert "Float16 conversion report" in out and "top-1 agreement" in out
    line = [l for l in out.splitlines() if l.startswith("converted float16 model")][0]
    assert "test accuracy" in line
    for name in ("training.png", "digits-amp.ckpt", "digits-fp32-symbol.json",
                 "digits-fp32-0000.params", "digits-fp16-symbol.json", "digits-fp16-0000.params"):
        assert (out_dir / name).stat().st_size > 0, name


def test_demo_rejects_zero_epochs(capsys):
    assert cli.main(["demo", "--epochs", "0"]) == 2
    assert "argument --epochs: must be at least 1" in capsys.readouterr().err


def test_info_reports_no_internal_layering():
    from mxmixed.diagnostics import machine

    text = machine.format_info(collect())
    assert "layers" not in text and "_preflight" not in text
    assert "float16 GEMM" in text and "versions" in text


def test_info_bfloat16_line_agrees_with_what_mxnet_needs(monkeypatch):
    from mxmixed.diagnostics import machine
    from mxmixed._core import devices

    monkeypatch.setattr(devices, "bfloat16_support", lambda: (True, ""))
    monkeypatch.setattr(devices, "bfloat16_native", lambda: None)
    assert machine.collect()["bfloat16"].startswith("emulated by oneDNN")
    monkeypatch.setattr(devices, "bfloat16_support",
                        lambda: (False, "this CPU lacks avx512bw"))
    line = machine.format_info(machine.collect())
    assert "bfloat16 AMP (MXNet) : cannot run: this CPU lacks avx512bw" in line


def test_convert_unknown_dtype_names_the_two_it_takes(capsys, tmp_path):
    assert cli.main(["convert", "m", "0", "--out", str(tmp_path / "o"), "--dtype",
                     "float64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "float16 or bfloat16" in err
