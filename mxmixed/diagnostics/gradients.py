"""Gradients against float16's range: collection, per-tensor shares, and a loss-scale advisor.

The talks' picture is drawn from gradients computed in float32: they show where each value
*would* land in float16 at a given loss scale. :func:`collect_gradients` computes them in
float32 in an executor of its own (the net, its gradients and its BatchNorm statistics are
left alone), or reads the gradients a backward pass left on the net.
"""
import math
from collections import OrderedDict
from typing import Any, Dict, Iterable, Mapping, Optional, Union

import numpy as np

import mxnet as mx
from mxnet import gluon

from ._executor import Namer, Run
from ._tracing import (DATA, LABEL, Batch, check_block, check_has_gradients, check_initialized,
                     split_batch, strip_amp_casts, trace)
from .float16 import FLOAT16_MAX, LOG2_EDGES, combine, float16_shares

__all__ = ["collect_gradients", "gradient_stats", "GradientStats", "recommend_loss_scale",
           "LossScaleAdvice"]

ACTIVATION_MARK = " (output gradient)"


# ---------------------------------------------------------------- collecting gradients
def collect_gradients(net: gluon.HybridBlock, batch: Optional[Batch] = None,
                      loss_fn: Optional[gluon.loss.Loss] = None, activations: bool = False,
                      grad_scale: float = 1.0, ctx: Optional[mx.Context] = None
                      ) -> "OrderedDict[str, np.ndarray]":
    """The gradients of a Gluon net's parameters (and, optionally, of its activations).

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock
        An initialized net (float32, under AMP, or cast to float16).
    batch : (NDArray, NDArray) or NDArray, optional
        ``(X, y)``: one forward and backward pass in float32 with ``loss_fn``, in an executor
        of its own; X alone: the head gradient is 1 on every output. Without a batch, the
        gradients a backward pass left on the parameters are read.
    loss_fn : mxnet.gluon.loss.Loss, optional
        Softmax cross-entropy by default (when y is given). The gradient is that of the
        per-sample losses summed, as ``loss.backward()`` computes it in Gluon.
    activations : bool, default False
        With a batch, also return the gradients flowing into every op's outputs (keys end
        with ``' (output gradient)'``). Under AMP these are float16 tensors too, and they are
        where a large loss scale overflows first.
    grad_scale : float, default 1.0
        Without a batch: the loss scale the backward pass used (for example
        ``mxmixed.loss_scaler(trainer).loss_scale``); the gradients are divided by it.
    ctx : mxnet.Context, optional
        Where to run; the context of X by default.

    Returns
    -------
    collections.OrderedDict of str to numpy.ndarray
        float32 gradients by parameter name, in the net's parameter order, then the
        activation gradients in backward execution order.

    Raises
    ------
    TypeError
        For a plain ``gluon.Block`` or a Symbol.
    RuntimeError
        For an uninitialized net.
    ValueError
        For a net without gradients (``grad_req='null'`` everywhere, or no backward pass yet
        when no batch is given) and for a batch that does not fit the net.
    """
    check_block(net, "collect_gradients")
    if batch is None:
        if activations:
            raise ValueError("activation gradients need a batch: pass batch=(X, y)")
        return _read_gradients(net, grad_scale)
    X, y = split_batch(batch)
    params = check_initialized(net, X)
    check_has_gradients(params)
    ctx = ctx or X.context
    if y is not None and loss_fn is None:
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    sym = strip_amp_casts(trace(net, loss_fn, with_label=y is not None))
    inputs = {DATA: X.astype("float32", copy=False)}
    if y is not None:
        inputs[LABEL] = y
    values = {n: _float32(p.data(ctx)) for n, p in params.items() if n in sym.list_inputs()}
    grad_names = [n for n, p in params.items() if p.grad_req != "null" and n in values]
    run = Run(sym, inputs, values, values, grad_names, ctx)
    found = OrderedDict()
    namer = Namer(run.graph, dict((n, v.shape) for n, v in run.args.items()), grad_names)
    run.forward(watch=lambda phase, name, array: namer.record_forward(name, array.shape))
    watch = _activation_watch(namer, run.graph, found) if activations else None
    run.backward(1.0, watch=watch)
    grads = OrderedDict((n, run.grads[n].asnumpy()) for n in grad_names)
    grads.update(found)
    return grads


