"""The float32 carry: one rounding op where a graph rounds to float16 only to widen again.

After :func:`mxmixed.emulation.emulate_symbol` has wrapped each emulated op in casts, a
float16 value that flows from one float32 computation into an emulated op goes float32 ->
float16 -> float32: an ``amp_cast`` to float16 (an emulated op's output, the bias
composition's first rounding, or AMP's own cast of a float32 weight or activation) whose only
reader is the emulation's ``amp_cast`` back to float32, possibly through AMP's casts of that
float16 value to float16 (copies), each the only reader of the one before. The chain is
replaced by one
``_mxmixed_round16`` node (float32 in, float32 out holding the float16 value; see
:mod:`._round16`), whose backward rounds the gradient as the pair's backward does. The float16
value is never materialized; every value, dtype and gradient stays what it was:

- forward: widen(round(x)) is round16(x), bit for bit;
- backward: the pair's gradient is widen(round(g)), with g the float32 gradient summed over
  the readers of the widened value, which is round16(g).

A float16 value read by anything else (a native float16 op, a graph output, a second cast)
keeps its cast pair, and so does a value whose shape MXNet learns only from its reader (an
RNN's begin state): the rounding op's shape inference runs forward only. Without the
rounding op (no compiler), or with ``MXMIXED_EMULATION_CARRY=0``, the graph is left as it is:
the same bits, in two passes.
"""
import ast
import os

from .._graph import Rebuild
from ._round16 import round16_op

__all__ = ["carry_float32", "carry_enabled"]


def carry_enabled():
    """Whether the carry pass runs (``MXMIXED_EMULATION_CARRY=0`` switches it off)."""
    return os.environ.get("MXMIXED_EMULATION_CARRY", "1") != "0"


def _cast_to(node, dtype):
    return node["op"] in ("amp_cast", "Cast") and node.get("attrs", {}).get("dtype") == dtype


def carry_float32(graph, float32_entries):
    """Replace each float32 -> float16 -> float32 cast pair of a rebuilt graph by one rounding.

    Parameters
    ----------
    graph : dict
        A graph in MXNet's JSON form, as the emulation's rebuild produced it.
    float32_entries : callable
        ``float32_entries(graph, entries)`` returns the subset of ``entries``
        (``(node, output)`` pairs) that are float32.

    Returns
    -------
    dict
        The graph with the pairs replaced, or the same dict when none was found (or the
        carry is off or unavailable).
    """
    if not carry_enabled():
        return graph
    nodes = graph["nodes"]
    readers = {}
    for i, node in enumerate(nodes):
        for src, out, _ in node["inputs"]:
            readers.setdefault((src, out), []).append(i)
    heads = {(src, out) for src, out, _ in graph["heads"]}
    pairs = {}
    for up, node in enumerate(nodes):
        if not (_cast_to(node, "float32") and "_emu_" in node["name"]):
            continue
        chain, reader = [], up
        down, out = node["inputs"][0][:2]
        while (out == 0 and _cast_to(nodes[down], "float16")
               and readers.get((down, 0)) == [reader] and (down, 0) not in heads):
            chain.append(down)
            reader = down
            down, out = nodes[down]["inputs"][0][:2]
        if chain:
            pairs[up] = chain
    if not pairs:
        return graph
    # the chain's first cast rounds a float32 value; AMP's casts of float16 values to float16
    # after it are copies (forward and backward)
    sources = {tuple(nodes[c]["inputs"][0][:2]) for chain in pairs.values() for c in chain}
    wide = float32_entries(graph, sources)
    trimmed = {}
    for up, chain in pairs.items():
        while chain and tuple(nodes[chain[-1]]["inputs"][0][:2]) not in wide:
            chain = chain[:-1]
        if chain and all(tuple(nodes[c]["inputs"][0][:2]) not in wide for c in chain[:-1]):
            trimmed[up] = chain
    pairs = trimmed
    shaped_late = _shaped_by_readers(nodes)
    pairs = {up: chain for up, chain in pairs.items()
             if nodes[chain[-1]]["inputs"][0][0] not in shaped_late}
    if not pairs or round16_op() is None:
        return graph
    dropped = {c for chain in pairs.values() for c in chain}
    new = Rebuild(graph)
    for i, node in enumerate(nodes):
        if i in dropped:
            continue
        if i in pairs:
            down = nodes[pairs[i][-1]]
            name = node["name"] if "_emu_in" in node["name"] else down["name"]
            node = {"op": round16_op(), "name": name, "attrs": {"fused": down["name"]},
                    "inputs": [list(down["inputs"][0])]}
        new.place(i, new.add(new.mapped(node)))
    return new.graph()


def _shaped_by_readers(nodes):
    """Nodes whose output shape MXNet learns only from the ops that read it.

    An op that creates a tensor with an unknown dimension (the begin state of a Gluon RNN is
    ``zeros(shape=(layers, 0, hidden))``, its batch size taken from the RNN op), and every op
    computed from one. The rounding op is an extension op, whose shape inference only runs
    forward (input to output): such a value keeps its cast pair.
    """
    late = set()
    for i, node in enumerate(nodes):
        if node["op"] == "null":
            continue
        if any(src in late for src, _, _ in node["inputs"]):
            late.add(i)
        elif not node["inputs"] and _unknown_dim(node.get("attrs", {}).get("shape")):
            late.add(i)
    return late


def _unknown_dim(shape):
    try:
        dims = ast.literal_eval(shape) if shape else ()
    except (ValueError, SyntaxError):
        return True  # a shape we cannot read: do not rely on it
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    return any(isinstance(d, int) and d <= 0 for d in dims)
