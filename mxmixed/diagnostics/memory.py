"""Training memory by precision: float32, AMP, and ``cast('float16')`` with multi-precision.

Every number is an explicit product of an element count and a dtype size, and the report
shows it. Shapes and dtypes come from ``infer_shape`` / ``infer_type``; nothing runs.

================  ==============  =================  ==========================================
item              float32         AMP                cast('float16') + multi_precision
================  ==============  =================  ==========================================
parameters        4 B             4 B (the master)   2 B; BatchNorm's stay 4 B
gradients         4 B             4 B                as the parameter
optimizer state   4 B x states    4 B x states       4 B x states (kept in float32)
master weights    none            none               4 B per float16 parameter
auxiliary states  4 B             4 B                4 B (BatchNorm statistics stay float32)
weight copies     none            2 B per parameter  none
                                  that a float16 op
                                  reads
activations       each op output  each op output at  each op output at its dtype
                  at 4 B          its dtype
input batch       4 B             4 B                2 B
================  ==============  =================  ==========================================

.. note::
   Activations are estimated as every visible op output stored once (casts that do not
   change the dtype excluded). MXNet's memory planner shares and frees buffers, so the real
   peak is lower; activation gradients, workspaces and allocator slack are not counted.
   The estimate is for comparing precisions, not for predicting an out-of-memory error.
"""
from collections import OrderedDict, namedtuple
from typing import Dict, Optional, Union

import numpy as np

import mxnet as mx
from mxnet import gluon

from .._core.convert import amp_forced, convert_graph, settle
from .._core.graph import as_graph
from .._core.state import amp_initialized
from ..training import amp_scope
from ._tracing import (GraphInfo, InputShape, check_block, data_inputs, is_cast,
                     normalize_input_shape, strip_amp_casts, trace)

__all__ = ["memory_report", "MemoryReport", "MemoryLine", "CONFIGS"]

CONFIGS = ("float32", "amp", "float16")
ITEMS = ("parameters", "gradients", "optimizer states", "master weights", "auxiliary states",
         "weight copies", "activations", "input batch")

MemoryLine = namedtuple("MemoryLine", ["config", "item", "bytes", "formula"])
MemoryLine.__doc__ = """One line of a :class:`MemoryReport`.

Parameters
----------
config : str
    'float32', 'amp' or 'float16'.
item : str
    One of ``ITEMS``.
bytes : int
    The size.
formula : str
    How it was computed, e.g. ``'244 x 4 B (float32) = 976 B'``.
"""

_BN_OPS = ("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm")


def _formula(groups):
    """``groups``: list of (elements, dtype name). Returns (bytes, 'a x 4 B (float32) + ...')."""
    groups = [(n, d) for n, d in groups if n]
    if not groups:
        return 0, "0 B"
    total = sum(n * np.dtype(d).itemsize for n, d in groups)
    terms = " + ".join("%d x %d B (%s)" % (n, np.dtype(d).itemsize, d) for n, d in groups)
    return int(total), "%s = %d B" % (terms, total)


def _by_dtype(pairs):
    """Sum element counts per dtype, float32 first."""
    out = OrderedDict()
    for n, d in sorted(pairs, key=lambda p: np.dtype(p[1]).itemsize, reverse=True):
        out[np.dtype(d).name] = out.get(np.dtype(d).name, 0) + int(n)
    return list((n, d) for d, n in out.items())


