"""Writes survive signals, races, full disks and special files (fault injection).

At every dangerous point of a write (just after each rename, an error raised just after a
rename) the target holds the earlier file(s) or the new one(s), whole: never neither, never a
mixed pair. Two writers to the same prefix end with one writer's complete pair. A full disk is
one line (``OSError`` / exit 3), and a link, a device or a FIFO at the target is left as it is.
"""
import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap

import mxnet as mx
import pytest
from mxnet import gluon

from conftest import ROOT, communicate, run_command
from mxmixed import checkpoint, symbolic
from mxmixed._files import atomic
from mxmixed.cli import main
from mxmixed.cli._run import run_script


def _model(hidden):
    """A pair whose symbol and params agree only with each other: FC with ``hidden`` units."""
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(data, num_hidden=hidden, name="fc")
    return sym, {"fc_weight": mx.nd.full((hidden, 4), hidden),
                 "fc_bias": mx.nd.zeros((hidden,))}, {}


def _pair_hidden(prefix):
    """The ``hidden`` of the pair at ``prefix``; fails on a mixed pair (they do not match)."""
    sym, arg_params, _ = symbolic.load_checkpoint(prefix, 0)
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    hidden = [n for n in nodes if n["op"] == "FullyConnected"][0]["attrs"]["num_hidden"]
    assert arg_params["fc_weight"].shape[0] == int(hidden)
    return int(hidden)


def _net(value):
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    net.weight.set_data(mx.nd.full((2, 3), value))
    return net


def _ckpt_value(path):
    net = _net(0)
    checkpoint.load(path, net)
    values = set(net.weight.data().asnumpy().ravel().tolist())
    assert len(values) == 1
    return values.pop()


def _listing(folder):
    return sorted(os.listdir(folder))


@contextlib.contextmanager
def _after_rename(n, action):
    """Run ``action`` just after the n-th ``os.replace`` (1-based) has renamed its file."""
    real, calls = os.replace, []

    def replace(src, dst):
        real(src, dst)
        calls.append(dst)
        if len(calls) == n:
            action()

    os.replace = replace
    try:
        yield calls
    finally:
        os.replace = real


def _sigint():
    os.kill(os.getpid(), signal.SIGINT)


def _error():
    raise OSError(5, "Input/output error")


# ----------------------------------------------------------------------------- signals, in process
@pytest.mark.parametrize("rename", [1, 2])
def test_sigint_just_after_a_rename_of_a_pair_leaves_the_new_pair_whole(tmp_path, rename):
    prefix = str(tmp_path / "m")
    symbolic.save_checkpoint(prefix, 0, *_model(3))
    with _after_rename(rename, _sigint) as calls:
        with pytest.raises(KeyboardInterrupt):  # delivered once both renames are done
            symbolic.save_checkpoint(prefix, 0, *_model(5))
    assert len(calls) == 2
    assert _pair_hidden(prefix) == 5
    assert _listing(tmp_path) == ["m-0000.params", "m-symbol.json"]


def test_sigint_just_after_the_rename_of_a_checkpoint_keeps_the_new_one(tmp_path):
    path = tmp_path / "c.mxc"
    checkpoint.save(path, _net(1.0))
    with _after_rename(1, _sigint):
        with pytest.raises(KeyboardInterrupt):
            checkpoint.save(path, _net(2.0))
    assert _ckpt_value(path) == 2.0  # before: removed by the rollback, neither file was left
    assert _listing(tmp_path) == ["c.mxc"]


@pytest.mark.parametrize("rename", [1, 2])
def test_an_error_just_after_a_rename_of_a_pair_restores_the_earlier_pair(tmp_path, rename):
    # CPython raises a pending signal right after a C call returns: the rename has happened
    # but was never recorded. The rollback reads what was renamed from the disk.
    prefix = str(tmp_path / "m")
    symbolic.save_checkpoint(prefix, 0, *_model(3))
    with _after_rename(rename, _error):
        with pytest.raises(OSError, match="Input/output error"):
            symbolic.save_checkpoint(prefix, 0, *_model(5))
    assert _pair_hidden(prefix) == 3
    assert _listing(tmp_path) == ["m-0000.params", "m-symbol.json"]


