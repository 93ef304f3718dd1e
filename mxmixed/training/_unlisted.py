"""bfloat16 AMP keeps the ops its lists do not name in float32, and says so once per op.

MXNet 1.9.1's bfloat16 AMP leaves an op that none of its lists names to its inputs' dtype, so
after a bfloat16 Convolution or FullyConnected it gets bfloat16 inputs. Several such ops have no
CPU bfloat16 kernel (``im2col``, ``col2im``, ``_contrib_RROIAlign``: "Unknown type enum 12"),
and MXNet's error names no op and surfaces at the next sync, in an unrelated line of the
script. Only the ops of ``_core.convert.NO_BFLOAT16_CPU_OPS`` were probed; the others are
unknown, so :func:`unlisted_ops` finds every registered op in none of the lists (AMP's and the
caller's), mxmixed's bfloat16 AMP adds them to AMP's float32 list, and :func:`announce` makes
the first call of each that meets bfloat16 warn once, naming it. A bfloat16 conversion
(``symbolic``) keeps them float32 too, each named in its report.
"""
import ctypes
import functools
import os
import re
import warnings

from mxnet import base, ndarray, operator, symbol
from mxnet.base import MXNetError
from mxnet.contrib import amp

from .._core.convert import NO_BFLOAT16_CPU_OPS

__all__ = ["unlisted_ops", "announce", "UNLISTED_NOTE", "resolves", "missing_kernel", "reads_arrays"]

# Ops that are no layer of a model, or that bfloat16 AMP must leave alone: gradients and the
# NumPy front end (MXNet 1.9's AMP patches nothing in NumPy mode), AMP's own casts, graphs
# made after AMP (subgraph backends, cached ops), int8 quantization, and the optimizer and
# reset ops, which write into their ``out`` arrays: a cast would send the update to a copy.
_NOT_LAYERS = ("_backward", "_contrib_backward", "_np", "amp_", "_CachedOp", "_sg_",
               "_contrib_quantize", "_contrib_quantized", "_contrib_calibrate")
_WRITES_ITS_INPUTS = ("reset_arrays", "multi_lars", "multi_sum_sq")

UNLISTED_NOTE = ("bfloat16 AMP runs %s in float32: it is in none of MXNet's bfloat16 AMP lists, "
                 "and mxmixed knows of no CPU bfloat16 kernel for it (to try bfloat16: "
                 "target_precision_ops=%r)")


def _bare(name):
    prefix = base._get_op_name_prefix(name)
    return name[len(prefix):] if prefix else name


def _named(lists):
    """Every op name of ``lists`` (plain names and conditional entries), with and without its
    module prefix (AMP's list says 'BatchNormWithReLU' for '_contrib_BatchNormWithReLU')."""
    names = set()
    for ops in lists:
        for entry in ops or ():
            name = entry[0] if isinstance(entry, (tuple, list)) else entry
            names.update((name, _bare(name)))
    return names


def _registered(name):
    """Whether MXNet has an operator registered under ``name`` (one C call, no list made)."""
    handle = ctypes.c_void_p()
    try:
        return base._LIB.NNGetOpHandle(base.c_str(name), ctypes.byref(handle)) == 0 \
            and bool(handle.value)
    except (TypeError, ValueError, UnicodeError):  # not text MXNet can take
        return False


def resolves(name):
    """Whether ``name`` is a registered MXNet op that AMP can wrap in both front ends (it
    raises on one it cannot find, and on names of modules or attributes that are no op:
    ``random``, ``contrib``, ``__name__``).

    Parameters
    ----------
    name : str
        An op name as AMP's lists spell it ('im2col', '_contrib_RROIAlign').

    Returns
    -------
    bool
    """
    if not isinstance(name, str) or not _registered(name):
        return False
    for module in (ndarray, symbol):
        submodules = {p: getattr(module, p[1:-1]) for p in base._OP_NAME_PREFIX_LIST}
        fun, where = amp.amp._get_fun_to_wrap(name, module, submodules)
        if not hasattr(where, fun):
            return False
    return True


