"""The one AMP conversion of a Symbol graph: MXNet's pass, then settling where it fails.

Both :mod:`mxmixed.symbolic` (``convert``, the search, ``mxmixed convert``) and
:mod:`mxmixed.diagnostics` (the overflow locator, the memory report) convert graphs here, so a
graph that one of them can convert, the other can too.

MXNet 1.9.1's AMP pass (``amp.convert_model`` / ``amp.convert_symbol``) leaves two kinds of
graphs that do not type-check, so that the conversion fails or the converted model cannot run:

* ops that are in none of its lists and take several floating inputs, such as
  ``_contrib_box_decode`` in SSD: the box predictions come out of a float16 convolution, the
  anchors stay float32 ("Incompatible attr in node ..._box_decode0 at 1-th input");
* excluded layers that feed a ``Concat`` or an elementwise add next to float16 branches
  (Inception's "Non-uniform data type in Concat"); MXNet's pass fails on them itself.

:func:`convert_graph` runs MXNet's pass with the exclusions. When that fails or its graph does
not type-check, it converts without exclusions and :func:`settle` walks the graph in order,
asks MXNet's own type inference about one node at a time, and where a node's inputs do not fit
together it casts them: up to float32 for most ops (the widest type, as ``amp_multicast``
does), down to float16 for the ops of MXNet's float16 list (Convolution, FullyConnected, ...).
Nodes named in ``forced`` always compute in float32, with float32 weights. The fast path, a
graph that already type-checks, is never touched.
"""
import ctypes
import functools
import re
from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

import mxnet as mx
from mxnet.contrib import amp

from . import dtypes
from . import errors
from .dtypes import FLOAT16, FLOAT32
from .graph import (Graph, GraphTypeError, Record, as_graph, cast_node, dtype_code, infer_types,
                    var_dtype)
from .ops import DETECTION_OPS

__all__ = ["ConversionError", "AmpGraph", "convert_graph", "amp_forced", "settle",
           "param_types_after", "NO_BFLOAT16_CPU_OPS", "NO_BFLOAT16_CPU_VARIANTS",
           "SLOW_BFLOAT16_CPU_OPS", "op_names"]

# Ops that AMP's bfloat16 lists let bfloat16 reach (unlisted, or on WIDEST_TYPE_CASTS, which
# keeps bfloat16 when every input is bfloat16) but whose CPU kernels refuse it: "Only FP32 is
# supported on CPU" (transformer.cc), "dot only supports float32/float64 for CPU", "Unknown
# type enum 12" (box_decode, box_iou, box_nms, ROIAlign, Correlation), "Unsupported data type 12"
# (MultiBoxPrior); probed with bfloat16 inputs, forward and backward, on MXNet 1.9.1's CPU
# wheel. A bfloat16 conversion keeps them float32 (gluonnlp's attention), and mxmixed's
# bfloat16 AMP adds them to AMP's float32 list (training._amp).
NO_BFLOAT16_CPU_OPS = ("_contrib_interleaved_matmul_selfatt_qk",
                       "_contrib_interleaved_matmul_selfatt_valatt",
                       "_contrib_interleaved_matmul_encdec_qk",
                       "_contrib_interleaved_matmul_encdec_valatt",
                       "batch_dot", "dot", "_contrib_box_decode", "_contrib_ROIAlign",
                       "Correlation", "_contrib_MultiBoxPrior", "_contrib_box_iou",
                       "_contrib_box_nms", "_contrib_box_non_maximum_suppression")
# The same for one value of an attribute ("Unknown type enum 12"), in the form of AMP's
# conditional float32 list: the op's other variants run in bfloat16. Pooling sum and LeakyReLU
# rrelu (forward, pooling-inl.h / leaky_relu-inl.h) were found after the first probe.
NO_BFLOAT16_CPU_VARIANTS = (("Activation", "act_type", ["softsign"]),
                            ("LeakyReLU", "act_type", ["prelu", "rrelu"]),
                            ("Pooling", "pool_type", ["lp", "sum"]))
