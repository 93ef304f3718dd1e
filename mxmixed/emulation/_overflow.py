"""The emulation's overflow check for ``mxnet.contrib.amp``'s loss scaler: exact, fast on a CPU.

MXNet 1.9.1's ``LossScaler.has_overflow`` checks the gradients with ``multi_all_finite``, whose
CPU kernel is 20-100 times slower than one pass over the data (it copies its parameter block
of 200 pointers for every element). On an emulated CPU step it takes about half the operator
time. While emulation is on, ``LossScaler.has_overflow`` is :func:`has_overflow`: the float32
sums of squares of the gradients first (one ``multi_sum_sq``, one sync); when all are finite
no element can be inf or NaN and the step goes on without MXNet's check. Otherwise, and for
anything but one float dtype on one CPU context (GPU arrays, mixed dtypes, no gradients),
MXNet's own method runs, so the decision and the scale's bookkeeping are always MXNet's.
"""
import logging

from mxnet.contrib.amp.loss_scaler import LossScaler

from .._finite import fast_check_applies, sums_finite

__all__ = ["REAL_HAS_OVERFLOW", "has_overflow", "install_overflow_check"]

REAL_HAS_OVERFLOW = LossScaler.has_overflow


def _summable(grads):
    first = grads[0]
    return fast_check_applies(first.dtype, first.context) and all(
        g.dtype == first.dtype and g.context == first.context for g in grads)


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
    if not grads or not _summable(grads) or not sums_finite([grads])[0]:
        return REAL_HAS_OVERFLOW(self, params)
    # MXNet 1.9.1's bookkeeping for a step without overflow, as in LossScaler.has_overflow
    self._loss_scale = self._next_loss_scale
    self._unskipped += 1
    if self._unskipped == self._scale_seq_len:
        self._unskipped = 0
        self._next_loss_scale = min(self._max_loss_scale, self._loss_scale * 2.)
        logging.info("AMP: increasing loss scale to %f", self._next_loss_scale)
    return False


def install_overflow_check():
    """Make :func:`has_overflow` ``LossScaler.has_overflow``; return the undo callable."""
    LossScaler.has_overflow = has_overflow

    def restore():
        LossScaler.has_overflow = REAL_HAS_OVERFLOW

    return restore