def test_an_error_just_after_the_rename_of_a_single_file_keeps_the_new_file(tmp_path):
    path = tmp_path / "c.mxc"
    checkpoint.save(path, _net(1.0))
    with _after_rename(1, _error):
        with pytest.raises(OSError):
            checkpoint.save(path, _net(2.0))
    assert _ckpt_value(path) == 2.0
    assert _listing(tmp_path) == ["c.mxc"]


# ----------------------------------------------------------------------------- SIGTERM, processes
SIGTERM_AFTER_RENAME = """
import os, signal, sys
real, calls = os.replace, []
def replace(src, dst):
    real(src, dst)
    calls.append(dst)
    if len(calls) == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGTERM)
os.replace = replace
"""


def _python(code, *args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return run_command([sys.executable, "-c", code] + [str(a) for a in args],
                       capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("rename", [1, 2])
def test_sigterm_just_after_a_rename_of_convert_leaves_one_whole_pair(tmp_path, rename):
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, *_model(5))
    out = str(tmp_path / "o16")
    symbolic.save_checkpoint(out, 0, *_model(3))  # an earlier converted pair
    proc = _python(SIGTERM_AFTER_RENAME + textwrap.dedent("""
        from mxmixed.cli import main
        sys.exit(main(["convert", sys.argv[2], "0", "--out", sys.argv[3]]))
    """), rename, prefix, out)
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-2000:]
    assert _pair_hidden(out) == 5
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


@pytest.mark.slow
def test_sigterm_just_after_the_rename_of_a_checkpoint_keeps_the_new_one(tmp_path):
    path = tmp_path / "c.mxc"
    checkpoint.save(path, _net(1.0))
    proc = _python(SIGTERM_AFTER_RENAME + textwrap.dedent("""
        import mxnet as mx
        from mxnet import gluon
        from mxmixed import checkpoint
        net = gluon.nn.Dense(2, in_units=3)
        net.initialize(mx.init.Constant(2.0))
        checkpoint.save(sys.argv[2], net)
        print("NOT ENDED")
    """), 1, path)
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-2000:]
    assert "NOT ENDED" not in proc.stdout
    assert _ckpt_value(path) == 2.0
    assert _listing(tmp_path) == ["c.mxc"]


@pytest.mark.slow
def test_sigterm_just_after_the_rename_of_the_final_report_keeps_it_whole(tmp_path):
    report = tmp_path / "r.json"
    report.write_text('{"an earlier run": true}')
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    # rename 1 is the report marked "running", rename 2 the final report
    proc = _python(SIGTERM_AFTER_RENAME + textwrap.dedent("""
        from mxmixed.cli import main
        sys.exit(main(["run", "--report", sys.argv[2], sys.argv[3]]))
    """), 2, report, script)
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["status"] == "finished" and data["exit_code"] == 0
    assert _listing(tmp_path) == ["r.json", "s.py"]


# ----------------------------------------------------------------------------- races
RACING_WRITER = """
import os, sys, time
import mxnet as mx
from mxmixed import symbolic
hidden, prefix, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
data = mx.sym.var("data")
sym = mx.sym.FullyConnected(data, num_hidden=hidden, name="fc")
params = {"fc_weight": mx.nd.full((hidden, 4), hidden), "fc_bias": mx.nd.zeros((hidden,))}
real, calls = os.replace, []
def replace(src, dst):  # a writer that says so, then waits, between its two renames
    real(src, dst)
    calls.append(dst)
    if len(calls) == 1:
        print("renamed", flush=True)
        time.sleep(delay)
os.replace = replace
print("ready", flush=True)
sys.stdin.readline()  # go
symbolic.save_checkpoint(prefix, 0, sym, params, {})
"""


