"""``mxmixed --help`` and argument errors answer before MXNet is imported (it takes seconds)."""
import sys

import pytest

from conftest import ROOT, run_command

PROBE = r"""
import sys
from mxmixed.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
print("MXNET_LOADED=%s CODE=%s" % ("mxnet" in sys.modules, code), file=sys.stderr)
"""


@pytest.mark.parametrize("argv, code", [
    (["--help"], 0),
    (["convert", "--help"], 0),
    (["convert"], 2),                                   # required arguments missing
    (["convert", "m", "0", "--out", "o", "--validate", "-1"], 2),
    (["convert", "m", "0", "--out", "o", "--input-shape", "3,x,4"], 2),
    (["run"], 2),
    (["demo", "--epochs", "0"], 2),
    (["nonsense"], 2),
])
def test_help_and_argument_errors_do_not_import_mxnet(argv, code):
    proc = run_command([sys.executable, "-c", PROBE] + argv, capture_output=True, text=True,
                       cwd=ROOT)
    assert "MXNET_LOADED=False CODE=%d" % code in proc.stderr, proc.stderr[-2000:]
    if code:
        lines = [l for l in proc.stderr.splitlines() if not l.startswith("MXNET_LOADED")]
        assert len(lines) == 1 and "error" in lines[0], proc.stderr


@pytest.mark.slow
def test_import_mxmixed_loads_mxnet_only_when_a_name_is_used():
    code = ("import sys, mxmixed; a = 'mxnet' in sys.modules; mxmixed.init_trainer; "
            "print(a, 'mxnet' in sys.modules, 'mxmixed.training' in sys.modules)")
    proc = run_command([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.split() == ["False", "True", "True"], proc.stderr[-2000:]
