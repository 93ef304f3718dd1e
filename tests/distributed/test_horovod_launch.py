"""Mixed precision under Horovod: ``horovodrun --gloo -np 2 -H localhost:2`` on loopback.

The launches run examples/distributed_amp.py with ``--kvstore horovod`` (``hvd.DistributedTrainer``,
``hvd.broadcast_parameters``; AMP and the float16 emulation on, so each rank loads the emulation's
rounding library after ``horovod.mxnet`` put ``libmxnet.so`` in the global namespace); the
ranks inherit the caller's OMP_NUM_THREADS. Each launch runs in a new session and is bounded by
conftest's ``HANG_S`` (a hang fails the test, naming the command and showing the job's output);
at the end the session's process group and every process that carries the launch's token
(Horovod starts each rank in a session of its own) are killed.

`make` installs Horovod (the horovod extra, built with gloo): these tests fail rather than skip
when it is missing, so a broken install cannot pass for a green run.

Tolerance: as in test_dist_sync_launch.py, the ranks must equal the single process on the same
global batch within ``rtol=1e-5, atol=1e-6``. With 2 ranks the allreduce's sum g0 + g1 is
commutative, so the runs measured here are bit-identical.
"""
import json
import os
import re
import signal
import subprocess
import sys
import uuid
import zipfile

import numpy as np
import pytest

import mxnet as mx

import mxmixed
from mxmixed.tutorial import digits_cnn, local_job

from conftest import ROOT, communicate, run_command, wait_for

EXAMPLE = os.path.join(ROOT, "examples", "distributed_amp.py")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
RTOL, ATOL = 1e-5, 1e-6
STEPS = 12
SAVED_AT = 6
PLANTED = (1, 3)  # rank 1, step 3
FLAGS = ["--steps", str(STEPS), "--batch-size", "16", "--init-scale", "128", "--log-every", "4",
         "--plant-overflow", "%d:%d" % PLANTED]


def _env(**extra):
    return dict(os.environ, PYTHONPATH=ROOT, **extra)


def _kill_job(proc, token):
    """Kill the launcher's process group and every process of the job (by its token)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for entry in local_job.job_processes(env={"MXMIXED_TEST_TOKEN": token}):
        try:
            os.kill(entry["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def example(*args):
    """The example's command line on a Horovod rank."""
    return [sys.executable, EXAMPLE, "--kvstore", "horovod", *args]


def _ended(proc, log_path):
    """Wait for ``proc`` to end by itself, bounded by ``HANG_S``: past it, the test fails naming
    the command and showing the job's output."""
    try:
        communicate(proc)
    except pytest.fail.Exception as hung:
        pytest.fail("%s\n%s" % (hung, log_path.read_text()[-3000:]), pytrace=False)
    return proc.returncode


def horovodrun(program, log_path, launcher=("--gloo",)):
    """Run ``program`` under ``horovodrun --gloo -np 2 -H localhost:2``, bounded.

    Returns
    -------
    (int, str)
        The launcher's exit status and its output (both ranks, stdout and stderr).
    """
    assert os.path.exists(HOROVODRUN), (
        "horovodrun is not installed: `make` builds Horovod (the horovod extra); see the README")
    token = uuid.uuid4().hex
    command = [HOROVODRUN, *launcher, "-np", "2", "-H", "localhost:2", *program]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True, env=_env(MXMIXED_TEST_TOKEN=token))
    try:
        returncode = _ended(proc, log_path)
    finally:
        _kill_job(proc, token)
    return returncode, log_path.read_text()


def _job_left(token):
    """The job's processes still alive: (pid, command line) each."""
    out = []
    for entry in local_job.job_processes(env={"MXMIXED_TEST_TOKEN": token}):
        try:
            with open("/proc/%d/cmdline" % entry["pid"], "rb") as handle:
                out.append((entry["pid"], handle.read().replace(b"\0", b" ").decode()[:200]))
        except OSError:
            pass  # ended meanwhile
    return out


def _load(path):
    return {name: array.asnumpy() for name, array in mx.nd.load(str(path)).items()}


def _trainable(name):
    return not name.endswith(("running_mean", "running_var"))


def _logs(report):
    return [json.loads((report / ("rank%d.json" % r)).read_text()) for r in (0, 1)]