def _racing_writer(hidden, prefix, delay, env):
    proc = subprocess.Popen([sys.executable, "-c", RACING_WRITER, str(hidden), prefix, str(delay)],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n", communicate(proc)[1][-2000:]
    return proc


@pytest.mark.slow
def test_two_writers_to_one_prefix_end_with_one_whole_pair(tmp_path):
    # the first writer renames its symbol file, then waits 1 s; the second, told to go when
    # the first has renamed, renames both of its files at once. Unserialized, the pair ends up
    # mixed (the second's symbol file, the first's params).
    prefix = str(tmp_path / "o16")
    env = dict(os.environ, PYTHONPATH=ROOT)
    for attempt in range(2):
        first, second = (_racing_writer(hidden, prefix, delay, env)
                         for hidden, delay in ((3, 1.0), (5, 0.0)))
        first.stdin.write("go\n")
        first.stdin.flush()
        assert first.stdout.readline() == "renamed\n", communicate(first)[1][-2000:]
        second.stdin.write("go\n")
        second.stdin.flush()
        for proc in (first, second):
            _, err = communicate(proc)
            assert proc.returncode == 0, err[-2000:]
        assert _pair_hidden(prefix) in (3, 5)  # a mixed pair fails to load
        assert _listing(tmp_path) == ["o16-0000.params", "o16-symbol.json"]


# ----------------------------------------------------------------------------- special files
def _special_targets(tmp_path):
    """A FIFO, a symbolic link and, where mknod is allowed, a null device of our own."""
    targets = {}
    os.mkfifo(tmp_path / "fifo")
    targets["a FIFO (named pipe)"] = tmp_path / "fifo"
    (tmp_path / "real.json").write_text("kept")
    os.symlink(tmp_path / "real.json", tmp_path / "link")
    targets["a symbolic link"] = tmp_path / "link"
    with contextlib.suppress(OSError):
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        targets["a character device"] = tmp_path / "null"
    return targets


def _unchanged(path, kind):
    mode = os.lstat(path).st_mode
    test = {"a FIFO (named pipe)": stat.S_ISFIFO, "a symbolic link": stat.S_ISLNK,
            "a character device": stat.S_ISCHR}[kind]
    assert test(mode), (path, kind)
    assert (path.parent / "real.json").read_text() == "kept"


def test_a_report_onto_a_link_a_fifo_or_a_device_exits_2_and_leaves_it(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("open(%r, 'w').close()\n" % str(tmp_path / "ran"))
    for kind, target in _special_targets(tmp_path).items():
        assert run_script(str(script), [], report=str(target)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is %s, not a regular file" % kind in err
        _unchanged(target, kind)
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_onto_a_link_a_fifo_or_a_device_is_refused_and_left(tmp_path):
    for kind, target in _special_targets(tmp_path).items():
        with pytest.raises(OSError, match=re.escape("it is %s, not a regular file" % kind)):
            checkpoint.save(target, _net(1.0))
        _unchanged(target, kind)
        with pytest.raises(atomic.NotRegularFileError):
            atomic.atomic_write(str(target), b"x")
        _unchanged(target, kind)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_convert_onto_a_link_or_a_device_exits_2_and_leaves_it(tmp_path, capsys):
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, *_model(3))
    for kind, target in _special_targets(tmp_path).items():
        out = str(tmp_path / ("o-" + target.name))
        os.rename(target, out + "-symbol.json")
        assert main(["convert", prefix, "0", "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is %s, not a regular file" % kind in err
        _unchanged(tmp_path / (os.path.basename(out) + "-symbol.json"), kind)
        assert not os.path.exists(out + "-0000.params")
        with pytest.raises(atomic.NotRegularFileError):
            symbolic.save_checkpoint(out, 0, *_model(3))
        assert not os.path.exists(out + "-0000.params")


# ----------------------------------------------------------------------------- run and SIGTERM
def _start_run(tmp_path, report):
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "mxmixed", "run", "--report", str(report),
                             str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started"
    return proc


@pytest.mark.slow
def test_run_on_sigterm_writes_a_partial_report_and_exits_143(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"status": "finished", "exit_code": 0}))  # an earlier run
    proc = _start_run(tmp_path, report)
    assert json.loads(report.read_text())["status"] == "running"
    proc.send_signal(signal.SIGTERM)
    communicate(proc)
    assert proc.returncode == 143
    data = json.loads(report.read_text())
    assert (data["status"], data["exit_code"], data["error"]) == ("interrupted", 143, "SIGTERM")
    assert data["pid"] == proc.pid and len(data["run_id"]) == 16


@pytest.mark.slow
def test_a_killed_run_leaves_a_report_marked_running_not_the_earlier_one(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"status": "finished", "exit_code": 0}))
    proc = _start_run(tmp_path, report)
    proc.kill()
    communicate(proc)
    data = json.loads(report.read_text())
    assert data["status"] == "running" and data["pid"] == proc.pid
    assert "exit_code" not in data


