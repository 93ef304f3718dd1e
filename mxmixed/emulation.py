"""CPU float16 emulation: run float16 MXNet graphs on a CPU with GPU-faithful numerics.

MXNet 1.9.1's CPU build has no float16 GEMM, and some of its float16 kernels are far slower
than float32. While emulation is on, every op listed in :mod:`mxmixed.emulated_ops` that sees
float16 inputs on a CPU casts them to float32, computes in float32 and casts its float16
outputs back: float16 operands, float32 accumulation, a float16 result, as on a GPU with Tensor
Cores. The tensors between ops keep exactly the dtypes a GPU run would give them, so rounding,
underflow and overflow happen in the same places, in the forward and the backward pass.

Where it applies:

* imperative NDArray calls (``mx.nd.FullyConnected`` ...) and non-hybridized Gluon blocks;
* hybridized Gluon blocks and ``SymbolBlock``: the graph of each ``CachedOp`` is rewritten by
  :func:`mxmixed.graphpass.emulate_symbol` once the dtypes of its inputs are known;
* Symbols bound with ``bind`` / ``simple_bind`` (and so the Module API) on a CPU context;
* any graph, loaded or built, through :func:`emulate_symbol` directly;
* ``mxnet.contrib.amp``'s imperative casts: MXNet 1.9.1 casts float16 to float32 for the ops on
  AMP's float32 list (softmax, norms, Gluon losses) only on GPU contexts, so while emulation
  is on, CPU arrays are cast as a GPU's would be.

Float32 tensors never pass through a cast: an op whose inputs are float32 runs exactly as
without emulation, and a float32 graph is left unchanged. GPU contexts are never touched, so
the same code uses the real float16 kernels on a GPU.

.. note::
   Emulation reproduces float16 numerics, not float16 speed. It is slower than float32 on a
   CPU, and no CPU timing says anything about Tensor Cores.

.. note::
   With ``mxnet.contrib.amp``, either order works: AMP's casting wrappers stay outermost and
   the emulation sits beneath them. A hybridized block that already ran before emulation was
   switched on keeps its plain cached graph; call ``net.hybridize()`` again to rebuild it.

.. note::
   Training a float16 Deconvolution imperatively or in a hybridized block raises
   NotImplementedError on MXNet's oneDNN build: its backward fails and corrupts the process
   when the weight is computed (an MXNet 1.9.1 bug the weight's cast triggers). Set
   ``MXNET_MKLDNN_ENABLED=0``, use the Symbol executor, or a GPU. Inference is unaffected.

.. note::
   RNN: the fused op is emulated at its boundary, so inside one call the hidden and cell
   states stay float32 between time steps, where cuDNN keeps float16 states. The difference
   to a step-by-step float16 reference is measured in ``tests/test_emulation_rnn.py`` and
   reported in ``docs/emulation.md``.
"""
import contextlib
import inspect
import logging
import os

import numpy as np

import mxnet as mx
from mxnet.ndarray import NDArray

from .emulated_ops import EMULATED_OPS
from .graphpass import emulate_symbol, rewritten_op_types

__all__ = ["enable", "disable", "emulated", "emulation_active", "describe", "emulate_symbol",
           "EmulatedCachedOp"]

_LOG = logging.getLogger("mxmixed.emulation")
_FLOAT16 = np.dtype(np.float16)
_MARK = "_mxmixed_emulates"


class _State:
    active = False
    mode = None
    reason = ""
    announced = False
    undo = []


def _gpu_visible():
    try:
        return mx.context.num_gpus() > 0
    except mx.base.MXNetError:
        return False


_DECONV_TRAINING = (
    "training a float16 Deconvolution under CPU emulation hits an MXNet 1.9.1 oneDNN bug: its "
    "backward fails ('could not execute a primitive') and corrupts the process when the weight "
    "is computed, which the float16-to-float32 cast makes it. Set MXNET_MKLDNN_ENABLED=0 "
    "before importing mxnet, bind it as a Symbol (Module API), or train on a GPU; inference "
    "works as it is")


