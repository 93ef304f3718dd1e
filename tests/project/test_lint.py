"""The code passes the linter configured in pyproject.toml (ruff: pyflakes, pycodestyle)."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT


def test_ruff_finds_nothing():
    exe = os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(exe):
        pytest.skip("ruff is not installed (pip install -c constraints.txt -e .[test])")
    proc = subprocess.run([exe, "check", "--no-cache", "mxmixed", "tests", "benchmarks",
                           "examples", "docs/conf.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
