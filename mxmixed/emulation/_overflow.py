"""The emulation's overflow check for ``mxnet.contrib.amp``'s loss scaler: exact, fast on a CPU.

MXNet 1.9.1's ``LossScaler.has_overflow`` checks the gradients with ``multi_all_finite``, whose
CPU kernel is 20-100 times slower than one pass over the data (it copies its parameter block
of 200 pointers for every element). On an emulated CPU step it takes about half the operator
time. While emulation is on, ``LossScaler.has_overflow`` is :func:`has_overflow`, which asks
:func:`all_finite`:

* once the emulation's extension library is loaded (the float32 carry loads it), its
  ``_mxmixed_nonfinite`` op tests every element's exponent bits, the test of
  ``multi_all_finite``, in one vectorized pass over float32 and float16 CPU gradients, with one
  sync;
* without the library, the float32 sums of squares of the gradients come first (one
  ``multi_sum_sq``, one sync). A finite sum proves its array finite; only the arrays with a
  non-finite sum get MXNet's exact per-element test (``all_finite``, the one-array form of
  ``multi_all_finite``).

The scale's bookkeeping is MXNet 1.9.1's own method, run on a one-element stand-in that
carries the decision. Anything but one float dtype on one CPU context (GPU arrays, mixed
dtypes, no gradients) goes to MXNet's own method, so its failures stay MXNet's too; float64
takes the sums.
"""
import ctypes

import mxnet as mx
import numpy as np
from mxnet import autograd
from mxnet.contrib.amp.loss_scaler import LossScaler
from mxnet.ndarray._internal import _imperative_invoke

from .._core.devices import is_cpu
from .._core.dtypes import FLOAT16, FLOAT32, LastArrays
from .._core.finite import (CHUNK, all_finite as sums_first_all_finite, each_finite,
                            fast_check_applies, nonfinite_sums)
from ._round16 import nonfinite_op

__all__ = ["REAL_HAS_OVERFLOW", "all_finite", "nonfinite_flags", "has_overflow",
           "install_overflow_check"]

REAL_HAS_OVERFLOW = LossScaler.has_overflow
_HANDLES = {}
# what was read of the last gradient arrays' dtypes and contexts (the same arrays every step)
_UNIFORM, _SERVED = LastArrays(), LastArrays()
# (overflow, context) -> the stand-in parameter carrying that decision
_VERDICTS = {}


def _summable(grads):
    first = grads[0]
    dtype, ctx = first.dtype, first.context
    return fast_check_applies(dtype, ctx) and all(
        g.dtype == dtype and g.context == ctx for g in grads)


def _served(arrays):
    # dense only: MXNet refuses a sparse array to an extension op (a row_sparse Embedding
    # gradient goes to the sums, whose multi_sum_sq densifies it)
    ctx = arrays[0].context
    return is_cpu(ctx) and all(
        a.context == ctx and np.dtype(a.dtype) in (FLOAT16, FLOAT32) and a.stype == "default"
        for a in arrays)


def _handle(op):
    handle = _HANDLES.get(op)
    if handle is None:
        found = ctypes.c_void_p()
        mx.base.check_call(mx.base._LIB.NNGetOpHandle(mx.base.c_str(op), ctypes.byref(found)))
        handle = _HANDLES[op] = found.value
    return handle


def nonfinite_flags(arrays):
    """One float32 flag per array, 1 where it holds an inf or a NaN, by the extension library.

    Parameters
    ----------
    arrays : list of mxnet.nd.NDArray

    Returns
    -------
    list of mxnet.nd.NDArray or None
        One 1-d array of flags per chunk of at most 200 arrays, in their order, without
        waiting for MXNet. None when the library's op is not loaded in this process, or the
        arrays are not all dense float32 or float16 arrays on one CPU context.
    """
    op = nonfinite_op()
    if op is None or not arrays or not _SERVED.get(arrays, _served):
        return None
    handle = _handle(op)
    with autograd.pause():
        return [_imperative_invoke(handle, arrays[start:start + CHUNK], ["num_arrays"],
                                   [len(arrays[start:start + CHUNK])], None, False, False)
                for start in range(0, len(arrays), CHUNK)]


def all_finite(grads):
    """Whether every element of every array is finite: exact, and fast on a CPU.

    Parameters
    ----------
    grads : list of mxnet.nd.NDArray

    Returns
    -------
    bool
        After one synchronisation: the library's test (:func:`nonfinite_flags`) where it
        applies, else :func:`mxmixed._core.finite.all_finite` (sums of squares first).
    """
    flags = nonfinite_flags(grads)
    if flags is None:
        return sums_first_all_finite(grads)
    return not np.concatenate([f.asnumpy() for f in flags]).any()


class _Verdict:
    """A parameter as ``LossScaler.has_overflow`` reads it (``_grad``), holding one element that
    is finite or not as the decision already taken, so that MXNet's own method keeps the scale's
    bookkeeping at the cost of a one-element check. MXNet only reads it: one per decision and
    context serves every step."""

    def __init__(self, overflow, ctx):
        with autograd.pause():
            self._grad = [mx.nd.full((1,), float("inf") if overflow else 0.0, ctx=ctx)]


def _verdict(overflow, ctx):
    found = _VERDICTS.get((overflow, ctx))
    if found is None:
        found = _VERDICTS[(overflow, ctx)] = _Verdict(overflow, ctx)
    return found


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
    if not grads or not _UNIFORM.get(grads, _summable):  # what MXNet refuses, it refuses
        return REAL_HAS_OVERFLOW(self, params)
    flags = nonfinite_flags(grads)
    with autograd.pause():
        if flags is not None:
            overflow = bool(np.concatenate([f.asnumpy() for f in flags]).any())
        else:
            suspects = nonfinite_sums(grads, uniform=True)
            overflow = bool(suspects) and not each_finite(suspects)
    return REAL_HAS_OVERFLOW(self, [_verdict(overflow, grads[0].context)])


def install_overflow_check(patches):
    """Make :func:`has_overflow` ``LossScaler.has_overflow`` through ``patches``."""
    patches.patch(LossScaler, "has_overflow", has_overflow)