def _float32(array):
    return array.astype("float32") if array.dtype != np.float32 else array


def _activation_watch(namer, graph, found):
    nodes = graph.nodes

    def watch(phase, name, array):
        _, _, source = namer.backward_source(name, array.shape)
        if source is None or nodes[source[0]].is_variable or not namer.computed(source):
            return
        src, out = source
        key = nodes[src].name + ("" if out == 0 else "[%d]" % out) + ACTIVATION_MARK
        if key in found:
            n = 2
            while "%s#%d" % (key, n) in found:
                n += 1
            key = "%s#%d" % (key, n)
        found[key] = array.asnumpy().astype(np.float32)

    return watch


def _read_gradients(net, grad_scale):
    if not (isinstance(grad_scale, (int, float)) and math.isfinite(grad_scale) and grad_scale > 0):
        raise ValueError("grad_scale must be positive and finite, got %r" % (grad_scale,))
    params = check_initialized(net)
    check_has_gradients(params)
    grads = OrderedDict()
    for name, param in params.items():
        if param.grad_req == "null" or param._grad is None:
            continue
        # one buffer per device, each from its share of the batch: their sum is the gradient
        total = sum(g.asnumpy().astype(np.float64) for g in param.list_grad())
        grads[name] = (total / grad_scale).astype(np.float32)
    if not grads:
        raise ValueError("the net has no gradients: no parameter has a gradient buffer (was "
                         "the net initialized with grad_req='null'?)")
    if all(not np.any(g) for g in grads.values()):
        raise ValueError("every gradient of the net is zero: run a backward pass first, or "
                         "pass batch=(X, y) to compute one")
    return grads


# ---------------------------------------------------------------- statistics
class GradientStats:
    """Per-tensor float16 range shares of a set of gradients at one loss scale.

    Attributes
    ----------
    scale : float
        The loss scale the gradients were multiplied by.
    tensors : collections.OrderedDict of str to RangeShares
        One entry per gradient tensor.
    total : RangeShares
        All tensors pooled (weighted by size).
    edges : numpy.ndarray
        The log2 histogram's bin edges (:data:`~mxmixed.diagnostics.float16.LOG2_EDGES`).
    """

    def __init__(self, tensors, scale):
        self.scale = float(scale)
        self.tensors = OrderedDict((s.name, s) for s in tensors)
        self.total = combine(self.tensors.values())
        self.edges = LOG2_EDGES

    def __getitem__(self, name):
        return self.tensors[name]

    def table(self, width: int = 48) -> str:
        """A text table: one row per tensor and a pooled row, shares in percent.

        Returns
        -------
        str
        """
        head = "%-*s %10s %7s %9s %10s %8s %9s %10s" % (
            width, "gradient (loss scale %g)" % self.scale, "elements", "zero%",
            "to-zero%", "subnormal%", "normal%", "overflow%", "max |g*S|")
        rows = [head, "-" * len(head)]
        for s in list(self.tensors.values()) + [self.total]:
            rows.append("%-*s %10d %7.2f %9.3f %10.3f %8.2f %9.3f %10.3g" % (
                width, s.name[-width:], s.size, 100 * s.zero, 100 * s.underflow,
                100 * s.subnormal, 100 * s.normal, 100 * s.overflow, s.max_abs))
        return "\n".join(rows)

    def __str__(self):
        return self.table()

    def __repr__(self):
        t = self.total
        return ("GradientStats(scale=%g, tensors=%d, underflow=%.4f, subnormal=%.4f, "
                "overflow=%.4f)" % (self.scale, len(self.tensors), t.underflow, t.subnormal,
                                    t.overflow))