# Ops whose CPU bfloat16 kernel is MXNet's generic (mshadow) one, measured slower than float32:
# AMP's bfloat16 lists leave them to their inputs' dtype, and mxmixed's bfloat16 AMP adds them,
# under all their names (op_names), to AMP's float32 list (training._amp; an op the caller names
# in target_precision_ops stays the caller's). A generic kernel converts element by element, so
# AMX would not change it. Measured by benchmarks/bfloat16_ops.py, which fails when this list
# and a run disagree: forward + backward, bfloat16 / float32 time on 8x64x56x56 and on
# 8x128x512 (2026-11-28, 2-core AMD EPYC with AVX512-BF16, no AMX, MXNet 1.9.1, load 2.5).
# A conversion (symbolic) keeps clip in bfloat16: oneDNN's subgraph backend fuses it into the
# Convolution (mobilenetv2_1.0 inference 1.50x float32; with clip float32, 0.32x).
SLOW_BFLOAT16_CPU_OPS = (
    "clip",  # 3.5x, 4.2x: MobileNet v2's ReLU6 (its training step 0.40x float32 -> 0.95x)
    "relu",  # 13x, 13x (F.relu; Activation relu is oneDNN's, 0.86x 1.1x)
    "abs", "sqrt", "square", "tanh",  # 6.1x 5.9x; 8.3x 6.7x; 23x 22x; 4.3x 4.2x
    "add_n",  # 4.8x, 1.8x (elemwise_add, oneDNN's sum, 1.6x 1.3x, stays bfloat16)
    "where",  # 2.3x, 2.3x
    "elemwise_sub", "elemwise_mul", "elemwise_div",  # 12x 12x; 19x 23x; 23x 24x
    "_maximum", "_minimum", "_mod",  # 27x 29x; 23x 33x; 5.1x 4.8x
    "broadcast_add", "broadcast_sub", "broadcast_div",  # 11x 8.0x; 9.6x 8.4x; 3.5x 4.2x
    "broadcast_maximum", "broadcast_minimum", "broadcast_mod",  # 4.0x 3.4x; 3.5x 3.4x; 3.8x 3.3x
    # the comparisons and logical ops, each 3.3-8.3x (broadcast_mul is on AMP's float32 list):
    "_equal", "_not_equal", "_greater", "_greater_equal", "_lesser", "_lesser_equal",
    "_logical_and", "_logical_or", "_logical_xor", "broadcast_equal", "broadcast_not_equal",
    "broadcast_greater", "broadcast_greater_equal", "broadcast_lesser",
    "broadcast_lesser_equal", "broadcast_logical_and", "broadcast_logical_or",
    "broadcast_logical_xor")


@functools.lru_cache(maxsize=None)
def op_names(ops):
    """Every name MXNet registers for the ops ``ops`` (their aliases: ``elemwise_sub`` is also
    ``_Minus``, ``_minus`` and ``_sub``, each a function of its own that AMP wraps apart).

    Parameters
    ----------
    ops : tuple of str
        Registered op names.

    Returns
    -------
    tuple of str
        ``ops`` first, then their other names, sorted.
    """
    handles = {_op_handle(name) for name in ops}
    aliases = sorted(name for name in mx.operator.get_all_registered_operators()
                     if name not in ops and _op_handle(name) in handles)
    return tuple(ops) + tuple(aliases)


def _op_handle(name):
    handle = ctypes.c_void_p()
    check = mx.base._LIB.NNGetOpHandle(mx.base.c_str(name), ctypes.byref(handle))
    return handle.value if check == 0 else None


class ConversionError(ValueError):
    """A bad input to a conversion (files, graph, params or options), as one readable line."""


@dataclass
class AmpGraph:
    """The result of :func:`convert_graph`.

    Attributes
    ----------
    symbol : mxnet.symbol.Symbol
        The converted graph, with its ``amp_cast`` nodes.
    arg_params, aux_params : dict of str to mxnet.nd.NDArray
        The params as the converted graph stores them (empty for a graph converted alone).
    widened : list of str
        Nodes, not forced, whose inputs were cast up to float32 because they did not match.
    settled : str or None
        None on MXNet's own path; else why settling was needed (MXNet's reason, one line).
    """

    symbol: mx.sym.Symbol
    arg_params: Dict[str, mx.nd.NDArray] = field(repr=False)
    aux_params: Dict[str, mx.nd.NDArray] = field(repr=False)
    widened: List[str] = field(default_factory=list)
    settled: str = None


def amp_forced(sym, excluded=()):
    """The nodes a default conversion keeps float32: ``excluded`` and every detection op.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    excluded : sequence of str
        Layer names kept float32 on request.

    Returns
    -------
    set of str
    """
    nodes = as_graph(sym).nodes
    return set(excluded or ()) | {n.name for n in nodes if n.op in DETECTION_OPS}


