"""Helpers for mixed precision across workers: MXNet's ``dist_sync`` kvstore (and Horovod).

What makes mixed precision safe across workers is already in :func:`mxmixed.init_trainer`:
the Trainer updates locally (``update_on_kvstore=False``), so the overflow check runs on the
gradients *after* they were summed over all workers. An inf or NaN on one worker is part of
every worker's sum, so every worker skips the same step and every :class:`~mxmixed.LossScaler`
takes the same decisions. This module adds what a distributed job needs around that:

* where this process stands in the job: :func:`rank`, :func:`num_workers`,
  :func:`launcher_env`;
* :func:`init_kvstore`: rank 0's initial weights on every worker *before* the first gradient
  push. Gluon does it inside the first ``step``, unordered with that push, and with
  ``update_on_kvstore=False`` a late pull can write summed gradients into a worker's weights;
* checkpoints written by rank 0 only, atomically: :func:`save_checkpoint`;
* a bounded run of MXNet's local launcher: :func:`run_local`. MXNet's local tracker blocks
  forever when a worker dies (it raises in a background thread while the other workers wait
  for the dead one); :func:`run_local` kills the whole process group and raises
  :class:`DistributedRunError`, naming the dead worker, within its timeout.

The launch itself goes through ``python -m mxmixed.launch``, MXNet's own launcher made to run on
Python 3.9 and later (see :mod:`mxmixed.launch`).
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["DistributedRunError", "LaunchResult", "launcher_env", "rank", "num_workers",
           "is_distributed", "check_launched", "announce", "init_kvstore", "save_checkpoint",
           "launch_command", "run_local", "job_processes"]

ANNOUNCE = "mxmixed-worker"


class DistributedRunError(RuntimeError):
    """A launched job failed: a process died, the launcher failed, or the timeout passed.

    Attributes
    ----------
    output : str
        Everything the job printed (launcher, scheduler, servers and workers).
    dead : dict or None
        The process that died first: ``role``, ``task_id``, ``returncode`` and, when the worker
        announced itself (:func:`announce`), ``rank`` and ``pid``.
    """

    def __init__(self, message, output="", dead=None):
        super().__init__(message)
        self.output = output
        self.dead = dead


class LaunchResult:
    """What a finished :func:`run_local` returns.

    Attributes
    ----------
    output : str
        Everything the job printed.
    elapsed : float
        Seconds from start to the launcher's exit.
    command : list of str
        The launcher command that ran.
    """

    def __init__(self, output, elapsed, command):
        self.output = output
        self.elapsed = elapsed
        self.command = command

    def __repr__(self):
        return "LaunchResult(elapsed=%.1fs, %d chars of output)" % (self.elapsed,
                                                                    len(self.output))


# ----------------------------------------------------------------------------- where am I
def launcher_env(environ=None):
    """What the launcher told this process, from its environment.

    Parameters
    ----------
    environ : mapping, optional
        ``os.environ`` by default.

    Returns
    -------
    dict
        ``role`` ('worker', 'server', 'scheduler' or None when not launched), ``task_id``
        (int or None; set by the local and SGE launchers), ``num_workers``, ``num_servers``
        (int or None) and ``root`` (``'host:port'`` of the scheduler, or None).
    """
    env = os.environ if environ is None else environ

    def as_int(name):
        value = env.get(name)
        return int(value) if value not in (None, "") else None

    root = None
    if env.get("DMLC_PS_ROOT_URI"):
        root = "%s:%s" % (env["DMLC_PS_ROOT_URI"], env.get("DMLC_PS_ROOT_PORT", "?"))
    return {"role": env.get("DMLC_ROLE") or None, "task_id": as_int("DMLC_TASK_ID"),
            "num_workers": as_int("DMLC_NUM_WORKER"), "num_servers": as_int("DMLC_NUM_SERVER"),
            "root": root}


def _kv_type(kvstore):
    if kvstore is None:
        return ""
    return kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "") or ""


def is_distributed(kvstore):
    """Whether ``kvstore`` (a name or a KVStore) is a distributed ps-lite kvstore.

    Parameters
    ----------
    kvstore : str or mxnet.kvstore.KVStore or None

    Returns
    -------
    bool
    """
    return "dist" in _kv_type(kvstore)


def rank(kvstore=None):
    """The rank of this worker, from 0 to ``num_workers() - 1``.

    Parameters
    ----------
    kvstore : mxnet.kvstore.KVStore, optional
        With a distributed kvstore its rank is used: ps-lite assigns it from the launcher's
        environment and it is the only rank every launcher (local, ssh, mpi, slurm) provides.
        Horovod users pass nothing and call ``hvd.rank()`` instead.

    Returns
    -------
    int
        Without a kvstore: ``DMLC_TASK_ID`` (local and SGE launchers), else 0.

    .. note::
       Under the local launcher ``DMLC_TASK_ID`` and the kvstore's rank are both 0..n-1 but need
       not agree for a given process; use one of them consistently (the kvstore's).
    """
    if kvstore is not None and not isinstance(kvstore, str) and is_distributed(kvstore):
        return int(kvstore.rank)
    task = launcher_env()["task_id"]
    return 0 if task is None else task


def num_workers(kvstore=None):
    """How many workers the job has.

    Parameters
    ----------
    kvstore : mxnet.kvstore.KVStore, optional
        With a distributed kvstore, its ``num_workers``.

    Returns
    -------
    int
        Without a kvstore: ``DMLC_NUM_WORKER``, else 1.
    """
    if kvstore is not None and not isinstance(kvstore, str) and is_distributed(kvstore):
        return int(kvstore.num_workers)
    count = launcher_env()["num_workers"]
    return 1 if count is None else count


def check_launched(kvstore):
    """Raise a clear error when a distributed kvstore is requested outside a launcher.

    Without the launcher's environment, ``mx.kv.create('dist_sync')`` fails deep in ps-lite.

    Parameters
    ----------
    kvstore : str
        The kvstore name.

    Raises
    ------
    RuntimeError
        For a ``dist_*`` kvstore in a process that no launcher started.
    """
    if is_distributed(kvstore) and launcher_env()["role"] is None:
        raise RuntimeError(
            "kvstore '%s' needs MXNet's launcher, which starts the scheduler, the servers and "
            "the workers; run for example: %s -m mxmixed.launch --launcher local -n 2 -s 1 "
            "%s ..." % (_kv_type(kvstore), os.path.basename(sys.executable),
                        os.path.basename(sys.argv[0] or "train.py")))


def announce(kvstore, stream=None):
    """Print one line that ties this worker's launcher task id to its kvstore rank and pid.

    :func:`run_local` reads it to name a dead worker by its rank as well.

    Parameters
    ----------
    kvstore : mxnet.kvstore.KVStore
    stream : file, optional
        ``sys.stdout`` by default.
    """
    env = launcher_env()
    print("%s task=%s rank=%d of=%d pid=%d" % (ANNOUNCE, env["task_id"], rank(kvstore),
                                               num_workers(kvstore), os.getpid()),
          file=stream or sys.stdout, flush=True)


# ----------------------------------------------------------------------------- the kvstore
def init_kvstore(trainer):
    """Create the Trainer's kvstore now and give every worker rank 0's initial parameters.

    Call it once, after :func:`mxmixed.init_trainer` and before the first forward pass.

    Gluon creates the kvstore lazily, in the first ``step``, after the first backward pass: it
    then pulls rank 0's initial parameters *and* pushes the first gradients at once, and
    MXNet 1.9.1 does not order the two for the same key. With ``update_on_kvstore=False`` (which
    loss scaling needs) the server's value of a key turns from the weight into the gradient sum
    as soon as every worker has pushed, so a pull that arrives late writes the *summed
    gradients* into that worker's weights. Measured here on the digits CNN with 2 workers:
    2 runs in 8 started with different weights on the two workers (one layer off by thousands),
    and diverged. This function does the broadcast first and waits for it, so no worker can
    push a gradient before every worker holds the initial weights.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
        With initialized parameters of known shapes (run one forward pass first for deferred
        shapes). Any kvstore works; for a non-distributed one this only creates it early.

    Raises
    ------
    ValueError
        When parameters still have deferred shapes.
    """
    if not trainer._kv_initialized:
        deferred = [p.name for p in trainer._params if p._deferred_init]
        if deferred:
            raise ValueError("parameters %s have deferred shapes; run one forward pass before "
                             "init_kvstore" % ", ".join(deferred[:3]))
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    if trainer._params_to_init:
        raise ValueError("parameters %s have deferred shapes; run one forward pass before "
                         "init_kvstore" % ", ".join(p.name for p in trainer._params_to_init[:3]))
    for param in trainer._params:
        for data in param.list_data():
            data.wait_to_read()
    return trainer._kvstore


# ----------------------------------------------------------------------------- checkpoints
def save_checkpoint(path, net, trainer=None, scaler=None, extra=None, kvstore=None,
                    barrier=True):
    """Write a checkpoint from rank 0 only, atomically (:func:`mxmixed.checkpoint.save`).

    Every worker calls it at the same point; only rank 0 writes. With ``barrier`` the workers
    then wait for each other, so that none reads the file (or exits) before it is complete.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file, on storage rank 0 can write (shared storage if other machines
        will read it).
    net, trainer, scaler, extra
        As in :func:`mxmixed.checkpoint.save`.
    kvstore : mxnet.kvstore.KVStore or int, optional
        The job's distributed kvstore, or this process's rank as an int (Horovod:
        ``hvd.rank()``). None: a single process, which writes.
    barrier : bool, default True
        Call the kvstore's global barrier after writing (distributed kvstores only; Horovod
        users call ``hvd.allreduce`` on a dummy array, or nothing).

    Returns
    -------
    bool
        Whether this process wrote the file.

    .. note::
       Parameters and optimizer states are the same on every worker, so rank 0's are the
       job's. BatchNorm's running mean and variance are not synchronized by the kvstore: the
       checkpoint holds rank 0's, computed on its own shards.
    """
    from . import checkpoint

    if isinstance(kvstore, int) and not isinstance(kvstore, bool):
        mine = kvstore
    else:
        mine = rank(kvstore) if kvstore is not None else 0
    wrote = False
    if mine == 0:
        checkpoint.save(path, net, trainer=trainer, scaler=scaler, extra=extra)
        wrote = True
    if barrier and kvstore is not None and not isinstance(kvstore, int) \
            and is_distributed(kvstore):
        kvstore._barrier()
    return wrote


# ----------------------------------------------------------------------------- the harness
def launch_command(command, num_workers=2, num_servers=1, launcher="local", python=None,
                   hostfile=None):
    """The ``python -m mxmixed.launch ...`` command line that runs ``command``.

    Parameters
    ----------
    command : list of str
        The program each worker, server and the scheduler runs (MXNet turns a process whose
        ``DMLC_ROLE`` is server or scheduler into one at ``import mxnet``). The launcher joins
        it with spaces and runs it through a shell, so each element is quoted here for that
        shell (``shlex.quote``).
    num_workers, num_servers : int
        ``-n`` and ``-s``.
    launcher : str, default 'local'
        ``--launcher`` (local, ssh, mpi, sge, yarn).
    python : str, optional
        The interpreter that runs the launcher; ``sys.executable`` by default.
    hostfile : str, optional
        ``-H``, for ssh and mpi.

    Returns
    -------
    list of str
    """
    if isinstance(command, str):
        raise TypeError("command must be a list of arguments, e.g. ['python', 'train.py'], "
                        "not a string")
    cmd = [python or sys.executable, "-m", "mxmixed.launch", "--launcher", launcher,
           "-n", str(int(num_workers)), "-s", str(int(num_servers))]
    if hostfile:
        cmd += ["-H", hostfile]
    return cmd + [shlex.quote(str(arg)) for arg in command]


def _proc_info(pid):
    """(pgid, state, environ dict) of a process, from /proc; None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fileobj:
            stat = fileobj.read().decode("utf-8", "replace")
        fields = stat[stat.rindex(")") + 2:].split()
        state, pgid = fields[0], int(fields[2])
        with open("/proc/%d/environ" % pid, "rb") as fileobj:
            raw = fileobj.read()
    except (OSError, ValueError, IndexError):
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.startswith((b"DMLC_", b"MXMIXED_")):
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return pgid, state, env