@functools.lru_cache(maxsize=None)
def reads_arrays(name):
    """Whether op ``name`` takes arrays (a creation op such as ``_zeros`` takes none).

    AMP's graph-building wrapper cannot wrap an op without inputs: MXNet 1.9.1 asks the new
    node for its inputs, gets None, and fails with ``TypeError: 'NoneType' object is not
    iterable``. Its bfloat16 float32 list names 39 such ops (``_zeros``, ``_ones``, ``_full``,
    the ``_random_*`` samplers ...), so a hybridized ``gluon.rnn.LSTM``, whose begin state is a
    ``zeros``, fails under bfloat16 AMP. Casting no input changes nothing: such ops need no
    wrapper.

    Parameters
    ----------
    name : str
        A registered op name ('_zeros', 'RNN').

    Returns
    -------
    bool
        True also for a name MXNet does not know (AMP then raises its own error).
    """
    handle = ctypes.c_void_p()
    if base._LIB.NNGetOpHandle(base.c_str(name), ctypes.byref(handle)) != 0 or not handle.value:
        return True
    texts = [ctypes.c_char_p() for _ in range(3)]
    count = base.mx_uint()
    names, types, docs = (ctypes.POINTER(ctypes.c_char_p)() for _ in range(3))
    variable = ctypes.c_char_p()
    base.check_call(base._LIB.MXSymbolGetAtomicSymbolInfo(
        handle, ctypes.byref(texts[0]), ctypes.byref(texts[1]), ctypes.byref(count),
        ctypes.byref(names), ctypes.byref(types), ctypes.byref(docs), ctypes.byref(variable),
        ctypes.byref(texts[2])))
    if variable.value:  # a variable number of inputs (Concat, add_n)
        return True
    return any(base.py_str(types[i]).startswith(("NDArray", "Symbol"))
               for i in range(count.value))


def unlisted_ops(target_precision_ops=None, conditional_fp32_ops=None, fp32_ops=None):
    """The registered ops that bfloat16 AMP would leave to their inputs' dtype, unprobed.

    Parameters
    ----------
    target_precision_ops, conditional_fp32_ops, fp32_ops : list, optional
        The caller's op lists, as ``amp.init`` takes them; an op they name is the caller's
        choice and is left out.

    Returns
    -------
    list of str
        The ops in none of AMP's bfloat16 lists nor the caller's, with a function in
        ``mx.nd`` and ``mx.sym``, that are model layers (no gradients, optimizer updates, casts
        or quantization) and not in ``NO_BFLOAT16_CPU_OPS``; sorted. Ops of an extension
        library loaded before the call are among them.
    """
    lists = amp.lists.symbol_bf16
    named = _named((lists.BF16_FUNCS, lists.BF16_FP32_FUNCS, lists.FP32_FUNCS,
                    lists.WIDEST_TYPE_CASTS, lists.CONDITIONAL_FP32_FUNCS,
                    lists.LOSS_OUTPUT_FUNCTIONS, target_precision_ops, conditional_fp32_ops,
                    fp32_ops, NO_BFLOAT16_CPU_OPS))
    return sorted(name for name in operator.get_all_registered_operators()
                  if name not in named and _bare(name) not in named
                  and not name.startswith(_NOT_LAYERS) and "update" not in name
                  and name not in _WRITES_ITS_INPUTS and resolves(name))


def _dtype_of(value):
    """The dtype of an NDArray, or of a Symbol's first output with float32 data: a Gluon graph
    being built has untyped data inputs, and AMP's float32 data is what it will be given."""
    if isinstance(value, ndarray.NDArray):
        return value.dtype
    if not isinstance(value, symbol.Symbol):
        return None
    attrs = value.attr_dict()
    data = {name: "float32" for name in value.list_arguments()
            if "__dtype__" not in attrs.get(name, {})}
    try:
        return value.infer_type_partial(**data)[1][0]
    except (MXNetError, IndexError):
        return None


