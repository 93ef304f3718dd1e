"""float32 rewrites of an inference graph before a conversion.

:func:`guard_control_flow` runs before every conversion: MXNet's AMP pass types the inside of a
control-flow op (``_foreach``, ``_while_loop``, ``_cond``) from the dtypes that reach it and
does not convert it consistently (ELMo's LSTM loop: "Incompatible attr ... expected float16,
got float32"), and excluding the op does not cast what flows into it. Each floating input that
an op computes is cast to float32 (a ``Cast`` node, an identity in the float32 model) in front
of the op, so the subgraph runs in float32 as written, whatever the layers around it become.

Two more rewrites, each equal to the graph it replaces within float32 rounding:

* :func:`fold_constants` (every conversion): a value computed from params alone (gluonnlp's
  attention concatenates its query, key and value weights, and stacks their biases, on every
  call; an RNN's flat params are a concat of its weights) is computed once, in float32, and
  stored as a param, which the conversion may then store in float16 or bfloat16. Nothing
  that reads a data input, and no op without inputs (random draws), is folded; nor a value
  larger than the params it is made of (a broadcast would grow the file).
* :func:`mask_softmax` (bfloat16, for oneDNN's sake): a ``softmax`` with ``use_length=True``
  (gluonnlp's masked attention) runs in MXNet's generic kernel, one row at a time in float64. It
  becomes a ``SequenceMask`` that sets the positions past each row's length to -1e30, then a
  plain ``softmax``, which oneDNN runs: ``exp(-1e30 - max)`` is exactly 0, so the masked
  positions get 0 as before and the others the same values. A row of length 0 differs: MXNet's
  kernel gives zeros, the rewrite an even spread. Self-attention scores
  (``_contrib_interleaved_matmul_selfatt_qk``, square in their last two axes) whose lengths are
  computed alike (gluonnlp repeats the computation in every layer) share one mask instead: -1e30
  past each row's length, 0 before it, made once by a ``SequenceMask`` of zeros and added to
  each layer's scores (oneDNN's ``sum``; ``SequenceMask`` copies its input single-threaded).
  ``x + 0`` is ``x`` and ``x + -1e30`` is -1e30 for any ``|x| < 2**75``, so the softmax gets the
  same values; only a non-finite score past a row's length differs (it was replaced, now it
  stays).
"""
import numpy as np

import mxnet as mx

from .._core.dtypes import is_floating
from .._core.graph import Record, as_graph, attr_ints, unused_name
from .._core.mxbool import read_optional_bool

__all__ = ["fold_constants", "mask_softmax", "guard_control_flow", "CONTROL_FLOW_OPS"]

#: ops that run a subgraph, which MXNet 1.9.1's AMP pass cannot convert (kept float32)
CONTROL_FLOW_OPS = ("_foreach", "_while_loop", "_cond")

_MASKED = -1e30  # past a row's length: exp(_MASKED - max) is 0 in float32


def _constant_nodes(graph, params):
    """Indices of the op nodes whose value depends on params only."""
    constant = set()
    for i, node in enumerate(graph.nodes):
        if node.is_variable:
            if node.name in params:
                constant.add(i)
        elif node.inputs and all(src in constant for src, _, _ in node.inputs):
            constant.add(i)
    return constant


def _frontier(graph, constant):
    """The op entries of ``constant`` nodes that a non-constant node or a head reads."""
    heads = {(src, out) for src, out, _ in graph.heads}
    found = set()
    for j, node in enumerate(graph.nodes):
        if j in constant:
            continue
        for src, out, _ in node.inputs:
            if src in constant and not graph.nodes[src].is_variable:
                found.add((src, out))
    found |= {(src, out) for src, out in heads
              if src in constant and not graph.nodes[src].is_variable}
    return sorted(found)


def _cone_size(graph, entry, params):
    """Elements of the params that ``entry``'s value is computed from."""
    seen, stack, names = set(), [entry[0]], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        node = graph.nodes[i]
        if node.is_variable:
            names.add(node.name)
        stack.extend(src for src, _, _ in node.inputs)
    return sum(int(np.prod(params[n].shape)) for n in names)