# ----------------------------------------------------------------------------- full disk
@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (needs root and mount); skipped where it cannot be mounted."""
    folder = tmp_path / "disk"
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here: %s" % proc.stderr.strip()[:200])
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def _fill(folder, leave):
    """Fill ``folder``'s filesystem until about ``leave`` bytes are free."""
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    (folder / "fill").write_bytes(bytes(max(0, free - leave)))


def test_a_full_disk_fails_checkpoint_save_in_one_line_and_keeps_the_earlier(small_disk):
    path = small_disk / "c.mxc"
    checkpoint.save(path, _net(1.0))
    before = path.read_bytes()
    _fill(small_disk, 8 << 10)
    big = gluon.nn.Dense(200, in_units=100)
    big.initialize()
    with pytest.raises(OSError) as info:
        checkpoint.save(path, big)
    assert str(info.value) == "[Errno 28] No space left on device: %r" % str(path)
    assert path.read_bytes() == before
    assert _listing(small_disk) == ["c.mxc", "fill"]


def test_a_full_disk_fails_convert_with_exit_3_and_one_line(small_disk, tmp_path, capsys):
    prefix = str(tmp_path / "m")
    mx.model.save_checkpoint(prefix, 0, *_model(300))  # 300 x 4 weights: about 5 KB
    _fill(small_disk, 4 << 10)
    assert main(["convert", prefix, "0", "--out", str(small_disk / "o16")]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert _listing(small_disk) == ["fill"]


def test_a_report_that_does_not_fit_keeps_the_scripts_exit_code(small_disk, tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import sys
        import mxnet as mx
        from mxnet import autograd, gluon
        net = gluon.nn.Dense(2, in_units=3)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        for _ in range(300):  # about 150 bytes of report per step
            with autograd.record():
                loss = net(mx.nd.ones((4, 3))).sum()
            loss.backward()
            trainer.step(4)
        sys.exit(7)
    """))
    _fill(small_disk, 16 << 10)  # room for the report marked "running", not for the final one
    report = small_disk / "r.json"
    assert run_script(str(script), [], report=str(report)) == 7
    closing, error = capsys.readouterr().err.splitlines()  # the float32 line, then the error
    assert closing.startswith("mxmixed run: 300 optimizer steps, all in float32")
    assert error.startswith("mxmixed run: error: --report %s: cannot write it: No space left"
                            % report)
    short = json.loads(report.read_text())  # the short report of how it ended fits
    assert (short["status"], short["exit_code"]) == ("finished", 7)
    assert "could not be written (OSError" in short["note"]
    assert _listing(small_disk) == ["fill", "r.json"]
