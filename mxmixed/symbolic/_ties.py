"""Tied params (one weight read by several layers) stored once, in the target dtype if any
reader computes in it.

A language model's output layer reads its embedding's weight (``tie_weights``). MXNet's AMP
pass cannot give one variable two dtypes: it refuses the float16 output layer ("Incompatible
attr ... expected float16, got float32"), which the settling then keeps float32, and the weight,
the largest array of the model, stays float32 in the file. :func:`untie` gives every reader
but the first its own variable (the same array) before the pass, so that each is typed on its
own; :func:`retie` makes them one variable again after it: stored in the target dtype where a
reader uses it so, with one cast to float32 for the readers that compute in float32 (as a
GPU would run them: the weight in float16, cast once).
"""
import numpy as np

from .._core.dtypes import FLOAT32
from .._core.graph import Record, as_graph, cast_node, unused_name

__all__ = ["untie", "retie"]


def untie(graph, params):
    """Give every reader of a shared param but the first its own variable.

    Parameters
    ----------
    graph : Graph or mxnet.symbol.Symbol
    params : dict of str to mxnet.nd.NDArray
        The arg params; each copy gets the same array.

    Returns
    -------
    graph : Graph
    params : dict
        With the copies' entries.
    ties : dict of str to list of str
        For each shared param, the names of its copies (empty when nothing is shared).
    """
    graph = as_graph(graph)
    nodes = graph.nodes
    seen, shared = {}, set()
    for node in nodes:
        for src, _, _ in node.inputs:
            if nodes[src].is_variable and nodes[src].name in params:
                seen[src] = seen.get(src, 0) + 1
                if seen[src] > 1:
                    shared.add(src)
    if not shared:
        return graph, params, {}
    taken = {node.name for node in nodes}
    params = dict(params)
    ties, read = {}, set()
    build = graph.rebuild()
    for i, node in enumerate(nodes):
        record = build.mapped(node)
        if not node.is_variable:
            inputs = []
            for entry in node.inputs:
                src = entry[0]
                if src in shared and src in read:
                    original = nodes[src].name
                    name = unused_name("%s_tied_%s" % (original, node.name), taken)
                    taken.add(name)
                    copy = build.add(Record(nodes[src], name=name))
                    params[name] = params[original]
                    ties.setdefault(original, []).append(name)
                    inputs.append([copy, 0, 0])
                else:
                    if src in shared:
                        read.add(src)
                    inputs.append(build.entry(entry))
            record["inputs"] = inputs
        build.place(i, build.add(record))
    return build.graph(), params, ties


def retie(graph, params, ties, target):
    """Make each param :func:`untie` split one variable again, under its own name.

    It is stored in ``target`` where any copy came out so (the pass stores a param in it where
    only low-precision layers read it), and the copies that came out float32 read one cast of
    it to float32; where none did, it stays float32 as before.

    Returns
    -------
    graph : Graph
    params : dict of str to mxnet.nd.NDArray
    stored : list of str
        The params now stored in ``target`` that a float32 layer reads (through the cast).
    """
    graph = as_graph(graph)
    if not ties:
        return graph, params, []
    params = dict(params)
    low = np.dtype(target) if target != "bfloat16" else None
    nodes = graph.nodes
    index = {node.name: i for i, node in enumerate(nodes) if node.is_variable}
    # old variable index -> (the name it becomes, whether its readers need the float32 cast)
    plan, stored, taken = {}, [], {node.name for node in nodes}
    for original, copies in ties.items():
        names = [n for n in [original] + copies if n in index and n in params]
        if not names:
            continue

        def is_low(name):
            dtype = params[name].dtype
            return (np.dtype(dtype) == low) if low is not None else (np.dtype(dtype) != FLOAT32)

        lows = [n for n in names if is_low(n)]
        keep = lows[0] if lows else names[0]
        for name in names:
            plan[index[name]] = (keep, bool(lows) and not is_low(name))
        if lows and len(lows) < len(names):
            stored.append(original)
        value = params[keep]
        for name in names:
            params.pop(name, None)
        params[original] = value
        plan[("name", keep)] = original
    build = graph.rebuild()
    kept, casts = {}, {}
    for i, node in enumerate(nodes):
        if i in plan:
            keep, widen = plan[i]
            if nodes[i].name == keep:
                if keep not in kept:
                    kept[keep] = build.add(Record(node, name=plan[("name", keep)]))
                build.place(i, kept[keep])
            continue
        record = Record(node)
        if not node.is_variable:
            inputs = []
            for entry in node.inputs:
                src = entry[0]
                if src in plan:
                    keep, widen = plan[src]
                    if keep not in kept:  # the kept copy comes later in the list
                        kept[keep] = build.add(Record(nodes[index[keep]],
                                                      name=plan[("name", keep)]))
                    if widen:
                        if keep not in casts:
                            name = unused_name("%s_float32" % plan[("name", keep)], taken)
                            taken.add(name)
                            casts[keep] = build.add(Record(
                                cast_node(name, FLOAT32, [kept[keep], 0])))
                        inputs.append([casts[keep], 0, 0])
                    else:
                        inputs.append([kept[keep], 0, 0])
                else:
                    inputs.append(build.entry(entry))
            record["inputs"] = inputs
        build.place(i, build.add(record))
    return build.graph(), params, stored
