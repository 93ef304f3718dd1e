"""Whether gradients are finite: the check a Trainer's loss scaler runs each step, and which
parameters hold inf or NaN when it fails.

Only MXNet and NumPy here, so the training layer and the diagnostics can both use it
(:func:`mxmixed.diagnostics.nonfinite_gradients` is this module's function).
"""
import mxnet as mx
import numpy as np
from mxnet import autograd

__all__ = ["all_finite", "fast_check_applies", "sums_finite", "exact_all_finite", "param_grads",
           "nonfinite_gradients", "NonfiniteGradients"]

_CHUNK = 200  # arrays per multi_all_finite / multi_sum_sq call, as MXNet's own scaler does
_SUMMED = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


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
    """Whether every element of every array is finite: one sum of squares per dtype, one sync.

    On CPU contexts the arrays' float32 sums of squares come first (``multi_sum_sq``; float16
    arrays are cast to float32 before, since MXNet squares float16 in float16). A finite sum
    proves every element finite; only when a sum is not finite (an inf or NaN, or the square
    of a float32 beyond about 1.8e19 overflowing) does MXNet's exact ``multi_all_finite`` run,
    which on a CPU is 20-100 times slower. GPU arrays go to ``multi_all_finite`` directly. The
    decision is always the exact check's.

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
    groups = {}
    for grad in grads:  # multi_all_finite and multi_sum_sq need one dtype
        groups.setdefault((grad.dtype, grad.context), []).append(grad)
    with autograd.pause():
        fast = [key for key in groups if fast_check_applies(*key)]
        finite = sums_finite([groups[key] for key in fast]) if fast else []
        exact = [group for key, group in groups.items()
                 if key not in fast or not finite[fast.index(key)]]
        return not exact or exact_all_finite(exact)


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
    return ctx.device_type == "cpu" and np.dtype(dtype) in _SUMMED


def sums_finite(groups):
    """Per group, whether the float32 sums of squares of its arrays are all finite.

    True proves every element finite. False means an element is inf or NaN, or a float32
    (float64) square or sum overflowed float32: the exact check must decide.

    Parameters
    ----------
    groups : list of list of mxnet.nd.NDArray
        Each group of one dtype (float16, float32 or float64) and one CPU context.

    Returns
    -------
    list of bool
        One flag per group, after one synchronisation.
    """
    sums, owners = [], []
    with autograd.pause():
        for n, group in enumerate(groups):
            if group[0].dtype == np.float16:  # MXNet squares float16 in float16 (inf above 256)
                group = [g.astype("float32") for g in group]
            for start in range(0, len(group), _CHUNK):
                chunk = group[start:start + _CHUNK]
                sums.append(mx.nd.multi_sum_sq(*chunk, num_arrays=len(chunk)))
                owners += [n] * len(chunk)
        values = np.isfinite(np.concatenate([s.asnumpy() for s in sums]))  # one wait
    finite = [True] * len(groups)
    for n, ok in zip(owners, values):
        finite[n] = finite[n] and bool(ok)
    return finite


def exact_all_finite(groups):
    """MXNet's exact check, ``multi_all_finite``, over groups of one dtype and context each.

    Parameters
    ----------
    groups : list of list of mxnet.nd.NDArray

    Returns
    -------
    bool
        Whether every element is finite, after one synchronisation.
    """
    flags = []
    with autograd.pause():
        for group in groups:
            ok = mx.nd.ones((1,), ctx=group[0].context)
            for start in range(0, len(group), _CHUNK):
                chunk = group[start:start + _CHUNK]
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
    def origin(self):
        """(str, str) or None: the first entry in backward order (the last one given)."""
        return self.entries[-1] if self.entries else None

    def describe(self):
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


def nonfinite_gradients(params):
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
