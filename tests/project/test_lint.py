"""The code passes the linter configured in pyproject.toml (ruff: pyflakes, pycodestyle, banned imports)."""
import os
import sys

import pytest

from conftest import ROOT, run_command


def test_ruff_finds_nothing():
    exe = os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(exe):
        pytest.skip("ruff is not installed (pip install -c constraints.txt -e .[test])")
    proc = run_command([exe, "check", "--no-cache", "mxmixed", "tests", "benchmarks",
                        "examples", "docs/conf.py"], cwd=ROOT, capture_output=True,
                       text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("line", ["import tqdm", "from tqdm.auto import tqdm", "import pickle"])
def test_ruff_refuses_a_banned_import_outside_its_home(line):
    """tqdm has one home (mxmixed/_core/progress.py) and pickle one (the format 1 loader,
    mxmixed/checkpoint/_legacy.py): ruff's banned-api rule (TID251) refuses them elsewhere."""
    exe = os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(exe):
        pytest.skip("ruff is not installed (pip install -c constraints.txt -e .[test])")
    proc = run_command([exe, "check", "--no-cache", "--stdin-filename",
                        os.path.join("mxmixed", "symbolic", "_stray.py"), "-"],
                       input=line + "\n", cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and "TID251" in proc.stdout, proc.stdout + proc.stderr