def _onednn_active():
    return (mx.runtime.Features().is_enabled("MKLDNN")
            and os.environ.get("MXNET_MKLDNN_ENABLED", "1") != "0")


def _refuse_deconv_training():
    if mx.autograd.is_recording() and _onednn_active():
        raise NotImplementedError(_DECONV_TRAINING)


# ---------------------------------------------------------------- imperative NDArray calls
def _upcast(value):
    if isinstance(value, NDArray) and value.dtype == _FLOAT16:
        return mx.nd.amp_cast(value, dtype="float32")
    return value


def _downcast(result, spec, out):
    results = result if isinstance(result, (list, tuple)) else [result]
    keep = range(len(results)) if spec.float16_outputs is None else spec.float16_outputs
    casted = list(results)
    for k in keep:
        if k < len(casted) and casted[k].dtype == np.float32:
            target = None
            if out is not None:
                target = out if isinstance(out, NDArray) else out[k]
            casted[k] = mx.nd.amp_cast(casted[k], dtype="float16", out=target)
    if isinstance(result, (list, tuple)):
        return casted
    return casted[0]


def _make_nd_wrapper(op_name, original, spec):
    names = [p.name for p in inspect.signature(original).parameters.values()
             if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keep_names = {names[k] for k in spec.keep_inputs if k < len(names)}

    def emulated_op(*args, **kwargs):
        if not _State.active:
            return original(*args, **kwargs)
        arrays = [(k, a) for k, a in enumerate(args) if isinstance(a, NDArray)]
        arrays += [(n, a) for n, a in kwargs.items() if isinstance(a, NDArray) and n != "out"]
        if not any(a.dtype == _FLOAT16 and a.context.device_type == "cpu" for _, a in arrays):
            return original(*args, **kwargs)
        if spec.same_dtype:
            dtypes = {a.dtype for _, a in arrays if np.issubdtype(a.dtype, np.floating)}
            if len(dtypes) > 1:
                raise TypeError("%s got inputs of dtypes %s; MXNet needs one dtype for all of "
                                "them (a GPU run fails too): cast them alike"
                                % (op_name, sorted(np.dtype(d).name for d in dtypes)))
        if op_name == "Deconvolution":
            _refuse_deconv_training()
        out = kwargs.pop("out", None)
        new_args = [a if k in spec.keep_inputs else _upcast(a) for k, a in enumerate(args)]
        new_kwargs = {n: v if n in keep_names else _upcast(v) for n, v in kwargs.items()}
        return _downcast(original(*new_args, **new_kwargs), spec, out)

    emulated_op.__name__ = getattr(original, "__name__", op_name)
    emulated_op.__doc__ = original.__doc__
    setattr(emulated_op, _MARK, original)
    return emulated_op


def _is_amp_wrapper(func):
    code = getattr(func, "__code__", None)
    return (code is not None and "f" in code.co_freevars
            and code.co_filename.replace("\\", "/").endswith("contrib/amp/amp.py"))


def _amp_cell(func):
    return func.__closure__[func.__code__.co_freevars.index("f")]


def _install(holder, attr, make):
    """Put ``make(original)`` beneath any AMP wrappers of ``holder.attr``; return its undo."""
    current = getattr(holder, attr)
    if not _is_amp_wrapper(current):
        setattr(holder, attr, make(current))
        return lambda: _uninstall(holder, attr)
    cell = _amp_cell(current)
    while _is_amp_wrapper(cell.cell_contents):
        cell = _amp_cell(cell.cell_contents)
    cell.cell_contents = make(cell.cell_contents)
    return lambda: _uninstall(holder, attr)


def _uninstall(holder, attr):
    """Remove the emulation wrapper from ``holder.attr``, wherever AMP has put it since."""
    current = getattr(holder, attr)
    if hasattr(current, _MARK):
        setattr(holder, attr, getattr(current, _MARK))
        return
    while _is_amp_wrapper(current):
        cell = _amp_cell(current)
        if hasattr(cell.cell_contents, _MARK):
            cell.cell_contents = getattr(cell.cell_contents, _MARK)
            return
        current = cell.cell_contents


def _nd_holders(op_name):
    if op_name.startswith("_contrib_"):
        return [(mx.nd.contrib, op_name[len("_contrib_"):])]
    return [(mx.nd, op_name), (mx.nd.op, op_name)]


# ---------------------------------------------------------------- hybridized Gluon / CachedOp
_REAL_CACHED_OP = mx.ndarray.CachedOp


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

    def __init__(self, sym, flags=()):
        self._sym = sym
        self._flags = list(flags)
        self._names = sym.list_inputs()
        self._ops = {}
        self._deconv = {}
        self._hook = None
        self.is_np_sym = _REAL_CACHED_OP(sym, self._flags).is_np_sym

    def _op_for(self, args):
        key = (_State.active,) + tuple((a.dtype, a.context.device_type) for a in args)
        op = self._ops.get(key)
        if op is None:
            sym = self._sym
            if _State.active and all(a.context.device_type == "cpu" for a in args):
                sym = emulate_symbol(sym, {n: a.dtype for n, a in zip(self._names, args)})
                if sym is not self._sym and sym.list_inputs() != self._names:
                    raise RuntimeError("mxmixed.emulation changed the inputs of a graph; "
                                       "please report this with the model's symbol JSON")
            op = self._ops[key] = _REAL_CACHED_OP(sym, self._flags)
            self._deconv[key] = (sym is not self._sym
                                 and "Deconvolution" in rewritten_op_types(sym))
            if self._hook is not None:
                op._register_op_hook(*self._hook)
        return op, self._deconv[key]

    def __call__(self, *args, **kwargs):
        op, emulates_deconv = self._op_for(args)
        if emulates_deconv:
            _refuse_deconv_training()
        return op(*args, **kwargs)

    def _register_op_hook(self, callback, monitor_all=False):
        self._hook = (callback, monitor_all)
        for op in self._ops.values():
            op._register_op_hook(callback, monitor_all)


# ---------------------------------------------------------------- Symbol bind / simple_bind
_REAL_SIMPLE_BIND = mx.sym.Symbol.simple_bind
_REAL_BIND = mx.sym.Symbol.bind


def _is_cpu(ctx):
    return ctx is None or getattr(ctx, "device_type", "cpu") == "cpu"


def _simple_bind(self, ctx, grad_req="write", type_dict=None, *args, **kwargs):
    sym = self
    if _State.active and _is_cpu(ctx):
        sym = emulate_symbol(self, type_dict)
    return _REAL_SIMPLE_BIND(sym, ctx, grad_req, type_dict, *args, **kwargs)


def _bind(self, ctx, args, args_grad=None, grad_req="write", aux_states=None, *rest, **kwargs):
    sym = self
    if _State.active and _is_cpu(ctx):
        types = {}
        for names, values in ((self.list_arguments(), args),
                              (self.list_auxiliary_states(), aux_states)):
            if isinstance(values, dict):
                types.update({n: v.dtype for n, v in values.items()})
            elif values is not None:
                types.update({n: v.dtype for n, v in zip(names, values)})
        sym = emulate_symbol(self, types)
    return _REAL_BIND(sym, ctx, args, args_grad, grad_req, aux_states, *rest, **kwargs)


_simple_bind.__doc__ = _REAL_SIMPLE_BIND.__doc__
_bind.__doc__ = _REAL_BIND.__doc__


# ---------------------------------------------------------------- AMP's own casts on a CPU
_AMP_MODULE = __import__("mxnet.contrib.amp.amp", fromlist=["amp"])
_REAL_AMP_CAST = _AMP_MODULE._cast_symbol_NDArray
_GPU_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def _amp_cast_as_on_gpu(s, dtype):
    """AMP's NDArray cast, with CPU float16 arrays treated as they are on a GPU.

    MXNet 1.9.1 casts float16 to float32 for the ops on AMP's float32 list (softmax, norms,
    losses) only on GPU contexts; on a CPU they would silently stay float16.
    """
    if (isinstance(s, NDArray) and s.context.device_type == "cpu" and s.dtype != dtype
            and np.dtype(s.dtype) in _GPU_FLOATS and np.dtype(dtype) in _GPU_FLOATS):
        return mx.nd.amp_cast(s, dtype=dtype)
    return _REAL_AMP_CAST(s, dtype)


# ---------------------------------------------------------------- the switch
def _apply():
    undo = []
    for op_name, spec in EMULATED_OPS.items():
        for holder, attr in _nd_holders(op_name):
            if hasattr(holder, attr):
                undo.append(_install(holder, attr,
                                     lambda orig, n=op_name, s=spec: _make_nd_wrapper(n, orig, s)))
    mx.ndarray.CachedOp = EmulatedCachedOp
    mx.sym.Symbol.simple_bind = _simple_bind
    mx.sym.Symbol.bind = _bind
    _AMP_MODULE._cast_symbol_NDArray = _amp_cast_as_on_gpu

    def restore_graph_hooks():
        mx.ndarray.CachedOp = _REAL_CACHED_OP
        mx.sym.Symbol.simple_bind = _REAL_SIMPLE_BIND
        mx.sym.Symbol.bind = _REAL_BIND
        _AMP_MODULE._cast_symbol_NDArray = _REAL_AMP_CAST

    undo.append(restore_graph_hooks)
    return undo


def enable(mode="on"):
    """Switch CPU float16 emulation on.

    Parameters
    ----------
    mode : {'on', 'auto'}, default 'on'
        ``'on'`` emulates float16 on CPU contexts whatever else the machine has. ``'auto'``
        emulates only when no GPU is visible, and then logs once that float16 runs emulated,
        for numerics and not speed; it is meant for higher-level helpers.

    Returns
    -------
    bool
        Whether emulation is now active.
    """
    if mode not in ("on", "auto"):
        raise ValueError("mode must be 'on' or 'auto', got %r" % (mode,))
    if mode == "auto" and _gpu_visible():
        if not _State.active:
            _State.mode, _State.reason = "auto", "a GPU is visible: real float16 kernels are used"
        return _State.active
    if mode == "auto" and not _State.announced:
        _LOG.warning("No GPU is visible, so mxmixed emulates float16 on the CPU: float16 "
                     "rounding with float32 arithmetic, for numerics and not speed.")
        _State.announced = True
    if not _State.active:
        _State.undo = _apply()
        _State.active = True
    _State.mode = mode
    _State.reason = "no GPU visible" if mode == "auto" else "switched on explicitly"
    return True


def disable():
    """Switch CPU float16 emulation off and restore MXNet's functions.

    AMP's wrappers, if ``amp.init`` ran in between, stay in place.
    """
    for undo in reversed(_State.undo):
        undo()
    _State.undo = []
    _State.active = False
    _State.mode, _State.reason = None, ""


@contextlib.contextmanager
def emulated(mode="on"):
    """Context manager form of :func:`enable`; restores the previous state on exit.

    Parameters
    ----------
    mode : {'on', 'auto'}, default 'on'
        As in :func:`enable`.

    Yields
    ------
    bool
        Whether emulation is active inside the block.
    """
    was_active, was_mode, was_reason = _State.active, _State.mode, _State.reason
    try:
        yield enable(mode)
    finally:
        if not was_active:
            disable()
        _State.mode, _State.reason = was_mode, was_reason


def emulation_active():
    """Whether CPU float16 emulation is on.

    Returns
    -------
    bool
    """
    return _State.active


def describe():
    """One line for ``mxmixed info``: whether emulation is active, and why.

    Returns
    -------
    str
    """
    if _State.active:
        return "active (%s): %d ops emulated" % (_State.reason, len(EMULATED_OPS))
    if _State.reason:
        return "inactive (%s)" % _State.reason
    return ("inactive (switch it on with mxmixed.emulation.enable(); mode='auto' emulates "
            "only when no GPU is visible)")
