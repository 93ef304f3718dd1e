"""The quick start page (docs/quickstart.md) stays true: its code runs, and prints what the page shows.

The page alternates code blocks (```python or ```bash) with the ```text block of their
expected output. Each step runs in the same temporary folder, in order (the conversion reads the
checkpoint that the training loop exported), each Python block in a fresh interpreter because
``mxmixed.init`` cannot be undone, with the caller's ``OMP_NUM_THREADS``. Outputs are
compared line by line: the words exactly, and the numbers exactly too except where the page
states a tolerance (:data:`LOOSE`): test accuracies within 0.12, validation errors within 3x,
times not at all.
"""
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import run_command

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?", re.I)
# (pattern of the number in its line, how far a printed value may be from the page's); the
# first pattern that matches a number decides; any other number must be equal
LOOSE = [
    (re.compile(r"test accuracy ([\d.]+)"), lambda got, want: abs(got - want) <= 0.12),
    (re.compile(r"(?:max abs error|max rel error|error) +([\d.e+-]+)"),
     lambda got, want: want / 3 <= got <= want * 3),
    (re.compile(r"([\d.]+) s\b"), lambda got, want: True),
]


def steps():
    """``(language, code, expected output)`` for each code block of the page, in order."""
    blocks = FENCE.findall(PAGE.read_text(encoding="utf-8"))
    out = []
    for i, (language, code) in enumerate(blocks):
        if language in ("python", "bash"):
            follows = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
            out.append((language, code, follows[1] if follows[0] == "text" else None))
    return out


def _normalized(text):
    return [" ".join(NUMBER.sub("#", line).split()) for line in text.splitlines()
            if line.strip()]


def test_the_page_has_a_training_loop_and_a_conversion_each_with_its_output():
    found = steps()
    assert [language for language, _, _ in found] == ["python", "bash"], found
    assert all(expected for _, _, expected in found), "a code block without its expected output"
    python, bash = found[0][1], found[1][1]
    for needed in ("import mxmixed", "from mxnet import autograd, gluon", "mxmixed.init()",
                   "mxmixed.init_trainer(", "mxmixed.scale_loss(", "mxmixed.step("):
        assert needed in python, needed
    assert bash.strip().startswith("mxmixed convert ")


def _numbers_agree(got_line, want_line):
    """Whether two lines with the same words hold numbers that agree under :data:`LOOSE`."""
    loose = {}
    for pattern, rule in LOOSE:
        for match in pattern.finditer(want_line):
            loose.setdefault(match.start(1), rule)
    got = [float(m.group(0)) for m in NUMBER.finditer(got_line)]
    want = [(m.start(), float(m.group(0))) for m in NUMBER.finditer(want_line)]
    if len(got) != len(want):
        return False
    return all(g == w or (start in loose and loose[start](g, w))
               for g, (start, w) in zip(got, want))


def _run(language, code, cwd):
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if language == "python":
        cmd = [sys.executable, "-c", code]
    else:  # one command line; ``mxmixed`` runs as this interpreter's module
        words = shlex.split(code.strip())
        assert words[0] == "mxmixed", code
        cmd = [sys.executable, "-m", "mxmixed"] + words[1:]
    return run_command(cmd, cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_quickstart_code_prints_what_the_page_shows(tmp_path):
    for language, code, expected in steps():
        proc = _run(language, code, tmp_path)
        assert proc.returncode == 0, "%s block failed:\n%s\n%s" % (language, code,
                                                                   proc.stderr[-3000:])
        got, want = _normalized(proc.stdout), _normalized(expected)
        assert got == want, ("the %s block of docs/quickstart.md printed\n%s\n\ninstead of\n%s"
                             % (language, proc.stdout, expected))
        printed = [line for line in proc.stdout.splitlines() if line.strip()]
        shown = [line for line in expected.splitlines() if line.strip()]
        wrong = [(g, w) for g, w in zip(printed, shown) if not _numbers_agree(g, w)]
        assert not wrong, "numbers beyond the page's tolerance (printed, page): %s" % wrong
    for name in ("digits-symbol.json", "digits-0000.params", "digits-fp16-symbol.json",
                 "digits-fp16-0000.params"):
        assert (tmp_path / name).is_file(), name


@pytest.mark.parametrize("text, same", [
    ("epoch 0: test accuracy 0.57, loss scale 256", "epoch 1: test accuracy 0.9, loss scale 8"),
    ("total  150.10 kB     75.43 kB  (50.2%)", "total 151 kB 7.5e+01 kB (49%)"),
])
def test_numbers_compare_loosely_and_words_strictly(text, same):
    assert _normalized(text) == _normalized(same)
    assert _normalized(text) != _normalized(text.replace("kB", "MB").replace("scale", "factor"))


@pytest.mark.parametrize("printed, agrees", [
    ("epoch 0: test accuracy 0.49, loss scale 256, skipped steps 8", True),    # an AVX2 CPU
    ("epoch 0: test accuracy 0.73, loss scale 256, skipped steps 8", False),   # 0.13 off
    ("epoch 0: test accuracy 0.59, loss scale 128, skipped steps 8", False),   # exact numbers
    ("epoch 0: test accuracy 0.59, loss scale 256, skipped steps 9", False),
])
def test_page_numbers_are_checked_within_the_stated_tolerance(printed, agrees):
    page = "epoch 0: test accuracy 0.60, loss scale 256, skipped steps 8"
    assert _numbers_agree(printed, page) is agrees


def test_validation_errors_may_move_threefold_and_times_freely():
    assert _numbers_agree("  max rel error       0.0030  (x)", "  max rel error       0.001  (x)")
    assert not _numbers_agree("  max rel error       0.0031  (x)", "  max rel error       0.001  (x)")
    assert _numbers_agree("  time                9.50 s", "  time                0.02 s")