class MemoryReport:
    """Bytes per item and precision, with the arithmetic.

    Attributes
    ----------
    lines : list of MemoryLine
        One per (config, item).
    activations : dict of str to list of (str, str, tuple, str, int)
        Per config, every counted activation: ``(node, op, shape, dtype, bytes)``.
    params : list of (str, int, bool, bool, bool)
        ``(name, elements, trainable, read by BatchNorm, auxiliary state)`` for every
        parameter and auxiliary state. Frozen parameters (``grad_req='null'``) count in
        'parameters' but have no gradient, optimizer state or master copy.
    optimizer_states : int
        Optimizer states per trainable parameter.
    """

    def __init__(self, lines, activations, params, optimizer_states, input_shape):
        self.lines = lines
        self.activations = activations
        self.params = params
        self.optimizer_states = optimizer_states
        self.input_shape = input_shape

    def bytes(self, config: str, item: Optional[str] = None) -> int:
        """Bytes of one item, or the total of a config.

        Parameters
        ----------
        config : {'float32', 'amp', 'float16'}
        item : str, optional
            One of ``ITEMS``; the total when omitted.

        Returns
        -------
        int
        """
        if config not in CONFIGS:
            raise ValueError("config must be one of %s, got %r" % (CONFIGS, config))
        picked = [l.bytes for l in self.lines if l.config == config
                  and (item is None or l.item == item)]
        if item is not None and not picked:
            raise ValueError("item must be one of %s, got %r" % (ITEMS, item))
        return int(sum(picked))

    @property
    def totals(self) -> Dict[str, int]:
        """dict: total bytes per config."""
        return {c: self.bytes(c) for c in CONFIGS}

    def formula(self, config: str, item: str) -> str:
        """The arithmetic of one line (str)."""
        for line in self.lines:
            if line.config == config and line.item == item:
                return line.formula
        raise ValueError("no line %r / %r" % (config, item))

    def table(self) -> str:
        """Bytes per item (rows) and config (columns), as text."""
        head = "%-18s %14s %14s %14s" % ("bytes", "float32", "AMP", "float16+MP")
        rows = [head, "-" * len(head)]
        for item in ITEMS:
            rows.append("%-18s %14s %14s %14s" % ((item,) + tuple(
                "{:,}".format(self.bytes(c, item)) for c in CONFIGS)))
        rows.append("%-18s %14s %14s %14s" % (("total",) + tuple(
            "{:,}".format(self.bytes(c)) for c in CONFIGS)))
        return "\n".join(rows)

    def explain(self, config: Optional[str] = None) -> str:
        """Every line's arithmetic, for one config or all.

        Returns
        -------
        str
        """
        out = []
        for c in CONFIGS if config is None else [config]:
            out.append("%s:" % {"float32": "float32", "amp": "AMP (float16 activations, float32 "
                                "params)", "float16": "cast('float16') + multi-precision"}[c])
            for line in self.lines:
                if line.config == c:
                    out.append("  %-17s %s" % (line.item, line.formula))
            out.append("  %-17s %d B" % ("total", self.bytes(c)))
        return "\n".join(out)

    def __str__(self):
        return self.table() + "\n\n" + self.explain()

    def __repr__(self):
        return "MemoryReport(%s)" % ", ".join("%s=%d" % kv for kv in self.totals.items())


def _untyped(sym):
    """The graph without ``__dtype__`` hints on its variables, so each config sets them."""
    graph = as_graph(sym)
    return graph.with_attrs({i: {"__dtype__": None} for i, node in enumerate(graph.nodes)
                             if node.is_variable}).to_symbol()


def _float16_graph(sym):
    """The graph as ``cast('float16')`` builds it: constant-creating ops (an RNN's zero begin
    state) make float16 tensors."""
    graph = as_graph(sym)
    changes = {i: {"dtype": "float16"} for i, node in enumerate(graph.nodes)
               if node.op in ("_zeros", "_ones", "_full", "_arange", "_eye")
               and node.attrs.get("dtype", "float32") == "float32"}
    return graph.with_attrs(changes).to_symbol() if changes else sym


