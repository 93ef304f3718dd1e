"""A Symbol graph pass that makes float16 graphs executable on CPU with GPU-faithful numerics.

For every emulated operator (see :mod:`mxmixed.emulation._ops`) whose inputs are float16 after
MXNet's own type inference, the pass inserts ``amp_cast`` nodes: float16 inputs are cast to
float32, the op runs in float32, and each output that was float16 in the original graph is
cast back to float16. An ``amp_multicast`` fed float16 becomes what it computes: each output
is its input, cast where the dtype changes (exact, or one rounding). A biased
FullyConnected, Convolution or Deconvolution runs without its bias; its result is rounded to
float16 and the bias is then added in float16 arithmetic (a float32 add of float16 values,
rounded), the two roundings of MXNet's GPU kernels. Every other
tensor keeps its dtype, so the rewritten graph has the dtypes a GPU run would have. Operators
whose inputs are float32 are left untouched: a float32 graph comes out unchanged.

The pass works on the JSON form of a Symbol, so it applies equally to a graph built in this
process, one loaded from ``prefix-symbol.json`` and the graph of a hybridized Gluon block.
"""
from typing import Any, Dict, Iterable, Mapping, Optional, Set

import mxnet as mx
import numpy as np
from mxnet.symbol.numpy import _Symbol as NumpySymbol

from .._core.dtypes import FLOAT16, FLOAT32
from .._core.graph import GraphTypeError, as_graph, attr_ints, cast_node, pin_variable_dtypes
from .._core.mxbool import attr_bool
from .._core.params import is_param_name
from ._carry import carry_float32
from ._deconv import conv_form_applies, deconvolution_nodes
from ._gpu_semantics import follow_gpu_in_graph
from ._names import emu_name, is_input_cast, is_output_cast
from ._ops import BIAS_TWICE, EMULATED_OPS, LIBRARY_OP, applies, library_compute
from ._round16 import BIAS_ADD_OP, library_op

__all__ = ["emulate_symbol", "count_emulated", "rewritten_op_types", "bias_of"]


def _float16_net_hint(types):
    """``'; the net is float16 but its input data is float32: ...'`` where float32 data meets
    float16 parameters (a net cast with ``net.cast('float16')``), else ``''``."""
    dtypes = {name: np.dtype(dtype) for name, dtype in types.items()}
    data = sorted(n for n, d in dtypes.items() if d == np.float32
                  and not is_param_name(n))
    if not data or not any(d == FLOAT16 and is_param_name(n)
                           for n, d in dtypes.items()):
        return ""
    return ("; the net is float16 but its input %s is float32: pass X.astype('float16')"
            % ", ".join(data[:3]))


def _short(types, shown=4):
    """Input dtypes for a message: a few names, then a count per dtype."""
    names = sorted(types, key=lambda n: (is_param_name(n), n))  # data first
    text = ", ".join("%s: %s" % (n, np.dtype(types[n]).name) for n in names[:shown])
    if len(names) > shown:
        rest = {}
        for n in names[shown:]:
            rest[np.dtype(types[n]).name] = rest.get(np.dtype(types[n]).name, 0) + 1
        text += " and %s more" % ", ".join("%d %s" % (k, d) for d, k in sorted(rest.items()))
    return "{%s}" % text


def bias_of(op, attrs, n_inputs):
    """The bias position of a biased GEMM op whose GPU kernel adds it as a second rounding.

    Parameters
    ----------
    op : str
    attrs : dict
        The node's (or call's) attributes.
    n_inputs : int

    Returns
    -------
    int or None
        None when the op has no bias composition or no bias.
    """
    spec = EMULATED_OPS.get(op)
    if spec is None or spec.gpu != BIAS_TWICE or attr_bool(attrs, "no_bias", False):
        return None
    return spec.bias_input if n_inputs > spec.bias_input else None


def bias_shape(op, attrs):
    """Shape to reshape a bias to, to broadcast it onto the op's output (None: trailing axis).

    Parameters
    ----------
    op : str
    attrs : dict

    Returns
    -------
    tuple of int or None
    """
    layout = attrs.get("layout")
    if op == "FullyConnected" or (layout not in (None, "None") and str(layout).endswith("C")):
        return None
    rank = len(attr_ints(attrs.get("kernel")) or ())
    return (-1,) + (1,) * rank


