"""The emulation's NDArray wrappers, and how they are slid beneath AMP's own wrappers.

Each emulated ``mx.nd`` function is replaced by a wrapper that, for float16 CPU inputs while
the emulation is on, casts them to float32, calls the real function and casts the float16
outputs back (see :mod:`mxmixed.emulation._ops` for what each op computes on a GPU).
"""
import ctypes
import functools
import inspect

import numpy as np

import mxnet as mx
import mxnet.ndarray.numpy._internal as nd_npi
import mxnet.ndarray.numpy_extension as nd_npx
import mxnet.numpy_extension as npx
from mxnet.base import OpHandle, _LIB, c_str, check_call, py_str
from mxnet.ndarray import NDArray
from mxnet.numpy import ndarray as NumpyArray

from .._core.devices import CPU_DEVICE_TYPES
from .._core.dtypes import FLOAT16, FLOAT32
from .._core.mxbool import attr_bool, env_bool
from .._core.state import EMULATION
from ._deconv import conv_form_applies, deconvolution_as_convolution
from ._gpu_semantics import csr_dot_as_on_gpu, is_float16_csr
from ._graphpass import bias_axis, bias_of, bias_shape
from ._ops import EMULATED_OPS, applies, library_compute
from ._round16 import BIAS_ADD_OP, library_op

__all__ = ["install_nd_wrappers", "numpy_aliases", "onednn_active", "refuse_deconv_training", "AMP_MODULE",
           "REAL_AMP_CAST", "amp_cast_as_on_gpu"]


_DECONV_TRAINING = (
    "training a float16 Deconvolution with target_shape under CPU emulation hits an MXNet 1.9.1 "
    "oneDNN bug: its backward fails ('could not execute a primitive') and corrupts the process "
    "when the weight is computed, which the float16-to-float32 cast makes it. Give pad and adj "
    "instead of target_shape, set MXNET_MKLDNN_ENABLED=0 before importing mxnet, or train on "
    "a GPU; inference works as it is")


def onednn_active():
    """Whether MXNet runs its oneDNN (MKLDNN) kernels in this process.

    Returns
    -------
    bool
    """
    return mx.runtime.Features().is_enabled("MKLDNN") and env_bool("MXNET_MKLDNN_ENABLED", True)


def refuse_deconv_training():
    """Raise NotImplementedError for an emulated Deconvolution under autograd on oneDNN."""
    if mx.autograd.is_recording() and onednn_active():
        raise NotImplementedError(_DECONV_TRAINING)


def _as_legacy(value):
    return value.as_nd_ndarray() if isinstance(value, NumpyArray) else value


def _like(template, result):
    """``result``, a legacy NDArray, as a NumPy-mode array where ``template`` is one (a view)."""
    return result.as_np_ndarray() if isinstance(template, NumpyArray) else result


def _cast(value, dtype, out=None):
    """``amp_cast``, on NumPy-mode arrays too: MXNet's legacy ops refuse them, npx ops need them."""
    cast = mx.nd.amp_cast(_as_legacy(value), dtype=dtype, out=_as_legacy(out))
    return out if out is not None else _like(value, cast)


def _upcast(value):
    if isinstance(value, NDArray) and value.dtype == FLOAT16:
        return _cast(value, "float32")
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
            casted[k] = _cast(casted[k], "float16", out=target)
    if isinstance(result, (list, tuple)):
        return casted
    return casted[0]


def _add_bias_as_on_gpu(op_name, result, bias, attrs, out):
    """Round the no-bias float32 result to float16, add the bias in float16 arithmetic (the
    rounding library's bias add where it is loaded: broadcast_add's bits, without its generic
    reduce)."""
    rounded = _cast(_cast(result, "float16"), "float32")
    if library_op(BIAS_ADD_OP) is not None:
        added = _library_compute(BIAS_ADD_OP)(rounded, bias, axis=bias_axis(op_name, attrs))
    else:
        shape = bias_shape(op_name, attrs)
        bias = bias if shape is None else bias.reshape(shape)
        added = mx.nd.broadcast_add(_as_legacy(rounded), _as_legacy(bias))
    return _cast(_like(result, added), "float16", out=out)


@functools.lru_cache(maxsize=256)
def _multicast_types(dtypes, cast_narrow):
    """Output dtypes of ``amp_multicast`` by MXNet's own type inference (``cast_narrow`` as
    given: MXNet reads it)."""
    names = ["x%d" % k for k in range(len(dtypes))]
    sym = mx.sym.amp_multicast(*[mx.sym.var(n) for n in names], num_outputs=len(names),
                               cast_narrow=cast_narrow)
    _, out_types, _ = sym.infer_type(**dict(zip(names, dtypes)))
    return tuple(np.dtype(t).name for t in out_types)