# ----------------------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, the same global batches, split over 2 CPU contexts."""
    out = tmp_path_factory.mktemp("single")
    proc = run_command([sys.executable, EXAMPLE, "--kvstore", "device", "--shards", "2",
                        *FLAGS, "--report", str(out / "report")],
                       capture_output=True, text=True, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def hvd(tmp_path_factory):
    """2 ranks on loopback; rank 0 writes a checkpoint after SAVED_AT of the STEPS steps."""
    out = tmp_path_factory.mktemp("horovod")
    (out / "ckpt").mkdir()
    returncode, output = horovodrun(example(
        *FLAGS, "--report", str(out / "report"), "--checkpoint", str(out / "ckpt" / "d.ckpt"),
        "--checkpoint-at", str(SAVED_AT)), out / "out.log")
    assert returncode == 0, output[-3000:]
    return {"out": out, "output": output}


@pytest.mark.slow
def test_ranks_end_with_the_params_of_a_single_process_on_the_same_global_batch(hvd, single):
    for rank in (0, 1):
        mine = _load(hvd["out"] / "report" / ("rank%d.params" % rank))
        ref = _load(single / "report" / ("rank%d.params" % rank))  # the same shard's context
        assert set(mine) == set(ref)
        print("rank %d: max |param - single process| = %.3g" % (rank, max(
            float(np.abs(mine[n] - ref[n]).max()) for n in mine)))
        for name in mine:  # BatchNorm's running stats too: rank r saw shard r's slices
            np.testing.assert_allclose(mine[name], ref[name], rtol=RTOL, atol=ATOL,
                                       err_msg="%s rank %d" % (name, rank))


@pytest.mark.slow
def test_a_planted_overflow_on_one_rank_is_skipped_by_every_rank(hvd, single):
    logs = _logs(hvd["out"] / "report")
    ref = json.loads((single / "report" / "rank0.json").read_text())
    assert [log["rank"] for log in logs] == [0, 1] and logs[0]["num_workers"] == 2
    for log in logs:
        assert [i for i, ok in enumerate(log["applied"]) if not ok] == [PLANTED[1]]
        assert log["applied"] == ref["applied"] and log["scales"] == ref["scales"]
    assert logs[0]["scaler"] == logs[1]["scaler"] == ref["scaler"]
    assert logs[0]["scaler"]["skipped"] == 1 and logs[0]["scaler"]["loss_scale"] == 64.0
    assert hvd["output"].count("SKIPPED (overflow)") == 2  # both ranks, that step only
    assert logs[0]["losses"][-1] < logs[0]["losses"][0]


@pytest.mark.slow
def test_the_emulation_runs_in_every_rank_beside_horovod(hvd):
    """horovod.mxnet made libmxnet.so global before the rounding library loaded: it loads."""
    for log in _logs(hvd["out"] / "report"):
        assert log["emulation"].startswith("active"), log["emulation"]
    assert "rounding op is unavailable" not in hvd["output"]
    assert "cannot keep oneDNN layouts" not in hvd["output"]


@pytest.mark.slow
def test_rank0_alone_writes_the_checkpoint_and_both_ranks_resume_from_it(hvd, tmp_path):
    output = hvd["output"]
    assert output.count("wrote checkpoint") == 1 and "[rank 0/2] wrote checkpoint" in output
    ckpt = hvd["out"] / "ckpt" / "d.ckpt"
    assert os.listdir(ckpt.parent) == ["d.ckpt"]  # no temporary file left behind
    net = digits_cnn(seed=1)
    assert mxmixed.checkpoint.load(ckpt, net) == {"step": SAVED_AT}
    with zipfile.ZipFile(ckpt) as archive:
        assert json.loads(archive.read("scaler.json"))["steps"] == SAVED_AT

    returncode, output = horovodrun(example(*FLAGS, "--resume", str(ckpt), "--report",
                                            str(tmp_path / "report")), tmp_path / "out.log")
    assert returncode == 0, output[-3000:]
    resumed, straight = _logs(tmp_path / "report"), _logs(hvd["out"] / "report")
    for rank in (0, 1):
        assert resumed[rank]["start"] == SAVED_AT
        assert resumed[rank]["scaler"] == straight[rank]["scaler"]
        mine = _load(tmp_path / "report" / ("rank%d.params" % rank))
        ref = _load(hvd["out"] / "report" / ("rank%d.params" % rank))
        for name in mine:
            if _trainable(name):  # the running stats are rank 0's in the checkpoint
                np.testing.assert_allclose(mine[name], ref[name], rtol=RTOL, atol=ATOL,
                                           err_msg="%s rank %d" % (name, rank))


# ----------------------------------------------------------------------------- failures
@pytest.mark.slow
def test_a_killed_rank_ends_the_job_by_itself_and_names_it(tmp_path):
    """horovodrun notices the dead rank and ends the job: the survivor, left waiting in an
    allreduce, does not keep it running until the ``HANG_S`` bound (taken for a hang), and
    every process of the job is gone once horovodrun has exited."""
    token = uuid.uuid4().hex
    log_path = tmp_path / "out.log"
    command = [HOROVODRUN, "--gloo", "-np", "2", "-H", "localhost:2",
               *example("--steps", "100000", "--batch-size", "16", "--log-every", "1")]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True, env=_env(MXMIXED_TEST_TOKEN=token))
    def training():  # both ranks are past their first steps
        output = log_path.read_text()
        assert proc.poll() is None, output[-3000:]
        return "[rank 1/2] step 3 " in output

    try:
        wait_for(training, "horovodrun's rank 1 to reach step 3")
        victim = int(re.search(r"\[rank 1/2\] pid (\d+)", log_path.read_text()).group(1))
        os.kill(victim, signal.SIGKILL)
        returncode = _ended(proc, log_path)  # 100000 steps: only the failure can end it
        try:
            wait_for(lambda: not _job_left(token), "every process of the job to end",
                     poll=0.2)
        except pytest.fail.Exception as hung:
            pytest.fail("%s: %s" % (hung, _job_left(token)), pytrace=False)
    finally:
        _kill_job(proc, token)
    output = log_path.read_text()
    assert returncode != 0, output[-3000:]
    assert "Process 1 exit with status code" in output, output[-3000:]
    assert "Process name: 1" in output