def _node_types(node, in_types, n_out):
    """Output dtypes of ``node`` given input dtypes, from MXNet's inference (or None)."""
    found = _node_inference(node, in_types, n_out)
    return None if found is None else list(found[1])


def _node_inference(node, in_types, n_out):
    """``(input dtypes, output dtypes)`` of ``node`` given some input dtypes (None: unknown),
    from MXNet's inference, or None where MXNet refuses them. Nodes of one op, attributes and
    input dtypes are asked about once (a chain of a thousand relus is one question)."""
    key = (node.op, tuple(sorted(node.attrs.items())),
           tuple(None if t is None else dtypes.dtype_name(t) for t in in_types), n_out)
    return _inference_of(key)


@functools.lru_cache(maxsize=4096)
def _inference_of(key):
    op, attrs, in_types, n_out = key
    nodes = [{"op": "null", "name": "in%d" % k, "inputs": []} for k in range(len(in_types))]
    nodes.append({"op": op, "name": "node", "attrs": dict(attrs),
                  "inputs": [[k, 0, 0] for k in range(len(in_types))]})
    graph = Graph({"nodes": nodes, "arg_nodes": list(range(len(in_types))),
                   "heads": [[len(in_types), j, 0] for j in range(n_out)],
                   "attrs": {"mxnet_version": ["int", 10901]}})
    known = {"in%d" % k: dtypes.BFLOAT16 if t == "bfloat16" else np.dtype(t)
             for k, t in enumerate(in_types) if t is not None}
    try:
        args, outs, _ = infer_types(graph.to_symbol(), known)
    except (GraphTypeError, mx.base.MXNetError):
        return None
    return tuple(args.get("in%d" % k) for k in range(len(in_types))), tuple(outs)


def _fp32_params(nodes, forced, param_types):
    """Params read only by forced nodes (directly or through one amp_cast): they stay float32."""
    consumers = {}
    for j, node in enumerate(nodes):
        for src, _, _ in node.inputs:
            consumers.setdefault(src, set()).add(j)
    kept = set()
    for i, node in enumerate(nodes):
        if node.op != "null" or node.name not in param_types:
            continue
        readers = set()
        for j in consumers.get(i, set()):
            readers |= consumers.get(j, set()) if nodes[j].op == "amp_cast" else {j}
        if readers and all(nodes[j].name in forced for j in readers):
            kept.add(node.name)
    return kept


def _output_counts(graph):
    n_out = {}
    for node in graph.nodes:
        for src, out, _ in node.inputs:
            n_out[src] = max(n_out.get(src, 1), out + 1)
    for src, out, _ in graph.heads:
        n_out[src] = max(n_out.get(src, 1), out + 1)
    return n_out


class _Settler:
    """The state of one :func:`settle` walk: the new nodes, their dtypes and the casts made."""

    def __init__(self, graph, lp16, low=FLOAT16):
        self.new = graph.rebuild()
        self.types, self.casts, self.widened = {}, {}, []
        self.lp16 = lp16
        self.low = low

    def add(self, node, out_types):
        new_id = self.new.add(node)
        for j, t in enumerate(out_types):
            self.types[(new_id, j)] = t
        return new_id

    def cast(self, entry, dtype):
        key = (entry, dtypes.dtype_name(dtype))
        if key not in self.casts:
            name = "%s_settle_%s" % (self.new.node(entry[0]).name, key[1])
            self.casts[key] = (self.add(cast_node(name, dtype, entry), [dtype]), 0)
        return self.casts[key]

    def fit(self, node, entries, forced, n_out):
        """Entries (cast where needed) and output dtypes for ``node``; None if nothing fits."""
        if node.name in forced:
            entries = [self.cast(e, FLOAT32) if self.types.get(e) == self.low else e
                       for e in entries]
        outs = _node_types(node, [self.types.get(e) for e in entries], n_out)
        if outs is None and node.name not in forced:
            floats = {dtypes.dtype_name(self.types[e]) for e in entries
                      if dtypes.is_floating(self.types.get(e))}
            if node.op in self.lp16:
                entries = [self.cast(e, self.low) if dtypes.is_floating(self.types.get(e))
                           and self.types.get(e) != self.low else e for e in entries]
            else:
                entries = [self.cast(e, FLOAT32) if self.types.get(e) == self.low else e
                           for e in entries]
                if len(floats) > 1:
                    self.widened.append(node.name)
            outs = _node_types(node, [self.types.get(e) for e in entries], n_out)
        if outs is None:
            names = sorted({dtypes.dtype_name(self.types[e]) if self.types.get(e) is not None else "?"
                            for e in entries})
            raise ConversionError("cannot give node %r (%s) inputs of one dtype (it gets %s)"
                                  % (node.name, node.op, ", ".join(names)))
        return entries, outs