def fold_constants(graph, arg_params, aux_params):
    """Compute every value made of params alone once; store it as a param.

    Parameters
    ----------
    graph : Graph or mxnet.symbol.Symbol
        A float32 inference graph.
    arg_params, aux_params : dict of str to NDArray
        Its float32 params (not changed).

    Returns
    -------
    graph : Graph
        The graph reading the folded values (the same object when nothing was folded).
    arg_params, aux_params : dict of str to NDArray
        New dicts: each folded value is an arg param named after the node that computed it
        (``<node>_folded``); params no longer read are gone.
    folded : list of str
        The names of the nodes whose outputs were folded, in graph order.
    """
    graph = as_graph(graph)
    params = dict(aux_params, **arg_params)
    constant = _constant_nodes(graph, params)
    entries = [e for e in _frontier(graph, constant)
               if np.prod(_shape_of(graph, e, params)) <= _cone_size(graph, e, params)]
    if not entries:
        return graph, dict(arg_params), dict(aux_params), []
    values = _evaluate(graph, entries, params)
    taken = {node.name for node in graph.nodes} | set(params)
    args, names = dict(arg_params), {}
    for (src, out), value in zip(entries, values):
        name = unused_name("%s_folded%s" % (graph.nodes[src].name, "" if out == 0 else out), taken)
        taken.add(name)
        args[name] = value
        names[(src, out)] = name
    rebuild, variables = graph.rebuild(), {}

    def read_folded(entry):
        if entry in names and entry not in variables:
            variables[entry] = rebuild.add({"op": "null", "name": names[entry], "inputs": []})
            rebuild.redirect(entry, (variables[entry], 0))

    for i, node in enumerate(graph.nodes):
        if node.is_variable or i not in constant:
            for src, out, _ in node.inputs:
                read_folded((src, out))
        rebuild.place(i, rebuild.add(rebuild.mapped(node)))
    for src, out, _ in graph.heads:
        read_folded((src, out))
    new = _prune(rebuild.graph())
    used = {node.name for node in new.nodes if node.is_variable}
    return (new, {k: v for k, v in args.items() if k in used},
            {k: v for k, v in aux_params.items() if k in used},
            [graph.nodes[src].name for src, _ in entries])


def _prune(graph):
    """The graph without the nodes that no head depends on (the folded computations)."""
    needed, stack = set(), [src for src, _, _ in graph.heads]
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack.extend(src for src, _, _ in graph.nodes[i].inputs)
    rebuild = graph.rebuild()
    for i, node in enumerate(graph.nodes):
        if i in needed:
            rebuild.place(i, rebuild.add(rebuild.mapped(node)))
    return rebuild.graph()


def _shape_of(graph, entry, params):
    sub = graph.with_heads([entry]).to_symbol()
    shapes = {n: params[n].shape for n in sub.list_inputs() if n in params}
    _, outs, _ = sub.infer_shape_partial(**shapes)
    return outs[0] if outs and outs[0] else (np.inf,)


def _evaluate(graph, entries, params):
    """The float32 values of ``entries``, computed on the CPU from ``params``."""
    sub = graph.with_heads(entries).to_symbol()
    args = {n: params[n].as_in_context(mx.cpu()) for n in sub.list_arguments()}
    auxs = {n: params[n].as_in_context(mx.cpu()) for n in sub.list_auxiliary_states()}
    executor = sub.bind(mx.cpu(), args, aux_states=auxs, grad_req="null")
    return [out.copy() for out in executor.forward(is_train=False)]


def mask_softmax(graph):
    """Each last-axis ``softmax`` with ``use_length=True``, as a mask and a plain softmax.

    Parameters
    ----------
    graph : Graph or mxnet.symbol.Symbol

    Returns
    -------
    graph : Graph
        The rewritten graph (the same object when no softmax was rewritten).
    rewritten : list of str
        The names of the softmax nodes rewritten.
    """
    graph = as_graph(graph)
    found = [i for i, node in enumerate(graph.nodes) if _masked_softmax(node)]
    if not found:
        return graph, []
    shared = _shared_masks(graph, found)
    rebuild, masks = graph.rebuild(), {}
    for i, node in enumerate(graph.nodes):
        if i not in found:
            rebuild.place(i, rebuild.add(rebuild.mapped(node)))
            continue
        data, length = (rebuild.entry(e) for e in node.inputs)
        if i in shared:
            key = shared[i]
            if key not in masks:
                masks[key] = _additive_mask(rebuild, node.name, data, length)
            back = rebuild.add({"op": "elemwise_add", "name": node.name + "_masked",
                                "inputs": [data, [masks[key], 0, 0]]})
        else:
            back = _sequence_mask(rebuild, node.name, data, length)
        attrs = {k: v for k, v in node.attrs.items() if k != "use_length"}
        rebuild.place(i, rebuild.add({"op": "softmax", "name": node.name, "attrs": attrs,
                                      "inputs": [[back, 0, 0]]}))
    return rebuild.graph(), [graph.nodes[i].name for i in found]


def _rows(rebuild, name, data, length):
    """New nodes: ``data`` as rows of its last axis, ``length`` as one value per row."""
    rows = rebuild.add({"op": "Reshape", "name": name + "_rows",
                        "attrs": {"shape": "(-1, 0)", "reverse": "True"}, "inputs": [data]})
    lengths = rebuild.add({"op": "Reshape", "name": name + "_lengths",
                           "attrs": {"shape": "(-1,)"}, "inputs": [length]})
    return rows, lengths


