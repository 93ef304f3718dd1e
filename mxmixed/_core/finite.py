"""Whether gradients are finite: the check a Trainer's loss scaler runs each step, and which
parameters hold inf or NaN when it fails.

Only MXNet and NumPy here, so the training layer and the diagnostics can both use it
(:func:`mxmixed.diagnostics.nonfinite_gradients` is this module's function).
"""
from typing import Dict, Optional, Sequence, Tuple, Union

import mxnet as mx
import numpy as np
from mxnet import autograd

from .devices import is_cpu
from .dtypes import FLOAT16, FLOAT32

__all__ = ["CHUNK", "all_finite", "fast_check_applies", "nonfinite_sums", "each_finite", "exact_all_finite",
           "param_grads", "nonfinite_gradients", "NonfiniteGradients", "sums_of_squares"]

#: Arrays per multi_all_finite / multi_sum_sq call, as MXNet's own scaler does.
CHUNK = 200
_SUMMED = (FLOAT16, FLOAT32, np.dtype(np.float64))


def param_grads(params, first_copy_only=False):
    """The gradient arrays of the parameters that have one.

    Parameters
    ----------
    params : list of mxnet.gluon.Parameter
    first_copy_only : bool, default False
        One array per parameter (the first context's), for gradients already summed across
        devices.

    Returns
    -------
    list of mxnet.nd.NDArray
    """
    return [g for p in params if p.grad_req != "null" and p._grad is not None
            for g in (p.list_grad()[:1] if first_copy_only else p.list_grad())]


def all_finite(grads):
    """Whether every element of every array is finite: exact, and fast on a CPU.

    On CPU contexts the arrays' float32 sums of squares come first, in one ``multi_sum_sq``
    per dtype (float16 arrays cast to float32 before: MXNet squares float16 in float16). A
    finite sum proves its array finite. Only an array whose sum is not finite (it holds an inf
    or NaN, or the square of a float32 beyond about 1.8e19 overflowed) goes to MXNet's exact test,
    ``all_finite``, the one-array form of ``multi_all_finite`` with the same per-element test.
    MXNet 1.9.1's CPU ``multi_all_finite``, which its own loss scaler uses, is 20-100 times
    slower than one pass over the data. GPU arrays (and any other dtype) go to
    ``multi_all_finite`` as before.

    Parameters
    ----------
    grads : list of mxnet.nd.NDArray
        Of any float dtypes and contexts (a float16 net keeps BatchNorm's gradients float32).

    Returns
    -------
    bool
    """
    if not grads:
        return True
    summed = [g for g in grads if fast_check_applies(g.dtype, g.context)]
    others = [g for g in grads if not fast_check_applies(g.dtype, g.context)]
    with autograd.pause():
        if others and not exact_all_finite(_grouped(others).values()):
            return False
        suspects = nonfinite_sums(summed) if summed else []
        return not suspects or each_finite(suspects)


def _grouped(arrays, cast=False):
    groups = {}
    for array in arrays:  # multi_all_finite and multi_sum_sq need one dtype and device
        dtype = np.dtype(array.dtype)
        key = (FLOAT32 if cast and dtype == np.float16 else dtype, array.context)
        groups.setdefault(key, []).append(array)
    return groups


def fast_check_applies(dtype, ctx):
    """Whether the sum-of-squares check serves arrays of this dtype on this context.

    Parameters
    ----------
    dtype : numpy dtype or type
    ctx : mxnet.Context

    Returns
    -------
    bool
        True for float16, float32 and float64 arrays on a CPU context.
    """
    return is_cpu(ctx) and np.dtype(dtype) in _SUMMED


def nonfinite_sums(arrays, uniform=False):
    """The arrays whose float32 sum of squares is not finite; every other one is finite.

    An array left out holds no inf or NaN. One returned may still be finite: a float32 (or
    float64) square or the sum overflowed float32.

    Parameters
    ----------
    arrays : list of mxnet.nd.NDArray
        float16, float32 or float64 arrays on CPU contexts.
    uniform : bool, default False
        The caller has checked that all arrays share one dtype and context (the per-step
        overflow check does): skip grouping them again.

    Returns
    -------
    list of mxnet.nd.NDArray
        After one synchronisation.
    """
    sums, order = [], []
    with autograd.pause():
        if uniform and arrays:  # one dtype: test it once
            half = np.dtype(arrays[0].dtype) == np.float16
            groups = [(list(arrays), [half] * len(arrays))]
        else:  # a float32 group may mix float32 and float16 arrays
            groups = [(group, [g.dtype == np.float16 for g in group])
                      for group in _grouped(arrays, cast=True).values()]
        for group, halves in groups:
            summed = [g.astype("float32") if h else g for g, h in zip(group, halves)]
            sums += sums_of_squares(summed)
            order += group
        finite = np.isfinite(np.concatenate([s.asnumpy() for s in sums]))  # one wait
    return [array for array, ok in zip(order, finite) if not ok]


def sums_of_squares(arrays):
    """The sum of the squares of each array, in its dtype: ``multi_sum_sq`` on chunks of arrays.

    The one chunked sum of squares (the overflow check's and ``clip_global_norm``'s). It does
    not wait for MXNet.

    Parameters
    ----------
    arrays : list of mxnet.nd.NDArray
        One dtype, one context (``multi_sum_sq`` needs both).

    Returns
    -------
    list of mxnet.nd.NDArray
        One 1-d array per chunk of at most 200 arrays, one sum per array, in their order.
    """
    return [mx.nd.multi_sum_sq(*arrays[start:start + CHUNK],
                               num_arrays=len(arrays[start:start + CHUNK]))
            for start in range(0, len(arrays), CHUNK)]