def bias_axis(op, attrs):
    """The output axis a bias is added on, for the rounding library's bias add: 1 for a
    channel-first convolution, None for the last axis (as :func:`bias_shape`)."""
    return None if bias_shape(op, attrs) is None else 1


def emulate_symbol(sym: "mx.sym.Symbol", type_dict: Optional[Mapping[str, Any]] = None,
                   exclude: Iterable[str] = (), carry: bool = True) -> "mx.sym.Symbol":
    """Rewrite a Symbol so that its float16 GEMM-like ops run on CPU in emulation.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The graph, built in this process or loaded with ``mx.sym.load``.
    type_dict : dict of str to dtype, optional
        Dtypes of the graph inputs (data, params, aux states). Inputs left out take the dtype
        of their ``__dtype__`` attribute or what type inference derives; inputs nothing
        determines are assumed float32.
    exclude : iterable of str, optional
        Node names to leave as they are.
    carry : bool, default True
        Carry float16 values between emulated ops as float32 through one rounding op
        (``mxmixed.emulation._carry``); False keeps every float16 tensor materialized, as the diagnostics
        need to see each one. The values are the same either way.

    Returns
    -------
    mxnet.symbol.Symbol
        The rewritten graph, with the same inputs in the same order and the same outputs; the
        input Symbol itself when nothing needed rewriting. A NumPy-mode Symbol
        (``mx.sym.np._Symbol``, the graph of a block hybridized after ``npx.set_np()``) gives
        one, so that its CachedOp returns ``mx.np.ndarray`` outputs. ``_contrib_ROIAlign`` nodes are
        rewritten in any dtype, to zero padding ROIs' rows as the GPU does.

    Raises
    ------
    TypeError
        When MXNet's type inference rejects the graph for these dtypes, as it would on a GPU
        (for example a float16 input with float32 weights in one FullyConnected).
    """
    graph = as_graph(sym)
    key = None if exclude else _pass_key(sym, type_dict, carry)
    if key is not None and key in graph.passes:
        return sym  # this graph is what the pass made of it (or of itself) for these dtypes
    result = _emulate_graph(graph, sym, type_dict, exclude, carry)
    if key is not None:
        (graph if result is sym else as_graph(result)).passes.add(key)
    if isinstance(sym, NumpySymbol) and result is not sym:
        return result.as_np_ndarray()  # the rebuilt graph is read back as a legacy Symbol
    return result


def _pass_key(sym, type_dict, carry):
    """What the emulation pass's result depends on besides the graph: the input dtypes given
    (for the graph's own inputs) and ``carry``."""
    names = set(sym.list_inputs())
    return (carry, frozenset((n, np.dtype(t)) for n, t in (type_dict or {}).items()
                             if n in names))


