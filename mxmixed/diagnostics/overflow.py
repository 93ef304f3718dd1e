"""Name the layer where inf or NaN first appears in a float16 forward and backward pass.

How it works, and why this way: the net (with its loss) is traced to a Symbol and run once
in an executor of its own, with MXNet's monitor callback on every op output. The callback
reports forward nodes and then backward nodes in the order the executor runs them, so the
first non-finite tensor it sees is the first one computed. The alternatives were weaker:

* ``HybridBlock.register_op_hook`` (which the emulation's ``EmulatedCachedOp`` forwards)
  reports forward ops only in MXNet 1.9.1 (a hybridized Dense-Dense net reports
  ``dense0_fwd_output`` and ``dense1_fwd_output`` and nothing from its backward pass), warns
  that it is experimental with ``static_alloc``, and stays registered on the user's net;
* forward hooks on a non-hybridized net see whole blocks, not the ops inside them (a
  residual add, a cast), and see no gradients at all.

The executor gets copies of the parameters and BatchNorm statistics, so the net, its
gradients and its running statistics are left exactly as they were. On a CPU the graph runs
under :mod:`mxmixed.emulation`, so float16 overflows where it would on a GPU.
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

import mxnet as mx
from mxnet import gluon
from mxnet.contrib import amp

from .._core.convert import amp_forced, convert_graph
from .._core.dtypes import FLOAT16
from .._core.state import amp_initialized
from ..emulation import is_emulation_name, user_name, user_tensor_name
from ..training import amp_scope
from ._executor import Namer, Run, with_loss_scale
from ._tracing import (DATA, LABEL, Batch, as_ndarray, block_paths, check_block,
                       check_has_gradients, check_initialized, has_float16, is_cast, layer_of,
                       split_batch, trace)
from ._overflow_report import OverflowReport, input_suggestions, suggestions

__all__ = ["find_overflow", "find_overflow_symbol", "OverflowReport", "keep_in_float32"]


def keep_in_float32(ops: Sequence[str], target_dtype: str = "float16") -> Dict[str, List[Any]]:
    """AMP op lists that keep ``ops`` in float32, for ``amp_scope`` / ``init`` / ``amp.init``.

    ``amp.init(fp32_ops=[...])`` *replaces* the float32 list and leaves the op in the float16
    list too, where it stays float16; this moves the ops from the other lists instead.

    Parameters
    ----------
    ops : list of str
        Operator names, e.g. ``['FullyConnected']``.
    target_dtype : str, default 'float16'

    Returns
    -------
    dict
        ``target_precision_ops``, ``conditional_fp32_ops`` and ``fp32_ops``; pass it as
        ``mxmixed.amp_scope(**keep_in_float32(['FullyConnected']))``.
    """
    if isinstance(ops, str) or not all(isinstance(op, str) for op in ops):
        raise TypeError("ops must be a list of operator names, got %r" % (ops,))
    ops = list(ops)
    known = set(amp.list_lp16_ops(target_dtype) + amp.list_fp32_ops(target_dtype)
                + amp.list_lp16_fp32_ops(target_dtype)
                + [c[0] for c in amp.list_conditional_fp32_ops(target_dtype)])
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise ValueError("%s not in any of AMP's op lists (operator names such as "
                         "'FullyConnected', 'Convolution', 'BatchNorm')" % unknown)
    return {"target_precision_ops": [op for op in amp.list_lp16_ops(target_dtype) if op not in ops],
            "conditional_fp32_ops": [c for c in amp.list_conditional_fp32_ops(target_dtype)
                                     if c[0] not in ops],
            "fp32_ops": [op for op in amp.list_fp32_ops(target_dtype) if op not in ops] + ops}


# ---------------------------------------------------------------- the search
def _check_scale(scale):
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) \
            or not np.isfinite(scale) or scale <= 0:
        raise ValueError("scale must be a positive finite number, got %r" % (scale,))
    return float(scale)


def _kind(values):
    return "overflow" if np.isinf(values).any() else "nan"


def _bad_inputs(values):
    for name, array in values.items():
        if not np.issubdtype(array.dtype, np.floating):
            continue
        data = array.asnumpy()
        if not np.isfinite(data).all():
            return name, _kind(data), array
    return None


class _Search:
    """Watch every tensor of a run; keep the first non-finite one."""

    def __init__(self, run):
        self.run = run
        self.namer = Namer(run.graph, {n: v.shape for n, v in run.args.items()}, run.grads)
        self.first = None
        self.checked = {"forward": 0, "backward": 0}

    def watch(self, phase, name, array):
        if phase == "forward":
            self.namer.record_forward(name, array.shape)
        if self.first is not None or name.startswith("_head_grad"):
            return
        if phase == "backward" and not self.namer.computed(
                self.namer.backward_source(name, array.shape)[2]):
            return
        self.checked[phase] += 1
        data = array.asnumpy()
        if not np.isfinite(data).all():
            self.first = (phase, name, _kind(data), array.dtype, tuple(array.shape))


def _locate(sym, inputs, values, aux, grad_names, ctx, scale, precision, paths, hints):
    bad = _bad_inputs(dict(inputs, **values))
    if bad is not None:
        name, kind, array = bad
        where = "the input '%s'" % name if name in inputs else "parameter '%s'" % name
        return OverflowReport(scale, precision, {}, "input", kind, layer=None, tensor=where,
                              dtype=array.dtype, shape=array.shape,
                              suggestions=input_suggestions(name in inputs))
    run = Run(with_loss_scale(sym, scale), inputs, values, aux, grad_names, ctx)
    search = _Search(run)
    run.forward(watch=search.watch)
    if search.first is None:
        run.backward(scale, watch=search.watch)
    if search.first is None:
        return OverflowReport(scale, precision, search.checked)
    phase, tensor, kind, dtype, shape = search.first
    where = _describe(run.graph, search.namer, phase, tensor, shape, dtype, paths)
    report = OverflowReport(scale, precision, search.checked, phase, kind,
                            tensor=user_tensor_name(tensor), dtype=dtype, shape=shape, **where)
    report.suggestions = suggestions(report, hints)
    return report


# ---------------------------------------------------------------- naming what was found
def _producer(nodes, index, out=0):
    """The op that really computed an entry: casts (AMP's and the emulation's) looked through."""
    while is_cast(nodes[index]) and nodes[index].inputs:
        index, out, _ = nodes[index].inputs[0]
    return index, out


def _op_index(nodes, by_name, index):
    """An emulation cast of op ``L`` (``emulation._names``) stands for ``L``."""
    return by_name.get(user_name(nodes[index].name), index)


def _entry_text(nodes, by_name, index, out):
    index, out = _producer(nodes, index, out)
    node = nodes[index]
    if node.op == "null":
        return "'%s'" % node.name
    op_index = _op_index(nodes, by_name, index)
    suffix = "" if out == 0 else " [output %d]" % out
    return "the output of '%s'%s" % (nodes[op_index].name, suffix)


def _label(name, paths):
    return layer_of(name, paths) or "'%s'" % name


def _describe(graph, namer, phase, tensor, shape, dtype, paths):
    nodes = graph.nodes
    by_name = {node.name: i for i, node in enumerate(nodes)}
    found = namer.split(tensor)
    if found is None:
        if tensor.startswith("sum_grad"):
            return {"layer": "a gradient sum ('%s': the gradients of a tensor that several "
                             "layers read, added up)" % tensor}
        return {"layer": "'%s'" % tensor}
    i = found[0]
    gradient_of = cast_from = None
    if phase == "forward":
        node = nodes[i]
        if is_cast(node) and user_name(node.name) == node.name:
            # an AMP cast put a float32 value out of float16's range: blame its consumer
            consumers = [j for j, n in enumerate(nodes)
                         if any(src == i for src, _, _ in n.inputs)]
            consumers = [_op_index(nodes, by_name, j) for j in consumers]
            consumers = [j for j in consumers if not is_cast(nodes[j])] or [i]
            target = consumers[0]
            if node.inputs:
                src = _producer(nodes, *node.inputs[0][:2])[0]
                cast_from = _label(nodes[_op_index(nodes, by_name, src)].name, paths)
        else:
            target = _op_index(nodes, by_name, i)
    else:
        i, k, source = namer.backward_source(tensor, shape)
        if i is None:
            return {"layer": "'%s'" % tensor}
        node = nodes[i]
        if source is not None:
            gradient_of = _entry_text(nodes, by_name, *source)
        if is_cast(node) and user_name(node.name) == node.name and source is not None:
            # an AMP cast turned a float32 gradient into float16: the float16 tensor is the
            # gradient of what the cast read
            target = _op_index(nodes, by_name, _producer(nodes, *source)[0])
            if nodes[target].op == "null":
                target = _op_index(nodes, by_name, i)
        else:
            target = _op_index(nodes, by_name, i)
    name = nodes[target].name
    emulated = any(is_emulation_name(n, name) for n in by_name)
    return {"layer": _label(name, paths), "node": name, "op": nodes[target].op,
            "gradient_of": gradient_of, "cast_from": cast_from,
            "float16": emulated or np.dtype(dtype) == FLOAT16}


# ---------------------------------------------------------------- Gluon
def find_overflow(net: gluon.HybridBlock, batch: Batch, loss_fn: Optional[gluon.loss.Loss] = None,
                  scale: float = 1.0, precision: str = "auto",
                  fp32_ops: Optional[Sequence[str]] = None,
                  ctx: Optional[mx.Context] = None) -> OverflowReport:
    """Run one float16 training pass and name the first layer whose output or gradient has
    inf or NaN.

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock
        An initialized net: float32 (AMP is applied for the check), built under
        ``mxmixed.amp_scope``/``init``, or cast with ``net.cast('float16')``.
    batch : (NDArray, NDArray) or NDArray
        ``(X, y)``; X alone puts head gradient ``scale`` on every output of the net.
    loss_fn : mxnet.gluon.loss.Loss, optional
        Softmax cross-entropy by default (with y).
    scale : float, default 1.0
        The loss scale: the backward pass starts from ``scale`` times the loss gradient, as
        in ``scale_loss``. Pass the scale that overflowed, e.g.
        ``mxmixed.loss_scaler(trainer).loss_scale``.
    precision : {'auto', 'amp', 'as_is'}, default 'auto'
        'auto': a net with float16 parameters, or one traced under AMP, runs as it is;
        a float32 net gets AMP ('amp'). 'as_is' runs a float32 net in float32.
    fp32_ops : list of str, optional
        Operators to keep in float32 when AMP is applied here (see :func:`keep_in_float32`):
        the way to check a fix.
    ctx : mxnet.Context, optional
        The context of X by default; on a CPU, float16 is emulated.

    Returns
    -------
    OverflowReport
        False when nothing overflowed; ``str(report)`` says where and what to try.

    Raises
    ------
    TypeError
        For a plain ``gluon.Block``, a Symbol (use :func:`find_overflow_symbol`) or a loss that
        does not take Symbols.
    RuntimeError
        For an uninitialized net.
    ValueError
        For a net without gradients, a batch that does not fit the net, or a bad scale.

    .. note::
       The net is not changed: the pass runs in an executor of its own on copies of the
       parameters and BatchNorm statistics.

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import gluon
    >>> from sklearn.datasets import load_digits
    >>> from mxmixed import diagnostics
    >>> digits = load_digits()
    >>> batch = (mx.nd.array(digits.data[:32] / 16), mx.nd.array(digits.target[:32]))
    >>> net = gluon.nn.Dense(10)
    >>> net.initialize()
    >>> net.hybridize()
    >>> bool(diagnostics.find_overflow(net, batch))          # nothing overflows at scale 1
    False
    >>> bool(diagnostics.find_overflow(net, batch, scale=1e9))  # the loss scale overflows
    True
    """
    check_block(net, "find_overflow", for_symbols="find_overflow_symbol")
    scale = _check_scale(scale)
    if precision not in ("auto", "amp", "as_is"):
        raise ValueError("precision must be 'auto', 'amp' or 'as_is', got %r" % (precision,))
    X, y = split_batch(batch)
    params = check_initialized(net, X)
    check_has_gradients(params)
    ctx = ctx or X.context
    if y is not None and loss_fn is None:
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    cast_net = any(np.dtype(p.dtype) == FLOAT16 for p in params.values())
    sym = trace(net, loss_fn, with_label=y is not None)
    if cast_net:
        mode = "float16"
    elif has_float16(sym):
        mode = "amp"
    elif precision == "as_is":
        mode = "float32"
    else:
        mode = None
    if fp32_ops and mode is not None:
        raise ValueError("fp32_ops applies only when find_overflow applies AMP itself (a float32 "
                         "net outside amp_scope, precision 'auto' or 'amp'); here the net is %s"
                         % {"float16": "cast to float16", "amp": "already under AMP",
                            "float32": "run as it is"}[mode])
    if mode is None:
        if amp_initialized():  # pragma: no cover - AMP's patches would have left casts
            raise RuntimeError("AMP is initialized but the traced graph has no float16 op")
        with amp_scope(emulate=False, **keep_in_float32(fp32_ops or [])):  # tracing only
            sym = trace(net, loss_fn, with_label=y is not None)
        mode = "amp"
    inputs = {DATA: X.astype("float16") if cast_net and X.dtype == np.float32 else X}
    if y is not None:
        inputs[LABEL] = y
    values = {n: p.data(ctx) for n, p in params.items() if n in sym.list_inputs()}
    grad_names = [n for n, p in params.items() if p.grad_req != "null"]
    paths = block_paths(net)
    if isinstance(loss_fn, gluon.Block):
        paths += block_paths(loss_fn, "loss_fn")
    return _locate(sym, inputs, values, values, grad_names, ctx, scale, mode, paths,
                   {"cast_net": cast_net})


# ---------------------------------------------------------------- Symbol
def find_overflow_symbol(sym: mx.sym.Symbol, inputs: Dict[str, mx.nd.NDArray],
                         arg_params: Dict[str, mx.nd.NDArray],
                         aux_params: Optional[Dict[str, mx.nd.NDArray]] = None,
                         scale: float = 1.0, precision: str = "auto",
                         excluded_sym_names: Optional[Sequence[str]] = None,
                         fp32_ops: Optional[Sequence[str]] = None,
                         ctx: Optional[mx.Context] = None) -> OverflowReport:
    """:func:`find_overflow` for a Symbol and its parameters (a Module checkpoint).

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The training graph, loss included (e.g. ending in ``SoftmaxOutput``).
    inputs : dict of str to NDArray
        The data and labels, e.g. ``{'data': X, 'softmax_label': y}``.
    arg_params, aux_params : dict of str to NDArray
        As from ``mx.model.load_checkpoint``.
    scale : float, default 1.0
        The loss scale: multiplies the ``grad_scale`` of loss-output ops (SoftmaxOutput, ...)
        and is the head gradient of other outputs.
    precision : {'auto', 'amp', 'as_is'}, default 'auto'
        'auto': a graph with float16 casts or parameters runs as it is; a float32 graph is
        converted to AMP first ('amp'), as ``mxmixed convert`` converts it (detection ops
        kept float32, inputs cast where MXNet's pass leaves them mismatched).
    excluded_sym_names, fp32_ops : list of str, optional
        Layers kept float32 and ops moved to float32 (as by :func:`keep_in_float32`) when AMP
        is applied here: the way to check a fix.
    ctx : mxnet.Context, optional

    Returns
    -------
    OverflowReport
    """
    if not isinstance(sym, mx.sym.Symbol):
        raise TypeError("find_overflow_symbol needs an mxnet Symbol, got %s; for Gluon nets "
                        "use find_overflow" % type(sym).__name__)
    scale = _check_scale(scale)
    if precision not in ("auto", "amp", "as_is"):
        raise ValueError("precision must be 'auto', 'amp' or 'as_is', got %r" % (precision,))
    if not isinstance(inputs, dict) or not inputs:
        raise TypeError("inputs must be a dict {name: array}, e.g. {'data': X, "
                        "'softmax_label': y}")
    inputs = {n: as_ndarray(v, n) for n, v in inputs.items()}
    arg_params = dict(arg_params or {})
    aux_params = dict(aux_params or {})
    unknown = set(inputs) - set(sym.list_arguments())
    if unknown:
        raise ValueError("inputs names %s, which the graph does not take (its arguments: %s)"
                         % (sorted(unknown), sym.list_arguments()[:8]))
    missing = [n for n in sym.list_arguments() if n not in inputs and n not in arg_params]
    if missing:
        raise ValueError("no value for %s: pass them in arg_params (parameters) or inputs "
                         "(data, labels)" % missing[:6])
    missing_aux = [n for n in sym.list_auxiliary_states() if n not in aux_params]
    if missing_aux:
        raise ValueError("no value for the auxiliary states %s: pass aux_params" % missing_aux[:6])
    ctx = ctx or next(iter(inputs.values())).context
    dtypes = {n: v.dtype for n, v in arg_params.items()}
    if precision == "as_is" or has_float16(sym, dtypes):
        mode = "float16" if any(np.dtype(t) == FLOAT16 for t in dtypes.values()) else (
            "amp" if has_float16(sym) else "float32")
        if excluded_sym_names or fp32_ops:
            raise ValueError("excluded_sym_names and fp32_ops apply only when AMP is applied "
                             "here (a float32 graph with precision='auto' or 'amp')")
    else:
        lists = keep_in_float32(fp32_ops or [])
        op_lists = {"target_dtype_ops": lists["target_precision_ops"],
                    "fp32_ops": lists["fp32_ops"],
                    "conditional_fp32_ops": lists["conditional_fp32_ops"]}
        sym = convert_graph(sym, sorted(inputs), amp_forced(sym, excluded_sym_names),
                            op_lists=op_lists).symbol
        mode = "amp"
    grad_names = [n for n in sym.list_arguments() if n not in inputs]
    return _locate(sym, inputs, arg_params, aux_params, grad_names, ctx, scale, mode, None,
                   {"symbol": True})