def settle(graph, forced, param_types, data_types, target="float16"):
    """Rewrite ``graph`` (converted JSON) so that every node type-checks.

    Parameters
    ----------
    graph : Graph or dict
        The converted graph, with its ``amp_cast`` nodes.
    forced : set of str
        Node names that must compute in float32.
    param_types : dict of str to numpy.dtype
        Dtype of every param (as stored after the conversion).
    data_types : dict of str to numpy.dtype
        Dtype of every data input.
    target : str, default 'float16'

    Returns
    -------
    graph : Graph
        The new graph.
    widened : list of str
        Nodes (not forced) whose inputs were cast up to float32 because they did not match.
    fp32_params : set of str
        Params that only forced nodes use: store them float32.
    """
    graph = as_graph(graph)
    nodes = graph.nodes
    n_out = _output_counts(graph)
    fp32_params = _fp32_params(nodes, forced, param_types)
    low = dtypes.BFLOAT16 if target == "bfloat16" else FLOAT16
    walk = _Settler(graph, set(amp.list_lp16_ops(dtypes.amp_list_key(target))), low)
    for i, node in enumerate(nodes):
        node = Record(node)
        if node.op == "null":
            name = node.name
            if name in fp32_params:
                dtype = FLOAT32
                node["attrs"] = dict(node.attrs, __dtype__=dtype_code(FLOAT32))
            else:
                dtype = np.dtype(param_types.get(name, data_types.get(name, FLOAT32)))
            walk.new.place(i, walk.add(node, [dtype]))
            continue
        entries = [tuple(walk.new.entry(e)[:2]) for e in node.inputs]
        if node.op == "amp_cast" and nodes[node.inputs[0][0]].name in fp32_params:
            walk.new.place(i, entries[0][0])  # a float16 cast of a param kept float32: pass it on
            continue
        entries, outs = walk.fit(node, entries, forced, n_out.get(i, 1))
        node["inputs"] = [[s, o, 0] for s, o in entries]
        walk.new.place(i, walk.add(node, outs))
    return walk.new.graph(), walk.widened, fp32_params


def param_types_after(graph, arg_params, aux_params):
    """Stored dtype of each param: its ``__dtype__`` in the converted graph, else its own."""
    declared = {node.name: var_dtype(node, None) for node in as_graph(graph).nodes
                if node.op == "null"}
    out = {}
    for params in (arg_params, aux_params):
        for name, value in params.items():
            dtype = declared.get(name)
            out[name] = np.dtype(value.dtype) if dtype is None else dtype
    return out


def _amp_pass(sym, target, excluded, data_names, params, cast_optional, op_lists):
    """MXNet's pass: ``convert_model`` with params, ``convert_symbol`` without."""
    if params is None:
        converted = amp.convert_symbol(sym, target_dtype=target, excluded_sym_names=excluded,
                                       data_names=list(data_names), cast_optional_params=False,
                                       **(op_lists or {}))
        return converted, {}, {}
    args, auxs = params
    # MXNet's pass types the data inputs float32 whatever they declare, then looks each input
    # that declares a __dtype__ up among the params (KeyError for a data input): the
    # declarations go for the pass and come back after it
    declared = {node.name: node.attrs["__dtype__"] for node in as_graph(sym).nodes
                if node.is_variable and node.name in data_names and "__dtype__" in node.attrs}
    if declared:
        sym = _with_declared(sym, dict.fromkeys(declared))
    new_sym, new_args, new_auxs = amp.convert_model(
        sym, dict(args), dict(auxs), target_dtype=target, excluded_sym_names=excluded,
        cast_optional_params=cast_optional, **(op_lists or {}))
    return (_with_declared(new_sym, declared) if declared else new_sym), new_args, new_auxs


def _with_declared(sym, declared):
    """``sym`` with the variables named in ``declared`` declaring that ``__dtype__`` (None:
    none)."""
    graph = as_graph(sym)
    return graph.with_attrs({i: {"__dtype__": declared[node.name]}
                             for i, node in enumerate(graph.nodes)
                             if node.is_variable and node.name in declared}).to_symbol()