def _meets_bfloat16(args, kwargs):
    """Whether a call gives the op a bfloat16 input (an array, or a node of a graph)."""
    return any(_dtype_of(value) == amp.amp.bfloat16
               for value in list(args) + list(kwargs.values()))


def _announcing(fun, name, told):
    def wrapper(*args, **kwargs):
        if name not in told and _meets_bfloat16(args, kwargs):
            told.add(name)
            ops = list(amp.lists.symbol_bf16.BF16_FUNCS) + [name]
            warnings.warn(UNLISTED_NOTE % (name, ops), stacklevel=2)
        out = kwargs.get("out")
        if isinstance(out, ndarray.NDArray) and out.dtype == amp.amp.bfloat16:
            # AMP's float32 wrapper would cast ``out`` too, and the result land in a copy
            result = fun(*args, **{k: v for k, v in kwargs.items() if k != "out"})
            return ndarray.amp_cast(result, dtype=out.dtype, out=out)
        return fun(*args, **kwargs)

    wrapper.__name__, wrapper.__doc__ = fun.__name__, fun.__doc__
    wrapper.__module__ = fun.__module__
    return wrapper


def announce(names):
    """Wrap the functions of ``names`` (over AMP's wrappers, in ``mx.nd`` and ``mx.sym``) so
    that the first call of each that meets bfloat16 warns once (a Symbol call: when a
    hybridized block builds its graph). Undone as AMP's wrappers are: by ``amp_scope`` on exit,
    never after a process-wide ``init``.

    Parameters
    ----------
    names : sequence of str
        Ops from :func:`unlisted_ops`, already on AMP's float32 list.

    Returns
    -------
    None
    """
    told = set()
    for module in (ndarray, symbol):
        submodules = {p: getattr(module, p[1:-1]) for p in base._OP_NAME_PREFIX_LIST}
        for name in names:
            fun, where = amp.amp._get_fun_to_wrap(name, module, submodules)
            wrapped = _announcing(getattr(where, fun), name, told)
            setattr(where, fun, wrapped)
            if where is module:
                setattr(module.op, fun, wrapped)


# How MXNet 1.9.1's CPU kernels refuse bfloat16 (type code 12) where their dtype switch has no
# case for it, and where its message says the kernel is (it names no op).
_NO_KERNEL = re.compile(r"(Unknown type enum|Unsupported data type) 12\b")
_KERNEL_AT = re.compile(r'File "[^"]*?(src/operator/[^"]+)", line (\d+)')


def missing_kernel(exc):
    """Where MXNet refused bfloat16 for want of a CPU kernel, from its error.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    tuple of (str, str) or None
        ``(source, op)``: the kernel's source and line ('src/operator/nn/im2col-inl.h:105')
        and the op its file is named after ('im2col'), each '' when the message does not say;
        None when ``exc`` is not MXNet's "Unknown type enum 12" / "Unsupported data type 12".
    """
    text = str(exc) if isinstance(exc, MXNetError) else ""
    if not _NO_KERNEL.search(text):
        return None
    places = _KERNEL_AT.findall(text)
    if not places:
        return "", ""
    path, line = os.path.normpath(places[-1][0]), places[-1][1]
    return "%s:%s" % (path, line), _op_of_file(os.path.basename(path))


def _op_of_file(filename):
    """The op a kernel's file is named after ('leaky_relu-inl.h': 'LeakyReLU'), or ''."""
    def key(name):
        return name.lower().replace("_", "")

    stem = key(re.sub(r"(-inl)?\.(h|cc|cu)$", "", filename))
    found = [name for name in operator.get_all_registered_operators()
             if key(_bare(name)) == stem and not name.startswith(_NOT_LAYERS)]
    return found[0] if len(found) == 1 else ""
