"""A checkpoint save that is killed leaves no litter that the next save does not sweep.

SIGKILL cannot be caught: it may leave a ``.<name>.<pid>.<tag>.tmp`` beside the checkpoint,
which the next :func:`mxmixed.checkpoint.save` to the same path removes (its pid is dead).
SIGTERM is handled like SIGINT: the save is abandoned, its temporary files are removed, and
the process then ends by SIGTERM as it would have. Nothing is ever written under ``/tmp``.
"""
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from conftest import ROOT, communicate
from mxmixed import checkpoint
from mxmixed._files import atomic

SAVING_LOOP = """
import sys
import mxnet as mx
from mxnet import gluon
from mxmixed import checkpoint

path = sys.argv[1]
mx.random.seed(0)
net = gluon.nn.Dense(1024, in_units=2048)  # 8 MB of weights: a save takes a while
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"momentum": 0.9},
                        update_on_kvstore=False)
checkpoint.save(path, net, trainer, extra=0)
print("READY", flush=True)
if sys.argv[2:] == ["kill-in-fsync"]:  # the archive is written, not yet renamed: die there
    import os, signal
    os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
step = 1
while True:
    checkpoint.save(path, net, trainer, extra=step)
    step += 1
"""


def _net():
    mx.random.seed(1)
    net = gluon.nn.Dense(1024, in_units=2048)
    net.initialize()
    return net


def _start(path, *args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", SAVING_LOOP, str(path)] + list(args),
                            cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "READY", communicate(proc)[1][-3000:]
    return proc


def _mxmixed_tmp_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "mxmixed-ckpt-*")))


@pytest.mark.slow
def test_saves_killed_by_sigkill_leave_litter_that_the_next_save_sweeps(tmp_path):
    path = tmp_path / "ckpt.mxc"
    tmp_dirs = _mxmixed_tmp_dirs()
    rng = np.random.RandomState(0)
    litter_seen = 0
    for run in range(5):
        if run == 0:  # once at a known point inside a save, then at random times
            proc = _start(path, "kill-in-fsync")
        else:
            proc = _start(path)
            time.sleep(rng.uniform(0.05, 0.6))
            proc.kill()
        communicate(proc)
        assert proc.returncode == -signal.SIGKILL
        names = os.listdir(tmp_path)
        assert "ckpt.mxc" in names
        litter = [n for n in names if n != "ckpt.mxc"]
        assert all(n.startswith(".ckpt.mxc.") and n.endswith(".tmp") for n in litter), litter
        litter_seen += len(litter)
    print("SIGKILL litter: %d temporary files after 5 kills" % litter_seen)
    assert litter_seen >= 1
    assert _mxmixed_tmp_dirs() <= tmp_dirs  # nothing written under /tmp
    step = checkpoint.load(path, _net())  # the last complete checkpoint is whole
    assert isinstance(step, int)
    checkpoint.save(path, _net(), extra="after")
    assert os.listdir(tmp_path) == ["ckpt.mxc"], "litter left (%d seen)" % litter_seen
    assert checkpoint.load(path, _net()) == "after"


@pytest.mark.slow
def test_sigterm_during_saves_removes_the_temporary_files_and_ends_the_process(tmp_path):
    path = tmp_path / "ckpt.mxc"
    for delay in (0.2, 0.5):
        proc = _start(path)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        communicate(proc)
        assert proc.returncode == -signal.SIGTERM
        assert os.listdir(tmp_path) == ["ckpt.mxc"]
        assert isinstance(checkpoint.load(path, _net()), int)


def test_sweep_leaves_temporary_files_of_live_processes_and_other_hosts(tmp_path):
    target = str(tmp_path / "ckpt.mxc")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)  # alive until the test kills it
    try:
        names = {
            "dead": ".ckpt.mxc.%d.%s%s.tmp" % (dead.pid, atomic._HOST, "0123abcd"),
            "dead_backup": ".ckpt.mxc.%d.%s%s.bak" % (dead.pid, atomic._HOST, "0123abcd"),
            "alive": ".ckpt.mxc.%d.%s%s.tmp" % (sleeper.pid, atomic._HOST, "0123abcd"),
            "other_host": ".ckpt.mxc.%d.%s%s.tmp" % (dead.pid, "%04x" % (int(atomic._HOST, 16) ^ 1),
                                                      "0123abcd"),
            "other_target": ".other.mxc.%d.%s%s.tmp" % (dead.pid, atomic._HOST, "0123abcd"),
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        checkpoint.save(target, _net())
        left = set(os.listdir(tmp_path))
        assert left == {"ckpt.mxc", names["alive"], names["other_host"], names["other_target"]}
    finally:
        sleeper.kill()
        sleeper.wait()
