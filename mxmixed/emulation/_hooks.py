"""The emulation's graph hooks: hybridized Gluon blocks (``CachedOp``) and ``Symbol.bind``.

Both hand the graph to :func:`mxmixed.emulation.emulate_symbol` once the dtypes of its inputs
are known, on CPU contexts only.
"""
import copy
from typing import Any, Sequence, Tuple

import mxnet as mx

from .._core.devices import CPU_DEVICE_TYPES, is_cpu
from .._core.dtypes import LastArrays
from .._core.state import EMULATION
from ._graphpass import emulate_symbol, rewritten_op_types
from ._wrappers import refuse_deconv_training

__all__ = ["EmulatedCachedOp", "install_graph_hooks"]

REAL_CACHED_OP = mx.ndarray.CachedOp
REAL_SIMPLE_BIND = mx.sym.Symbol.simple_bind
REAL_BIND = mx.sym.Symbol.bind


class EmulatedCachedOp:
    """A ``CachedOp`` that rewrites its graph for float16 emulation once input dtypes are known.

    Gluon creates one per hybridized block; while emulation is on, ``mxnet.ndarray.CachedOp``
    is this class. Each distinct set of input dtypes and devices gets its own real CachedOp:
    on a CPU with float16 inputs, the graph from :func:`emulate_symbol`; otherwise the graph
    unchanged.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The graph.
    flags : sequence of (str, object)
        CachedOp flags, passed through.
    """

    def __init__(self, sym: "mx.sym.Symbol", flags: Sequence[Tuple[str, Any]] = ()) -> None:
        self._sym = sym
        self._flags = list(flags)
        self._names = sym.list_inputs()
        self._ops = {}
        self._deconv = {}
        self._hook = None
        self.is_np_sym = REAL_CACHED_OP(sym, self._flags).is_np_sym
        # Gluon hands its parameters at param_indices, the same arrays on every call: their
        # dtypes are read once (LastArrays); the data's on every call
        params = dict(self._flags).get("param_indices", ())
        params = set(params if isinstance(params, (list, tuple)) and all(
            isinstance(i, int) and 0 <= i < len(self._names) for i in params) else ())
        self._param_at = sorted(params)
        self._data_at = [i for i in range(len(self._names)) if i not in params]
        self._params = LastArrays()

    def _op_for(self, args):
        if len(args) == len(self._names):
            data = _signature([args[i] for i in self._data_at])
            params = self._params.get([args[i] for i in self._param_at], _signature)
            key = (EMULATION.active, data, params)
        else:  # MXNet's own CachedOp says what is wrong with the arguments
            key = (EMULATION.active, _signature(args))
        op = self._ops.get(key)
        if op is None:
            sym = self._sym
            if EMULATION.active and all(a.context.device_type in CPU_DEVICE_TYPES for a in args):
                sym = emulate_symbol(sym, {n: a.dtype for n, a in zip(self._names, args)})
                if sym is not self._sym and sym.list_inputs() != self._names:
                    raise RuntimeError("mxmixed.emulation changed the inputs of a graph; "
                                       "please report this with the model's symbol JSON")
            op = self._ops[key] = REAL_CACHED_OP(sym, self._flags)
            self._deconv[key] = (sym is not self._sym
                                 and "Deconvolution" in rewritten_op_types(sym))
            if self._hook is not None:
                op._register_op_hook(*self._hook)
        return op, self._deconv[key]

    def __call__(self, *args, **kwargs):
        op, emulates_deconv = self._op_for(args)
        if emulates_deconv:
            refuse_deconv_training()
        return op(*args, **kwargs)

    def _register_op_hook(self, callback, monitor_all=False):
        self._hook = (callback, monitor_all)
        for op in self._ops.values():
            op._register_op_hook(callback, monitor_all)


def _signature(arrays):
    return tuple((a.dtype, a.context.device_type) for a in arrays)


