"""Mixed precision across workers: MXNet's dist_sync kvstore on loopback, via mxmixed.launch.

The launches run examples/distributed_amp.py with 2 workers and 1 server under
``python -m mxmixed.launch --launcher local -n 2 -s 1`` (MXNet's own launcher), with the
caller's OMP_NUM_THREADS (1 where it is unset), each bounded by a generous timeout (a hang, never
a speed limit), and their process group is always killed.

Tolerance: the distributed parameters must equal the single-process run on the same global
batch (split over 2 CPU contexts, as 2 workers split it) within ``rtol=1e-5, atol=1e-6``
(float32; about 100 ulp of the weights). With 2 workers the server's sum g0 + g1 is
commutative, so the runs measured here are bit-identical; the tolerance leaves room for
other BLAS builds.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
import zipfile

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

import mxmixed
from mxmixed import distributed
from mxmixed import launch
from mxmixed.tutorial import local_job
from mxmixed.tutorial.local_job import DistributedRunError, run_local
from mxmixed.tutorial import digits_cnn

from conftest import HANG_S, ROOT, communicate, run_command, run_python, wait_for

EXAMPLE = os.path.join(ROOT, "examples", "distributed_amp.py")
RTOL, ATOL = 1e-5, 1e-6
STEPS = 12
PLANTED = (1, 3)  # worker rank 1, step 3
FLAGS = ["--steps", str(STEPS), "--batch-size", "16", "--init-scale", "128", "--log-every", "4",
         "--plant-overflow", "%d:%d" % PLANTED]


def _env(**extra):
    return dict({"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": ROOT},
                **extra)


def _load(path):
    return {name: array.asnumpy() for name, array in mx.nd.load(str(path)).items()}


def _trainable(name):
    return not name.endswith(("running_mean", "running_var"))


def _max_diff(a, b, names):
    return max(float(np.abs(a[n] - b[n]).max()) for n in names)


# ----------------------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, the same global batches, split over 2 CPU contexts."""
    out = tmp_path_factory.mktemp("single")
    proc = run_command([sys.executable, EXAMPLE, "--kvstore", "device", "--shards", "2",
                        *FLAGS, "--report", str(out / "report"),
                        "--checkpoint", str(out / "digits.ckpt")],
                       capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, **_env()))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module", params=["dist_sync", "dist_device_sync"])
def dist(request, tmp_path_factory):
    """2 workers and 1 server on loopback, through the compatibility entry point."""
    out = tmp_path_factory.mktemp(request.param)
    ckpt_dir = out / "ckpt"
    ckpt_dir.mkdir()
    command = [sys.executable, EXAMPLE, "--kvstore", request.param, *FLAGS,
               "--report", str(out / "report"), "--checkpoint", str(ckpt_dir / "digits.ckpt")]
    result = run_local(command, num_workers=2, num_servers=1, timeout=HANG_S, env=_env(),
                       cwd=ROOT)
    assert "-m mxmixed.launch --launcher local -n 2 -s 1" in " ".join(result.command)
    return {"kvstore": request.param, "out": out, "ckpt_dir": ckpt_dir, "result": result}


@pytest.mark.slow
def test_workers_end_with_the_params_of_a_single_process_on_the_same_global_batch(dist, single):
    for rank in (0, 1):
        mine = _load(dist["out"] / "report" / ("rank%d.params" % rank))
        ref = _load(single / "report" / ("rank%d.params" % rank))  # the same shard's context
        assert set(mine) == set(ref)
        names = [n for n in mine if _trainable(n)]
        print("%s rank %d: max |param - single process| = %.3g (trainable), %.3g (BatchNorm "
              "running stats of the same shard)" % (
                  dist["kvstore"], rank, _max_diff(mine, ref, names),
                  _max_diff(mine, ref, [n for n in mine if not _trainable(n)])))
        for name in mine:  # running stats too: worker r and context r saw the same shards
            np.testing.assert_allclose(mine[name], ref[name], rtol=RTOL, atol=ATOL,
                                       err_msg="%s rank %d" % (name, rank))


@pytest.mark.slow
def test_a_planted_overflow_on_one_worker_is_skipped_by_every_worker(dist, single):
    logs = [json.loads((dist["out"] / "report" / ("rank%d.json" % r)).read_text())
            for r in (0, 1)]
    ref = json.loads((single / "report" / "rank0.json").read_text())
    assert sorted(log["rank"] for log in logs) == [0, 1]
    for log in logs:
        assert [i for i, ok in enumerate(log["applied"]) if not ok] == [PLANTED[1]]
        assert log["applied"] == ref["applied"]
        assert log["scales"] == ref["scales"]
    assert logs[0]["scaler"] == logs[1]["scaler"] == ref["scaler"]
    assert logs[0]["scaler"]["skipped"] == 1 and logs[0]["scaler"]["loss_scale"] == 64.0
    output = dist["result"].output
    assert output.count("step %d" % PLANTED[1]) == 2
    assert output.count("SKIPPED (overflow)") == 2  # both workers, that step only