# Where MXNet's own pass stops on a node it left with inputs of two dtypes (bfloat16's lists are
# short, so ops such as Concat or interleaved_matmul_selfatt_valatt are in none of them):
# "Incompatible attr in node NAME at 1-th input" or "in operator NAME: in_type->at(i)"
_REFUSED_NODE = (re.compile(r"Incompatible attr in node (\S+) at \d+-th"),
                 re.compile(r"in operator ([^\s:]+):"),
                 re.compile(r"Non-uniform data type in (\S+?)[,:.\s]"))


def _refused_node(err, layers):
    """The node MXNet's pass names in ``err`` (a layer of the graph), or None."""
    text = str(err)
    for pattern in _REFUSED_NODE:
        for match in pattern.finditer(text):
            if match.group(1) in layers:
                return match.group(1)
    return None


_MAX_PASSES = 16


def _op_classes(target, op_lists):
    """How MXNet's pass treats each op: ``(low, fp32, widest, conditional)``, the lists it
    uses (``op_lists`` overrides the first, second and fourth, as in ``amp.convert_symbol``)."""
    key = dtypes.amp_list_key(target)
    op_lists = op_lists or {}
    conditional = {}
    for op, attr, values in (op_lists.get("conditional_fp32_ops")
                             or amp.list_conditional_fp32_ops(key)):
        conditional.setdefault(op, []).append((attr, set(values)))
    return (set(op_lists.get("target_dtype_ops") or amp.list_lp16_ops(key)),
            set(op_lists.get("fp32_ops") or amp.list_fp32_ops(key)),
            set(amp.list_widest_type_cast(key)), conditional)


def _predicted_refusals(graph, target, excluded, op_lists):
    """The nodes MXNet's pass would stop on one after another, found in one walk.

    MXNet's pass names one node per run where the graph it made does not type-check (an op
    that follows its inputs' dtype, such as bfloat16's Concat, given bfloat16 and float32
    inputs); keeping that node float32 and running it again costs a whole-graph pass per such
    node. This walk follows the pass's rules in graph order (target-dtype ops cast their
    floating inputs down, float32 ops and excluded nodes up, widest-type ops to the widest,
    every other op takes what it is given) and asks MXNet's inference about each node, once
    per kind of node: a node that takes what it is given and refuses it is kept float32, as
    the pass's next run would keep it.

    Returns
    -------
    list of str
        The node names, in graph order.
    """
    low_ops, fp32_ops, widest_ops, conditional = _op_classes(target, op_lists)
    low = dtypes.BFLOAT16 if target == "bfloat16" else FLOAT16
    n_out = _output_counts(graph)
    types, refused = {}, []
    for i, node in enumerate(graph.nodes):
        op, name = node.op, node.name
        if op == "null":
            types[(i, 0)] = var_dtype(node)
            continue
        given = [types.get((src, out)) for src, out, _ in node.inputs]
        floats = [t for t in given if dtypes.is_floating(t)]
        attrs = node.attrs
        if name in excluded or op in fp32_ops or any(
                attrs.get(attr) in values for attr, values in conditional.get(op, ())):
            ins = [FLOAT32 if dtypes.is_floating(t) else t for t in given]
        elif op in low_ops:
            asked = _node_inference(node, [low] + [None] * (len(given) - 1), n_out.get(i, 1))
            wanted = asked[0] if asked is not None else [low] * len(given)
            ins = [low if dtypes.is_floating(t) and wanted[k] in (None, low) else t
                   for k, t in enumerate(given)]
        elif op in widest_ops and floats:
            widest = FLOAT32 if any(t != low for t in floats) else low
            ins = [widest if dtypes.is_floating(t) else t for t in given]
        else:
            ins = given
        found = _node_inference(node, ins, n_out.get(i, 1))
        if found is None and ins is given and len(floats) > 1:
            refused.append(name)
            found = _node_inference(node, [FLOAT32 if dtypes.is_floating(t) else t
                                           for t in given], n_out.get(i, 1))
        for j, t in enumerate(found[1] if found is not None else ()):
            types[(i, j)] = t
    return refused


