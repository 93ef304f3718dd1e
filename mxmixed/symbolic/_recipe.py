"""The manual float16 recipe of MXNet's original tutorial, for the Module API.

A float16 body between casts with ``SoftmaxOutput`` in float32, and the optimizer settings
for ``multi_precision=True`` with static loss scaling. Re-exported by :mod:`mxmixed.symbolic`.
"""
from typing import Any, Callable, Dict

import numpy as np

import mxnet as mx

from .._core.dtypes import FLOAT16, FLOAT32

__all__ = ["float16_softmax_symbol", "multi_precision_params", "multi_precision_optimizer"]


# ------------------------------------------------------------------ the manual recipe
def float16_softmax_symbol(body: Callable[[mx.sym.Symbol], mx.sym.Symbol], dtype: str = "float16",
                           loss_scale: float = 1.0, data_name: str = "data",
                           name: str = "softmax") -> mx.sym.Symbol:
    """Wrap a network body the way MXNet's original float16 tutorial does.

    The data is cast to ``dtype`` right after the input variable, the body runs in that
    dtype, and its output is cast back to float32 before ``SoftmaxOutput``, whose
    ``grad_scale`` is the static loss scale.

    Parameters
    ----------
    body : callable
        ``body(data) -> mxnet.symbol.Symbol``, the network from the (cast) input to the logits.
    dtype : {'float16', 'float32'}, default 'float16'
        ``'float32'`` builds the same network without casts, for a float32 baseline.
    loss_scale : float, default 1.0
        Static loss scale, set as ``grad_scale`` of ``SoftmaxOutput``. Pair it with
        :func:`multi_precision_optimizer` (same ``loss_scale``), which divides it back out.
    data_name : str, default 'data'
        Name of the input variable.
    name : str, default 'softmax'
        Name of the ``SoftmaxOutput`` op (its label input is ``name + '_label'``).

    Returns
    -------
    mxnet.symbol.Symbol

    .. note::
       Only static loss scaling exists for the Module API in MXNet 1.9.1; dynamic loss
       scaling (``amp.init_trainer``, :class:`mxmixed.LossScaler`) is Gluon-only.
    """
    if np.dtype(dtype) not in (FLOAT16, FLOAT32):
        raise ValueError("dtype must be 'float16' or 'float32', got %r" % (dtype,))
    if not loss_scale > 0:
        raise ValueError("loss_scale must be positive, got %r" % (loss_scale,))
    data = mx.sym.var(data_name)
    half = np.dtype(dtype) == FLOAT16
    if half:
        data = mx.sym.Cast(data, dtype="float16", name=data_name + "_float16")
    out = body(data)
    if half:
        out = mx.sym.Cast(out, dtype="float32", name=name + "_input_float32")
    return mx.sym.SoftmaxOutput(out, name=name, grad_scale=float(loss_scale))


def multi_precision_params(batch_size: int, loss_scale: float = 1.0, learning_rate: float = 0.01,
                           **kwargs: Any) -> Dict[str, Any]:
    """Optimizer settings for float16 Module API training: master weights, static scaling.

    Pass them as ``mod.fit(..., optimizer='sgd', optimizer_params=...)``.

    Parameters
    ----------
    batch_size : int
        The batch size; ``rescale_grad`` is ``1 / (loss_scale * batch_size)``, which undoes
        both the loss scale and the summed ``SoftmaxOutput`` gradient.
    loss_scale : float, default 1.0
        The static loss scale given to :func:`float16_softmax_symbol`.
    learning_rate : float, default 0.01
        The learning rate.
    **kwargs
        Further optimizer settings (``momentum``, ``wd``, ...).

    Returns
    -------
    dict
        With ``multi_precision=True``: the optimizer keeps float32 master copies of the
        float16 weights and updates those.

    .. note::
       The original tutorial's ``mx.optimizer.create('sgd', multi_precision=True, lr=0.01)``
       raises TypeError in MXNet 1.9.1: the keyword is ``learning_rate``.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1, got %r" % (batch_size,))
    if not loss_scale > 0:
        raise ValueError("loss_scale must be positive, got %r" % (loss_scale,))
    params = dict(kwargs)
    params.update(multi_precision=True, learning_rate=learning_rate,
                  rescale_grad=1.0 / (float(loss_scale) * batch_size))
    return params


def multi_precision_optimizer(batch_size: int, loss_scale: float = 1.0, optimizer: str = "sgd",
                              learning_rate: float = 0.01,
                              **kwargs: Any) -> mx.optimizer.Optimizer:
    """The optimizer of :func:`multi_precision_params`, created.

    Parameters
    ----------
    batch_size, loss_scale, learning_rate, **kwargs
        As in :func:`multi_precision_params`.
    optimizer : str, default 'sgd'
        A name known to ``mx.optimizer.create``.

    Returns
    -------
    mxnet.optimizer.Optimizer

    .. note::
       ``Module.fit`` warns that ``rescale_grad`` "is not normalized to 1.0/batch_size" when
       given an optimizer object with a loss scale; that is intended here. The
       ``optimizer_params`` form (:func:`multi_precision_params`) does not warn.
    """
    return mx.optimizer.create(optimizer, **multi_precision_params(
        batch_size, loss_scale, learning_rate, **kwargs))
