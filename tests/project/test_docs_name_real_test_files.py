"""Every test file or folder that the docs, the notebooks and the code's comments name exists: a
reader who looks for the test behind a claim finds it (the tests moved into folders once, and
the old paths stayed behind)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_PATH = re.compile(r"(?<![\w/.-])tests/[\w/.*-]*[\w/*]")
SOURCES = ["README.md", "docs/**/*.md", "tutorials/*.ipynb", "mxmixed/**/*.py",
           "benchmarks/*.py", "examples/**/*.py"]


def _named(text):
    """The ``tests/...`` paths in ``text``: files (.py, .json, ...), folders, or glob patterns."""
    return {m.group(0).rstrip(".") for m in TEST_PATH.finditer(text)}


def test_the_pattern_finds_test_paths():
    assert _named("see `tests/emulation/test_nlp.py`, tests/data/clients/, tests/run/test_*.py "
                  "and tests/test_old.py. Not mytests/x.py") == {
        "tests/emulation/test_nlp.py", "tests/data/clients/", "tests/run/test_*.py",
        "tests/test_old.py"}


def test_every_test_path_named_exists():
    missing = []
    sources = sorted({p for pattern in SOURCES for p in ROOT.glob(pattern)})
    assert len(sources) > 50, sources
    for source in sources:
        for path in sorted(_named(source.read_text(encoding="utf-8"))):
            if not (any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
                missing.append("%s names %s" % (source.relative_to(ROOT).as_posix(), path))
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)
