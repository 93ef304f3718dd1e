"""A language-model loss-scaling experiment (the tutorials use :mod:`mxmixed.tutorial.dense`).

:func:`train_language_model` runs one training loop for float32, AMP without loss scaling and
AMP with dynamic loss scaling, recording the loss and the share of gradients that round to
zero in float16.
"""
import math
import time

import mxnet as mx
from mxnet import autograd, gluon

from ..._core.progress import progress as progress_bar
from ...diagnostics import collect_gradients, gradient_stats
from ...diagnostics.gradients import ACTIVATION_MARK
from ...training import amp_scope, clip_global_norm, scale_loss, step
from ..fit import experiment_scaler
from .batches import BPTTBatches
from .model import LSTMLanguageModel, TokenCrossEntropyLoss
from .vocab import check_int

__all__ = ["LM_MODES", "float16_activation_gradients", "train_language_model"]


LM_MODES = ("float32", "float16-unscaled", "float16-scaled")
"""tuple of str: the three runs of :func:`train_language_model`."""


def float16_activation_gradients(net):
    """Names, in :func:`~mxmixed.diagnostics.collect_gradients` output, of the activation
    gradients that are float16 tensors under AMP.

    They are the gradients flowing into the decoder's output (the logits), the LSTM's output
    and the embedding's output. (The gradients of the loss ops, ``log_softmax`` and ``pick``,
    stay float32 under AMP; the LSTM's fused parameter vector is a parameter gradient.)

    Parameters
    ----------
    net : LSTMLanguageModel

    Returns
    -------
    list of str
    """
    if not isinstance(net, LSTMLanguageModel):
        raise TypeError("net must be an LSTMLanguageModel, got %s" % type(net).__name__)
    return [net.decoder.name + "_fwd" + ACTIVATION_MARK, net.lstm.prefix + "rnn0" + ACTIVATION_MARK,
            net.embedding.name + "_fwd" + ACTIVATION_MARK]


def _detach(states):
    return [s.detach() for s in states]


def train_language_model(mode, build_net, batches, steps, learning_rate=2e-3, clip=1.0,
                         scaler=None, measure_every=25, ctx=None, progress=True):
    """Train a language model in float32, or float16 (AMP) with or without loss scaling.

    The three modes run one loop; only the precision and the loss scaler differ:

    * ``'float32'``: no AMP, no scaler; clipping with ``gluon.utils.clip_global_norm``.
    * ``'float16-unscaled'``: AMP (:func:`mxmixed.amp_scope`) with a static scale of 1, i.e.
      no loss scaling. The scaler still skips a step whose gradients hold inf or NaN (and
      counts it in ``skipped``), so this run can fail only through underflow and precision
      loss, not through one overflowing step poisoning the weights.
    * ``'float16-scaled'``: AMP with a dynamic :class:`~mxmixed.scaler.LossScaler`
      (MXNet's constants: 2**16 to start, halved on overflow, doubled after 2000 clean steps).

    The loss of a window is the *mean* per-token cross-entropy, back-propagated as it is (as
    bigLSTM and gluon-nlp's language-model scripts do), and the step is ``step(trainer, 1)``.
    Adam; the hidden state is carried from window to window and detached.

    Every ``measure_every`` steps (and at the first and last step), after the update, the
    gradients of the current window are recomputed in float32 with
    :func:`mxmixed.diagnostics.collect_gradients` (from zero initial states) and
    :func:`mxmixed.diagnostics.gradient_stats` gives the share of the nonzero values that
    round to zero in float16 at the scale the run uses (1 without scaling, the scaler's scale
    with it; in float32, what float16 without scaling would lose), for the parameters and for
    the activation gradients named by :func:`float16_activation_gradients`.

    Parameters
    ----------
    mode : {'float32', 'float16-unscaled', 'float16-scaled'}
    build_net : callable
        Returns a fresh initialized :class:`LSTMLanguageModel`; called inside the AMP scope.
    batches : BPTTBatches
        Windows are cycled through when ``steps`` exceeds their number.
    steps : int
    learning_rate : float, default 2e-3
        Adam's learning rate.
    clip : float or None, default 1.0
        Global norm of the true (unscaled) gradients to clip to; None: no clipping.
    scaler : LossScaler, optional
        For ``'float16-scaled'`` only: the scaler to use instead of a default dynamic one.
    measure_every : int or None, default 25
        None: no gradient measurements.
    ctx : mxnet.Context, optional
    progress : bool, default True
        A text tqdm bar over the steps.

    Returns
    -------
    dict
        ``mode``, ``losses`` (per step, float32 values; inf or nan when the run diverged),
        ``measured_steps``, ``underflow_params`` and ``underflow_activations`` (shares per
        measurement), ``scales`` (per step; 1.0 without scaling, None in float32),
        ``skipped`` (steps skipped on overflow), ``seconds`` (wall time of the loop, without
        measurements), ``net`` and ``trainer``.

    .. note::
       The loss block is hybridized, so AMP's graph pass casts the float16 logits to float32
       for ``log_softmax`` (on AMP's float32 list), as on a GPU.
    """
    _check_lm_arguments(mode, batches, steps, measure_every, clip, scaler)
    ctx = ctx or mx.cpu()
    loss_fn = TokenCrossEntropyLoss()
    loss_fn.hybridize()  # AMP's graph pass then casts the logits to float32 for log_softmax
    result = {"mode": mode, "losses": [], "measured_steps": [], "underflow_params": [],
              "underflow_activations": [], "scales": [] if mode != "float32" else None}
    measure_at = set() if measure_every is None else \
        set(range(0, steps, measure_every)) | {steps - 1}
    seconds = 0.0
    with amp_scope(enabled=mode != "float32"):
        net = build_net()
        if not isinstance(net, LSTMLanguageModel):
            raise TypeError("build_net must return an LSTMLanguageModel, got %s"
                            % type(net).__name__)
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": learning_rate},
                                update_on_kvstore=False)
        loss_scaler = experiment_scaler(trainer, mode, scaler)
        params = [p for p in net.collect_params().values() if p.grad_req != "null"]
        activation_keys = float16_activation_gradients(net)
        states = net.begin_state(batches.batch_size, ctx=ctx)
        # text bars (not widgets): they render in the docs
        bar = progress_bar(total=steps, desc=mode, mininterval=2.0, enabled=progress, widget=False)
        for i in range(steps):
            x_np, y_np = batches[i % len(batches)]
            if i % len(batches) == 0:
                states = net.begin_state(batches.batch_size, ctx=ctx)
            X, y = mx.nd.array(x_np, ctx=ctx), mx.nd.array(y_np, ctx=ctx)
            started = time.perf_counter()
            if loss_scaler is not None:
                result["scales"].append(loss_scaler.loss_scale)
            value, states = _train_step(net, loss_fn, X, y, _detach(states), trainer,
                                        loss_scaler is not None, clip, params, ctx)
            seconds += time.perf_counter() - started
            result["losses"].append(value)
            if i in measure_at:
                scale = loss_scaler.loss_scale if mode == "float16-scaled" else 1.0
                params_share, acts_share = _underflow_shares(
                    net, (X, y), loss_fn, activation_keys,
                    scale / (batches.seq_len * batches.batch_size), ctx)
                result["measured_steps"].append(i)
                result["underflow_params"].append(params_share)
                result["underflow_activations"].append(acts_share)
            bar.update(1)
        bar.close()
    result.update(skipped=loss_scaler.skipped_steps if loss_scaler is not None else 0,
                  seconds=seconds, net=net, trainer=trainer)
    return result