def job_processes(pgid=None, env=None):
    """The live processes of a launched job (Linux, from ``/proc``; empty elsewhere).

    Parameters
    ----------
    pgid : int, optional
        Only processes of this process group (what :func:`run_local` starts is one group).
    env : dict, optional
        Only processes whose environment holds all these ``DMLC_*`` / ``MXMIXED_*``
        variables with these values (e.g. ``{'DMLC_ROLE': 'worker', 'DMLC_TASK_ID': '1'}``).

    Returns
    -------
    list of dict
        ``pid``, ``pgid``, ``role`` and ``task_id`` (strings or None); zombies are left out.
    """
    if not os.path.isdir("/proc"):
        return []
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        info = _proc_info(int(name))
        if info is None:
            continue
        group, state, penv = info
        if state == "Z" or (pgid is not None and group != pgid):
            continue
        if env and any(penv.get(k) != str(v) for k, v in env.items()):
            continue
        found.append({"pid": int(name), "pgid": group, "role": penv.get("DMLC_ROLE"),
                      "task_id": penv.get("DMLC_TASK_ID")})
    return sorted(found, key=lambda p: p["pid"])


_WORKER_DIED = re.compile(r"Get nonzero return code=(-?\d+) on (.*)")
_SCHEDULER_DIED = re.compile(r"CalledProcessError: Command .* returned non-zero exit status "
                             r"(-?\d+)|CalledProcessError: Command .* died with <Signals\.(\w+)")