def gradient_stats(gradients: Union[Mapping[str, Any], gluon.HybridBlock], scale: float = 1.0,
                   **collect_kwargs: Any) -> "GradientStats":
    """Where each gradient lands in float16 at a loss scale: shares and log2 histograms.

    Parameters
    ----------
    gradients : dict of str to array, or mxnet.gluon.HybridBlock
        Gradients as :func:`collect_gradients` returns them, or a net (then
        ``collect_gradients(net, **collect_kwargs)`` is called first).
    scale : float, default 1.0
        The loss scale to evaluate.
    **collect_kwargs
        ``batch``, ``loss_fn``, ``activations``, ``grad_scale``, ``ctx`` for
        :func:`collect_gradients`.

    Returns
    -------
    GradientStats

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import gluon
    >>> from sklearn.datasets import load_digits
    >>> from mxmixed import diagnostics
    >>> digits = load_digits()
    >>> batch = (mx.nd.array(digits.data[:32] / 16), mx.nd.array(digits.target[:32]))
    >>> net = gluon.nn.Dense(10)
    >>> net.initialize()
    >>> net.hybridize()
    >>> stats = diagnostics.gradient_stats(net, batch=batch)
    >>> isinstance(stats, diagnostics.GradientStats)
    True
    """
    if isinstance(gradients, gluon.Block):
        gradients = collect_gradients(gradients, **collect_kwargs)
    elif collect_kwargs:
        raise TypeError("%s only apply when a net is given" % sorted(collect_kwargs))
    if not isinstance(gradients, dict) or not gradients:
        raise ValueError("gradients must be a non-empty dict {name: array} (from "
                         "collect_gradients) or a Gluon net")
    return GradientStats([float16_shares(g, scale, name) for name, g in gradients.items()], scale)


# ---------------------------------------------------------------- the advisor
class LossScaleAdvice:
    """What :func:`recommend_loss_scale` found.

    Attributes
    ----------
    scale : float
        The recommended static loss scale (a power of two).
    max_abs : float
        The largest gradient magnitude measured (unscaled).
    max_name : str
        The gradient tensor it was found in.
    headroom : float
        The factor kept free below 65504: ``scale * max_abs * headroom <= 65504``.
    scaled, unscaled : GradientStats
        The measured gradients at ``scale`` and at 1.
    batches : int
        How many batches were measured.
    """

    def __init__(self, scale, max_abs, max_name, headroom, scaled, unscaled, batches, capped):
        self.scale = scale
        self.max_abs = max_abs
        self.max_name = max_name
        self.headroom = headroom
        self.scaled = scaled
        self.unscaled = unscaled
        self.batches = batches
        self.capped = capped

    @property
    def underflow(self) -> Dict[str, float]:
        """dict: the share of gradient values rounding to zero, ``{'scaled', 'unscaled'}``."""
        return {"scaled": self.scaled.total.underflow, "unscaled": self.unscaled.total.underflow}

    @property
    def subnormal(self) -> Dict[str, float]:
        """dict: the share landing in the subnormal range, ``{'scaled', 'unscaled'}``."""
        return {"scaled": self.scaled.total.subnormal, "unscaled": self.unscaled.total.subnormal}

    def __str__(self):
        lines = [
            "recommended static loss scale: %g (2**%d)"
            % (self.scale, round(math.log2(self.scale))),
            "  largest gradient |g| = %.4g in %s (%d batch%s measured)"
            % (self.max_abs, self.max_name, self.batches, "" if self.batches == 1 else "es"),
            "  check: %g * %.4g * headroom %g = %.4g <= 65504"
            % (self.scale, self.max_abs, self.headroom,
               self.scale * self.max_abs * self.headroom),
            "  values rounding to zero in float16: %.3f%% unscaled -> %.3f%% at this scale"
            % (100 * self.underflow["unscaled"], 100 * self.underflow["scaled"]),
            "  subnormal (precision lost):          %.3f%% unscaled -> %.3f%% at this scale"
            % (100 * self.subnormal["unscaled"], 100 * self.subnormal["scaled"]),
        ]
        if self.capped:
            lines.append("  capped at max_scale %g" % self.scale)
        if self.scale < 1:
            lines.append("  the gradients exceed float16's range even unscaled: keep the "
                         "layer named above in float32, or lower the learning signal")
        lines.append("  gradients change during training: re-measure later, or use a dynamic "
                     "LossScaler starting here")
        return "\n".join(lines)

    def __repr__(self):
        return "LossScaleAdvice(scale=%g, max_abs=%.4g, headroom=%g)" % (
            self.scale, self.max_abs, self.headroom)