def _train_step(net, loss_fn, X, y, states, trainer, scaled_loss, clip, params, ctx):
    """One step: the mean token loss, backward (scaled under a loss scaler), clip, update.

    Returns the loss (float) and the carried states.
    """
    with autograd.record():
        logits, states = net(X, *states)
        loss = loss_fn(logits, y).mean()
        if scaled_loss:
            with scale_loss(loss, trainer) as scaled:
                scaled.backward()
        else:
            loss.backward()
    if clip is not None:
        if scaled_loss:
            clip_global_norm(trainer, clip)
        else:
            gluon.utils.clip_global_norm([p.grad(ctx) for p in params], clip)
    step(trainer, 1)
    return float(loss.astype("float32").asscalar()), states


def _check_lm_arguments(mode, batches, steps, measure_every, clip, scaler):
    if mode not in LM_MODES:
        raise ValueError("mode must be one of %s, got %r" % (LM_MODES, mode))
    if not isinstance(batches, BPTTBatches):
        raise TypeError("batches must be a BPTTBatches, got %s" % type(batches).__name__)
    check_int("steps", steps, 1)
    if measure_every is not None:
        check_int("measure_every", measure_every, 1)
    if clip is not None and not (isinstance(clip, (int, float)) and math.isfinite(clip)
                                 and clip > 0):
        raise ValueError("clip must be positive and finite, or None; got %r" % (clip,))
    if scaler is not None and mode != "float16-scaled":
        raise ValueError("a scaler applies to mode 'float16-scaled' only, not %r" % (mode,))


def _underflow_shares(net, batch, loss_fn, activation_keys, scale, ctx):
    """Shares of the parameter and of the activation gradients that round to zero in float16.

    ``collect_gradients`` gives the gradient of the summed token losses; the run
    back-propagates their mean, so its float16 values are these times ``scale`` (the loss
    scale over the number of tokens).
    """
    grads = collect_gradients(net, batch, loss_fn=loss_fn, activations=True, ctx=ctx)
    weights = {n: g for n, g in grads.items() if not n.endswith(ACTIVATION_MARK)}
    acts = {n: g for n, g in grads.items() if n in activation_keys}
    if len(acts) != len(activation_keys):
        raise RuntimeError("activation gradients %s not found among %s"
                           % (sorted(set(activation_keys) - set(acts)), list(grads)))
    return (gradient_stats(weights, scale).total.underflow,
            gradient_stats(acts, scale).total.underflow)
