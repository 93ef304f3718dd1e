"""The emulation's overflow check for ``mxnet.contrib.amp``'s loss scaler: exact, fast on a CPU.

MXNet 1.9.1's ``LossScaler.has_overflow`` checks the gradients with ``multi_all_finite``, whose
CPU kernel is 20-100 times slower than one pass over the data (it copies its parameter block
of 200 pointers for every element). On an emulated CPU step it takes about half the operator
time. While emulation is on, ``LossScaler.has_overflow`` is :func:`has_overflow`: the float32
sums of squares of the gradients first (one ``multi_sum_sq``, one sync). A finite sum proves
its array finite; only the arrays with a non-finite sum get MXNet's exact per-element test
(``all_finite``, the one-array form of ``multi_all_finite``). The scale's bookkeeping is
MXNet 1.9.1's own method, run on a one-element stand-in that carries the decision. Anything but
one float dtype on one CPU context (GPU arrays, mixed dtypes, no gradients) goes to MXNet's own
method, so its failures stay MXNet's too.
"""
import mxnet as mx
from mxnet import autograd
from mxnet.contrib.amp.loss_scaler import LossScaler

from .._core.finite import each_finite, fast_check_applies, nonfinite_sums

__all__ = ["REAL_HAS_OVERFLOW", "has_overflow", "install_overflow_check"]

REAL_HAS_OVERFLOW = LossScaler.has_overflow


def _summable(grads):
    first = grads[0]
    dtype, ctx = first.dtype, first.context
    return fast_check_applies(dtype, ctx) and all(
        g.dtype == dtype and g.context == ctx for g in grads)


class _Verdict:
    """A parameter as ``LossScaler.has_overflow`` reads it (``_grad``), holding one element that
    is finite or not as the decision already taken, so that MXNet's own method keeps the scale's
    bookkeeping at the cost of a one-element check."""

    def __init__(self, overflow, ctx):
        self._grad = [mx.nd.full((1,), float("inf") if overflow else 0.0, ctx=ctx)]


def has_overflow(self, params):
    """``LossScaler.has_overflow`` while emulation is on: MXNet's decision, found faster.

    Parameters
    ----------
    self : mxnet.contrib.amp.loss_scaler.LossScaler
    params : list of mxnet.gluon.Parameter

    Returns
    -------
    bool
        Whether the gradients hold inf or NaN (the step is then skipped).
    """
    grads = [p._grad[0] for p in params if p._grad is not None]
    if not grads or not _summable(grads):
        return REAL_HAS_OVERFLOW(self, params)
    with autograd.pause():
        suspects = nonfinite_sums(grads, uniform=True)
        overflow = bool(suspects) and not each_finite(suspects)
    return REAL_HAS_OVERFLOW(self, [_Verdict(overflow, grads[0].context)])


def install_overflow_check(patches):
    """Make :func:`has_overflow` ``LossScaler.has_overflow`` through ``patches``."""
    patches.patch(LossScaler, "has_overflow", has_overflow)
