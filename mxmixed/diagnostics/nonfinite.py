"""The cheap overflow check: which parameter gradients hold inf or NaN, from the gradients alone.

Two reductions per parameter and one synchronization, so a loss scaler can call it when it
raises. :func:`~mxmixed.diagnostics.find_overflow` names the exact op, at the cost of a pass.
"""
import mxnet as mx

__all__ = ["nonfinite_gradients", "NonfiniteGradients"]


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
    """
    if isinstance(params, dict) or hasattr(params, "values"):
        params = list(params.values())
    checked, flags = [], []
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
