"""Multi-precision SGD for ``net.cast('float16')`` networks: float32 master weights.

A network cast to float16 keeps float16 weights, and an update of at most half a float16 ulp
of a weight is lost when added in float16: float16's ulp at 1.0 is 2**-10, so 1 + 2**-11 rounds
(a tie, to even) back to 1, and so does any smaller increase.
The remedy from NVIDIA's mixed-precision training talks is a float32 *master copy* of every
float16 weight: the float16 gradients are cast to float32, the optimizer updates the master
copy, and the master copy is cast back into the float16 model.

Two ways to get it here:

* :func:`multi_precision_trainer`: a Gluon ``Trainer`` whose optimizer keeps the master copies
  itself (MXNet's ``multi_precision=True``, with the fused ``mp_sgd_mom_update`` kernels for
  SGD); :func:`master_weights` reads them back.
* the explicit steps of the talk, for teaching, in :mod:`mxmixed.tutorial.master` (notebook
  02): ``make_master_params`` ("prep"), ``grads_to_master``, ``sgd_momentum_step`` and
  ``master_to_model``. They give bit for bit the weights of MXNet's fused
  ``mp_sgd_mom_update``.

.. note::
   Under AMP (:func:`mxmixed.init`, ``amp.init``) the parameters stay float32 and AMP casts
   per op, so there is nothing for master weights to do: ``multi_precision`` only matters for
   networks cast with ``net.cast('float16')``.
"""
import warnings
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

import mxnet as mx
from mxnet import gluon
from mxnet.optimizer import Optimizer

from ._core.dtypes import FLOAT16, FLOAT32
from ._core.kvstore import kvstore_name

__all__ = ["MULTI_PRECISION_OPTIMIZERS", "multi_precision_trainer", "master_weights"]

# what a Trainer takes as its parameters
_Params = Union[gluon.ParameterDict, Dict[str, gluon.Parameter], Sequence[gluon.Parameter]]


#: The MXNet 1.9.1 optimizers that keep float32 master weights with ``multi_precision=True``.
#: SGD, NAG and LARS create the master copy themselves (``state[1]``) and update it with fused
#: ``mp_*`` kernels. All the others use the generic layout of ``mxnet.optimizer.Optimizer``
#: (master copy in ``state[0]``): LAMB updates it with its ``mp_lamb_*`` kernels, the rest
#: through the generic wrapper (the update applied to the master copy with the gradient cast
#: to float32, then the master cast back into the float16 weight).
#: ``tests/training/test_optim_multi_precision_sgd.py`` checks every one of them.
MULTI_PRECISION_OPTIMIZERS = ("sgd", "nag", "signum", "ftml", "lars", "lbsgd", "lamb", "dcasgd",
                              "sgld", "adam", "adagrad", "rmsprop", "adadelta", "ftrl", "adamax",
                              "nadam", "groupadagrad")

_REFUSED = {
    "ccsgd": "'ccsgd' is a deprecated alias of 'sgd'; use 'sgd'",
    "test": "'test' is MXNet's internal test optimizer, not one to train with",
}


def param_list(params: _Params, what: str = "params") -> List[gluon.Parameter]:
    """The ``gluon.Parameter`` objects of ``params``, checked: not empty, no name twice.

    Parameters
    ----------
    params : gluon.ParameterDict, dict or list of gluon.Parameter
    what : str
        The argument's name, for the error messages.

    Returns
    -------
    list of gluon.Parameter
    """
    if isinstance(params, (gluon.ParameterDict, dict)):
        items = list(params.values())
    elif isinstance(params, (list, tuple)):
        items = list(params)
    else:
        raise TypeError("%s must be a ParameterDict (net.collect_params()), a dict or a list of "
                        "gluon.Parameter, got %s" % (what, type(params).__name__))
    for p in items:
        if not isinstance(p, gluon.Parameter):
            raise TypeError("%s must hold gluon.Parameter objects, got a %s"
                            % (what, type(p).__name__))
    if not items:
        raise ValueError("%s is empty" % what)
    names = [p.name for p in items]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError("%s holds the same parameter name more than once: %s"
                         % (what, ", ".join(duplicates)))
    return items


def _supported_list():
    return ", ".join(repr(n) for n in MULTI_PRECISION_OPTIMIZERS)


def _is_stock(klass):
    return klass.__module__.startswith("mxnet.optimizer")


