"""Every ```python block of the user docs (README.md and docs/*.md; not docs/design/) runs as
written.

Each page's blocks run in order, in one fresh interpreter, in a temporary folder, as a reader
who copies them one after the other would run them: a later block may use the names and the
files of an earlier one. Shell blocks (```bash, ```console) are not run. docs/quickstart.md's
blocks run in tests/project/test_quickstart_page.py, which also compares their outputs with the page: here
that page is reported as skipped, with that reason.

An HTML comment on the line just before a block changes how it runs, and says why:

* ``<!-- not run: REASON -->``: not run. REASON must start with "needs" (a GPU, the network, a
  file the page asks the reader to bring, ...); each such block is reported as a skipped test
  with its page, line and reason, never dropped silently.
* ``<!-- new process: REASON -->``: runs in a new interpreter (same folder), for a block that is
  a program of its own (one that must not see an earlier block's ``mxmixed.init()``).
* ``<!-- needs avx512: REASON -->`` (also combined, ``<!-- new process, needs avx512: ... -->``):
  runs only on a CPU with AVX-512 F/BW/VL/DQ; elsewhere it is reported as skipped.

Nothing here downloads anything: the blocks use the digits that ship with scikit-learn.
"""
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_command

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md"] + sorted("docs/%s" % p.name for p in (ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(.*?)\s*-->\s*$")
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
# Pages whose blocks another test runs already, and checks more closely.
RUN_ELSEWHERE = {"docs/quickstart.md": "tests/project/test_quickstart_page.py runs its blocks and compares "
                                       "what they print with the page"}


def _cpu_has_avx512():
    try:
        with open("/proc/cpuinfo") as handle:
            flags = set(re.findall(r"^flags\s*:(.*)$", handle.read(), re.M)[0].split())
    except (OSError, IndexError):
        return False
    return all(flag in flags for flag in AVX512)


def blocks(page):
    """``[(line, code, mark)]`` for each python block of ``page``; ``mark`` is the comment
    on the line just before the block ('' when there is none)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    out = []
    for match in FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        found = MARK.search(before)
        out.append((line, match.group(2), found.group(1) if found else ""))
    return out


def _kinds(mark):
    """The mark's keywords (``not run``, ``new process``, ``needs avx512``) and its reason."""
    head, _, reason = mark.partition(":")
    return {k.strip() for k in head.split(",") if k.strip()}, reason.strip()


def plan(page):
    """``(runs, skipped)``: ``runs`` is a list of processes, each a list of ``(line, code)``;
    ``skipped`` is ``[(line, reason)]``."""
    runs, skipped, avx512 = [[]], [], _cpu_has_avx512()
    for line, code, mark in blocks(page):
        kinds, reason = _kinds(mark) if mark else (set(), "")
        if "not run" in kinds:
            skipped.append((line, "not run: " + reason))
            continue
        if "needs avx512" in kinds and not avx512:
            skipped.append((line, "needs a CPU with AVX-512 F/BW/VL/DQ: " + reason))
            continue
        if "new process" in kinds and runs[-1]:
            runs.append([])
        runs[-1].append((line, code))
    return [r for r in runs if r], skipped


RUNNER = textwrap.dedent("""
    import json, sys, traceback
    page, blocks = json.load(open(sys.argv[1]))
    namespace = {"__name__": "__main__"}
    for line, code in blocks:
        try:
            exec(compile(code, "%s, block at line %d" % (page, line), "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print("FAILED: %s, the python block at line %d" % (page, line), file=sys.stderr)
            sys.exit(1)
    """)


def _all_skips():
    return [(page, line, reason) for page in PAGES for line, reason in plan(page)[1]]


def test_every_page_is_read_and_every_mark_is_known():
    """The marks are the three this test knows; a skipped block says what it needs."""
    assert "README.md" in PAGES and "docs/emulation.md" in PAGES
    assert not any(p.startswith("docs/design/") for p in PAGES)
    for page in PAGES:
        for line, _, mark in blocks(page):
            if not mark:
                continue
            kinds, reason = _kinds(mark)
            assert kinds <= {"not run", "new process", "needs avx512"} and reason, (
                "%s:%d: unknown mark <!-- %s -->" % (page, line, mark))
            if "not run" in kinds:
                assert reason.startswith("needs"), "%s:%d: say what it needs" % (page, line)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)])
def test_python_blocks_run_as_written(page, tmp_path):
    if page in RUN_ELSEWHERE:
        pytest.skip("%s: %s" % (page, RUN_ELSEWHERE[page]))
    runs, _ = plan(page)
    if not runs:
        pytest.skip("%s: every python block is marked not run (see the skips)" % page)
    env = dict(os.environ, MPLBACKEND="Agg", MXMIXED_PROGRESS="0")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    work = tmp_path / "work"
    work.mkdir()
    for n, run in enumerate(runs):
        spec = tmp_path / ("blocks-%d.json" % n)
        spec.write_text(json.dumps([page, run]))
        runner = tmp_path / "runner.py"
        runner.write_text(RUNNER)
        proc = run_command([sys.executable, str(runner), str(spec)], cwd=work, env=env,
                           capture_output=True, text=True)
        assert proc.returncode == 0, "%s: a python block failed:\n%s" % (
            page, (proc.stdout + proc.stderr)[-4000:])


@pytest.mark.parametrize("page, line, reason", _all_skips() or [("-", 0, "")])
def test_blocks_not_run_are_listed(page, line, reason):
    """One skipped test per block that is not run, with its page, line and reason."""
    if page == "-":
        return
    pytest.skip("%s:%d %s" % (page, line, reason))
