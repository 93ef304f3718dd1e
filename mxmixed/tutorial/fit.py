"""The Gluon training and evaluation loops shared by the demo, notebooks, scripts and tests."""
import contextlib

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon

from .. import emulation
from .._core.progress import progress as progress_bar
from ..optim import multi_precision_trainer
from ..scaler import LossScaler
from ..training import amp_scope, clip_global_norm, init_trainer, scale_loss, step

__all__ = ["evaluate", "train_epoch", "fit"]


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
    for X, y in progress_bar(loader, enabled=progress, desc=desc, leave=False):
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
    for _ in progress_bar(range(epochs), enabled=progress, desc="epochs", total=epochs,
                          leave=False):
        losses.append(train_epoch(net, train_loader, trainer, ctx=ctx))
    return {"losses": losses, "accuracy": evaluate(net, test_loader, ctx)}


PRECISIONS = ("float32", "amp", "float16")


def experiment_scaler(trainer, mode, scaler=None):
    """Attach the loss scaling of one arm of a loss-scaling experiment to ``trainer``.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    mode : {'float32', 'float16-unscaled', 'float16-scaled'}
        No scaler; a static scale of 1 (AMP without loss scaling); ``scaler`` or dynamic.
    scaler : LossScaler or float or 'dynamic', optional
        For ``'float16-scaled'``; dynamic by default.

    Returns
    -------
    LossScaler or None
    """
    if mode == "float16-unscaled":
        return init_trainer(trainer, LossScaler.static(1.0))
    if mode == "float16-scaled":
        return init_trainer(trainer, scaler if scaler is not None else "dynamic")
    return None


def _param_bytes(net):
    return int(sum(np.prod(p.shape) * np.dtype(p.dtype).itemsize
                   for p in net.collect_params().values()))


def train_precision(precision, build_net, loaders, epochs=3, learning_rate=0.1, momentum=0.9,
                    scaler=None, clip=None, ctx=None, progress=True, hybridize=True,
                    kvstore="device"):
    """Train one classifier in float32, AMP or float16 (cast + master weights), same code path.

    This is the ``enabled=`` switch of the PyTorch AMP recipe: the three runs differ only in
    ``precision``. AMP runs inside :func:`mxmixed.amp_scope`, so float32 and AMP runs can sit
    side by side in one process; on a CPU, float16 is emulated (numerics, not speed).

    Parameters
    ----------
    precision : {'float32', 'amp', 'float16', 'bfloat16'}
        ``'amp'``: ``mxnet.contrib.amp`` through mxmixed, float32 params, dynamic scaling by
        default. ``'bfloat16'``: the same with ``target_dtype='bfloat16'`` (oneDNN, CPUs
        with AVX-512), no loss scaling by default. ``'float16'``: ``net.cast('float16')``,
        multi-precision SGD (float32 master weights), static scale 128 by default.
    build_net : callable
        Returns a fresh initialized network; called inside the precision's scope.
    loaders : tuple of DataLoader
        ``(train_loader, test_loader)``.
    epochs : int, default 3
    learning_rate, momentum : float
        SGD settings.
    scaler : {'dynamic'} or float or LossScaler, optional
        Loss scaling for 'amp' and 'float16'.
    clip : float, optional
        Clip the global norm of the true gradients.
    ctx : mxnet.Context, optional
        The CPU by default.
    progress : bool, default True
        A tqdm bar over the steps.
    hybridize : bool, default True
    kvstore : str, default 'device'
        The Trainer's kvstore; updates always happen locally (``update_on_kvstore=False``).

    Returns
    -------
    dict
        ``precision``, ``accuracy``, ``losses`` (per step), ``scales`` (per step, None in
        float32), ``skipped`` (count), ``param_bytes``, ``net`` and ``trainer``.
    """
    if precision not in PRECISIONS + ("bfloat16",):
        raise ValueError("precision must be one of %s, got %r"
                         % (PRECISIONS + ("bfloat16",), precision))
    if epochs < 1:
        raise ValueError("epochs must be at least 1, got %r" % (epochs,))
    ctx = ctx or mx.cpu()
    train_loader, test_loader = loaders
    dtype = "float16" if precision == "float16" else "float32"
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    optimizer_params = {"learning_rate": learning_rate, "momentum": momentum}
    losses, scales = [], []
    emulate = emulation.emulated("auto") if precision == "float16" else contextlib.nullcontext()
    amp_on = precision in ("amp", "bfloat16")
    target = "bfloat16" if precision == "bfloat16" else "float16"
    with emulate, amp_scope(enabled=amp_on, target_dtype=target):
        net = build_net()
        if precision == "float16":
            net.cast("float16")
            trainer = multi_precision_trainer(net.collect_params(), "sgd", optimizer_params,
                                              kvstore=kvstore)
            loss_scaler = init_trainer(trainer, 128.0 if scaler is None else scaler)
        else:
            trainer = gluon.Trainer(net.collect_params(), "sgd", optimizer_params,
                                    kvstore=kvstore, update_on_kvstore=False)
            default = "auto" if precision == "bfloat16" else "dynamic"
            loss_scaler = (init_trainer(trainer, default if scaler is None else scaler)
                           if amp_on else None)
        if hybridize:
            net.hybridize()
        bar = progress_bar(total=epochs * len(train_loader), desc=precision, leave=False,
                           enabled=progress)
        for _ in range(epochs):
            for X, y in train_loader:
                X = X.as_in_context(ctx).astype(dtype, copy=False)
                y = y.as_in_context(ctx)
                with autograd.record():
                    loss = loss_fn(net(X), y)
                    if loss_scaler is not None:
                        scales.append(loss_scaler.loss_scale)
                        with scale_loss(loss, trainer) as scaled:
                            scaled.backward()
                if loss_scaler is None:
                    loss.backward()
                if clip:
                    clip_global_norm(trainer, clip)
                step(trainer, X.shape[0])
                losses.append(float(loss.astype("float32").mean().asscalar()))
                bar.update(1)
        bar.close()
        accuracy = evaluate(net, test_loader, ctx, dtype=dtype)
    return {"precision": precision, "accuracy": accuracy, "losses": losses,
            "scales": scales or None,
            "skipped": loss_scaler.skipped_steps if loss_scaler is not None else 0,
            "param_bytes": _param_bytes(net), "net": net, "trainer": trainer}


