"""A dense-prediction task on the digits whose float16 gradients really underflow.

Notebook 06 uses it to reproduce, on a CPU, the effect that motivates loss scaling. Each image
is a 2 x 2 grid of handwritten digits (scikit-learn's, upscaled to 32 x 32, so 64 x 64 in all);
its target holds one mask per digit class, marking the pixels of the digits of that class. The
net predicts all ten masks, and the loss is the sigmoid cross-entropy **averaged over every
pixel of every mask** of the batch, as dense losses are normalised over pixels or anchors.

That average is what makes the gradients small: the gradient of each logit is
``(sigmoid(z) - y) / N`` with ``N = batch * 10 * 64 * 64``, about 1.3 million for a batch of 32,
so every logit gradient is below float16's smallest normal number (``2**-14``), and all those
whose error is below about ``N * 2**-25`` (4% for a batch of 32) round to zero in float16.
"""
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from ..diagnostics import collect_gradients, gradient_stats
from ..diagnostics.gradients import ACTIVATION_MARK
from ..training import amp_scope, scale_loss, step
from .data import digits_arrays
from .fit import experiment_scaler

__all__ = ["DENSE_MODES", "digit_grids", "DenseDigitsNet", "MeanSigmoidBCE",
           "float16_activation_gradients", "train_dense"]

DENSE_MODES = ("float32", "float16-unscaled", "float16-scaled")
CLASSES = 10


def digit_grids(count, seed=0, split="train", grid=2, digit_size=32, threshold=0.3):
    """Images of ``grid x grid`` digits and one mask per class marking their pixels.

    Parameters
    ----------
    count : int
        Number of images.
    seed : int, default 0
        Which digits go where; the same seed gives the same images.
    split : {'train', 'test'}, default 'train'
        Draw the digits from the training or the test part of
        :func:`mxmixed.tutorial.digits_arrays` (its default split).
    grid : int, default 2
    digit_size : int, default 32
        Side of one digit (a multiple of 8; the 8 x 8 digits are upscaled).
    threshold : float, default 0.3
        Ink level (digits lie in [0, 1]) above which a pixel belongs to its digit's mask.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Images ``(count, 1, S, S)`` and masks ``(count, 10, S, S)``, float32, with
        ``S = grid * digit_size``.
    """
    X_train, y_train, X_test, y_test = digits_arrays(size=digit_size)
    X, y = (X_train, y_train) if split == "train" else (X_test, y_test)
    rng = np.random.RandomState(seed)
    picks = rng.randint(0, len(y), size=(count, grid * grid))
    side = grid * digit_size
    images = np.zeros((count, 1, side, side), np.float32)
    masks = np.zeros((count, CLASSES, side, side), np.float32)
    rows = np.arange(count)
    for k in range(grid * grid):
        r, c = divmod(k, grid)
        window = (slice(r * digit_size, (r + 1) * digit_size),
                  slice(c * digit_size, (c + 1) * digit_size))
        digits = X[picks[:, k], 0]
        images[(slice(None), 0) + window] = digits
        ink = (digits > threshold).astype(np.float32)
        masks[(rows, y[picks[:, k]]) + window] = ink
    return images, masks


class DenseDigitsNet(nn.HybridBlock):
    """A small fully convolutional net: class scores on an 8 x 8 grid, upsampled 8x.

    A 4 x 4 convolution with stride 4, a 3 x 3 convolution, a 2 x 2 max-pool, another 3 x 3
    convolution and a 1 x 1 convolution to the 10 classes give coarse scores, which are
    upsampled to the input's size (nearest neighbour), as FCN upsamples its score maps before a
    per-pixel loss. Channel counts are multiples of 8.
    """

    def __init__(self, channels=32, upsample=8, **kwargs):
        super().__init__(**kwargs)
        self.upsample = upsample
        with self.name_scope():
            self.features = nn.HybridSequential(prefix="features_")
            with self.features.name_scope():
                self.features.add(
                    nn.Conv2D(16, 4, strides=4, activation="relu", in_channels=1),
                    nn.Conv2D(channels, 3, padding=1, activation="relu", in_channels=16),
                    nn.MaxPool2D(2),
                    nn.Conv2D(channels, 3, padding=1, activation="relu", in_channels=channels),
                )
            self.scores = nn.Conv2D(CLASSES, 1, in_channels=channels, prefix="scores_")

    def hybrid_forward(self, F, x):
        scores = self.scores(self.features(x))
        return F.UpSampling(scores, scale=self.upsample, sample_type="nearest")