def _check_optimizer_name(name):
    key = name.lower()
    if key in _REFUSED:
        raise ValueError("%s; optimizers with float32 master weights: %s"
                         % (_REFUSED[key], _supported_list()))
    registry = Optimizer.opt_registry
    if key not in registry:
        raise ValueError("unknown optimizer %r; optimizers with float32 master weights: %s"
                         % (name, _supported_list()))
    if key not in MULTI_PRECISION_OPTIMIZERS or not _is_stock(registry[key]):
        raise ValueError("optimizer %r (%s.%s) is not one whose float32 master weights mxmixed "
                         "has checked; use one of %s"
                         % (name, registry[key].__module__, registry[key].__name__,
                            _supported_list()))


def _check_optimizer_instance(optimizer, optimizer_params):
    if optimizer_params:
        raise ValueError("optimizer_params must be empty when optimizer is an Optimizer "
                         "instance (%s); set its parameters when creating it"
                         % type(optimizer).__name__)
    name = type(optimizer).__name__.lower()
    if name not in MULTI_PRECISION_OPTIMIZERS or not _is_stock(type(optimizer)):
        raise ValueError("optimizer %s is not one whose float32 master weights mxmixed has "
                         "checked; use one of %s" % (type(optimizer).__name__, _supported_list()))
    if not optimizer.multi_precision:
        raise ValueError("this %s was created with multi_precision=False and would accumulate "
                         "in float16; create it with multi_precision=True, or pass its name"
                         % type(optimizer).__name__)


def multi_precision_trainer(params: _Params, optimizer: Union[str, Optimizer] = "sgd",
                            optimizer_params: Optional[Dict[str, Any]] = None,
                            kvstore: Union[str, mx.kvstore.KVStore] = "device") -> gluon.Trainer:
    """A Gluon ``Trainer`` that keeps float32 master copies of the float16 parameters.

    It is ``gluon.Trainer(params, optimizer, {..., 'multi_precision': True}, kvstore,
    update_on_kvstore=False)``, with the checks MXNet leaves out: the optimizer must really keep
    master weights (see :data:`MULTI_PRECISION_OPTIMIZERS`), and the updates happen locally, as
    :func:`mxmixed.init_trainer` and loss scaling need.

    Parameters
    ----------
    params : mxnet.gluon.ParameterDict or dict or list of mxnet.gluon.Parameter
        The parameters, e.g. ``net.collect_params()`` of a net cast with
        ``net.cast('float16')``. Float32 parameters in it (BatchNorm's, which ``cast`` leaves
        float32) are updated in float32 as usual.
    optimizer : str or mxnet.optimizer.Optimizer, default 'sgd'
        A name from :data:`MULTI_PRECISION_OPTIMIZERS` (case-insensitive), or an instance of one
        of them created with ``multi_precision=True``.
    optimizer_params : dict, optional
        Optimizer settings (``learning_rate``, ``momentum``, ``wd`` ...); ``multi_precision`` is
        set to True. Must be empty when ``optimizer`` is an instance.
    kvstore : str or mxnet.kvstore.KVStore, default 'device'
        As for ``gluon.Trainer``. An asynchronous kvstore is refused (it updates on the
        server).

    Returns
    -------
    mxnet.gluon.Trainer
        The trainer, with ``update_on_kvstore=False``. Its master weights exist after the first
        ``step``; :func:`master_weights` returns them.

    Raises
    ------
    TypeError
        For params that are not Parameters, or optimizer_params that is not a dict.
    ValueError
        For an unknown optimizer, one without float32 master weights, ``multi_precision=False``
        in ``optimizer_params``, or an asynchronous kvstore.

    .. note::
       Under AMP (``mxmixed.init`` / ``amp.init``) the parameters stay float32 (AMP casts per
       op), so ``multi_precision`` changes nothing there: it matters for networks cast with
       ``net.cast('float16')``. A warning says so when no parameter is float16.

    Examples
    --------
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> net = gluon.nn.Dense(10, in_units=64)
    >>> net.initialize()
    >>> net.cast("float16")
    >>> trainer = mxmixed.optim.multi_precision_trainer(
    ...     net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    >>> trainer.optimizer.multi_precision
    True
    """
    items = param_list(params)
    if optimizer_params is not None and not isinstance(optimizer_params, dict):
        raise TypeError("optimizer_params must be a dict or None, got %s"
                        % type(optimizer_params).__name__)
    if isinstance(optimizer, Optimizer):
        _check_optimizer_instance(optimizer, optimizer_params)
        settings = None
    elif isinstance(optimizer, str):
        _check_optimizer_name(optimizer)
        settings = dict(optimizer_params or {})
        if settings.get("multi_precision", True) is not True:
            raise ValueError("multi_precision_trainer always sets multi_precision=True; drop "
                             "multi_precision=%r from optimizer_params (use gluon.Trainer for "
                             "float16 accumulation)" % (settings["multi_precision"],))
        settings["multi_precision"] = True
    else:
        raise TypeError("optimizer must be a name such as 'sgd' or an mxnet Optimizer, got %s"
                        % type(optimizer).__name__)
    kv_name = kvstore_name(kvstore)
    if "async" in kv_name:
        raise ValueError("kvstore %r updates on the server; multi-precision with loss scaling "
                         "needs local updates (a synchronous kvstore such as 'device')" % kv_name)
    if not any(np.dtype(p.dtype) == FLOAT16 for p in items):
        warnings.warn("no parameter is float16, so there are no master weights to keep: under "
                      "AMP the parameters stay float32 and multi_precision changes nothing; it "
                      "is for networks cast with net.cast('float16')", stacklevel=2)
    return gluon.Trainer(params, optimizer, settings, kvstore=kvstore, update_on_kvstore=False)


