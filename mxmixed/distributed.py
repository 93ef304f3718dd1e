"""Helpers for mixed precision across workers: MXNet's ``dist_sync`` kvstore (and Horovod).

What makes mixed precision safe across workers is already in :func:`mxmixed.init_trainer`:
the Trainer updates locally (``update_on_kvstore=False``), so the overflow check runs on the
gradients *after* they were summed over all workers. An inf or NaN on one worker is part of
every worker's sum, so every worker skips the same step and every :class:`~mxmixed.LossScaler`
takes the same decisions. This module adds what a distributed job needs around that:

* where this process stands in the job: :func:`rank`, :func:`num_workers`,
  :func:`launcher_env`, :func:`is_distributed`;
* :func:`init_kvstore`: rank 0's initial weights on every worker *before* the first gradient
  push. Gluon does it inside the first ``step``, unordered with that push, and with
  ``update_on_kvstore=False`` a late pull can write summed gradients into a worker's weights;
* checkpoints written by rank 0 only, atomically: :func:`save_checkpoint`.

The launch itself goes through ``python -m mxmixed.launch``, MXNet's own launcher made to run on
Python 3.9 and later (see :mod:`mxmixed.launch`). A bounded run of a whole local job, for tests
and examples, is :func:`mxmixed.tutorial.local_job.run_local`.
"""
import os
import sys
from typing import IO, TYPE_CHECKING, Any, Dict, Mapping, Optional, Union

from . import checkpoint
from ._core.kvstore import init_kvstore, is_distributed, kvstore_name
from .scaler import LossScaler

if TYPE_CHECKING:  # for the annotations only: checkpoint imports MXNet when it runs
    import mxnet as mx

__all__ = ["launcher_env", "rank", "num_workers", "is_distributed", "check_launched",
           "announce", "init_kvstore", "save_checkpoint"]

#: The start of the line :func:`announce` prints; :mod:`mxmixed.tutorial.local_job` reads it.
ANNOUNCE = "mxmixed-worker"


# ----------------------------------------------------------------------------- where am I
def launcher_env(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
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


def rank(kvstore: Optional["mx.kvstore.KVStore"] = None) -> int:
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


def num_workers(kvstore: Optional["mx.kvstore.KVStore"] = None) -> int:
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


def check_launched(kvstore: Union[str, "mx.kvstore.KVStore"]) -> None:
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
            "%s ..." % (kvstore_name(kvstore), os.path.basename(sys.executable),
                        os.path.basename(sys.argv[0] or "train.py")))


def announce(kvstore: Optional["mx.kvstore.KVStore"], stream: Optional[IO[str]] = None) -> None:
    """Print one line that ties this worker's launcher task id to its kvstore rank and pid.

    :func:`mxmixed.tutorial.local_job.run_local` reads it to name a dead worker by its rank.

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


# ----------------------------------------------------------------------------- checkpoints
def save_checkpoint(path: Union[str, "os.PathLike[str]"], net: "mx.gluon.Block",
                    trainer: Optional["mx.gluon.Trainer"] = None,
                    scaler: Optional[LossScaler] = None, extra: Any = None,
                    kvstore: Union["mx.kvstore.KVStore", int, None] = None,
                    barrier: bool = True) -> bool:
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
        Then wait for every worker: the kvstore's global barrier, or, with a rank under an
        initialized Horovod (``horovod.mxnet`` imported by the script), an allreduce of one
        number over all ranks.

    Returns
    -------
    bool
        Whether this process wrote the file.

    .. note::
       Parameters and optimizer states are the same on every worker, so rank 0's are the
       job's. BatchNorm's running mean and variance are not synchronized by the kvstore: the
       checkpoint holds rank 0's, computed on its own shards.
    """
    if isinstance(kvstore, int) and not isinstance(kvstore, bool):
        mine = kvstore
    else:
        mine = rank(kvstore) if kvstore is not None else 0
    wrote = False
    if mine == 0:
        checkpoint.save(path, net, trainer=trainer, scaler=scaler, extra=extra)
        wrote = True
    if barrier and isinstance(kvstore, int) and not isinstance(kvstore, bool):
        _horovod_barrier()
    elif barrier and kvstore is not None and not isinstance(kvstore, int) \
            and is_distributed(kvstore):
        kvstore._barrier()
    return wrote


def _horovod_barrier():
    """Wait for every rank of an initialized Horovod job; nothing when there is none.

    Horovod's MXNet API has no barrier: a blocking allreduce of one number stands for it. Only
    a script that imported ``horovod.mxnet`` itself gets here: mxmixed never imports it.
    """
    hvd = sys.modules.get("horovod.mxnet")
    if hvd is None or not hvd.is_initialized() or hvd.size() == 1:
        return
    import mxnet as mx

    hvd.allreduce(mx.nd.zeros((1,)), name="mxmixed.distributed.barrier").wait_to_read()
