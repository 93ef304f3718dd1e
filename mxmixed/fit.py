"""The plain Gluon training and evaluation loops shared by the demo, notebooks and tests."""
import numpy as np

import mxnet as mx
from mxnet import autograd, gluon

__all__ = ["evaluate", "train_epoch", "fit"]


def _progress(iterable, enabled, desc, total=None):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False)


def evaluate(net, loader, ctx=None, dtype="float32"):
    """Top-1 accuracy of a classifier on a DataLoader.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The classifier.
    loader : mxnet.gluon.data.DataLoader
        Yields ``(X, y)`` batches.
    ctx : mxnet.Context, optional
        Where to run; the CPU by default.
    dtype : str, default 'float32'
        The dtype the inputs are cast to (``'float16'`` for ``net.cast('float16')`` nets).

    Returns
    -------
    float
        The share of correctly classified samples, in [0, 1].
    """
    ctx = ctx or mx.cpu()
    correct = total = 0
    for X, y in loader:
        out = net(X.as_in_context(ctx).astype(dtype, copy=False))
        pred = out.argmax(axis=1).asnumpy().astype(np.int64)
        correct += int((pred == y.asnumpy().astype(np.int64)).sum())
        total += len(pred)
    if total == 0:
        raise ValueError("the loader yielded no samples")
    return correct / total


def train_epoch(net, loader, trainer, loss_fn=None, ctx=None, dtype="float32", progress=False,
                desc="train"):
    """Train for one pass over a DataLoader in plain float32 (or a cast network's dtype).

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    loader : mxnet.gluon.data.DataLoader
        Yields ``(X, y)`` batches.
    trainer : mxnet.gluon.Trainer
        The trainer of ``net``'s parameters.
    loss_fn : mxnet.gluon.loss.Loss, optional
        Softmax cross-entropy by default.
    ctx : mxnet.Context, optional
        Where to run; the CPU by default.
    dtype : str, default 'float32'
        The dtype the inputs are cast to.
    progress : bool, default False
        Show a tqdm bar.
    desc : str
        Label of the bar.

    Returns
    -------
    float
        The mean training loss over the epoch.
    """
    ctx = ctx or mx.cpu()
    loss_fn = loss_fn or gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for X, y in _progress(loader, progress, desc):
        X = X.as_in_context(ctx).astype(dtype, copy=False)
        y = y.as_in_context(ctx)
        with autograd.record():
            loss = loss_fn(net(X), y)
        loss.backward()
        trainer.step(X.shape[0])
        losses.append(float(loss.mean().asscalar()))
    return float(np.mean(losses))


def fit(net, train_loader, test_loader, epochs=3, learning_rate=0.1, momentum=0.9, ctx=None,
        progress=True):
    """Train a float32 classifier with SGD and report its test accuracy.

    Parameters
    ----------
    net : mxnet.gluon.Block
        An initialized classifier.
    train_loader, test_loader : mxnet.gluon.data.DataLoader
        The data.
    epochs : int, default 3
        Passes over the training data.
    learning_rate, momentum : float
        SGD settings.
    ctx : mxnet.Context, optional
        Where to run; the CPU by default.
    progress : bool, default True
        Show a tqdm bar over the epochs.

    Returns
    -------
    dict
        ``{'losses': [...], 'accuracy': float}``.
    """
    if epochs < 1:
        raise ValueError("epochs must be at least 1, got %r" % (epochs,))
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": learning_rate, "momentum": momentum})
    losses = []
    for epoch in _progress(range(epochs), progress, "epochs", total=epochs):
        losses.append(train_epoch(net, train_loader, trainer, ctx=ctx))
    return {"losses": losses, "accuracy": evaluate(net, test_loader, ctx)}
