"""``mxmixed run --report`` ends its report as ``finished`` or ``interrupted`` whatever the script
raises or closes, and never prints the runner's own traceback.

Scripts that closed or replaced ``sys.stderr``, raised an exception whose ``str()`` raises, or
replaced ``json.dumps`` once left the report saying ``running`` and printed a traceback from
``mxmixed/cli/_run.py``. Each script here runs in its own interpreter, as a user runs it.
The one exception is ``os._exit``: it ends the process at once, and nothing of the runner runs
after it, so the report stays ``running`` (``docs/diagnostics.md`` says so).
"""
import json
import os
import sys

import pytest

from conftest import ROOT, run_command

SCRIPTS = {
    "closes sys.stderr, then raises": (
        "import sys\nsys.stderr.close()\nraise RuntimeError('boom')\n", 1),
    "closes sys.stdout": ("import sys\nsys.stdout.close()\n", 0),
    "sets sys.stdout and sys.stderr to None, then raises": (
        "import sys\nsys.stdout = sys.stderr = None\nraise RuntimeError('boom')\n", 1),
    "a sys.stderr whose write raises": (
        "import sys\nclass W:\n    def write(self, text):\n        raise OSError('no')\n"
        "    def flush(self):\n        raise OSError('no')\nsys.stderr = W()\n"
        "raise RuntimeError('x')\n", 1),
    "closes descriptor 2, then raises": ("import os\nos.close(2)\nraise RuntimeError('x')\n", 1),
    "an exception whose str() raises": (
        "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\n"
        "raise E()\n", 1),
    "an exception whose str() raises SystemExit": (
        "class E(Exception):\n    def __str__(self):\n        raise SystemExit(5)\n"
        "raise E()\n", 1),
    "sys.exit of an object whose str() raises": (
        "import sys\nclass C:\n    def __str__(self):\n        raise RuntimeError('no')\n"
        "sys.exit(C())\n", 1),
    "a BaseException subclass": ("class B(BaseException):\n    pass\nraise B('odd')\n", 1),
    "replaces what the runner uses, then raises": (
        "import json, os, sys, time, traceback\njson.dumps = os.replace = None\n"
        "time.perf_counter = traceback.format_exception = None\nsys.path = None\n"
        "raise RuntimeError('x')\n", 1),
    "deletes the folder it runs in, then raises": (
        "import os\nos.mkdir('w')\nos.chdir('w')\nos.rmdir(os.path.join('..', 'w'))\n"
        "raise RuntimeError('gone')\n", 1),
}


def _run(tmp_path, body):
    script = tmp_path / "script.py"
    script.write_text(body)
    report = tmp_path / "report.json"
    proc = run_command([sys.executable, "-m", "mxmixed", "run", "--no-emulation", "--report",
                        str(report), "script.py"], cwd=str(tmp_path), capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    return proc, json.loads(report.read_text())


# The report's error line, where a script's own makes it hard to write.
ERRORS = {"an exception whose str() raises": "E: <str() failed>"}


@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_the_report_ends_and_no_runner_traceback_is_printed(tmp_path, kind):
    body, code = SCRIPTS[kind]
    proc, report = _run(tmp_path, body)
    assert proc.returncode == code, proc.stderr
    assert report["status"] == "finished", report
    assert report["exit_code"] == code, report
    assert "mxmixed" + os.sep not in proc.stderr and "_run.py" not in proc.stderr, proc.stderr
    frames = [line for line in proc.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert all("script.py" in line for line in frames), proc.stderr
    if kind in ERRORS:  # an error line is recorded even when str() fails
        assert report["error"] == ERRORS[kind], report


def test_a_report_whose_writer_the_script_broke_still_says_how_it_ended(tmp_path):
    _, report = _run(tmp_path, "import json\njson.JSONEncoder.encode = lambda self, o: 1 / 0\n"
                               "raise ValueError('late')\n")
    assert (report["status"], report["exit_code"], report["error"]) == (
        "finished", 1, "ValueError: late")
    assert "could not be written (ZeroDivisionError" in report["note"], report


def test_os_exit_ends_the_process_before_the_runner_can_write(tmp_path):
    """``os._exit`` cannot be caught: the report is left saying ``running``, as documented."""
    proc, report = _run(tmp_path, "import os\nos._exit(3)\n")
    assert proc.returncode == 3 and report["status"] == "running"
