"""Shared fixtures: every test starts and ends with emulation off and seeded generators."""
import atexit
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# One temporary folder per session holds everything the suite writes: pytest's tmp_path, the
# folders the notebooks and the docs' examples make with tempfile (their kernels and
# subprocesses inherit TMPDIR), and the emulation's rounding library: copied from the user's
# cache where `make` built it (_seed_rounding_library), else compiled on first use. Under
# pytest-xdist the controller loads this file first and its workers inherit the folder, so the
# library is built at most once per session (the build holds a lock; see _round16). The process
# that made the folder removes it when it exits, after its workers and their subprocesses. Its
# name leaves out "mxmixed": tests check that tracebacks do not show the package.
if not os.environ.get("MXMIXED_TEST_TMP"):
    os.environ["MXMIXED_TEST_TMP"] = tempfile.mkdtemp(prefix="suite-tmp-")
    atexit.register(shutil.rmtree, os.environ["MXMIXED_TEST_TMP"], ignore_errors=True)
    os.environ["TMPDIR"] = os.environ["MXMIXED_TEST_TMP"]
    tempfile.tempdir = None  # tempfile reads TMPDIR again
# Under pytest-xdist (pytest.ini: one worker per core) each worker's MXNet, and every
# subprocess or notebook kernel it starts, gets its share of the cores (one thread on a
# 2-core machine), so that the workers do not oversubscribe the machine. Set before MXNet is
# imported: it reads the variable once. An OMP_NUM_THREADS already set is kept.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(
        1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import mxnet as mx  # noqa: E402

from mxmixed._core.env import cache_dir  # noqa: E402


def _seed_rounding_library(built, cache):
    """Copy the rounding libraries in ``built`` (``make`` builds one into the user's cache)
    into the session's ``cache``, so that the session compiles none it already has (about 20
    CPU seconds, which every emulated test would wait for). Only regular files of this user
    that others cannot write are copied; the emulation checks each library's recorded size
    and sha256 before loading it, and builds the ones missing."""
    for name in sorted(os.listdir(built)) if os.path.isdir(built) else ():
        path = os.path.join(built, name)
        info = os.lstat(path)
        if name.startswith("round16-") and stat.S_ISREG(info.st_mode) \
                and info.st_uid == os.geteuid() and not info.st_mode & 0o022:
            shutil.copy2(path, os.path.join(cache, name))


if not os.environ.get("MXMIXED_CACHE_DIR"):
    _built = cache_dir()
    os.environ["MXMIXED_CACHE_DIR"] = tempfile.mkdtemp(prefix="mxmixed-cache-")
    _seed_rounding_library(_built, os.environ["MXMIXED_CACHE_DIR"])

from mxmixed import emulation  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _clean_emulation_state():
    emulation.disable()
    mx.random.seed(0)
    np.random.seed(0)
    yield
    emulation.disable()


# No test asserts on wall-clock time: a hang is caught by a bound many times what the work takes
# on a loaded 2-core machine, and the failure names what hung. HANG_S bounds one subprocess or
# one wait (run_command, communicate, wait_for); pytest.ini's `timeout` (pytest-timeout, 1200 s)
# bounds a whole test and names it. Subprocesses inherit the caller's OMP_NUM_THREADS.
HANG_S = 900