def each_finite(arrays):
    """MXNet's exact test, one ``all_finite`` per array (fast on a CPU), into one flag per device.

    Parameters
    ----------
    arrays : list of mxnet.nd.NDArray

    Returns
    -------
    bool
        Whether every element is finite, after one synchronisation.
    """
    flags = {}
    with autograd.pause():
        for array in arrays:
            ok = flags.get(array.context)
            if ok is None:
                ok = flags[array.context] = mx.nd.ones((1,), ctx=array.context)
            mx.nd.all_finite(array, init_output=False, out=ok)
        return all(bool(flag.asscalar()) for flag in flags.values())


def exact_all_finite(groups):
    """MXNet's exact check, ``multi_all_finite``, over groups of one dtype and context each.

    Parameters
    ----------
    groups : iterable of list of mxnet.nd.NDArray

    Returns
    -------
    bool
        Whether every element is finite, after one synchronisation.
    """
    flags = []
    with autograd.pause():
        for group in groups:
            ok = mx.nd.ones((1,), ctx=group[0].context)
            for start in range(0, len(group), CHUNK):
                chunk = group[start:start + CHUNK]
                mx.nd.multi_all_finite(*chunk, num_arrays=len(chunk), init_output=False, out=ok)
            flags.append(ok.as_in_context(mx.cpu()))
        return bool(mx.nd.concat(*flags, dim=0).min().asscalar())


class NonfiniteGradients:
    """Which parameter gradients hold inf or NaN, for an error message.

    Attributes
    ----------
    entries : list of (str, str)
        ``(parameter name, 'inf' or 'NaN')`` in the order the parameters were given (creation
        order, usually forward order); NaN wins when a gradient holds both.
    total : int
        How many parameter gradients were checked.
    """

    def __init__(self, entries, total):
        self.entries = list(entries)
        self.total = total

    def __bool__(self):
        return bool(self.entries)

    def __len__(self):
        return len(self.entries)

    @property
    def origin(self) -> Optional[Tuple[str, str]]:
        """(str, str) or None: the first entry in backward order (the last one given)."""
        return self.entries[-1] if self.entries else None

    def describe(self) -> str:
        """One paragraph for an error message.

        Returns
        -------
        str
        """
        if not self.entries:
            return "no parameter gradient holds inf or NaN"
        name, kind = self.origin
        layer = name.rsplit("_", 1)[0] if "_" in name else name
        span = ("'%s'" % name if len(self.entries) == 1 else
                "'%s' ... '%s' in creation order" % (self.entries[0][0], name))
        text = ("inf/NaN in the gradients of %d of %d parameters (%s); first in backward "
                "order (the reverse of creation order, usually the forward order): '%s' (%s), "
                "layer '%s'" % (len(self.entries), self.total, span, name, kind, layer))
        if len(self.entries) == self.total:
            text += (". Every gradient is affected, so the overflow began at the loss gradient, "
                     "the last layer or in the forward pass")
        else:
            text += ", where the overflow most likely began (the earlier layers inherit it)"
        return text + ("; mxmixed.diagnostics.find_overflow(net, batch, scale=...) names the "
                       "exact op")

    def __str__(self):
        return self.describe()


def nonfinite_gradients(params: Union[Sequence[mx.gluon.Parameter], Dict[str, mx.gluon.Parameter]]
                        ) -> "NonfiniteGradients":
    """Check each parameter's gradient for inf and NaN: two reductions per parameter, one sync.

    Parameters
    ----------
    params : list of mxnet.gluon.Parameter or dict of str to Parameter
        ``trainer._params`` or ``net.collect_params()``.

    Returns
    -------
    NonfiniteGradients

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> from mxmixed import diagnostics
    >>> net = gluon.nn.Dense(2, in_units=2)
    >>> net.initialize()
    >>> with autograd.record():
    ...     loss = net(mx.nd.array([[1.0, float("inf")]])).sum()
    >>> loss.backward()
    >>> found = diagnostics.nonfinite_gradients(net.collect_params())
    >>> bool(found)
    True
    """
    if isinstance(params, dict) or hasattr(params, "values"):
        params = list(params.values())
    checked, flags = [], []
    with autograd.pause():
        for param in params:
            if param.grad_req == "null" or param._grad is None:
                continue
            for grad in param.list_grad():
                checked.append(param.name)
                flags.append(mx.nd.contrib.isinf(grad).max().astype("float32"))
                flags.append(mx.nd.contrib.isnan(grad).max().astype("float32"))
        if not checked:
            return NonfiniteGradients([], 0)
        values = mx.nd.concat(*[f.reshape((1,)).as_in_context(mx.cpu()) for f in flags],
                              dim=0).asnumpy()
    entries, seen = [], set()
    for n, name in enumerate(checked):
        has_inf, has_nan = values[2 * n] > 0, values[2 * n + 1] > 0
        if (has_inf or has_nan) and name not in seen:
            seen.add(name)
            entries.append((name, "NaN" if has_nan else "inf"))
    return NonfiniteGradients(entries, len(set(checked)))
