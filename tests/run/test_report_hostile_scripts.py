"""``mxmixed run --report`` ends its report as ``finished`` or ``interrupted`` whatever the script
raises or closes, and never prints the runner's own traceback.

Scripts that closed or replaced ``sys.stderr``, raised an exception whose ``str()`` raises, or
replaced ``json.dumps`` once left the report saying ``running`` and printed a traceback from
``mxmixed/cli/_run.py``; the report is written with the standard library as it was before the
script. Each script runs in a process of its own, as ``python -m mxmixed run``:
one interpreter imports the runner and what it imports before a script (MXNet) once, then
forks a child per script, which runs ``mxmixed``'s ``__main__`` and ends as that interpreter
ends (its exit code, its exit handlers, the closing of its streams), without paying MXNet's
import again.
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


BROKEN_WRITER = ("import json\njson.JSONEncoder.encode = lambda self, o: 1 / 0\n"
                 "raise ValueError('late')\n")
EXITS = "import os\nos._exit(3)\n"

# Run by one interpreter: each job's child writes its stdout and stderr into its folder.
FORKS = r"""
import json, os, runpy, sys
# what the runner imports before it runs a script (MXNet among them); what it imports after
# (the picture's matplotlib) each child imports, as a fresh interpreter would
import mxmixed.cli._run, mxmixed.diagnostics.steps, mxmixed.training  # noqa: F401
codes = []
for folder in json.loads(sys.argv[1]):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child leaves this loop as `python -m mxmixed run` ends: SystemExit
        os.chdir(folder)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            opened = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = ["mxmixed", "run", "--no-emulation", "--report",
                    os.path.join(folder, "report.json"), "script.py"]
        runpy.run_module("mxmixed", run_name="__main__", alter_sys=True)
        raise SystemExit(0)  # __main__ always exits; never let a child fork the next job
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs[body]``: (exit code, stderr, report) of every script of this file."""
    bodies = [body for body, _ in SCRIPTS.values()] + [BROKEN_WRITER, EXITS]
    folders = [tmp_path_factory.mktemp("script") for _ in bodies]
    for body, folder in zip(bodies, folders):
        (folder / "script.py").write_text(body)
    proc = run_command([sys.executable, "-c", FORKS, json.dumps([str(f) for f in folders])],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.splitlines()[-1])
    return {body: (code, (folder / "stderr").read_text(),
                   json.loads((folder / "report.json").read_text()))
            for body, code, folder in zip(bodies, codes, folders)}


# The report's error line, where a script's own makes it hard to write.
ERRORS = {"an exception whose str() raises": "E: <str() failed>"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_the_report_ends_and_no_runner_traceback_is_printed(runs, kind):
    body, code = SCRIPTS[kind]
    returncode, stderr, report = runs[body]
    assert returncode == code, stderr
    assert report["status"] == "finished", report
    assert report["exit_code"] == code, report
    assert "mxmixed" + os.sep not in stderr and "_run.py" not in stderr, stderr
    frames = [line for line in stderr.splitlines() if line.lstrip().startswith("File ")]
    assert all("script.py" in line for line in frames), stderr
    if kind in ERRORS:  # an error line is recorded even when str() fails
        assert report["error"] == ERRORS[kind], report


@pytest.mark.slow
def test_a_report_whose_json_encoder_the_script_broke_is_written_whole(runs):
    _, stderr, report = runs[BROKEN_WRITER]
    assert (report["status"], report["exit_code"], report["error"]) == (
        "finished", 1, "ValueError: late")
    assert "steps" in report and "summary" in report, report
    assert "cannot write it" not in stderr, stderr


@pytest.mark.slow
def test_os_exit_ends_the_process_before_the_runner_can_write(runs):
    """``os._exit`` cannot be caught: the report is left saying ``running``, as documented."""
    returncode, _, report = runs[EXITS]
    assert returncode == 3 and report["status"] == "running"
