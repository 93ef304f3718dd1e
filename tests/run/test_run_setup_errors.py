"""``mxmixed run`` that cannot start the script: one line, exit 2, and a report that does not say
``running``. ``--fp32-op`` names that MXNet's AMP finds as attributes but that are no op (a
submodule such as ``random`` or ``contrib``, a dunder such as ``__name__``) once got through
the check, made a traceback inside AMP, and left the report saying ``running``."""
import json
import os
import sys

import pytest

from conftest import run_command
from mxmixed import emulation
from mxmixed._core.devices import bfloat16_support
from mxmixed.cli._run import run_script
from mxmixed.cli._run_precision import fp32_ops_problem
from mxmixed.training._unlisted import resolves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS, WHY = bfloat16_support()
NO_OPS = ["random", "contrib", "linalg", "__name__", "__doc__", "op", ""]


@pytest.mark.parametrize("name", NO_OPS)
def test_a_name_that_is_no_op_is_refused_in_one_line(name):
    assert not resolves(name)
    assert fp32_ops_problem([name], "bfloat16") == (
        "--fp32-op %s: no such MXNet op (names as in mx.nd: im2col, _contrib_RROIAlign)" % name)


@pytest.mark.parametrize("name", ["im2col", "_contrib_RROIAlign", "relu", "Convolution"])
def test_the_names_of_ops_still_resolve(name):
    assert resolves(name)
    assert "no such MXNet op" not in (fp32_ops_problem([name], "bfloat16") or "")


@pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
@pytest.mark.parametrize("name", ["random", "contrib", "__name__"])
def test_fp32_op_with_no_op_exits_2_in_one_line_before_the_report_starts(tmp_path, name):
    script, report = tmp_path / "s.py", tmp_path / "r.json"
    script.write_text("x = 1\n")
    proc = run_command([sys.executable, "-m", "mxmixed.run", "--report", str(report), "--amp",
                        "bfloat16", "--fp32-op", name, str(script)], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["mxmixed run: error: --fp32-op %s: no such MXNet op "
                                        "(names as in mx.nd: im2col, _contrib_RROIAlign)" % name]
    assert not report.exists()


def test_a_run_that_cannot_be_set_up_is_one_line_and_its_report_is_closed(
        tmp_path, monkeypatch, capsys):
    def enable(*args, **kwargs):
        raise RuntimeError("planted: the emulation cannot start\nsecond line")

    monkeypatch.setattr(emulation, "enable", enable)
    script, report = tmp_path / "s.py", tmp_path / "r.json"
    script.write_text("open(%r, 'w').write('ran')\n" % str(tmp_path / "ran"))
    assert run_script(str(script), [], report=str(report)) == 2
    line = ("mxmixed run: error: the run could not be set up, and the script did not start: "
            "RuntimeError: planted: the emulation cannot start")
    assert capsys.readouterr().err.splitlines() == [line]
    data = json.loads(report.read_text())
    assert (data["status"], data["exit_code"]) == ("not started", 2)
    assert data["error"] == line[len("mxmixed run: error: "):]
    assert not (tmp_path / "ran").exists()