def _master_position(optimizer):
    klass = type(optimizer)
    if klass.create_state_multi_precision is Optimizer.create_state_multi_precision:
        return 0  # the generic wrapper: (master, state)
    return 1      # SGD, NAG, LARS: (momentum, master)


def master_weights(trainer: gluon.Trainer) -> "OrderedDict[str, mx.nd.NDArray]":
    """The float32 master weights a multi-precision Trainer keeps.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
        A trainer with ``multi_precision=True`` (e.g. from :func:`multi_precision_trainer`)
        that has made at least one ``step``.

    Returns
    -------
    collections.OrderedDict of str to mxnet.nd.NDArray
        Parameter name to its float32 master copy, for the float16 parameters only (float32
        parameters have none). These are the optimizer's own arrays, on the first context: do
        not write to them.

    Raises
    ------
    TypeError
        For anything but a Gluon Trainer.
    ValueError
        When the trainer's optimizer has ``multi_precision=False``.
    RuntimeError
        Before the first ``step`` (MXNet creates the master copies there), or when the
        trainer updates on the kvstore (the states then live in the kvstore).

    Examples
    --------
    The float32 master copies appear with the first update:

    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> import mxmixed
    >>> net = gluon.nn.Dense(10, in_units=64)
    >>> net.initialize()
    >>> net.cast("float16")
    >>> trainer = mxmixed.optim.multi_precision_trainer(
    ...     net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    >>> with mxmixed.emulation.emulated():     # float16 Dense on a CPU
    ...     with autograd.record():
    ...         loss = net(mx.nd.ones((4, 64), dtype="float16")).sum()
    ...     loss.backward()
    ...     trainer.step(4)
    >>> masters = mxmixed.optim.master_weights(trainer)
    >>> sorted(str(w.dtype.__name__) for w in masters.values())
    ['float32', 'float32']
    """
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError("master_weights needs a gluon.Trainer, got %s" % type(trainer).__name__)
    optimizer = trainer._optimizer
    if not optimizer.multi_precision:
        raise ValueError("this Trainer's %s has multi_precision=False: it keeps no master "
                         "weights; create it with mxmixed.optim.multi_precision_trainer"
                         % type(optimizer).__name__)
    if trainer._update_on_kvstore:
        raise RuntimeError("this Trainer updates on the kvstore, where its states cannot be "
                           "read; create it with update_on_kvstore=False")
    states = trainer._updaters[0].states if trainer._updaters else {}
    position = _master_position(optimizer)
    masters = OrderedDict()
    for index, param in enumerate(trainer._params):
        if np.dtype(param.dtype) != FLOAT16 or param.grad_req == "null":
            continue
        if index not in states:
            raise RuntimeError("the Trainer has no state for '%s' yet: MXNet creates the master "
                               "weights at the first trainer.step()" % param.name)
        state = states[index]
        master = state[position] if isinstance(state, (tuple, list)) else None
        if not isinstance(master, mx.nd.NDArray) or master.dtype != FLOAT32 \
                or master.shape != param.shape:
            raise RuntimeError("the state of '%s' holds no float32 master copy where %s keeps "
                               "it" % (param.name, type(optimizer).__name__))
        masters[param.name] = master
    return masters