_ANNOUNCED = re.compile(ANNOUNCE + r" task=(\w+) rank=(\d+) of=\d+ pid=(\d+)")


def _describe_returncode(code):
    """'was killed by SIGKILL', 'exited with status 1', ... for a return code."""
    if code < 0:
        try:
            return "was killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "was killed by signal %d" % -code
    if code > 128:
        try:
            return "exited with status %d (killed by %s)" % (code, signal.Signals(code - 128).name)
        except ValueError:
            pass
    return "exited with status %d" % code


def _find_death(output):
    """The first dead process the tracker reported in ``output``, or None."""
    for line in output.splitlines():
        match = _WORKER_DIED.search(line)
        if match:
            code = int(match.group(1))
            role = re.search(r"'DMLC_ROLE': '(\w+)'", line)
            task = re.search(r"'DMLC_TASK_ID': '(\d+)'", line)
            return {"role": role.group(1) if role else "worker",
                    "task_id": int(task.group(1)) if task else None, "returncode": code}
        match = _SCHEDULER_DIED.search(line)
        if match:
            if match.group(1) is not None:
                code = int(match.group(1))
            else:
                code = -int(getattr(signal, match.group(2), 0))
            return {"role": "scheduler", "task_id": None, "returncode": code}
    return None


def _name(dead, output):
    if dead["role"] == "scheduler":
        return "the scheduler"
    text = "%s %s" % (dead["role"], "?" if dead["task_id"] is None else dead["task_id"])
    if dead["role"] == "worker" and dead["task_id"] is not None:
        for task, kv_rank, pid in _ANNOUNCED.findall(output):
            if task == str(dead["task_id"]):
                dead["rank"], dead["pid"] = int(kv_rank), int(pid)
                text += " (kvstore rank %s, pid %s)" % (kv_rank, pid)
    return text