def _amp_pass_settled(sym, target, excluded, data_names, params, cast_optional, op_lists):
    """MXNet's pass; where it stops on a node with mismatched inputs, that node is kept float32
    (``excluded_sym_names``: its inputs are cast up, as settling does) and the pass runs again.

    The nodes it would stop on are found first, in one walk (:func:`_predicted_refusals`), so
    that one run usually does; a node the walk missed costs one more run, and at most
    ``_MAX_PASSES`` runs are made.

    Returns the pass's result and the nodes kept float32 that way (in graph order, then in
    the order met).
    """
    graph = as_graph(sym)
    layers = {n.name for n in graph.nodes if n.op != "null"}
    refused = _predicted_refusals(graph, target, set(excluded), op_lists)
    passes = 0
    while True:
        try:
            return _amp_pass(sym, target, sorted(set(excluded) | set(refused)), data_names,
                             params, cast_optional, op_lists), refused
        except (AssertionError, ValueError, mx.base.MXNetError) as err:
            passes += 1
            node = _refused_node(err, layers)
            if node is None or node in refused or node in excluded \
                    or passes >= _MAX_PASSES:
                where = (" (at node %r, %s)" % (node, _op_of(sym, node))) if node else ""
                raise ConversionError("MXNet cannot convert this graph%s: %s"
                                      % (where, errors.one_line(err))) from None
            refused.append(node)


def _op_of(sym, name):
    ops = [n.op for n in as_graph(sym).nodes if n.name == name]
    return ops[0] if ops else "?"


def _types_check(sym, known):
    """The Graph of ``sym``, once MXNet's type inference accepts it for ``known``."""
    graph = as_graph(sym)
    graph.entry_dtypes(graph.consumed_entries(), known)
    return graph


def convert_graph(sym, data_names, forced=(), target="float16", arg_params=None,
                  aux_params=None, cast_optional_params=False, op_lists=None, data_types=None):
    """Convert a float32 graph to AMP, settled where MXNet's pass leaves it untyped.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The float32 graph.
    data_names : sequence of str
        Its data inputs (float32).
    forced : collection of str
        Node names that must compute in float32 (excluded layers, detection ops).
    target : str, default 'float16'
        'float16' or 'bfloat16'.
    arg_params, aux_params : dict of str to mxnet.nd.NDArray, optional
        The float32 params. Without them the graph is converted alone (params stay float32,
        cast where they are used), as ``amp.convert_symbol`` does.
    cast_optional_params : bool, default False
        Store params in the target dtype where only target-dtype ops use them (with params).
    op_lists : dict, optional
        ``target_dtype_ops``, ``fp32_ops``, ``conditional_fp32_ops`` for MXNet's pass.
    data_types : dict of str to numpy.dtype, optional
        Dtypes of data inputs that are not float32 (integer token ids, lengths): the type
        checks and the settling use them, so no cast is put on them. MXNet's pass itself
        assumes float32 data; its ``amp_cast`` passes integers through unchanged.

    Returns
    -------
    AmpGraph

    Raises
    ------
    ConversionError
        When MXNet cannot convert the graph, or no cast makes a node's inputs agree.
    """
    params = None if arg_params is None else (arg_params, aux_params or {})
    data_types = dict({n: FLOAT32 for n in data_names},
                      **{n: np.dtype(t) for n, t in (data_types or {}).items() if n in data_names})
    # converted alone, a graph keeps float32 params, cast where they are used
    float32_params = {n: FLOAT32 for n in sym.list_inputs() if n not in data_types}
    try:
        new_sym, new_args, new_auxs = _amp_pass(sym, target, sorted(forced), data_names, params,
                                                cast_optional_params, op_lists)
        known = dict(float32_params if params is None else {}, **data_types)
        known.update({n: np.dtype(v.dtype) for n, v in
                      list(new_args.items()) + list(new_auxs.items())})
        return AmpGraph(_types_check(new_sym, known).to_symbol(), new_args, new_auxs)
    except (AssertionError, ValueError, mx.base.MXNetError, GraphTypeError) as err:
        first = err.reason if isinstance(err, GraphTypeError) else errors.one_line(err)
    (new_sym, new_args, new_auxs), refused = _amp_pass_settled(
        sym, target, [], data_names, params, cast_optional_params, op_lists)
    graph = as_graph(new_sym)
    if params is None:
        param_types = float32_params
    else:
        param_types = param_types_after(graph, new_args, new_auxs)
    settled, widened, fp32_params = settle(graph, set(forced), param_types, data_types, target)
    widened = [n for n in refused if n not in forced] + [n for n in widened if n not in refused]
    for name in fp32_params:
        if params is not None and name in new_args:
            new_args[name] = params[0][name]
    return AmpGraph(settled.to_symbol(), new_args, new_auxs, widened, first)
