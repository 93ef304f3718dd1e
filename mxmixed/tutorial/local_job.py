"""A bounded, always cleaned-up run of a local distributed job (notebook 08, the examples, tests).

MXNet's local tracker blocks forever when a worker dies (it raises in a background thread while
the other workers wait for the dead one). :func:`run_local` runs ``python -m mxmixed.launch``
in a new session, watches the launcher's output, kills the whole process group and raises
:class:`DistributedRunError`, naming the dead worker, within its timeout.

This module is for notebooks, examples and tests; ``import mxmixed`` does not load it and
training code does not need it. It reads ``/proc`` (Linux) to list a job's processes.
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from ..distributed import ANNOUNCE

__all__ = ["DistributedRunError", "LaunchResult", "launch_command", "run_local",
           "job_processes"]


class DistributedRunError(RuntimeError):
    """A launched job failed: a process died, the launcher failed, or the timeout passed.

    Attributes
    ----------
    output : str
        Everything the job printed (launcher, scheduler, servers and workers).
    dead : dict or None
        The process that died first: ``role``, ``task_id``, ``returncode`` and, when the worker
        announced itself (:func:`mxmixed.distributed.announce`), ``rank`` and ``pid``.
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
    cmd = launch_command(command, num_workers, num_servers)
    with tempfile.TemporaryFile(mode="w+b") as log:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=_job_env(env, num_workers + num_servers), cwd=cwd,
                                start_new_session=True)
        pgid = proc.pid
        reader = _LogReader(log, echo)
        try:
            while True:
                returncode = proc.poll()
                output = reader.read()
                dead = _find_death(output)
                elapsed = time.monotonic() - start
                if dead is not None:
                    _kill_group(pgid)
                    proc.wait()
                    output = reader.read()
                    raise DistributedRunError(
                        "distributed job failed after %.1f s: %s %s; killed the "
                        "remaining processes of the job (process group %d).\n--- last output "
                        "---\n%s" % (elapsed, _name(dead, output),
                                     _describe_returncode(dead["returncode"]), pgid,
                                     _tail(output)), output, dead)
                if returncode is not None:
                    _kill_group(pgid)  # stray processes the launcher left behind, if any
                    output = reader.read()
                    if returncode != 0:
                        raise DistributedRunError(
                            "the launcher %s after %.1f s.\n--- last output ---\n%s"
                            % (_describe_returncode(returncode), elapsed, _tail(output)),
                            output)
                    return LaunchResult(output, elapsed, cmd)
                if elapsed > timeout:
                    raise _timed_out(proc, pgid, timeout, reader)
                time.sleep(poll)
        finally:
            if proc.poll() is None:
                _kill_group(pgid)
                proc.wait()
            else:
                _kill_group(pgid, grace=0.5)
            reader.close()


def _job_env(env, processes):
    """This process's environment with ``env``, one thread share per process, unbuffered
    output, and this package importable."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(package)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (root, full_env.get("PYTHONPATH")) if p)
    return full_env


class _LogReader:
    """The job's output so far, read from its log file; whole new lines copied to ``echo``
    (the tracker's dump of the environment cut short)."""

    def __init__(self, log, echo):
        self.log, self.echo = log, echo
        self.chunks, self.read_at, self.partial = [], 0, ""

    def read(self):
        self.log.seek(self.read_at)
        data = self.log.read()
        self.read_at += len(data)
        if data:
            text = data.decode("utf-8", "replace")
            self.chunks.append(text)
            if self.echo is not None:
                lines = (self.partial + text).split("\n")
                self.partial = lines.pop()
                if lines:
                    self.echo.write("".join(_cut(line) + "\n" for line in lines))
                    self.echo.flush()
        return "".join(self.chunks)

    def close(self):
        if self.echo is not None and self.partial:
            self.echo.write(_cut(self.partial) + "\n")
            self.echo.flush()


def _timed_out(proc, pgid, timeout, reader):
    """Kill a job past its timeout; the error names what was still running."""
    alive = job_processes(pgid=pgid)
    _kill_group(pgid)
    proc.wait()
    output = reader.read()
    names = ", ".join("%s%s (pid %d)" % (p["role"] or "launcher",
                                         "" if p["task_id"] is None else " " + p["task_id"],
                                         p["pid"]) for p in alive) or "?"
    return DistributedRunError(
        "distributed job timed out after %.0f s; killed its process group %d, still running "
        "were: %s.\n--- last output ---\n%s" % (timeout, pgid, names, _tail(output)), output)