@pytest.mark.slow
def test_rank0_alone_writes_the_checkpoint_atomically(dist, single):
    output = dist["result"].output
    assert output.count("wrote checkpoint") == 1
    assert "[rank 0/2] wrote checkpoint" in output
    assert os.listdir(dist["ckpt_dir"]) == ["digits.ckpt"]  # no temporary file left behind
    net = digits_cnn(seed=1)
    assert mxmixed.checkpoint.load(dist["ckpt_dir"] / "digits.ckpt", net) == {"step": STEPS}
    with zipfile.ZipFile(dist["ckpt_dir"] / "digits.ckpt") as archive:
        scaler = json.loads(archive.read("scaler.json"))
    assert scaler["skipped"] == 1 and scaler["steps"] == STEPS
    ref = digits_cnn(seed=2)
    mxmixed.checkpoint.load(single / "digits.ckpt", ref)
    for (name, mine), theirs in zip(net._collect_params_with_prefix().items(),
                                    ref._collect_params_with_prefix().values()):
        if _trainable(name):
            np.testing.assert_allclose(mine.data().asnumpy(), theirs.data().asnumpy(),
                                       rtol=RTOL, atol=ATOL, err_msg=name)


# ----------------------------------------------------------------------------- failures
def _job_alive(token):
    return local_job.job_processes(env={"MXMIXED_TEST_TOKEN": token})


