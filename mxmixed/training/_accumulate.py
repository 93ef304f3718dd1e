"""bfloat16 AMP keeps the gradients of parameters with ``grad_req='add'``.

MXNet 1.9.1's oneDNN ``amp_cast`` (``AMPCastExCPU``) never commits its result when asked to
add it to the output (``req == kAddTo``): the backward of AMP's cast of a parameter with
``grad_req='add'`` adds nothing, and the parameter's gradient stays zero (measured: a Dense
layer's weight and bias under ``amp.init(target_dtype='bfloat16')``; hybridized, also the
float32-to-float32 casts of AMP's float32 list: Embedding, LayerNorm). Gradient accumulation
(``grad_req='add'``, as GluonNLP's ``train_transformer.py`` sets for every parameter) then
trains only the parameters that reach no cast alone (a weight tied to two layers, BatchNorm's
gamma and beta): the Transformer's valid loss stayed at 1.96 where float32 reached 0.74.

:func:`keeping_accumulation` wraps AMP's cast so that a parameter (a graph variable, or an
array with a gradient attached) reaches the cast through a copy (``_copy``, whose oneDNN
backward adds as asked): the cast then writes into the copy's gradient, and the copy adds it
to the parameter's. It costs one copy of each parameter per forward pass.
"""
import ctypes
import functools
import threading

import numpy as np

from mxnet import base, ndarray, symbol
from mxnet.ndarray.register import _make_ndarray_function
from mxnet.symbol.register import _make_symbol_function

__all__ = ["keeping_accumulation"]

_BUSY = threading.local()


@functools.lru_cache(maxsize=None)
def _plain_copies():
    """``_copy`` for arrays and for graphs, made afresh from the op: never an AMP wrapper."""
    handle = ctypes.c_void_p()
    base.check_call(base._LIB.NNGetOpHandle(base.c_str("_copy"), ctypes.byref(handle)))
    return (_make_ndarray_function(handle, "_copy", "_copy"),
            _make_symbol_function(handle, "_copy", "_copy"))


def _is_variable(value):
    """Whether ``value`` is a graph's variable (a parameter or a data input)."""
    return (isinstance(value, symbol.Symbol) and value.get_children() is None
            and value.list_arguments() == [value.name])


def _is_leaf_with_gradient(value, dtype):
    """Whether ``value`` is an array with a gradient attached that the cast would change."""
    return (isinstance(value, ndarray.NDArray) and value.grad is not None
            and np.dtype(value.dtype) != np.dtype(dtype))


def keeping_accumulation(cast):
    """AMP's cast ``cast(value, dtype)``, with a parameter passed through a copy first.

    Parameters
    ----------
    cast : callable
        ``mxnet.contrib.amp.amp._cast_symbol_NDArray`` as it is now.

    Returns
    -------
    callable
        The same signature.
    """
    def amp_cast_keeping_accumulation(value, dtype):
        if getattr(_BUSY, "on", False) or not (
                _is_variable(value) or _is_leaf_with_gradient(value, dtype)):
            return cast(value, dtype)
        copy_array, copy_graph = _plain_copies()
        _BUSY.on = True
        try:
            copied = copy_graph(value) if isinstance(value, symbol.Symbol) else copy_array(value)
            return cast(copied, dtype)
        finally:
            _BUSY.on = False

    amp_cast_keeping_accumulation.wrapped = cast
    return amp_cast_keeping_accumulation