def _kill_group(proc):
    """SIGKILL ``proc``'s process group (it leads one: ``start_new_session``), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _hung(command, timeout):
    words = command if isinstance(command, str) else " ".join(str(w) for w in command)
    pytest.fail("still running after %d s, taken for a hang (its process group was killed): %s"
                % (timeout, words[:300]), pytrace=False)


def communicate(proc, input=None, timeout=HANG_S):
    """``proc.communicate(input)``, bounded by ``timeout`` seconds; past it, the process (its
    group, where it leads one) is killed and the test fails, naming the command."""
    try:
        return proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _hung(proc.args, timeout)


def run_command(command, timeout=HANG_S, input=None, capture_output=False, check=False,
                **kwargs):
    """``subprocess.run(command, ...)`` in a session of its own, bounded by ``timeout`` seconds:
    past it, or when the test is interrupted, its whole process group is killed; past it, the
    test fails naming the command. Returns the CompletedProcess (``check``: raises
    CalledProcessError on a non-zero exit, as ``subprocess.run`` does)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with subprocess.Popen(command, start_new_session=True, **kwargs) as proc:
        try:
            out, err = communicate(proc, input, timeout)
        except BaseException:
            if proc.poll() is None:
                _kill_group(proc)
            raise
    done = subprocess.CompletedProcess(command, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def wait_for(condition, what, timeout=HANG_S, poll=0.05):
    """Poll ``condition()`` until it is true; fail naming ``what`` if it is still false after
    ``timeout`` seconds (a hang, not a speed limit)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("waited %d s for %s, taken for a hang" % (timeout, what), pytrace=False)
        time.sleep(poll)


def run_python(code, env=None):
    """Run Python code in a fresh interpreter (for AMP, whose patches cannot be undone), bounded
    as :func:`run_command` bounds it.

    Returns the CompletedProcess; stdout and stderr are text.
    """
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return run_command([sys.executable, "-c", code], capture_output=True, text=True,
                       env=full_env, cwd=ROOT)


def dense_and_trainer(optimizer="sgd", **optimizer_params):
    """A seeded ``Dense(3, in_units=4)`` and its Trainer (learning rate 0.1 unless given,
    ``update_on_kvstore=False``): the smallest net the checkpoint tests save and load."""
    from mxnet import gluon
    mx.random.seed(0)
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), optimizer,
                            dict({"learning_rate": 0.1}, **optimizer_params),
                            update_on_kvstore=False)
    return net, trainer


def dense_step(net, trainer):
    """One training step of :func:`dense_and_trainer`'s net on a fixed batch of 2."""
    from mxnet import autograd
    with autograd.record():
        loss = (net(mx.nd.arange(8).reshape((2, 4)) / 8) ** 2).sum()
    loss.backward()
    trainer.step(2)
    mx.nd.waitall()


@pytest.fixture
def digits_pair(tmp_path):
    """The prefix of an exported digits CNN checkpoint (epoch 0), in ``tmp_path / 'in'``."""
    from mxmixed.tutorial import digits_cnn
    net = digits_cnn(seed=1, prefix="digits_")
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    folder = tmp_path / "in"
    folder.mkdir()
    net.export(str(folder / "model"))
    return str(folder / "model")


def run_convert(argv, capsys):
    """``mxmixed convert ARGV`` in this process: (exit code, stdout, stderr)."""
    from mxmixed import cli
    code = cli.main(["convert"] + argv)
    out, err = capsys.readouterr()
    return code, out, err


# The files that take longest, longest first: about 140 s for the loss-scaling notebook, 100-120
# for the dist_sync launches and the rounding library's own tests, 40-70 for the rest (the sums of
# their tests' durations in a whole-suite run on two workers of a 2-core Xeon at load 3-4,
# 2026-11-27, less what was cut since). Under pytest-xdist they are handed out first, then the
# notebooks, then the rest, so that the workers finish together (--dist loadfile hands out whole
# files in collection order).
LONGEST_FIRST = (
    "tutorials/06_loss_scaling_experiment.ipynb", "tests/distributed/test_dist_sync_launch.py",
    "tests/emulation/test_round16_library.py", "tests/emulation/test_bits.py",
    "tests/project/test_docs_code_blocks.py", "tests/distributed/test_horovod_launch.py",
    "tests/run/test_real_clients.py", "tests/files/test_atomic_write_faults.py",
    "tests/project/test_docs_site.py", "tests/emulation/test_round16.py",
    "tests/run/test_runner.py", "tests/files/test_untrusted_graphs.py",
    "tests/run/test_forked_children.py",
)


def _run_order(item):
    rel = os.path.relpath(str(item.path), ROOT).replace(os.sep, "/")
    if rel in LONGEST_FIRST:
        return LONGEST_FIRST.index(rel)
    return len(LONGEST_FIRST) + (0 if rel.startswith("tutorials/") else 1)


def pytest_collection_modifyitems(config, items):
    """The tutorial notebooks (nbval's cells) are slow: they train models end to end. Under
    pytest-xdist, the longest files run first (a stable sort: each file keeps its order)."""
    tutorials = os.path.join(ROOT, "tutorials")
    for item in items:
        if str(item.path).startswith(tutorials + os.sep):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_run_order)


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if anything in it replaced /dev/null (a root process can: MXNet's
    profiler once re-created its output file there)."""
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        sys.stderr.write("\nFAILED: %s is no longer a character device at the end of the "
                         "session; a test or a benchmark wrote over it\n" % os.devnull)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
