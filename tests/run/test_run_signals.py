"""``mxmixed run`` and signals, as under plain python: a script's own signal mask survives its
forks; SIGTERM ends the run within about a second whatever threads the script left at work (the
report says which); helpers a script starts to outlive it live on after a normal end; and a
script that replaces ``signal``'s functions gets no traceback of the runner's.

Processes are signalled and waited for with conftest's bounds (``HANG_S``, ``wait_for``): a run
that does not end fails its test naming what hung; nothing is timed."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import HANG_S, communicate, run_command, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script(tmp_path, body, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _env():
    return dict(os.environ, PYTHONPATH=ROOT)


def _run(tmp_path, args):
    return run_command([sys.executable, "-m", "mxmixed.run"] + [str(a) for a in args],
                       capture_output=True, text=True, env=_env(), cwd=str(tmp_path))


# The script blocks SIGTERM, forks, and SIGTERM is sent to the child while it is blocked there:
# the child must still have it blocked and pending (the runner's fork hook unblocked it, and
# the SIGTERM killed the child), and the parent keeps its mask too.
BLOCKED_ACROSS_A_FORK = """
    import os, signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(go_r, 1)  # SIGTERM has been sent by now
        blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        pending = signal.SIGTERM in signal.sigpending()
        os._exit(10 * blocked + pending)
    os.kill(pid, signal.SIGTERM)
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    print("child", "exit" if os.WIFEXITED(status) else "killed by",
          os.WEXITSTATUS(status) if os.WIFEXITED(status) else os.WTERMSIG(status))
    print("parent blocked", signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []))
"""


def test_a_script_that_blocks_sigterm_across_a_fork_keeps_its_mask_and_the_held_signal(
        tmp_path):
    script = _script(tmp_path, BLOCKED_ACROSS_A_FORK)
    plain = run_command([sys.executable, script], capture_output=True, text=True)
    proc = _run(tmp_path, [script])
    assert proc.returncode == plain.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == plain.stdout.splitlines() == [
        "child exit 11", "parent blocked True"]


# Each case leaves something at work that python's exit would wait for, far longer than any
# bound of the test: a non-daemon thread, an executor's work (its `with` waits for it on the
# way out), a `finally` that takes its time.
AT_WORK = {
    "thread": """
        import sys, threading, time
        threading.Thread(target=time.sleep, args=(%(long)d,), name="worker").start()
        print("started", flush=True)
        time.sleep(%(long)d)
    """,
    "executor": """
        import concurrent.futures, time
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="pool") as ex:
            ex.submit(time.sleep, %(long)d)
            print("started", flush=True)
    """,
    "slow finally": """
        import time
        try:
            print("started", flush=True)
            time.sleep(%(long)d)
        finally:
            time.sleep(%(long)d)
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("case, unfinished", [
    ("thread", "with threads at work (worker)"),
    ("executor", "with threads at work (pool_0)"),
    ("slow finally", "the script had not ended 1 s after it; the run ended without waiting"),
])
def test_sigterm_ends_the_run_whatever_the_script_left_at_work(tmp_path, case, unfinished):
    script = _script(tmp_path, AT_WORK[case] % {"long": 4 * HANG_S})
    report = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "mxmixed.run", "--report", str(report),
                             script], env=_env(), cwd=str(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    started = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGTERM)
    out, err = communicate(proc)  # a run that waits for the work fails here, named
    assert started == "started", err[-3000:]
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("mxmixed run:")] == [
        "mxmixed run: the script was interrupted (SIGTERM), exit 143; the report says so: %s"
        % report]
    data = json.loads(report.read_text())
    assert (data["status"], data["exit_code"], data["error"]) == ("interrupted", 143, "SIGTERM")
    assert unfinished in data["unfinished"]


# Helpers started to outlive the script, each in its own way; each waits until the test says
# go (after the run has ended) and then writes its name into the folder.
HELPERS = """
    import multiprocessing, os, subprocess, sys, time
    out = sys.argv[1]

    def helper(name):
        while not os.path.exists(os.path.join(out, "go")):
            time.sleep(0.05)
        open(os.path.join(out, name), "w").close()

    if __name__ == "__main__":
        if os.fork() == 0:
            helper("fork")
            os._exit(0)
        for method in ("fork", "spawn"):
            process = multiprocessing.get_context(method).Process(target=helper,
                                                                  args=("mp-" + method,))
            process.start()
            multiprocessing.process._children.discard(process)  # detached: not joined
        subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, %r); "
                          "import helpers; helpers.helper('popen-setsid')" % os.path.dirname(
                              os.path.abspath(__file__)), out], preexec_fn=os.setsid)
        print("started", flush=True)
"""


@pytest.mark.slow
def test_helpers_a_script_starts_to_outlive_it_live_on_after_the_run_ends(tmp_path):
    script = _script(tmp_path, HELPERS, name="helpers.py")
    out = tmp_path / "out"
    out.mkdir()
    # files, not pipes: the helpers hold the run's stdout and stderr open after it ends
    with open(str(tmp_path / "stdout"), "w") as stdout, \
            open(str(tmp_path / "stderr"), "w") as stderr:
        proc = run_command([sys.executable, "-m", "mxmixed.run", script, str(out)],
                           stdout=stdout, stderr=stderr, env=_env(), cwd=str(tmp_path))
    err = (tmp_path / "stderr").read_text()
    assert proc.returncode == 0 and (tmp_path / "stdout").read_text() == "started\n", err
    (out / "go").write_text("")
    names = {"fork", "mp-fork", "mp-spawn", "popen-setsid"}
    wait_for(lambda: names <= set(os.listdir(str(out))),
             "the helpers to write their names (have: %s)" % sorted(os.listdir(str(out))))


# The script replaces the functions of `signal` (and of `os`) that the runner's fork hooks and
# handlers call, then forks and ends normally: no traceback of the runner's (its fork hooks,
# its handler's restoring, the report's atomic writer) and a finished report.
REPLACED = """
    import os, signal

    def broken(*args, **kwargs):
        raise RuntimeError("the script's own replacement")

    for name in ("signal", "getsignal", "pthread_sigmask", "raise_signal", "sigpending"):
        setattr(signal, name, broken)
    fork, waitpid, exit_now = os.fork, os.waitpid, os._exit
    for name in ("getpid", "getppid", "kill"):
        setattr(os, name, broken)
    pid = fork()
    if pid == 0:
        exit_now(7)
    _, status = waitpid(pid, 0)
    print("child", os.WEXITSTATUS(status))
"""


def test_a_script_that_replaces_signal_functions_gets_no_runner_traceback(tmp_path):
    script = _script(tmp_path, REPLACED)
    report = tmp_path / "r.json"
    proc = _run(tmp_path, ["--report", report, script])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["child", "7"]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, \
        proc.stderr[-3000:]
    assert json.loads(report.read_text())["status"] == "finished"
