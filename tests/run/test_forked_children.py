"""``mxmixed run`` and forked children: DataLoader workers and ``multiprocessing`` pools die on
SIGTERM as under plain python (no runner traceback from them, no parent waiting forever in
``Pool.terminate``), and an outside SIGTERM ends the whole run with its one-line report."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import HANG_S, communicate, run_command, run_python, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Three DataLoaders with four workers each (GluonNLP's scripts hard-code num_workers=4), each
# dropped while its workers are alive, and a pool used and terminated by its ``with``.
WORKERS_AND_POOL = """
    import multiprocessing
    import mxnet as mx
    from mxnet import gluon

    def square(x):
        return x * x

    data = gluon.data.ArrayDataset(mx.nd.arange(64).reshape((32, 2)), mx.nd.arange(32))
    for _ in range(3):
        loader = gluon.data.DataLoader(data, batch_size=8, num_workers=4)
        total = sum(float(x.sum().asscalar()) for x, y in loader)
    with multiprocessing.Pool(2) as pool:
        squares = sum(pool.map(square, range(10)))
    print("done", total, squares)
"""

# Workers busy in a slow dataset and an idle pool, when SIGTERM arrives from outside.
BUSY_WORKERS = """
    import multiprocessing, sys, time
    import mxnet as mx
    from mxnet import gluon

    class Slow(gluon.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            if i >= 8:
                time.sleep(float(sys.argv[2]))
            return mx.nd.array([i])

    loader = gluon.data.DataLoader(Slow(), batch_size=8, num_workers=4)
    pool = multiprocessing.Pool(2)
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(str(p.pid) for p in multiprocessing.active_children()))
    for n, x in enumerate(loader):
        if n == 0:
            print("started", flush=True)
"""


def _script(tmp_path, body, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _env():
    return dict(os.environ, PYTHONPATH=ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(5))
def test_dataloader_workers_and_a_pool_end_quietly_and_the_run_exits_0(tmp_path, attempt):
    script = _script(tmp_path, WORKERS_AND_POOL)
    # a hang is what this test looks for: run_command's HANG_S bound fails it, naming the run
    proc = run_command([sys.executable, "-m", "mxmixed.run", script], env=_env(),
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done 2016.0 285" in proc.stdout
    assert "ScriptTerminated" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_outside_sigterm_ends_the_run_its_workers_and_pool_with_one_line(tmp_path):
    pids, report = tmp_path / "pids", tmp_path / "r.json"
    script = _script(tmp_path, BUSY_WORKERS)
    proc = subprocess.Popen([sys.executable, "-m", "mxmixed.run", "--report", str(report),
                             script, str(pids), "5"], env=_env(), cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    started = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGTERM)
    out, err = communicate(proc)  # a run that does not end on SIGTERM fails here, named
    assert started == "started", err[-3000:]
    assert proc.returncode == 143, err[-3000:]
    assert "ScriptTerminated" not in err and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("mxmixed run:")]
    assert lines == ["mxmixed run: the script was interrupted (SIGTERM), exit 143; "
                     "the report says so: %s" % report]
    data = json.loads(report.read_text())
    assert (data["status"], data["exit_code"], data["error"]) == ("interrupted", 143, "SIGTERM")
    children = pids.read_text().split()
    assert len(children) == 6
    alive = [pid for pid in children if _running(int(pid))]
    assert not alive, "workers left running: %s" % alive


def _running(pid):
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_workers_do_not_outlive_a_run_killed_outright(tmp_path):
    pids = tmp_path / "pids"
    script = _script(tmp_path, BUSY_WORKERS)
    # the workers sleep longer than the wait below may last: only the run's death can end them
    proc = subprocess.Popen([sys.executable, "-m", "mxmixed.run", script, str(pids),
                             str(2 * HANG_S)], env=_env(), cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "started"
    finally:
        proc.kill()  # SIGKILL: no handler, no clean-up in the run's process
        communicate(proc)
    children = [int(pid) for pid in pids.read_text().split()]
    assert len(children) == 6
    try:
        wait_for(lambda: not any(_running(pid) for pid in children),
                 "the workers of a killed run to end (pids %s)" % children)
    finally:  # clean up before failing
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


# The child waits in a fork hook registered before the runner's until the parent has sent it
# SIGTERM, so the signal lands where a pool's terminate can land it: after the fork, before the
# child has put SIGTERM's default back. Delivered then to the runner's handler, it was lost.
SIGTERM_IN_THE_FORK_WINDOW = """
import os, signal
from mxmixed._files.signals import sigterm_raises

go_r, go_w = os.pipe()
os.register_at_fork(after_in_child=lambda: os.read(go_r, 1))
with sigterm_raises(RuntimeError):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.kill(pid, signal.SIGTERM)
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
print("killed by", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
      "exit", os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)
"""


def test_sigterm_sent_to_a_child_before_it_resets_the_handler_still_kills_it():
    proc = run_python(SIGTERM_IN_THE_FORK_WINDOW)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["killed", "by", str(int(signal.SIGTERM)), "exit", "None"], \
        proc.stdout + proc.stderr[-3000:]