def compare_precisions(build_net, make_loaders, precisions=PRECISIONS, seeds=(0,), epochs=3,
                       progress=True, **kwargs):
    """Train the same net in several precisions and seeds; summarise accuracy side by side.

    Parameters
    ----------
    build_net : callable
        ``build_net(seed)`` returns a fresh initialized network.
    make_loaders : callable
        ``make_loaders(seed)`` returns ``(train_loader, test_loader)``.
    precisions : sequence of str, default ('float32', 'amp', 'float16')
    seeds : sequence of int, default (0,)
    epochs : int, default 3
    progress : bool, default True
    **kwargs
        Passed to :func:`train_precision`.

    Returns
    -------
    list of dict
        One row per precision: ``precision``, ``accuracies`` (per seed), ``mean_accuracy``,
        ``final_loss`` (mean over seeds), ``final_scale`` and ``skipped`` (of the first seed),
        ``param_bytes``, and ``runs`` (the full results).
    """
    rows = []
    for precision in precisions:
        runs = [train_precision(precision, lambda s=seed: build_net(s), make_loaders(seed),
                                epochs=epochs, progress=progress, **kwargs) for seed in seeds]
        rows.append({"precision": precision,
                     "accuracies": [r["accuracy"] for r in runs],
                     "mean_accuracy": float(np.mean([r["accuracy"] for r in runs])),
                     "final_loss": float(np.mean([r["losses"][-1] for r in runs])),
                     "final_scale": runs[0]["scales"][-1] if runs[0]["scales"] else None,
                     "skipped": runs[0]["skipped"], "param_bytes": runs[0]["param_bytes"],
                     "runs": runs})
    return rows


def format_comparison(rows):
    """Format :func:`compare_precisions` rows as a fixed-width text table.

    Parameters
    ----------
    rows : list of dict

    Returns
    -------
    str
    """
    lines = ["%-9s %9s %10s %12s %8s %12s" % ("precision", "accuracy", "final loss", "final scale",
                                               "skipped", "param bytes")]
    for row in rows:
        scale = "-" if row["final_scale"] is None else "%g" % row["final_scale"]
        lines.append("%-9s %8.2f%% %10.4f %12s %8d %12d" % (
            row["precision"], 100 * row["mean_accuracy"], row["final_loss"], scale,
            row["skipped"], row["param_bytes"]))
    return "\n".join(lines)