def _emulate_graph(graph, sym, type_dict, exclude, carry):
    """The emulation pass proper (:func:`emulate_symbol`), on ``graph``, the graph of ``sym``."""
    as_on_gpu = follow_gpu_in_graph(graph)
    if as_on_gpu is not None:
        graph, sym = as_on_gpu, as_on_gpu.to_symbol()
    nodes = graph.nodes
    exclude = set(exclude)
    targets = [i for i, node in enumerate(nodes)
               if node.op in EMULATED_OPS and node.name not in exclude and emulates(node)]
    if not targets:
        return sym
    consumed = set(graph.consumed_entries())
    target_set = set(targets)
    entries = {(i, 0) for i in targets}
    for i in targets:
        entries.update((src, out) for src, out, _ in nodes[i].inputs)
    entries.update(entry for entry in consumed if entry[0] in target_set)
    entries = sorted(entries)
    known = dict(type_dict or {})
    try:
        types, variables = graph.entry_dtypes(entries, known)
    except GraphTypeError as err:
        raise TypeError("MXNet's type inference rejects this graph (it would fail on a GPU "
                        "too): %s; give that op's inputs one dtype (input dtypes: %s)%s"
                        % (err.reason, _short(known), _float16_net_hint(known))) from None

    rewrite, multicast = {}, {}
    for i in targets:
        if nodes[i].op == "amp_multicast":
            ins = [types[(src, out)] for src, out, _ in nodes[i].inputs]
            if FLOAT16 in ins:
                multicast[i] = {out: (ins[out], types[(i, out)])
                                for (src, out) in entries if src == i}
            continue
        spec = EMULATED_OPS[nodes[i].op]
        cast_in = [k for k, (src, out, _) in enumerate(nodes[i].inputs)
                   if k not in spec.keep_inputs and types[(src, out)] == FLOAT16]
        if cast_in:
            cast_out = [out for (src, out) in entries
                        if src == i and types[(src, out)] == FLOAT16]
            bias = bias_of(nodes[i].op, nodes[i].attrs, len(nodes[i].inputs))
            if types[(i, 0)] != FLOAT16:
                bias = None
            rewrite[i] = (cast_in, cast_out, bias)
    if not rewrite and not multicast:
        return sym
    graph = _pin_bias_shapes(pin_variable_dtypes(graph, variables, known), rewrite)
    rebuilt = _rebuild(graph, rewrite, multicast)
    return (carry_float32(rebuilt, _float32_entries) if carry else rebuilt).to_symbol()


def emulates(node):
    """Whether a node of an emulated op type is emulated: its attributes match the op's entry,
    and the rounding library is there when the entry computes with one of its ops."""
    spec = EMULATED_OPS[node.op]
    computed_by = library_compute(spec, node.attrs)
    return applies(spec, node.attrs) and (not computed_by or library_op(computed_by) is not None)


def _float32_entries(graph, entries):
    """The entries of a rebuilt graph (variable dtypes pinned) that are float32."""
    entries = sorted(entries)
    types, _ = graph.entry_dtypes(entries, {})
    return {entry for entry in entries if types[entry] == FLOAT32}


def _pin_bias_shapes(graph, rewrite):
    """Write each bias variable's shape on it: once the op has no bias, nothing infers it.
    Returns the new graph."""
    nodes, changes = graph.nodes, {}
    for i, (_, _, bias) in rewrite.items():
        if bias is None:
            continue
        src = nodes[i].inputs[bias][0]
        attrs = nodes[i].attrs
        size = attrs.get("num_hidden", attrs.get("num_filter"))
        if nodes[src].is_variable and size is not None and "__shape__" not in nodes[src].attrs:
            changes[src] = {"__shape__": "(%d,)" % int(size)}
    return graph.with_attrs(changes)


def _bias_nodes(node, out_id, bias_entry, first_id):
    """The nodes that add the bias as a GPU does: round, widen, add, round."""
    name, attrs = node.name, node.attrs
    nodes = [cast_node(emu_name(name, "round"), "float16", [out_id, 0]),
             cast_node(emu_name(name, "widen"), "float32", [first_id, 0])]
    bias = list(bias_entry)
    if library_op(BIAS_ADD_OP):  # broadcast_add's bits, without its generic reduce
        axis = bias_axis(node.op, attrs)
        nodes.append({"op": BIAS_ADD_OP, "name": emu_name(name, "biasadd"),
                      "attrs": {} if axis is None else {"axis": str(axis)},
                      "inputs": [[first_id + 1, 0, 0], [bias[0], bias[1], 0]]})
        return nodes
    shape = bias_shape(node.op, attrs)
    if shape is not None:
        nodes.append({"op": "Reshape", "name": emu_name(name, "bias"),
                      "attrs": {"shape": str(shape)}, "inputs": [[bias[0], bias[1], 0]]})
        bias = [first_id + 2, 0]
    nodes.append({"op": "broadcast_add", "name": emu_name(name, "biasadd"), "attrs": {},
                  "inputs": [[first_id + 1, 0, 0], [bias[0], bias[1], 0]]})
    return nodes


