"""Bad ``MXMIXED_*`` values are one line before any work: exit 2 for the CLI, ValueError in Python.

``MXMIXED_EMULATION_KEEP_LAYOUTS=2``, ``yes`` or `` 1`` once made ``mxmixed convert --validate``
print a 27-line traceback after the conversion. Every ``MXMIXED_*`` variable the package reads
is checked in one place, ``mxmixed._core.env``.
"""
import ast
import os
import sys

import pytest

from conftest import ROOT, run_command
from mxmixed import cli, emulation
from mxmixed._core import env as _env
from mxmixed._core.state import EMULATION

BAD = [("MXMIXED_EMULATION_KEEP_LAYOUTS", "2"), ("MXMIXED_EMULATION_KEEP_LAYOUTS", "yes"),
       ("MXMIXED_EMULATION_KEEP_LAYOUTS", " 1"), ("MXMIXED_EMULATION_CARRY", "true"),
       ("MXMIXED_PROGRESS", "on"), ("MXMIXED_CACHE_DIR", "relative/cache")]


def package_reads():
    """The MXMIXED_* names written in the package's code, outside _env."""
    names = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "mxmixed")):
        for name in files:
            if name.endswith(".py") and name != "_env.py":
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    tree = ast.parse(handle.read())
                names |= {node.value for node in ast.walk(tree)
                          if isinstance(node, ast.Constant) and isinstance(node.value, str)
                          and node.value.startswith("MXMIXED_") and node.value != "MXMIXED_"}
    return names


def test_every_variable_the_package_reads_is_checked_in_one_place():
    known = set(_env.SWITCHES) | {_env.CACHE_DIR}
    assert package_reads() <= known
    # and nothing else reads them behind _env's back
    for folder, _, files in os.walk(os.path.join(ROOT, "mxmixed")):
        for name in files:
            if name.endswith(".py") and name != "_env.py":
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    text = handle.read()
                for variable in known:
                    assert 'environ.get("%s"' % variable not in text, (name, variable)


@pytest.mark.parametrize("name, value", BAD)
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    error = _env.environment_error()
    assert error.startswith(name) and repr(value) in error and "\n" not in error
    with pytest.raises(ValueError) as raised:
        _env.check()
    assert str(raised.value) == error


@pytest.mark.parametrize("value, expected", [("", True), ("1", True), ("0", False)])
def test_a_switch_takes_0_1_or_nothing(monkeypatch, value, expected):
    monkeypatch.setenv("MXMIXED_EMULATION_CARRY", value)
    assert _env.switch("MXMIXED_EMULATION_CARRY") is expected
    assert _env.environment_error() is None


def test_progress_unset_means_guess(monkeypatch):
    monkeypatch.delenv("MXMIXED_PROGRESS", raising=False)
    assert _env.switch("MXMIXED_PROGRESS") is None


@pytest.mark.parametrize("name, value", BAD)
def test_enabling_the_emulation_refuses_a_bad_value_before_patching(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        emulation.enable()
    assert not EMULATION.active


@pytest.mark.parametrize("name, value", BAD)
def test_the_cli_says_it_in_one_line_and_exits_2_before_any_work(monkeypatch, capsys, tmp_path,
                                                                 name, value):
    monkeypatch.setenv(name, value)
    code = cli.main(["convert", str(tmp_path / "nothing"), "0", "--validate", "4",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mxmixed convert: error: " + name), err
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.slow
def test_convert_validate_with_a_bad_layouts_value_is_one_line_not_a_traceback(tmp_path):
    """The reported case, end to end: a real checkpoint, ``python -m mxmixed convert
    --validate`` in a fresh interpreter; nothing converted, nothing written."""
    import mxnet as mx
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=4, name="fc")
    net.save(str(tmp_path / "m-symbol.json"))
    mx.nd.save(str(tmp_path / "m-0000.params"), {"arg:fc_weight": mx.nd.ones((4, 3)),
                                                 "arg:fc_bias": mx.nd.zeros((4,))})
    for value in ("2", "yes", " 1"):
        proc = run_command(
            [sys.executable, "-m", "mxmixed", "convert", str(tmp_path / "m"), "0",
             "--input-shape", "3", "--validate", "4", "--out", str(tmp_path / "m16")],
            capture_output=True, text=True, cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT, MXMIXED_EMULATION_KEEP_LAYOUTS=value))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert "MXMIXED_EMULATION_KEEP_LAYOUTS must be 0 or 1" in proc.stderr
        assert not (tmp_path / "m16-symbol.json").exists()
