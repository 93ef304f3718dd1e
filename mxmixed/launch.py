"""``python -m mxmixed.launch``: MXNet's own launcher, made to run on Python 3.9 and later.

``python -m mxnet.tools.launch`` crashes on Python >= 3.9 because its bundled ``dmlc_tracker``
calls ``threading.Thread.isAlive()``, which Python 3.9 removed. This entry point aliases
``isAlive`` to ``is_alive`` and then runs ``mxnet.tools.launch`` unchanged, with the same
arguments::

    python -m mxmixed.launch --launcher local -n 2 -s 1 python examples/distributed_amp.py
    python -m mxmixed.launch --launcher ssh -H hosts -n 4 -s 2 python train.py --kvstore dist_sync

One more adaptation, for ``--launcher local`` only: every process of a local job runs on this
machine, so the tracker (the ps-lite scheduler) listens on ``127.0.0.1`` and each server and
worker announces ``127.0.0.1`` (``DMLC_NODE_HOST``), instead of the first non-loopback
interface that ``dmlc_tracker`` and ps-lite would pick. Set ``DMLC_NODE_HOST`` yourself to
override it. The scheduler's port is one the system hands out as free, not the first free one
from 9091, which two jobs started together would both take. Other launchers are untouched.

.. note::
   MXNet's local launcher blocks forever when a worker dies: the tracker raises in a background
   thread and the surviving workers wait for the dead one. Bound local runs with
   :func:`mxmixed.tutorial.local_job.run_local`, which kills the whole process group and names the
   dead worker.
"""
import os
import runpy
import socket
import sys
import threading

__all__ = ["main"]

LOOPBACK = "127.0.0.1"


def _alias_is_alive():
    if not hasattr(threading.Thread, "isAlive"):
        threading.Thread.isAlive = threading.Thread.is_alive


def _launcher(argv):
    for i, arg in enumerate(argv):
        if arg == "--launcher" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--launcher="):
            return arg.split("=", 1)[1]
        if not arg.startswith("-") and i > 0 and argv[i - 1] not in (
                "-n", "--num-workers", "-s", "--num-servers", "-H", "--hostfile",
                "--sync-dst-dir", "--env-server", "--env-worker", "--env"):
            return None  # the command starts here; its own flags are not the launcher's
    return None


def _loopback_for_local_jobs():
    from dmlc_tracker import tracker

    host = os.environ.setdefault("DMLC_NODE_HOST", LOOPBACK)
    tracker.get_host_ip = lambda host_ip=None: host
    scheduler = tracker.PSTracker

    def scheduler_on_a_free_port(hostIP, cmd, port=None, port_end=None, envs=None):
        start = _free_port()
        return scheduler(hostIP, cmd, port=start, port_end=start + 1, envs=envs)

    tracker.PSTracker = scheduler_on_a_free_port


def _free_port():
    """A port the system has just handed out as free (dmlc_tracker's own search starts at 9091
    for every job, so two local jobs started together shared one scheduler port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def main(argv=None):
    """Run ``mxnet.tools.launch`` with ``argv`` (default: ``sys.argv[1:]``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    _alias_is_alive()
    if _launcher(argv) == "local":
        _loopback_for_local_jobs()
    sys.argv = ["mxnet.tools.launch"] + argv
    runpy.run_module("mxnet.tools.launch", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    sys.exit(main())
