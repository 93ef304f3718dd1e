"""/dev/null stays a character device: nothing in the tests or the benchmarks writes over it.

MXNet's profiler writes its trace by creating its file anew; given ``filename=os.devnull``
(as ``benchmarks/ssd_step.py`` once did), a root process replaced /dev/null with a regular
file, and apt then failed on that machine. ``tests/conftest.py`` fails the whole session if
/dev/null is not a character device at its end; ``benchmarks/run_all.py`` does the same.
"""
import os
import re
import stat
import sys

import pytest

from conftest import ROOT, run_command

# the only files allowed to name os.devnull: they check it, or say why it must not be written
# (mxmixed/cli/_streams.py opens the device for writing, O_WRONLY and never O_CREAT, to discard the
# output once a pipe's reader is gone)
ALLOWED = {"tests/conftest.py", "tests/project/test_dev_null_guard.py", "mxmixed/_files/atomic.py",
           "benchmarks/run_all.py", "benchmarks/ssd_step.py", "mxmixed/cli/_streams.py"}


def test_dev_null_is_a_character_device():
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_no_code_gives_dev_null_as_a_file_name():
    found = []
    for top in ("mxmixed", "tests", "benchmarks", "examples"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)
                if not name.endswith(".py") or rel in ALLOWED:
                    continue
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                if re.search(r"os\.devnull|/dev/null", text):
                    found.append(rel)
    assert found == []
    with open(os.path.join(ROOT, "benchmarks", "ssd_step.py"), encoding="utf-8") as handle:
        assert "filename=os.devnull" not in handle.read()


@pytest.mark.slow
def test_the_session_fails_when_dev_null_was_replaced(tmp_path):
    # the session-finish check of conftest.py, seen from outside: a session in which
    # os.devnull names a regular file ends as failed, although its test passed
    regular = tmp_path / "not-a-device"
    regular.write_text("")
    test = tmp_path / "test_replaced.py"
    test.write_text("import os\nos.devnull = %r\n\n\ndef test_passes():\n    pass\n"
                    % str(regular))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    proc = run_command([sys.executable, "-m", "pytest", "-q", "-p", "conftest",
                        "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(test)],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "1 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode == 1
    assert "is no longer a character device at the end of the session" in proc.stderr