def _graphs(net):
    """(float32 graph, AMP graph, trainable names or None) for a net or a Symbol."""
    if isinstance(net, mx.sym.Symbol):
        plain = strip_amp_casts(net)
        amp_graph = convert_graph(_untyped(plain), data_inputs(plain),
                                  amp_forced(plain)).symbol
        return plain, amp_graph, None
    if not isinstance(net, gluon.Block):
        raise TypeError("memory_report needs a Gluon HybridBlock or an mxnet Symbol, got %s"
                        % type(net).__name__)
    check_block(net, "memory_report")
    traced = trace(net)
    if amp_initialized():
        amp_graph = traced
    else:
        with amp_scope(emulate=False):  # tracing only; nothing runs
            amp_graph = trace(net)
    trainable = {p.name for p in net.collect_params().values() if p.grad_req != "null"}
    return strip_amp_casts(traced), amp_graph, trainable


def memory_report(net: Union[gluon.HybridBlock, mx.sym.Symbol], input_shape: InputShape,
                  dtype: str = "float32", optimizer_states: int = 1) -> "MemoryReport":
    """Parameter, gradient, optimizer, master-weight and activation bytes in three precisions.

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock or mxnet.symbol.Symbol
        The model, without its loss (it need not be initialized).
    input_shape : tuple or dict of str to tuple
        The batch shape, e.g. ``(64, 1, 8, 8)``.
    dtype : str, default 'float32'
        The dtype the data arrives in for the float32 and AMP columns (the float16 column
        always takes float16 data, as ``net.cast('float16')`` needs).
    optimizer_states : int, default 1
        float32 state tensors per parameter: 0 for plain SGD, 1 for SGD with momentum,
        2 for Adam.

    Returns
    -------
    MemoryReport
        ``print(report)`` shows the table and each line's arithmetic.

    Raises
    ------
    TypeError
        For a plain ``gluon.Block`` or anything else.
    ValueError
        For an input shape that does not fit the model.

    Examples
    --------
    >>> from mxnet import gluon
    >>> from mxmixed import diagnostics
    >>> net = gluon.nn.HybridSequential()
    >>> net.add(gluon.nn.Dense(256, activation="relu"), gluon.nn.Dense(10))
    >>> net.initialize()
    >>> report = diagnostics.memory_report(net, (32, 64))
    >>> isinstance(report, diagnostics.MemoryReport)
    True
    """
    if isinstance(optimizer_states, bool) or not isinstance(optimizer_states, (int, np.integer)) \
            or optimizer_states < 0:
        raise ValueError("optimizer_states must be a non-negative integer, got %r"
                         % (optimizer_states,))
    data_dtype = np.dtype(dtype).name
    if data_dtype not in ("float32", "float16"):
        raise ValueError("dtype must be 'float32' or 'float16', got %r" % (dtype,))
    plain, amp_graph, trainable = _graphs(net)
    shapes = normalize_input_shape(plain, input_shape)
    plain = _untyped(plain)
    graphs = {"float32": plain, "amp": _untyped(amp_graph), "float16": _float16_graph(plain)}
    inputs = set(shapes)
    base = GraphInfo(plain, shapes, {n: data_dtype for n in inputs})
    labels = {n for n in plain.list_arguments() if n not in inputs and n.endswith("label")}
    params = _param_rows(plain, base, inputs | labels, trainable)
    lines, activations = [], {}
    for config in CONFIGS:
        in_dtype = "float16" if config == "float16" else data_dtype
        dtypes = {n: in_dtype for n in inputs}
        dtypes.update({n: "float32" for n in labels})
        dtypes.update({n: _param_dtype(config, bn) for n, _, _, bn, _ in params})
        info = _graph_info(graphs[config], shapes, dtypes, config)
        copies, acts = _activations(info, inputs | labels)
        rows = _column(config, params, optimizer_states, copies, acts,
                       [(int(np.prod(shapes[n])), in_dtype) for n in shapes])
        lines += [MemoryLine(config, item, size, text) for item, (size, text) in rows.items()]
        activations[config] = acts
    return MemoryReport(lines, activations, params, optimizer_states, shapes)