def _batches(batches, num_batches):
    if isinstance(batches, (tuple, list)) and len(batches) == 2 and \
            not isinstance(batches[0], (tuple, list)):
        return [batches]
    if isinstance(batches, (mx.nd.NDArray, np.ndarray)):
        return [batches]
    picked = []
    for batch in batches:
        picked.append(batch)
        if len(picked) >= num_batches:
            break
    if not picked:
        raise ValueError("no batches to measure")
    return picked


def recommend_loss_scale(net: gluon.HybridBlock, batches: Union[Batch, Iterable[Batch]],
                         loss_fn: Optional[gluon.loss.Loss] = None, headroom: float = 8.0,
                         max_scale: float = 2.0 ** 24, num_batches: int = 4,
                         activations: bool = True, ctx: Optional[mx.Context] = None
                         ) -> "LossScaleAdvice":
    """The largest power-of-two static loss scale whose scaled gradients stay below 65504.

    The gradients are measured in float32 (see :func:`collect_gradients`), on parameters and,
    by default, on activations, the float16 tensors where a large scale overflows first.
    The scale is ``2**floor(log2(65504 / (headroom * max|g|)))``, capped at ``max_scale``.

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock
        An initialized net.
    batches : (X, y) or iterable of (X, y)
        One batch, or a DataLoader / list; the first ``num_batches`` are measured and the
        largest gradient over all of them counts.
    loss_fn : mxnet.gluon.loss.Loss, optional
        Softmax cross-entropy by default.
    headroom : float, default 8.0
        Safety factor for gradients that grow during training (8: three powers of two).
    max_scale : float, default 2**24
        Ceiling (MXNet's dynamic scaler's).
    num_batches : int, default 4
        How many batches of an iterable to measure.
    activations : bool, default True
        Include activation gradients (recommended: under AMP they are float16).
    ctx : mxnet.Context, optional

    Returns
    -------
    LossScaleAdvice
        ``advice.scale`` goes to ``mxmixed.init_trainer(trainer, scaler=advice.scale)``.

    .. note::
       Gradients are those of the summed per-sample losses (what ``loss.backward()`` computes
       in Gluon before ``trainer.step(batch_size)`` divides), so the scale depends on the batch
       size: measure with the batch size you train with.

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import gluon
    >>> from sklearn.datasets import load_digits
    >>> from mxmixed import diagnostics
    >>> digits = load_digits()
    >>> batch = (mx.nd.array(digits.data[:32] / 16), mx.nd.array(digits.target[:32]))
    >>> net = gluon.nn.Dense(10)
    >>> net.initialize()
    >>> net.hybridize()
    >>> advice = diagnostics.recommend_loss_scale(net, [batch])
    >>> 1 <= advice.scale <= 2 ** 24
    True
    """
    if not (math.isfinite(headroom) and headroom >= 1):
        raise ValueError("headroom must be a finite number >= 1, got %r" % (headroom,))
    if not (math.isfinite(max_scale) and max_scale > 0):
        raise ValueError("max_scale must be positive and finite, got %r" % (max_scale,))
    picked = _batches(batches, int(num_batches))
    pooled = OrderedDict()
    max_abs, max_name = 0.0, None
    for n, batch in enumerate(picked):
        grads = collect_gradients(net, batch, loss_fn=loss_fn, activations=activations, ctx=ctx)
        for name, g in grads.items():
            finite = np.abs(g[np.isfinite(g)])
            peak = float(finite.max()) if finite.size else 0.0
            if peak > max_abs:
                max_abs, max_name = peak, name
            pooled["%s @%d" % (name, n) if len(picked) > 1 else name] = g
    if max_abs == 0.0:
        raise ValueError("every measured gradient is zero: nothing to scale")
    exponent = math.floor(math.log2(FLOAT16_MAX / (headroom * max_abs)))
    scale = 2.0 ** exponent
    capped = scale > max_scale
    if capped:
        scale = 2.0 ** math.floor(math.log2(max_scale))
    return LossScaleAdvice(scale, max_abs, max_name, float(headroom),
                           gradient_stats(pooled, scale), gradient_stats(pooled, 1.0),
                           len(picked), capped)
