"""Module API helpers for the Symbol tutorials: fit a Module on the digits, read its optimizer.

The notebooks on the Symbol API import these instead of writing a training loop and a
callback inline. Everything here uses public MXNet API only: the optimizer states are read
through ``Module.save_optimizer_states``, not through the Module's private updater.
"""
import os
import tempfile
import warnings

import mxnet as mx
import numpy as np

from ..checkpoint import unpickle

__all__ = ["digits_iter", "fit_module", "module_accuracy", "module_optimizer_states"]


def digits_iter(X, y, batch_size=64, shuffle=False):
    """An ``NDArrayIter`` over images and labels, labelled ``softmax_label``.

    Parameters
    ----------
    X : numpy.ndarray
        Images, NCHW.
    y : numpy.ndarray
        Integer labels.
    batch_size : int, default 64
    shuffle : bool, default False
        Training iterators shuffle and drop the last partial batch; evaluation iterators keep
        the order and pad the last batch (``Module.predict`` drops the padding again).

    Returns
    -------
    mxnet.io.NDArrayIter
    """
    return mx.io.NDArrayIter(X, y.astype(np.float32), batch_size=batch_size, shuffle=shuffle,
                             last_batch_handle="discard" if shuffle else "pad",
                             label_name="softmax_label")


def fit_module(sym, optimizer, X, y, epochs=4, batch_size=64, ctx=None, seed=0):
    """Train a Module with ``Module.fit`` and record the training loss of every batch.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        A graph ending in ``SoftmaxOutput`` (for example from
        :func:`mxmixed.float16_softmax_symbol`).
    optimizer : mxnet.optimizer.Optimizer
        Created by the caller, so that its settings (``multi_precision``, ``rescale_grad``)
        stay inspectable after training. Module's warning that its ``rescale_grad`` is not
        ``1/batch_size`` is silenced: with a loss scale it is ``1/(scale * batch_size)``.
    X, y : numpy.ndarray
        Training images and labels.
    epochs : int, default 4
    batch_size : int, default 64
    ctx : mxnet.Context, optional
        The CPU by default.
    seed : int, default 0
        Seeds ``mx.random`` and NumPy (the iterator's shuffle) before training.

    Returns
    -------
    (mxnet.mod.Module, list of float)
        The trained Module and the cross-entropy of every batch (as the loss the scaled
        ``SoftmaxOutput`` reports, unscaled).
    """
    mx.random.seed(seed)
    np.random.seed(seed)
    metric, losses, last = mx.metric.CrossEntropy(), [], {}

    def record(param):
        # the metric accumulates over an epoch: keep the difference of each batch
        total, count = (0.0, 0) if param.nbatch == 0 else last["seen"]
        last["seen"] = (metric.sum_metric, metric.num_inst)
        losses.append((metric.sum_metric - total) / (metric.num_inst - count))

    mod = mx.mod.Module(sym, context=ctx or mx.cpu())
    with warnings.catch_warnings():
        # a loss-scaled optimizer's rescale_grad is 1/(scale * batch) on purpose
        warnings.filterwarnings("ignore", message="Optimizer created manually outside Module")
        mod.fit(digits_iter(X, y, batch_size, shuffle=True), num_epoch=epochs,
                optimizer=optimizer, initializer=mx.init.Xavier(magnitude=2.0),
                eval_metric=metric, batch_end_callback=record)
    return mod, losses


def module_accuracy(mod, X, y, batch_size=64):
    """Top-1 accuracy of a trained classifier Module on images ``X`` with labels ``y``.

    Returns
    -------
    float
    """
    probabilities = mod.predict(digits_iter(X, y, batch_size)).asnumpy()
    return float((probabilities.argmax(axis=1) == y).mean())


def module_optimizer_states(mod):
    """The optimizer state of every trained parameter of a Module, by parameter name.

    Reads them through the public ``Module.save_optimizer_states``. With a multi-precision
    SGD and momentum, the state of a float16 weight is ``(momentum, float32 master weight)``;
    that of a float32 weight is its momentum alone.

    Parameters
    ----------
    mod : mxnet.mod.Module
        A Module after ``fit`` (or ``init_optimizer``), updating locally.

    Returns
    -------
    dict of str to NDArray or tuple of NDArray
    """
    handle, path = tempfile.mkstemp(suffix=".states")
    os.close(handle)
    try:
        mod.save_optimizer_states(path)
        with open(path, "rb") as f:  # MXNet's own pickle, written just now by this process
            states = unpickle(path, f.read(), "optimizer states")
    finally:
        os.remove(path)
    if isinstance(states, tuple):  # (states, optimizer) when the optimizer was dumped too
        states = states[0]
    # the updater numbers the parameters in the order of the graph's arguments
    inputs = set(mod.data_names) | set(mod.label_names)
    names = [n for n in mod.symbol.list_arguments() if n not in inputs]
    return {names[i]: state for i, state in states.items()}