def _cut(line, width=400):
    return line if len(line) <= width else line[:width] + " ...[cut]"


def _tail(output, lines=40):
    return "\n".join(_cut(row) for row in output.splitlines()[-lines:])


def _kill_group(pgid, grace=2.0):
    """SIGTERM, then SIGKILL, the process group ``pgid``; returns when it is empty."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not job_processes(pgid=pgid) and os.path.isdir("/proc"):
                return
            time.sleep(0.05)


def run_local(command, num_workers=2, num_servers=1, timeout=300, env=None, cwd=None,
              echo=None, poll=0.1):
    """Run ``command`` under MXNet's local launcher, bounded in time and always cleaned up.

    The launcher (``python -m mxmixed.launch --launcher local -n N -s S command``) starts in a
    new session, so the scheduler, the servers and the workers are one process group. The run
    ends in one of three ways:

    * the launcher exits 0: a :class:`LaunchResult` is returned;
    * a process dies (the tracker reports it, then would wait forever) or the launcher fails:
      the whole group is killed at once and :class:`DistributedRunError` names the dead
      process (``worker 1 (kvstore rank 0, pid 4242) ... killed by SIGKILL``);
    * ``timeout`` passes: the group is killed and :class:`DistributedRunError` lists what was
      still running.

    Parameters
    ----------
    command : list of str
        The program, e.g. ``[sys.executable, 'examples/distributed_amp.py', '--steps', '20']``.
    num_workers, num_servers : int, default 2 and 1
    timeout : float, default 300
        Seconds for the whole job.
    env : dict, optional
        Variables added to this process's environment. ``OMP_NUM_THREADS`` defaults to the
        CPU count divided by the number of processes (at least 1): every process of a local
        job shares this machine. ``PYTHONUNBUFFERED=1`` keeps the output in order.
    cwd : str, optional
        Working folder of the job.
    echo : file, optional
        Also copy the job's output there as it comes (e.g. ``sys.stdout``).
    poll : float, default 0.1
        Seconds between checks.

    Returns
    -------
    LaunchResult

    Raises
    ------
    DistributedRunError
        When a process died, the launcher failed or the timeout passed; the group is gone by
        then.
    """
    if timeout <= 0:
        raise ValueError("timeout must be positive, got %r" % (timeout,))
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("OMP_NUM_THREADS",
                        str(max(1, (os.cpu_count() or 1) // (num_workers + num_servers))))
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, full_env.get("PYTHONPATH")) if p)
    cmd = launch_command(command, num_workers, num_servers)
    with tempfile.TemporaryFile(mode="w+b") as log:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=full_env, cwd=cwd, start_new_session=True)
        pgid = proc.pid
        chunks, read_at, partial = [], 0, [""]

        def read_new():
            nonlocal read_at
            log.seek(read_at)
            data = log.read()
            read_at += len(data)
            if data:
                text = data.decode("utf-8", "replace")
                chunks.append(text)
                if echo is not None:  # whole lines; the tracker's dump of the environment is cut
                    lines = (partial[0] + text).split("\n")
                    partial[0] = lines.pop()
                    if lines:
                        echo.write("".join(_cut(line) + "\n" for line in lines))
                        echo.flush()
            return "".join(chunks)

        try:
            while True:
                returncode = proc.poll()
                output = read_new()
                dead = _find_death(output)
                elapsed = time.monotonic() - start
                if dead is not None:
                    _kill_group(pgid)
                    proc.wait()
                    output = read_new()
                    raise DistributedRunError(
                        "distributed job failed after %.1f s: %s %s; killed the "
                        "remaining processes of the job (process group %d).\n--- last output "
                        "---\n%s" % (elapsed, _name(dead, output),
                                     _describe_returncode(dead["returncode"]), pgid,
                                     _tail(output)), output, dead)
                if returncode is not None:
                    _kill_group(pgid)  # stray processes the launcher left behind, if any
                    output = read_new()
                    if returncode != 0:
                        raise DistributedRunError(
                            "the launcher %s after %.1f s.\n--- last output ---\n%s"
                            % (_describe_returncode(returncode), elapsed, _tail(output)),
                            output)
                    return LaunchResult(output, elapsed, cmd)
                if elapsed > timeout:
                    alive = job_processes(pgid=pgid)
                    _kill_group(pgid)
                    proc.wait()
                    output = read_new()
                    names = ", ".join(
                        "%s%s (pid %d)" % (p["role"] or "launcher",
                                           "" if p["task_id"] is None else " " + p["task_id"],
                                           p["pid"]) for p in alive) or "?"
                    raise DistributedRunError(
                        "distributed job timed out after %.0f s; killed its process group %d, "
                        "still running were: %s.\n--- last output ---\n%s"
                        % (timeout, pgid, names, _tail(output)), output)
                time.sleep(poll)
        finally:
            if proc.poll() is None:
                _kill_group(pgid)
                proc.wait()
            else:
                _kill_group(pgid, grace=0.5)
            if echo is not None and partial[0]:
                echo.write(_cut(partial[0]) + "\n")
                echo.flush()