def _complete_shapes(sym, kwargs):
    """``kwargs`` with the shape of every input of ``sym`` that the given shapes determine.

    The rewritten graph can infer less than the original: a biased op that lost its bias
    leaves the bias's shape, and what follows it, to be given. Shapes are therefore inferred
    on the user's graph, as MXNet would, and all of them are handed to the rewritten one.
    The shapes are the keywords whose value is a tuple, as MXNet's ``simple_bind`` takes them;
    it passes over any other keyword (``force_rebind=True`` in MXNet's own tests).
    """
    shapes = {n: v for n, v in kwargs.items() if isinstance(v, tuple)}
    if not shapes:
        return kwargs
    try:
        arg_shapes, _, aux_shapes = sym.infer_shape_partial(**shapes)
    except mx.base.MXNetError:
        return kwargs  # the real simple_bind reports the user's error
    if arg_shapes is None:
        return kwargs
    names = sym.list_arguments() + sym.list_auxiliary_states()
    complete = dict(kwargs)
    for name, shape in zip(names, list(arg_shapes) + list(aux_shapes)):
        if name not in complete and shape and all(d > 0 for d in shape):
            complete[name] = tuple(shape)
    return complete


class _UserExecutor(mx.executor.Executor):
    """An executor of a rewritten graph that shows the user's graph: its names, its outputs.

    ``output_dict``, ``arg_dict`` and the rest are keyed by ``_symbol``'s names; the rewritten
    graph has the same inputs and outputs in the same order, but its outputs carry the names of
    its last nodes (an ``emu_name(..., "out", 0)`` output), which a GPU run never shows.
    """

    def reshape(self, partial_shaping=False, allow_up_sizing=False, **kwargs):
        # Unchanged shapes are inferred on the user's graph (the rewritten one cannot infer a
        # split-off bias); changed ones are left to MXNet's own checks.
        now = dict(zip(self._symbol.list_arguments(), (a.shape for a in self.arg_arrays)))
        now.update(zip(self._symbol.list_auxiliary_states(),
                       (a.shape for a in self.aux_arrays)))
        complete = _complete_shapes(self._symbol, kwargs)
        kwargs.update({n: s for n, s in complete.items() if n not in kwargs and now.get(n) == s})
        return _as_user_executor(super().reshape(partial_shaping, allow_up_sizing, **kwargs),
                                 self._symbol)

    reshape.__doc__ = mx.executor.Executor.reshape.__doc__


def _as_user_executor(exe, user_sym):
    exe._symbol = user_sym
    exe.__class__ = _UserExecutor
    return exe


def _simple_bind(self, ctx, grad_req="write", type_dict=None, *args, **kwargs):
    sym = self
    if EMULATION.active and is_cpu(ctx):
        sym = emulate_symbol(self, type_dict)
        if sym is not self:
            kwargs = _complete_shapes(self, kwargs)
    exe = REAL_SIMPLE_BIND(sym, ctx, grad_req, type_dict, *args, **kwargs)
    return exe if sym is self else _as_user_executor(exe, copy.deepcopy(self))


def _bind(self, ctx, args, args_grad=None, grad_req="write", aux_states=None, *rest, **kwargs):
    sym = self
    if EMULATION.active and is_cpu(ctx):
        types = {}
        for names, values in ((self.list_arguments(), args),
                              (self.list_auxiliary_states(), aux_states)):
            if isinstance(values, dict):
                types.update({n: v.dtype for n, v in values.items()})
            elif values is not None:
                types.update({n: v.dtype for n, v in zip(names, values)})
        sym = emulate_symbol(self, types)
    exe = REAL_BIND(sym, ctx, args, args_grad, grad_req, aux_states, *rest, **kwargs)
    return exe if sym is self else _as_user_executor(exe, copy.deepcopy(self))


_simple_bind.__doc__ = REAL_SIMPLE_BIND.__doc__
_bind.__doc__ = REAL_BIND.__doc__


def install_graph_hooks(patches):
    """Put the CachedOp and bind hooks in place through ``patches``."""
    patches.patch(mx.ndarray, "CachedOp", EmulatedCachedOp)
    patches.patch(mx.sym.Symbol, "simple_bind", _simple_bind)
    patches.patch(mx.sym.Symbol, "bind", _bind)
