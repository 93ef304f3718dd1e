"""The kvstore facts every layer needs: its name, whether it is distributed, early init.

One home for reading a kvstore's name (``'device'``, ``'dist_sync'``, a KVStore object or
None) and for the broadcast of rank 0's weights before the first gradient push. It imports
nothing of mxmixed, so that :mod:`mxmixed.training` and :mod:`mxmixed.distributed` can both
use it; :mod:`mxmixed.distributed` re-exports it.
"""

from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:  # for the annotations only
    import mxnet as mx

__all__ = ["kvstore_name", "is_distributed", "trainer_is_distributed", "init_kvstore",
           "ensure_local_updates", "ready_kvstore"]


def kvstore_name(kvstore):
    """The type name of a kvstore given by name or as an object.

    Parameters
    ----------
    kvstore : str or mxnet.kvstore.KVStore or None

    Returns
    -------
    str
        e.g. ``'device'``, ``'dist_sync'``; ``''`` for None.
    """
    if kvstore is None:
        return ""
    return kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "") or ""


def is_distributed(kvstore: Union[str, "mx.kvstore.KVStore", None]) -> bool:
    """Whether ``kvstore`` (a name or a KVStore) is a distributed ps-lite kvstore.

    Parameters
    ----------
    kvstore : str or mxnet.kvstore.KVStore or None

    Returns
    -------
    bool
    """
    return "dist" in kvstore_name(kvstore)  # as MXNet itself tests it (gluon.Trainer)


def trainer_is_distributed(trainer):
    """Whether a Gluon Trainer was created with a distributed kvstore.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    bool
    """
    return is_distributed(trainer._kvstore_params.get("kvstore"))


def init_kvstore(trainer: "mx.gluon.Trainer") -> Optional["mx.kvstore.KVStore"]:
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

    Returns
    -------
    mxnet.kvstore.KVStore or None
        The trainer's kvstore (None for a single device without one).

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


def ensure_local_updates(trainer):
    """Make a Trainer update locally (``update_on_kvstore=False``), which loss scaling needs.

    A Trainer with sparse weights (``row_sparse``, e.g. GluonNLP's big LM) must update on its
    kvstore, MXNet decides: on one machine it keeps doing so, and the overflow check runs
    before anything is pushed (``training/_handle``); a distributed one is refused.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    bool
        Whether the Trainer updates locally (False: on its local kvstore, for sparse weights).

    Raises
    ------
    ValueError
        For an asynchronous kvstore, a Trainer that already updates on its kvstore, or sparse
        weights on a distributed kvstore.
    """
    config = trainer._kvstore_params
    name = kvstore_name(config.get("kvstore"))
    if "async" in name:
        raise ValueError("kvstore '%s' updates on the server, before any overflow check; loss "
                         "scaling needs a synchronous kvstore with update_on_kvstore=False" % name)
    if getattr(trainer, "_contains_sparse_weight", False) \
            and config.get("update_on_kvstore") is not False:
        if is_distributed(config.get("kvstore")):
            raise ValueError("sparse weights make the Trainer update on its kvstore '%s', where "
                             "the servers apply a step before any overflow check: loss "
                             "scaling cannot skip a step there; train the sparse weights dense "
                             "or on one machine" % name)
        return False
    if trainer._kv_initialized:
        if trainer._kvstore is not None and trainer._update_on_kvstore:
            raise ValueError("this Trainer already updates on the kvstore, where an overflowing "
                             "step is applied before the check; create it with "
                             "gluon.Trainer(..., update_on_kvstore=False) before its first step")
        return True
    if config.get("update_on_kvstore") is True:
        raise ValueError("the Trainer was created with update_on_kvstore=True: the kvstore would "
                         "apply overflowing steps before the overflow check; create it with "
                         "gluon.Trainer(params, optimizer, ..., update_on_kvstore=False)")
    config["update_on_kvstore"] = False
    return True


def ready_kvstore(trainer):
    """Create a distributed Trainer's kvstore before its first push (:func:`init_kvstore`).

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    """
    if trainer_is_distributed(trainer) and (not trainer._kv_initialized
                                             or trainer._params_to_init):
        init_kvstore(trainer)
