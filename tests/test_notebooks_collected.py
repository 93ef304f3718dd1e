"""Meta-test: every notebook under tutorials/ is collected by the test run (through nbval)."""
import glob
import os
import subprocess
import sys

from conftest import ROOT


def test_every_tutorial_notebook_is_collected():
    notebooks = sorted(os.path.relpath(p, ROOT)
                       for p in glob.glob(os.path.join(ROOT, "tutorials", "*.ipynb")))
    assert notebooks, "tutorials/ holds no notebook"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = {line.split("::", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    missing = [nb for nb in notebooks if nb not in collected]
    assert not missing, "notebooks not collected by `make test`: %s" % missing


def test_every_notebook_checks_some_output():
    import json

    for path in glob.glob(os.path.join(ROOT, "tutorials", "*.ipynb")):
        with open(path) as handle:
            cells = json.load(handle)["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        assert any("NBVAL_CHECK_OUTPUT" in src for src in code), path
        assert all(c.get("execution_count") is not None for c in cells
                   if c["cell_type"] == "code" and "".join(c["source"]).strip()), \
            "%s has unexecuted cells: its stored outputs are the expectation" % path
