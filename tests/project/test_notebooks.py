"""Meta-tests of the tutorial notebooks: collected by the test run (through nbval), checked by
cell tags, with code lines that fit the page, and stored with clean outputs."""
import glob
import json
import os
import re
import sys

import pytest

from conftest import ROOT, run_command

NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "tutorials", "*.ipynb")))
MAX_LINE = 90
NBVAL_TAGS = {"nbval-check-output", "nbval-ignore-output", "nbval-skip", "raises-exception"}


def _cells(path):
    with open(path) as handle:
        return json.load(handle)["cells"]


def _source(cell):
    return "".join(cell["source"])


def _ids(paths):
    return [os.path.basename(p) for p in paths]


@pytest.mark.slow
def test_every_tutorial_notebook_is_collected():
    notebooks = [os.path.relpath(p, ROOT) for p in NOTEBOOKS]
    assert notebooks, "tutorials/ holds no notebook"
    # `make test`'s command and configuration (pytest.ini's testpaths and nbval options),
    # in one process, with the tests themselves left out: collecting them costs a minute
    proc = run_command([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                        "--ignore-glob", os.path.join(ROOT, "tests", "*")],
                       capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    collected = {line.split("::", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    missing = [nb for nb in notebooks if nb not in collected]
    assert not missing, "notebooks not collected by `make test`: %s" % missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_checks_output_through_cell_tags(path):
    code = [c for c in _cells(path) if c["cell_type"] == "code"]
    tags = [set(c.get("metadata", {}).get("tags", [])) for c in code]
    assert any("nbval-check-output" in t for t in tags), \
        "%s: no cell is tagged nbval-check-output" % path
    markers = [_source(c) for c in code if re.search(r"^\s*#\s*NBVAL_", _source(c), re.M)]
    assert not markers, "%s: nbval markers belong in cell tags, not in the code: %r" % (
        path, [m.splitlines()[0] for m in markers])
    unknown = {t for s in tags for t in s if t.startswith("nbval") and t not in NBVAL_TAGS}
    assert not unknown, "%s: nbval does not know the tags %s" % (path, sorted(unknown))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_code_lines_fit_the_rendered_page(path):
    cells = _cells(path)
    long_lines = ["cell %d: %s" % (i, line) for i, c in enumerate(cells) if c["cell_type"] == "code"
                  for line in _source(c).splitlines() if len(line) > MAX_LINE]
    assert not long_lines, "%s: code lines over %d characters scroll sideways when rendered:\n%s" \
        % (path, MAX_LINE, "\n".join(long_lines))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_stores_clean_outputs(path):
    for i, cell in enumerate(_cells(path)):
        if cell["cell_type"] != "code":
            continue
        assert "execution" not in cell.get("metadata", {}), \
            "%s cell %d stores execution timestamps" % (path, i)
        if _source(cell).strip():
            assert cell.get("execution_count") is not None, \
                "%s cell %d is unexecuted: its stored outputs are the expectation" % (path, i)
        for out in cell.get("outputs", []):
            text = "".join(out.get("text", ""))
            assert not re.search(r"\d+%\|", text), "%s cell %d stores a progress bar" % (path, i)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_markdown_renders_and_speaks_to_readers(path):
    for i, cell in enumerate(_cells(path)):
        if cell["cell_type"] != "markdown":
            continue
        # outside code spans, `2**-11` would render as bold text
        prose = re.sub(r"```.*?```", "", _source(cell), flags=re.S)
        prose = re.sub(r"`[^`]*`", "", prose)
        assert not re.search(r"\d\*\*-?\d", prose), \
            "%s cell %d: write powers as `2**-11` in backticks" % (path, i)
        assert not re.search(r"this project's (issue|CI)|as cited in this project", prose), \
            "%s cell %d refers to how the project is run" % (path, i)