def _param_rows(plain, base, inputs, trainable):
    """``(name, elements, trainable, read by BatchNorm, auxiliary)`` of every param and aux."""
    bn_inputs = set()
    for i in base.op_nodes(_BN_OPS):
        for src, _, _ in base.nodes[i].inputs[1:]:
            bn_inputs.add(base.nodes[src].name)
    params = [(name, int(np.prod(base.arg_shapes[name])),
               trainable is None or name in trainable, name in bn_inputs, False)
              for name in plain.list_arguments() if name not in inputs]
    params += [(name, int(np.prod(base.aux_shapes[name])), False, True, True)
               for name in plain.list_auxiliary_states()]
    return params


def _param_dtype(config, bn):
    return "float16" if config == "float16" and not bn else "float32"


def _column(config, params, optimizer_states, copies, acts, batch):
    """Bytes and arithmetic of every item of one config's column."""
    args = [(n, s, _param_dtype(config, bn), t) for n, s, t, bn, is_aux in params
            if not is_aux]
    train = [(n, s, d) for n, s, d, t in args if t]
    aux = [(n, s) for n, s, _, _, is_aux in params if is_aux]
    rows = OrderedDict()
    rows["parameters"] = _formula(_by_dtype([(s, d) for _, s, d, _ in args]))
    rows["gradients"] = _formula(_by_dtype([(s, d) for _, s, d in train]))
    rows["optimizer states"] = _formula(
        [(optimizer_states * sum(s for _, s, _ in train), "float32")])
    rows["master weights"] = _formula(
        [(sum(s for _, s, d in train if d == "float16"), "float32")])
    rows["auxiliary states"] = _formula([(sum(s for _, s in aux), "float32")])
    rows["weight copies"] = _formula(_by_dtype(copies))
    size, text = _formula(_by_dtype([(int(np.prod(shape)), d) for _, _, shape, d, _ in acts]))
    rows["activations"] = (size, "%s (%d op outputs)" % (text, len(acts)))
    rows["input batch"] = _formula(batch)
    return rows


def _graph_info(graph, shapes, dtypes, config):
    """:class:`GraphInfo` of one column. A graph that casts to float32 itself (gluoncv's
    Faster R-CNN clips boxes against a ``Cast(float32)``) does not type-check once every
    param is float16; its float16 column then casts those inputs as a user would have to
    (:func:`mxmixed._core.convert.settle`)."""
    try:
        return GraphInfo(graph, shapes, dtypes)
    except TypeError:
        if config != "float16":
            raise
    inputs = set(graph.list_inputs())
    settled, _, _ = settle(as_graph(graph), set(), {n: np.dtype(d) for n, d in dtypes.items()
                                                      if n in inputs}, {})
    return GraphInfo(settled.to_symbol(), shapes, dtypes)


def _activations(info, inputs):
    """(weight copies as (elements, dtype), activations as (node, op, shape, dtype, bytes)).

    A cast of a parameter is a weight copy; a cast of the data is an activation.
    """
    copies, acts = [], []
    for i in info.op_nodes():
        node = info.nodes[i]
        outs = info.outputs(i)
        if is_cast(node):
            for k, (shape, dtype) in enumerate(outs):
                src_k = min(k, len(node.inputs) - 1)
                src = info.nodes[node.inputs[src_k][0]]
                in_dtype = info.input(i, src_k)[1]
                if dtype == in_dtype:
                    continue  # a cast to the same dtype copies nothing
                if src.is_variable and src.name not in inputs:
                    copies.append((int(np.prod(shape)), dtype.name))
                    continue
                acts.append((node.name, node.op, shape, dtype.name,
                             int(np.prod(shape)) * dtype.itemsize))
            continue
        for shape, dtype in outs:
            dtype = np.dtype(dtype or np.float32)
            acts.append((node.name, node.op, shape, dtype.name,
                         int(np.prod(shape)) * dtype.itemsize))
    return copies, acts