def _multicast(original, *data, num_outputs=None, cast_narrow=False, out=None, **kwargs):
    """``amp_multicast`` as the GPU computes it: each input cast to its output dtype."""
    targets = _multicast_types(tuple(np.dtype(a.dtype).name for a in data), str(cast_narrow))
    outs = out if isinstance(out, (list, tuple)) else [None] * len(data)
    return [mx.nd.amp_cast(a, dtype=t, out=o) for a, t, o in zip(data, targets, outs)]


def _deconvolution_by_convolution(data=None, weight=None, bias=None, **attrs):
    """``mx.nd.Deconvolution`` (float32, no bias) computed as a Convolution: see ``_deconv``."""
    if bias is not None:
        raise ValueError("the emulation adds a Deconvolution's bias itself")
    return _like(data, deconvolution_as_convolution(mx.nd, _as_legacy(data), _as_legacy(weight),
                                                    attrs))


def _library_compute(name):
    """A function that runs the rounding library's op ``name`` on NDArrays (the library has no
    Python functions: see ``_round16.load``); autograd records it like any op. The call's other
    arguments go to the op as attributes; of several outputs (LayerNorm's mean and std), only
    the first unless ``output_mean_var``."""
    handle = _op_handle(name)

    def compute(*args, **kwargs):
        arrays = [a for a in list(args) + list(kwargs.values()) if isinstance(a, NDArray)]
        attrs = {k: str(v) for k, v in kwargs.items() if v is not None and k != "name"
                 and not isinstance(v, NDArray)}
        result = mx.ndarray._internal._imperative_invoke(
            handle, [_as_legacy(a) for a in arrays], list(attrs), list(attrs.values()), None,
            False, False)
        if isinstance(result, list) and not attr_bool(attrs, "output_mean_var", False):
            result = result[0]
        return _like(arrays[0], result)
    return compute