def _kill_session(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


NEEDS_PROC = pytest.mark.skipif(not os.path.isdir("/proc"),
                                reason="finds the job's processes through /proc (Linux)")


@pytest.mark.slow
@NEEDS_PROC
def test_a_killed_worker_fails_the_wrapper_fast_and_names_it(tmp_path):
    token = uuid.uuid4().hex
    log_path = tmp_path / "out.log"
    with open(log_path, "w") as log:
        # The example's own wrapper: --launch-local runs it under mxmixed.launch, bounded.
        wrapper = subprocess.Popen(
            [sys.executable, EXAMPLE, "--launch-local", "2", "--servers", "1", "--timeout",
             str(HANG_S), "--steps", "100000", "--batch-size", "16", "--init-scale", "128",
             "--log-every", "1"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
            env=dict(os.environ, **_env(MXMIXED_TEST_TOKEN=token)))
    try:
        # both ranks are training
        wait_for(lambda: "step 3 " in log_path.read_text() or wrapper.poll() is not None,
                 "the job to start training", poll=0.1)
        assert wrapper.poll() is None, log_path.read_text()[-3000:]
        victims = [p for p in _job_alive(token)
                   if p["role"] == "worker" and p["task_id"] == "1"]
        assert len(victims) == 1, victims
        os.kill(victims[0]["pid"], signal.SIGKILL)
        communicate(wrapper)
    finally:
        _kill_session(wrapper)
    output = log_path.read_text()
    assert wrapper.returncode == 1, output[-3000:]
    assert "timed out" not in output  # the death ended the job, not the wrapper's timeout
    assert "error: distributed job failed" in output
    assert "worker 1 (kvstore rank" in output and "was killed by SIGKILL" in output
    assert "pid %d" % victims[0]["pid"] in output
    assert _job_alive(token) == []


@pytest.mark.slow
@NEEDS_PROC
def test_run_local_bounds_a_hanging_job_and_kills_its_process_group():
    token = uuid.uuid4().hex
    # the job never ends by itself: that run_local returns at all shows that it bounded it
    with pytest.raises(DistributedRunError, match="timed out after 8 s") as info:
        run_local([sys.executable, "-c", "import signal; signal.pause()"], num_workers=1,
                  num_servers=1, timeout=8, env=_env(MXMIXED_TEST_TOKEN=token), cwd=ROOT)
    assert "still running were" in str(info.value)
    assert _job_alive(token) == []


@pytest.mark.slow
def test_run_local_names_a_worker_that_fails_by_itself():
    with pytest.raises(DistributedRunError, match=r"worker 0 exited with status 3") as info:
        run_local([sys.executable, "-c",
                   "import os, sys, time; r = os.environ['DMLC_ROLE']; "
                   "sys.exit(3) if r == 'worker' else time.sleep(300)"],
                  num_workers=1, num_servers=1, timeout=HANG_S, env=_env(), cwd=ROOT)
    assert info.value.dead == {"role": "worker", "task_id": 0, "returncode": 3}


@pytest.mark.slow
def test_two_local_jobs_started_together_both_finish():
    """dmlc_tracker gives every job the first free port from 9091: two jobs started together
    took the same one, and each job's workers met the other's scheduler (both failed)."""
    outcomes = {}

    def job(i):
        try:
            run_local([sys.executable, EXAMPLE, "--steps", "5", "--batch-size", "16"],
                      timeout=HANG_S, env=_env(), cwd=ROOT)
            outcomes[i] = "finished"
        except DistributedRunError as err:
            outcomes[i] = str(err).splitlines()[0]

    threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == {0: "finished", 1: "finished"}


# ----------------------------------------------------------------------------- no launch
@pytest.mark.slow
def test_launch_entry_point_aliases_isAlive_and_keeps_mxnets_launcher():
    assert not hasattr(threading.Thread, "isAlive") or sys.version_info < (3, 9)
    proc = run_python("import sys; from mxmixed import launch; "
                      "sys.argv = ['x', '--help']; launch.main()")
    assert proc.returncode == 0, proc.stderr
    assert "Launch a distributed job" in proc.stdout and "--launcher" in proc.stdout
    proc = run_python("import threading; from mxmixed import launch; "
                      "launch._alias_is_alive(); "
                      "assert threading.Thread.isAlive is threading.Thread.is_alive")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("argv, launcher", [
    (["--launcher", "local", "-n", "2", "python", "x.py"], "local"),
    (["-n", "2", "--launcher=ssh", "-H", "hosts", "python", "x.py"], "ssh"),
    (["-n", "2", "-s", "1", "python", "x.py", "--launcher", "local"], None),
    (["-n", "2", "python", "x.py"], None),
])
def test_launch_entry_point_reads_the_launcher_but_not_the_programs_flags(argv, launcher):
    assert launch._launcher(argv) == launcher


def test_launch_command_goes_through_the_compatibility_entry_point():
    cmd = local_job.launch_command(["python", "train.py", "--name", "a b"], 4, 2,
                                     launcher="ssh", python="py", hostfile="hosts")
    assert cmd == ["py", "-m", "mxmixed.launch", "--launcher", "ssh", "-n", "4", "-s", "2",
                   "-H", "hosts", "python", "train.py", "--name", "'a b'"]  # for its shell
    with pytest.raises(TypeError, match="list of arguments"):
        local_job.launch_command("python train.py")


def test_rank_and_workers_come_from_the_launchers_environment(monkeypatch):
    for name in ("DMLC_ROLE", "DMLC_TASK_ID", "DMLC_NUM_WORKER"):
        monkeypatch.delenv(name, raising=False)
    assert (distributed.rank(), distributed.num_workers()) == (0, 1)
    with pytest.raises(RuntimeError, match="needs MXNet's launcher"):
        distributed.check_launched("dist_sync")
    distributed.check_launched("device")
    monkeypatch.setenv("DMLC_ROLE", "worker")
    monkeypatch.setenv("DMLC_TASK_ID", "1")
    monkeypatch.setenv("DMLC_NUM_WORKER", "2")
    assert (distributed.rank(), distributed.num_workers()) == (1, 2)
    assert distributed.launcher_env()["role"] == "worker"
    distributed.check_launched("dist_sync")


def _float16_dense():
    net = gluon.nn.Dense(4, in_units=3)
    net.initialize()
    net.cast("float16")
    return net


@pytest.mark.parametrize("kvstore", ["dist_sync", "dist_device_sync"])
def test_init_trainer_makes_dist_kvstores_update_locally(kvstore):
    trainer = gluon.Trainer(_float16_dense().collect_params(), "sgd", kvstore=kvstore)
    mxmixed.init_trainer(trainer)
    assert trainer._kvstore_params["update_on_kvstore"] is False


@pytest.mark.parametrize("kvstore, update_on_kvstore, message", [
    ("dist_sync", True, "update_on_kvstore=True"),
    ("dist_device_sync", True, "update_on_kvstore=True"),
    ("dist_async", None, "synchronous kvstore"),
])
def test_init_trainer_refuses_server_side_updates(kvstore, update_on_kvstore, message):
    trainer = gluon.Trainer(_float16_dense().collect_params(), "sgd", kvstore=kvstore,
                            update_on_kvstore=update_on_kvstore)
    with pytest.raises(ValueError, match=message):
        mxmixed.init_trainer(trainer)


def test_save_checkpoint_writes_on_rank0_only(tmp_path):
    net = digits_cnn(seed=0)
    assert distributed.save_checkpoint(tmp_path / "r1.ckpt", net, kvstore=1) is False
    assert not (tmp_path / "r1.ckpt").exists()
    assert distributed.save_checkpoint(tmp_path / "r0.ckpt", net, kvstore=0) is True
    assert distributed.save_checkpoint(tmp_path / "one.ckpt", net) is True
    assert sorted(os.listdir(tmp_path)) == ["one.ckpt", "r0.ckpt"]


@pytest.mark.slow
def test_the_example_refuses_a_dist_kvstore_without_the_launcher():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLC_")}
    proc = run_command([sys.executable, EXAMPLE, "--kvstore", "dist_sync", "--steps", "1"],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2
    assert "needs MXNet's launcher" in proc.stderr and "mxmixed.launch" in proc.stderr