# ----------------------------------------------------------------------------- mxmixed run
@pytest.mark.parametrize("env, written", [
    ({}, "/out/r.json"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}, "/out/r.json"),
    ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4"}, "/out/r.rank3.json"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1"}, "/out/r.json"),
])
def test_mxmixed_run_gives_each_horovod_rank_its_own_report(env, written):
    from mxmixed.cli._run_report import report_of_rank
    assert report_of_rank("/out/r.json", env) == written


@pytest.mark.slow
def test_mxmixed_run_under_horovodrun_writes_a_report_per_rank_with_the_emulation_on(tmp_path):
    """``horovodrun -np 2 mxmixed run --report r.json script.py``: Horovod picks gloo (it is
    built without MPI); rank 0 writes r.json and rank 1 r.rank1.json."""
    report = tmp_path / "r.json"
    returncode, output = horovodrun(
        [sys.executable, "-m", "mxmixed", "run", "--report", str(report), EXAMPLE,
         "--kvstore", "horovod", "--steps", "4", "--batch-size", "16", "--init-scale", "128",
         "--plant-overflow", "1:2"], tmp_path / "out.log", launcher=())
    assert returncode == 0, output[-3000:]
    assert sorted(os.listdir(tmp_path)) == ["out.log", "r.json", "r.png", "r.rank1.json",
                                            "r.rank1.png"]
    reports = [json.loads(report.read_text()),
               json.loads((tmp_path / "r.rank1.json").read_text())]
    assert reports[0]["pid"] != reports[1]["pid"]
    for mine in reports:
        assert mine["status"] == "finished" and mine["exit_code"] == 0
        assert mine["emulation"]["active"], mine["emulation"]
        # the report counts steps from 1: the example's step 2 is its third
        assert mine["summary"]["steps"] == 4 and mine["summary"]["skipped_steps"] == [3], mine


# ----------------------------------------------------------------------------- compression
# Each rank's loss-scaled gradient is 1.5 * 2**15 = 49152: a float16 number. Horovod's
# DistributedTrainer sums the ranks' gradients (and divides by the ranks in the update), so
# the sum, 98304, is past float16's largest finite value (65504). Compression.fp16 casts the
# gradients to float16 for the allreduce, which sums them in float16: inf on every rank.
COMPRESSED = r"""
import json, sys
import mxnet as mx
from mxnet import autograd, gluon
import horovod.mxnet as hvd
import mxmixed
hvd.init()
out = sys.argv[1]
mxmixed.init()
for compression in ("none", "fp16"):  # a net, a trainer and a scaler of its own each
    net = gluon.nn.Dense(1, in_units=1, use_bias=False)
    net.initialize(mx.init.One())
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                     compression=getattr(hvd.Compression, compression))
    scaler = mxmixed.init_trainer(trainer, mxmixed.LossScaler(init_scale=2.0 ** 15))
    log = {"scales": [], "applied": []}
    for _ in range(2):
        log["scales"].append(scaler.loss_scale)
        with autograd.record():
            loss = 1.5 * net(mx.nd.ones((1, 1))).sum()
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        log["applied"].append(bool(mxmixed.step(trainer, 1)))
    log["weight"] = float(net.weight.data().asscalar())
    with open("%s.%s.rank%d.json" % (out, compression, hvd.rank()), "w") as handle:
        json.dump(log, handle)
"""


@pytest.fixture(scope="module")
def compressed(tmp_path_factory):
    """The folder of COMPRESSED's logs, both compressions in one job (one launch)."""
    folder = tmp_path_factory.mktemp("compressed")
    script = folder / "compressed.py"
    script.write_text(COMPRESSED)
    returncode, output = horovodrun([sys.executable, str(script), str(folder / "log")],
                                    folder / "out.log")
    assert returncode == 0, output[-3000:]
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("compression, applied, scales, weight", [
    ("none", [True, True], [2.0 ** 15, 2.0 ** 15], 1 - 2 * 0.1 * 1.5),
    # the sum overflows in float16: skipped on both ranks; at half the scale it fits
    ("fp16", [False, True], [2.0 ** 15, 2.0 ** 14], 1 - 0.1 * 1.5),
])
def test_fp16_compression_sums_the_scaled_gradients_in_float16(compressed, compression, applied,
                                                               scales, weight):
    for rank in (0, 1):
        log = json.loads((compressed / ("log.%s.rank%d.json" % (compression, rank))).read_text())
        assert log["applied"] == applied and log["scales"] == scales
        assert log["weight"] == pytest.approx(weight, rel=1e-3)  # float16 gradients
