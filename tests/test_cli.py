"""The ``mxmixed`` command line: version, help, info and the float32 demo."""
import subprocess
import sys

import mxmixed
from mxmixed import cli, emulation
from mxmixed.sysinfo import collect


def test_version_flag_prints_the_package_version(capsys):
    try:
        cli.main(["--version"])
    except SystemExit as stop:
        assert stop.code == 0
    assert mxmixed.__version__ in capsys.readouterr().out


def test_python_dash_m_help_lists_the_commands():
    proc = subprocess.run([sys.executable, "-m", "mxmixed", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0
    assert "info" in proc.stdout and "demo" in proc.stdout


def test_info_reports_build_gpus_float16_and_versions(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "mxnet" in out and "1.9.1" in out
    assert "CPU build" in out or "CUDA build" in out
    assert "GPUs seen" in out and "float16 GEMM" in out
    assert "numpy" in out and "1.23.5" in out


def test_info_says_float16_is_emulated_on_a_cpu_build():
    info = collect()
    if info["build"] == "CPU":
        assert info["gpus"] == 0
        assert info["float16_gemm"].startswith("emulated")


def test_info_reports_emulation_state():
    assert collect()["emulation"].startswith("inactive")
    with emulation.emulated():
        assert collect()["emulation"].startswith("active")


def test_demo_trains_and_prints_accuracy(capsys):
    assert cli.main(["demo", "--epochs", "1"]) == 0
    out = capsys.readouterr().out
    line = [l for l in out.splitlines() if l.startswith("digits test accuracy")][0]
    accuracy = float(line.split(":")[1].strip().rstrip("%"))
    assert accuracy > 50.0


def test_demo_rejects_zero_epochs(capsys):
    assert cli.main(["demo", "--epochs", "0"]) == 2
    assert "--epochs must be at least 1" in capsys.readouterr().err