def _masking(name, rows, lengths):
    return {"op": "SequenceMask", "name": name + "_mask",
            "attrs": {"use_sequence_length": "True", "axis": "1", "value": repr(_MASKED)},
            "inputs": [[rows, 0, 0], [lengths, 0, 0]]}


def _sequence_mask(rebuild, name, data, length):
    """New nodes: ``data`` with -1e30 past each row's length; the index of the last."""
    rows, lengths = _rows(rebuild, name, data, length)
    masked = rebuild.add(_masking(name, rows, lengths))
    return rebuild.add({"op": "reshape_like", "name": name + "_masked",
                        "inputs": [[masked, 0, 0], data]})


def _additive_mask(rebuild, name, data, length):
    """New nodes: data's shape, -1e30 past each row's length, else 0; the index of the last."""
    rows, lengths = _rows(rebuild, name, data, length)
    zeros = rebuild.add({"op": "zeros_like", "name": name + "_zeros", "inputs": [[rows, 0, 0]]})
    masked = rebuild.add(_masking(name, zeros, lengths))
    return rebuild.add({"op": "reshape_like", "name": name + "_additive_mask",
                        "inputs": [[masked, 0, 0], data]})


def _shared_masks(graph, found):
    """Of the masked softmaxes ``found``, those on self-attention scores, each mapped to the
    key of its length input: equal keys, equal lengths (and so equal score shapes)."""
    keys = _structure_keys(graph)
    shared = {}
    for i in found:
        (src, _, _), (length, out, _) = graph.nodes[i].inputs
        if graph.nodes[src].op == "_contrib_interleaved_matmul_selfatt_qk":
            shared[i] = (keys[length], out)
    return shared


def _structure_keys(graph):
    """Per node, an id that two nodes share when they compute the same value: the same op
    and attributes on the same inputs (a variable: its name; an op without inputs, such as
    a random draw, is never shared)."""
    interned, keys = {}, []
    for i, node in enumerate(graph.nodes):
        if node.is_variable:
            key = ("null", node.name)
        elif not node.inputs:
            key = ("alone", i)
        else:
            key = (node.op, tuple(sorted(node.attrs.items())),
                   tuple((keys[src], out) for src, out, _ in node.inputs))
        keys.append(interned.setdefault(key, len(interned)))
    return keys


def _masked_softmax(node):
    if node.op != "softmax" or len(node.inputs) != 2:
        return False
    if not read_optional_bool(node.attrs.get("use_length"), "use_length"):
        return False
    return attr_ints(node.attrs.get("axis", "-1")) == (-1,)


def guard_control_flow(graph, known):
    """Keep each control-flow op float32: its floating inputs that an op computes are cast to
    float32 in front of it.

    Parameters
    ----------
    graph : Graph or mxnet.symbol.Symbol
        The float32 graph.
    known : dict of str to numpy.dtype
        The dtypes of its inputs (data and params), for the type inference that says which of
        a control-flow op's inputs are floating (integer ones stay as they are).

    Returns
    -------
    graph : Graph
        The graph with the casts (the same one where it has no control-flow op).
    loops, casts : list of str
        The control-flow ops, and the cast nodes added, by name.
    """
    graph = as_graph(graph)
    nodes = graph.nodes
    loops = [i for i, node in enumerate(nodes) if node.op in CONTROL_FLOW_OPS]
    if not loops:
        return graph, [], []
    entries = sorted({(src, out) for i in loops for src, out, _ in nodes[i].inputs
                      if not nodes[src].is_variable})
    dtypes, _ = graph.entry_dtypes(entries, known) if entries else ({}, {})
    taken = {node.name for node in nodes}
    build = graph.rebuild()
    added, casts = [], {}
    for i, node in enumerate(nodes):
        record = build.mapped(node)
        if i in loops:
            inputs = []
            for entry in node.inputs:
                key = (entry[0], entry[1])
                if is_floating(dtypes.get(key)):
                    if key not in casts:
                        name = unused_name("%s_in%d_float32" % (node.name, len(inputs)), taken)
                        taken.add(name)
                        casts[key] = build.add(Record(op="Cast", name=name,
                                                      attrs={"dtype": "float32"},
                                                      inputs=[build.entry(entry)]))
                        added.append(name)
                    inputs.append([casts[key], 0, 0])
                else:
                    inputs.append(build.entry(entry))
            record["inputs"] = inputs
        build.place(i, build.add(record))
    return build.graph(), [nodes[i].name for i in loops], added
