"""A Symbol graph pass that makes float16 graphs executable on CPU with GPU-faithful numerics.

For every emulated operator (see :mod:`mxmixed.emulated_ops`) whose inputs are float16 after
MXNet's own type inference, the pass inserts ``amp_cast`` nodes: float16 inputs are cast to
float32, the op runs in float32, and each output that was float16 in the original graph is
cast back to float16. Every other tensor keeps its dtype, so the rewritten graph has the
dtypes a GPU run would have. Operators whose inputs are float32 are left untouched: a float32
graph comes out unchanged.

The pass works on the JSON form of a Symbol, so it applies equally to a graph built in this
process, one loaded from ``prefix-symbol.json`` and the graph of a hybridized Gluon block.
"""
import json

import numpy as np

import mxnet as mx
from mxnet.ndarray.ndarray import _DTYPE_NP_TO_MX

from .emulated_ops import EMULATED_OPS

__all__ = ["emulate_symbol", "count_emulated", "rewritten_op_types"]

_FLOAT16 = np.dtype(np.float16)


def _entry_types(graph, entries, type_dict):
    """Infer the dtype of each graph entry ``(node, output)`` with MXNet's own type inference."""
    probe = dict(graph)
    probe["heads"] = [[node, out, 0] for node, out in entries]
    probe.pop("node_row_ptr", None)
    sym = mx.sym.load_json(json.dumps(probe))
    known = {name: dtype for name, dtype in type_dict.items() if name in set(sym.list_inputs())}
    try:
        arg_types, out_types, aux_types = sym.infer_type_partial(**known)
    except mx.base.MXNetError as err:
        raise TypeError("MXNet's type inference rejects this graph for the input dtypes %s "
                        "(it would fail on a GPU too): %s"
                        % (_short(known), str(err).strip().splitlines()[-1])) from None
    names = sym.list_arguments() + sym.list_auxiliary_states()
    variables = {n: t for n, t in zip(names, list(arg_types) + list(aux_types)) if t is not None}
    return dict(zip(entries, out_types)), variables


def _short(types):
    return {name: np.dtype(dtype).name for name, dtype in types.items()}


def emulate_symbol(sym, type_dict=None, exclude=()):
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

    Returns
    -------
    mxnet.symbol.Symbol
        The rewritten graph, with the same inputs in the same order and the same outputs; the
        input Symbol itself when nothing needed rewriting.

    Raises
    ------
    TypeError
        When MXNet's type inference rejects the graph for these dtypes, as it would on a GPU
        (for example a float16 input with float32 weights in one FullyConnected).
    """
    graph = json.loads(sym.tojson(remove_amp_cast=False))
    nodes = graph["nodes"]
    exclude = set(exclude)
    targets = [i for i, node in enumerate(nodes)
               if node["op"] in EMULATED_OPS and node["name"] not in exclude]
    if not targets:
        return sym
    consumed = {}
    for node in nodes:
        for src, out, _ in node["inputs"]:
            consumed.setdefault((src, out), None)
    for src, out, _ in graph["heads"]:
        consumed.setdefault((src, out), None)
    target_set = set(targets)
    entries = set()
    for i in targets:
        entries.update((src, out) for src, out, _ in nodes[i]["inputs"])
    entries.update(entry for entry in consumed if entry[0] in target_set)
    entries = sorted(entries)
    types, variables = _entry_types(graph, entries, dict(type_dict or {}))

    rewrite = {}
    for i in targets:
        spec = EMULATED_OPS[nodes[i]["op"]]
        cast_in = [k for k, (src, out, _) in enumerate(nodes[i]["inputs"])
                   if k not in spec.keep_inputs and types[(src, out)] == _FLOAT16]
        if cast_in:
            cast_out = [out for (src, out) in entries
                        if src == i and types[(src, out)] == _FLOAT16]
            rewrite[i] = (cast_in, cast_out)
    if not rewrite:
        return sym
    _pin_variable_dtypes(graph, variables)
    return mx.sym.load_json(json.dumps(_rebuild(graph, rewrite)))


def _pin_variable_dtypes(graph, variables):
    """Record each input's inferred dtype on its node.

    Inference may derive a weight's dtype from the op that consumes it; once a cast sits in
    between, nothing could, so the dtype the original graph implied is written down.
    """
    for node in graph["nodes"]:
        if node["op"] == "null" and node["name"] in variables:
            attrs = node.setdefault("attrs", {})
            attrs.setdefault("__dtype__", str(_DTYPE_NP_TO_MX[np.dtype(variables[node["name"]]).type]))


def _cast_node(name, dtype, entry):
    return {"op": "amp_cast", "name": name, "attrs": {"dtype": dtype}, "inputs": [list(entry)]}


def _rebuild(graph, rewrite):
    """Copy the graph in order, inserting the casts that ``rewrite`` asks for."""
    new_nodes, where = [], {}
    upcasts = {}
    highest = {}
    for src, out, _ in [e for node in graph["nodes"] for e in node["inputs"]] + graph["heads"]:
        highest[src] = max(highest.get(src, 0), out)

    def mapped(entry):
        src, out, version = entry
        return list(where.get((src, out), (src, out))) + [version]

    for i, node in enumerate(graph["nodes"]):
        node = dict(node)
        node["inputs"] = [mapped(entry) for entry in node["inputs"]]
        if i in rewrite:
            cast_in, cast_out = rewrite[i]
            for k in cast_in:
                key = tuple(node["inputs"][k][:2])
                if key not in upcasts:
                    new_nodes.append(_cast_node("%s_emu_in%d" % (node["name"], k), "float32",
                                                [key[0], key[1], 0]))
                    upcasts[key] = len(new_nodes) - 1
                node["inputs"][k] = [upcasts[key], 0, 0]
        new_nodes.append(node)
        new_id = len(new_nodes) - 1
        for out in range(highest.get(i, 0) + 1):
            where[(i, out)] = (new_id, out)
        if i in rewrite:
            for out in rewrite[i][1]:
                new_nodes.append(_cast_node("%s_emu_out%d" % (node["name"], out), "float16",
                                            [new_id, out, 0]))
                where[(i, out)] = (len(new_nodes) - 1, 0)
    heads = [mapped(entry) for entry in graph["heads"]]
    arg_nodes = [j for j, node in enumerate(new_nodes) if node["op"] == "null"]
    return {"nodes": new_nodes, "arg_nodes": arg_nodes, "heads": heads,
            "attrs": graph.get("attrs", {})}


def count_emulated(sym):
    """Count the ``amp_cast`` nodes the pass inserted into a graph.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol

    Returns
    -------
    dict
        ``{'to_float32': n, 'to_float16': m}``.
    """
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    counts = {"to_float32": 0, "to_float16": 0}
    for node in nodes:
        if node["op"] == "amp_cast" and "_emu_" in node["name"]:
            counts["to_" + node["attrs"]["dtype"]] += 1
    return counts


def rewritten_op_types(sym):
    """The op types that :func:`emulate_symbol` rewrote in a graph.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        A graph returned by :func:`emulate_symbol`.

    Returns
    -------
    set of str
    """
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    return {node["op"] for node in nodes if node["op"] != "null"
            and any(nodes[src]["name"].startswith(node["name"] + "_emu_in")
                    for src, _, _ in node["inputs"])}