def _op_nodes(node, rewritten, first_id):
    """The node itself, or for an emulated Deconvolution the Convolution that computes it."""
    if rewritten and node.op == "Deconvolution" and conv_form_applies(node.attrs):
        return deconvolution_nodes(node, first_id)
    computed_by = rewritten and library_compute(EMULATED_OPS[node.op], node.attrs)
    if computed_by == LIBRARY_OP:
        return [dict(node, op=LIBRARY_OP, attrs={"act_type": node.attrs["act_type"]})]
    if computed_by:  # the op's own attributes (axis, eps) go to the library's op
        return [dict(node, op=computed_by)]
    return [node]


def _rebuild(graph, rewrite, multicast):
    """Copy the graph in order, inserting the casts (and bias adds) that ``rewrite`` asks for.

    Each ``amp_multicast`` node in ``multicast`` (``{output: (input dtype, output dtype)}``)
    is replaced by what it computes: every output is its input, cast with ``amp_cast`` where
    the dtype changes.
    """
    new, upcasts = graph.rebuild(), {}
    for i, node in enumerate(graph.nodes):
        node = new.mapped(node)
        if i in multicast:
            for out, (source_dtype, dtype) in multicast[i].items():
                source = node.inputs[out]
                new.redirect((i, out), source)
                if dtype != source_dtype:
                    new.redirect((i, out), (new.add(cast_node(
                        emu_name(node.name, "out", out), dtype, source)), 0))
            continue
        bias_entry = None
        if i in rewrite:
            cast_in, cast_out, bias = rewrite[i]
            for k in cast_in:
                key = tuple(node.inputs[k][:2])
                if key not in upcasts:
                    upcasts[key] = new.add(cast_node(emu_name(node.name, "in", k),
                                                     "float32", key))
                node.inputs[k] = [upcasts[key], 0, 0]
            if bias is not None:
                bias_entry = node.inputs[bias]
                node["inputs"] = node.inputs[:bias] + node.inputs[bias + 1:]
                node["attrs"] = dict(node.attrs, no_bias="True")
        new_id = new.add(*_op_nodes(node, i in rewrite, new.next_id))
        new.place(i, new_id)
        for out in rewrite[i][1] if i in rewrite else ():
            src = new_id
            if out == 0 and bias_entry is not None:
                src = new.add(*_bias_nodes(node, new_id, bias_entry, new.next_id))
            new.redirect((i, out), (new.add(cast_node(
                emu_name(node.name, "out", out), "float16",
                [src, 0 if src != new_id else out])), 0))
    return new.graph()


def count_emulated(sym: "mx.sym.Symbol") -> Dict[str, int]:
    """Count the ``amp_cast`` nodes the pass inserted around emulated ops.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol

    Returns
    -------
    dict
        ``{'to_float32': n, 'to_float16': m}`` (the bias composition's inner casts not
        counted). A rounding op of the float32 carry counts as the cast pair it stands for;
        the cast pair the carry leaves out after a relu of a rounded value (it rounds
        nothing) is not counted.
    """
    counts = {"to_float32": 0, "to_float16": 0}
    for node in as_graph(sym).nodes:
        if node.op == "_mxmixed_round16":  # a fused cast pair (see _carry.py)
            counts["to_float32"] += is_input_cast(node.name)
            counts["to_float16"] += is_output_cast(node.attrs["fused"])
            continue
        if node.op == "amp_cast" and (is_input_cast(node.name)
                                         or is_output_cast(node.name)):
            counts["to_" + node.attrs["dtype"]] += 1
    return counts


def rewritten_op_types(sym: "mx.sym.Symbol") -> Set[str]:
    """The op types that :func:`emulate_symbol` rewrote in a graph.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        A graph returned by :func:`emulate_symbol`.

    Returns
    -------
    set of str
    """
    nodes = as_graph(sym).nodes
    computed_by = {"gelu": "LeakyReLU"}  # the library's other act_types are Activation's
    kernels = {spec.kernel: op for op, spec in EMULATED_OPS.items() if spec.kernel}
    return {computed_by.get(node.attrs.get("act_type"), "Activation") if node.op == LIBRARY_OP
            else kernels.get(node.op, node.op) for node in nodes if node.op != "null"
            and any(is_input_cast(nodes[src].name, node.name)
                    for src, _, _ in node.inputs)}