def _make_nd_wrapper(op_name, original, spec):
    names = [p.name for p in inspect.signature(original).parameters.values()
             if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keep_names = {names[k] for k in spec.keep_inputs if k < len(names)}
    bias_name = names[spec.bias_input] if spec.bias_input is not None else None

    def emulated_op(*args, **kwargs):
        if not EMULATION.active or not applies(spec, kwargs):
            return original(*args, **kwargs)
        if op_name == "dot" and is_float16_csr(*args[:2], **{k: v for k, v in kwargs.items()
                                                             if k.startswith("transpose")}):
            return csr_dot_as_on_gpu(*args[:2])
        arrays = [(k, a) for k, a in enumerate(args) if isinstance(a, NDArray)]
        arrays += [(n, a) for n, a in kwargs.items() if isinstance(a, NDArray) and n != "out"]
        if not any(a.dtype == FLOAT16 and a.context.device_type in CPU_DEVICE_TYPES for _, a in arrays):
            return original(*args, **kwargs)
        if spec.same_dtype:
            dtypes = {a.dtype for _, a in arrays if np.issubdtype(a.dtype, np.floating)}
            if len(dtypes) > 1:
                data = arrays[0][1]  # a layer's data comes first; its weights follow
                layer = spec.bias_input is not None or op_name == "RNN"
                hint = ("; the net is float16 but its input is float32: pass "
                        "X.astype('float16')" if layer and data.dtype == np.float32
                        and any(a.dtype == FLOAT16 for _, a in arrays[1:]) else "")
                raise TypeError("%s got inputs of dtypes %s; MXNet needs one dtype for all of "
                                "them (a GPU run fails too): cast them alike%s"
                                % (op_name, sorted(np.dtype(d).name for d in dtypes), hint))
        if op_name == "Deconvolution" and not conv_form_applies(kwargs):
            refuse_deconv_training()
        if op_name == "amp_multicast":
            return _multicast(original, *args, **kwargs)
        out = kwargs.pop("out", None)
        new_args = [a if k in spec.keep_inputs else _upcast(a) for k, a in enumerate(args)]
        new_kwargs = {n: v if n in keep_names else _upcast(v) for n, v in kwargs.items()}
        bias = None
        if bias_name is not None and bias_of(op_name, kwargs, spec.bias_input + 1) is not None:
            if len(new_args) > spec.bias_input:
                bias = new_args[spec.bias_input]
                new_args[spec.bias_input] = None
            else:
                bias = new_kwargs.pop(bias_name, None)
        compute = original
        computed_by = library_compute(spec, kwargs)
        if computed_by:
            if library_op(computed_by) is None:
                return original(*args, **kwargs)
            compute = _library_compute(computed_by)
            # the library's op takes its inputs in the signature's order, not the call's
            new_args += [new_kwargs.pop(n) for n in names[len(new_args):]
                         if isinstance(new_kwargs.get(n), NDArray)]
        if op_name == "Deconvolution" and conv_form_applies(kwargs):
            compute = _deconvolution_by_convolution
        if isinstance(bias, NDArray):
            new_kwargs["no_bias"] = True
            result = compute(*new_args, **new_kwargs)
            return _add_bias_as_on_gpu(op_name, result, bias, kwargs, out)
        return _downcast(compute(*new_args, **new_kwargs), spec, out)

    emulated_op.__name__ = getattr(original, "__name__", op_name)
    emulated_op.__doc__ = original.__doc__
    return emulated_op


def _is_amp_wrapper(func):
    code = getattr(func, "__code__", None)
    return (code is not None and "f" in code.co_freevars
            and code.co_filename.replace("\\", "/").endswith("contrib/amp/amp.py"))


def _amp_cell(func):
    return func.__closure__[func.__code__.co_freevars.index("f")]


def _install(patches, holder, attr, make):
    """Put ``make(original)`` beneath any AMP wrappers of ``holder.attr``, through ``patches``."""
    current = getattr(holder, attr)
    if not _is_amp_wrapper(current):
        patches.patch(holder, attr, make(current))
        return
    cell = _amp_cell(current)
    while _is_amp_wrapper(cell.cell_contents):
        cell = _amp_cell(cell.cell_contents)
    patches.patch(cell, "cell_contents", make(cell.cell_contents))


def _registered_names():
    size, names = ctypes.c_uint(), ctypes.POINTER(ctypes.c_char_p)()
    check_call(_LIB.MXListAllOpNames(ctypes.byref(size), ctypes.byref(names)))
    return [py_str(names[k]) for k in range(size.value)]


def _op_handle(name):
    handle = OpHandle()
    check_call(_LIB.NNGetOpHandle(c_str(name), ctypes.byref(handle)))
    return handle.value


# NumPy mode reaches an op through aliases that MXNet registers on the same operator
# (``_npx_batch_dot`` is ``batch_dot``); a graph names the operator, a Python call the alias.
_ALIAS_HOLDERS = {"_npx_": (npx, npx._op, nd_npx, nd_npx._op), "_npi_": (nd_npi,)}


@functools.lru_cache(maxsize=1)
def numpy_aliases():
    """The NumPy-mode aliases of the emulated ops, from MXNet's operator registry.

    Returns
    -------
    dict of str to list of str
        ``{op name: [alias, ...]}``, e.g. ``{'batch_dot': ['_npx_batch_dot'], ...}``.
    """
    by_handle = {_op_handle(op): op for op in EMULATED_OPS}
    aliases = {}
    for name in _registered_names():
        if name.startswith(tuple(_ALIAS_HOLDERS)):
            op = by_handle.get(_op_handle(name))
            if op is not None and op != name:
                aliases.setdefault(op, []).append(name)
    return aliases


def _nd_holders(op_name):
    holders = [(mx.nd.contrib, op_name[len("_contrib_"):])] if op_name.startswith(
        "_contrib_") else [(mx.nd, op_name), (mx.nd.op, op_name)]
    for alias in numpy_aliases().get(op_name, ()):
        prefix = alias[:5]
        holders += [(holder, alias[len(prefix):]) for holder in _ALIAS_HOLDERS[prefix]]
    return holders


def install_nd_wrappers(patches):
    """Wrap every emulated ``mx.nd`` function through ``patches``."""
    for op_name, spec in EMULATED_OPS.items():
        for holder, attr in _nd_holders(op_name):
            if hasattr(holder, attr):
                _install(patches, holder, attr,
                         lambda orig, n=op_name, s=spec: _make_nd_wrapper(n, orig, s))


# ---------------------------------------------------------------- AMP's own casts on a CPU
AMP_MODULE = __import__("mxnet.contrib.amp.amp", fromlist=["amp"])
REAL_AMP_CAST = AMP_MODULE._cast_symbol_NDArray
_GPU_FLOATS = (FLOAT16, FLOAT32)


def amp_cast_as_on_gpu(s, dtype):
    """AMP's NDArray cast, with CPU float16 arrays treated as they are on a GPU.

    MXNet 1.9.1 casts float16 to float32 for the ops on AMP's float32 list (softmax, norms,
    losses) only on GPU contexts; on a CPU they would silently stay float16.
    """
    if (isinstance(s, NDArray) and s.context.device_type in CPU_DEVICE_TYPES and s.dtype != dtype
            and np.dtype(s.dtype) in _GPU_FLOATS and np.dtype(dtype) in _GPU_FLOATS):
        return mx.nd.amp_cast(s, dtype=dtype)
    return REAL_AMP_CAST(s, dtype)