class MeanSigmoidBCE(gluon.HybridBlock):
    """Sigmoid cross-entropy averaged over every element: one scalar per batch.

    The logits are cast to float32 first, as AMP does for its float32 loss ops, so the loss
    and its gradient are computed in float32; the gradient is rounded to float16 where it
    flows back into the float16 logits. Written as ``softrelu(z) - z * label`` (MXNet's
    softrelu returns ``z`` itself past 20, so it does not overflow), in three elementwise ops
    over the batch's million elements rather than seven.
    """

    def hybrid_forward(self, F, logits, label):
        z = F.cast(logits, "float32")
        return F.mean(F.Activation(z, act_type="softrelu") - z * label)


def float16_activation_gradients(grads):
    """Keep the activation gradients that are float16 tensors under AMP (the net's, not the
    loss's), from :func:`mxmixed.diagnostics.collect_gradients` output."""
    return {k: v for k, v in grads.items()
            if k.endswith(ACTIVATION_MARK) and not k.startswith("meansigmoidbce")}


def _measure(net, loss_fn, batch, scale):
    grads = collect_gradients(net, batch, loss_fn=loss_fn, activations=True)
    return gradient_stats(float16_activation_gradients(grads), scale)


def train_dense(mode, data, steps=300, batch_size=32, learning_rate=0.01, scaler=None,
                seed=0, measure_at=(), ctx=None):
    """Train :class:`DenseDigitsNet` in float32, or in float16 (AMP) with or without scaling.

    The three modes share one loop (Adam, the mean loss back-propagated as it is); only the
    precision and the loss scaler differ:

    * ``'float32'``: no AMP;
    * ``'float16-unscaled'``: AMP (:func:`mxmixed.amp_scope`) with ``LossScaler.static(1.0)``:
      no scaling (the scaler would only skip a step whose gradients hold inf or NaN, and
      count it);
    * ``'float16-scaled'``: AMP with a dynamic :class:`~mxmixed.LossScaler` (``scaler``).

    Parameters
    ----------
    mode : {'float32', 'float16-unscaled', 'float16-scaled'}
    data : tuple of numpy.ndarray
        ``(X_train, Y_train, X_test, Y_test)`` from :func:`digit_grids`.
    steps : int, default 300
    batch_size : int, default 32
    learning_rate : float, default 0.01
        Adam's learning rate.
    scaler : LossScaler, optional
        For ``'float16-scaled'``: the scaler; a default dynamic one otherwise.
    seed : int, default 0
        Seeds the initial weights and the order of the batches.
    measure_at : sequence of int
        Steps after which the activation gradients of the current batch are measured in
        float32 (:func:`mxmixed.diagnostics.collect_gradients`) and placed against float16's
        range at the scale the run uses (1 without scaling).
    ctx : mxnet.Context, optional

    Returns
    -------
    dict
        ``mode``, ``losses`` (per step), ``test_loss``, ``scales`` (per step, None in
        float32), ``skipped``, ``stats`` (step to :class:`GradientStats`), ``seconds`` (the
        training loop alone), ``net`` and ``trainer``.
    """
    if mode not in DENSE_MODES:
        raise ValueError("mode must be one of %s, got %r" % (DENSE_MODES, mode))
    X_train, Y_train, X_test, Y_test = data
    ctx = ctx or mx.cpu()
    loss_fn = MeanSigmoidBCE()
    loss_fn.hybridize()
    rng = np.random.RandomState(seed)
    result = {"mode": mode, "losses": [], "scales": None if mode == "float32" else [],
              "stats": {}}
    seconds = 0.0
    with amp_scope(enabled=mode != "float32"):
        mx.random.seed(seed)
        net = DenseDigitsNet()
        net.initialize(mx.init.Xavier(), ctx=ctx)
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": learning_rate},
                                update_on_kvstore=False)
        loss_scaler = experiment_scaler(trainer, mode, scaler)
        for i in range(steps):
            pick = rng.randint(0, len(X_train), batch_size)
            X = mx.nd.array(X_train[pick], ctx=ctx)
            Y = mx.nd.array(Y_train[pick], ctx=ctx)
            started = time.perf_counter()
            with autograd.record():
                loss = loss_fn(net(X), Y)
                if loss_scaler is not None:
                    result["scales"].append(loss_scaler.loss_scale)
                    with scale_loss(loss, trainer) as scaled:
                        scaled.backward()
                else:
                    loss.backward()
            step(trainer, 1)
            result["losses"].append(float(loss.asscalar()))
            seconds += time.perf_counter() - started
            if i in measure_at:
                scale = loss_scaler.loss_scale if mode == "float16-scaled" else 1.0
                result["stats"][i] = _measure(net, loss_fn, (X, Y), scale)
        test = [loss_fn(net(mx.nd.array(X_test[j:j + 64], ctx=ctx)),
                        mx.nd.array(Y_test[j:j + 64], ctx=ctx)).asscalar()
                for j in range(0, len(X_test), 64)]
    result.update(test_loss=float(np.mean(test)), seconds=seconds, net=net, trainer=trainer,
                  skipped=loss_scaler.skipped_steps if loss_scaler is not None else 0)
    return result
