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

A float16 value read by several widenings (a ResNet block's output, read by a convolution
and the skip connection's add) is carried too, in the layout that makes MXNet sum its
gradient as it did on the casts (:func:`_fan_outs`). A float16 value read by anything else (a
native float16 op, a graph output) keeps its cast pair, and so does a value whose shape MXNet
learns only from its reader (an RNN's begin state): the rounding op's shape inference runs
forward only. Without the rounding op (no compiler), or with ``MXMIXED_EMULATION_CARRY=0``,
the graph is left as it is: the same bits, in two passes.

A relu between two roundings needs only one of them (:func:`_exact_relus`): the relu of a
float16 value is that value or zero, and its gradient is the incoming one or zero, so the
rounding after it changes nothing forward, and going back the rounding before it rounds the
same gradient: round(mask * g) is mask * round(g). This holds only where each rounding has the
relu as its one neighbour (no other reader adds an unrounded gradient), and is checked so.
Only a NaN's payload can differ (its low bits, which float16 cannot hold).
"""

from .._core.env import switch
from .._core.graph import attr_ints
from .._core.mxbool import env_bool
from ._names import is_emulation_name, is_input_cast
from ._round16 import round16_op

__all__ = ["carry_float32", "carry_enabled"]


def carry_enabled():
    """Whether the carry pass runs (``MXMIXED_EMULATION_CARRY=0`` switches it off)."""
    return switch("MXMIXED_EMULATION_CARRY")


def _cast_to(node, dtype):
    return node.op in ("amp_cast", "Cast") and node.attrs.get("dtype") == dtype


def carry_float32(graph, float32_entries):
    """Replace each float32 -> float16 -> float32 cast pair of a rebuilt graph by one rounding.

    Parameters
    ----------
    graph : mxmixed._core.graph.Graph
        The graph as the emulation's rebuild produced it.
    float32_entries : callable
        ``float32_entries(graph, entries)`` returns the subset of ``entries``
        (``(node, output)`` pairs) that are float32.

    Returns
    -------
    Graph
        The graph with the pairs replaced, or the same Graph when none was found (or the
        carry is off or unavailable).
    """
    if not carry_enabled():
        return graph
    nodes, readers = graph.nodes, graph.readers
    heads = {(src, out) for src, out, _ in graph.heads}
    pairs = _single_reader_chains(nodes, readers, heads)
    fans = _fan_outs(nodes, readers, heads)
    if not pairs and not fans:
        return graph
    # the chain's first cast rounds a float32 value; AMP's casts of float16 values to float16
    # after it are copies (forward and backward)
    sources = {tuple(nodes[c].inputs[0][:2]) for chain in pairs.values() for c in chain}
    sources |= {tuple(nodes[c].inputs[0][:2]) for c in fans}
    wide = float32_entries(graph, sources)
    trimmed = {}
    for up, chain in pairs.items():
        while chain and tuple(nodes[chain[-1]].inputs[0][:2]) not in wide:
            chain = chain[:-1]
        if chain and all(tuple(nodes[c].inputs[0][:2]) not in wide for c in chain[:-1]):
            trimmed[up] = chain
    shaped_late = _shaped_by_readers(nodes)
    pairs = {up: chain for up, chain in trimmed.items()
             if nodes[chain[-1]].inputs[0][0] not in shaped_late}
    fans = {c: routes for c, routes in fans.items() if tuple(nodes[c].inputs[0][:2]) in wide
            and nodes[c].inputs[0][0] not in shaped_late}
    if not (pairs or fans) or round16_op() is None:
        return graph
    return _exact_relus(_rebuilt(graph, pairs, fans))


def _is_relu(node):
    return node.op == "Activation" and node.attrs.get("act_type") == "relu"


def _exact_relus(graph):
    """The graph without the roundings of relu outputs whose input is a rounding.

    A rounding R is dropped when it reads a relu A (R its only reader, A's output not a graph
    output), A reads a rounding P (A its only reader), and R is not a graph output; R's readers
    then read A. The values and gradients stay bit for bit (see the module's notes).
    """
    op = round16_op()
    nodes, readers = graph.nodes, graph.readers
    heads = {(src, out) for src, out, _ in graph.heads}
    dropped = {}
    for r, node in enumerate(nodes):
        if node.op != op or (r, 0) in heads:
            continue
        a, out = node.inputs[0][:2]
        if out != 0 or not _is_relu(nodes[a]) or readers((a, 0)) != [r] or (a, 0) in heads:
            continue
        p, out = nodes[a].inputs[0][:2]
        if out == 0 and nodes[p].op == op and readers((p, 0)) == [a] and (p, 0) not in heads:
            dropped[r] = a
    if not dropped:
        return graph
    new = graph.rebuild()
    for i, node in enumerate(nodes):
        if i in dropped:
            new.redirect((i, 0), new.entry([dropped[i], 0, 0]))
        else:
            new.place(i, new.add(new.mapped(node)))
    return new.graph()


def _rebuilt(graph, pairs, fans):
    """The graph with each chain and each fan-out replaced by rounding ops."""
    nodes = graph.nodes
    dropped = {c for chain in pairs.values() for c in chain}
    dropped |= {c for routes in fans.values() for route in routes for c in route[:-1]}
    widening = {route[-1]: c for c, routes in fans.items() for route in routes}
    merged = {c for c, routes in fans.items() if _merged_by_mxnet(nodes, routes)}
    new = graph.rebuild()
    for i, node in enumerate(nodes):
        if i in dropped:
            continue
        if i in pairs:
            down = nodes[pairs[i][-1]]
            name = node.name if is_input_cast(node.name) else down.name
            node = _round16_node(name, down.name, down.inputs[0])
        elif i in fans:
            node = _round16_node(node.name, node.name, node.inputs[0])
        elif widening.get(i) in merged:  # the widenings are one, and so is the rounding
            new.place(i, new.entry([widening[i], 0, 0])[0])
            continue
        elif i in widening:
            node = _round16_node(node.name, node.name, [widening[i], 0, 0])
        new.place(i, new.add(new.mapped(node)))
    return new.graph()


def _round16_node(name, fused, entry):
    return {"op": round16_op(), "name": name, "attrs": {"fused": fused}, "inputs": [list(entry)]}


def _single_reader_chains(nodes, readers, heads):
    """``{widening cast: [the float16 casts down to a rounding]}``, each cast the only reader
    of the one before."""
    pairs = {}
    for up, node in enumerate(nodes):
        if not (_cast_to(node, "float32") and is_emulation_name(node.name)):
            continue
        chain, reader = [], up
        down, out = node.inputs[0][:2]
        while (out == 0 and _cast_to(nodes[down], "float16")
               and readers((down, 0)) == [reader] and (down, 0) not in heads):
            chain.append(down)
            reader = down
            down, out = nodes[down].inputs[0][:2]
        if chain:
            pairs[up] = chain
    return pairs


def _fan_outs(nodes, readers, heads):
    """Roundings to float16 read by several of the emulation's widening casts.

    Such a value (a ResNet block's output, read by the next convolution and the skip
    connection's add) is carried in one of two ways, chosen to keep the bits it had with its
    casts:

    - When MXNet's common-expression elimination merges the routes to the widenings into one
      widening (:func:`_merged_by_mxnet`), the value's gradient is summed in float32 and
      rounded once: one rounding op, read by every reader, does the same.
    - Otherwise, with two readers, the gradient is the float16 sum of the readers' float16
      gradients. The rounding becomes a rounding op, and each widening another one, which
      leaves the rounded value alone going forward and rounds its reader's gradient going
      back. MXNet sums the two float16 values in float32, which rounds to their correctly
      rounded float16 sum (24 >= 2 * 11 + 2 bits): the bits of MXNet's float16 ``add_n``,
      without its slow float16 kernel. With three readers or more MXNet rounds after each
      addition, so those keep their casts.

    Returns
    -------
    dict
        ``{rounding cast: [route to each widening cast]}``, a route being the list of AMP's
        float16 copies on the way (each the only reader of the one before), then the widening.
    """
    fans = {}
    for i, node in enumerate(nodes):
        ups = readers((i, 0))
        if not (_cast_to(node, "float16") and (i, 0) not in heads and len(ups) >= 2
                and len(set(ups)) == len(ups)):
            continue
        routes = [_copies_to_widening(nodes, readers, heads, up) for up in ups]
        if all(routes) and (len(routes) == 2 or _merged_by_mxnet(nodes, routes)):
            fans[i] = routes
    return fans


def _merged_by_mxnet(nodes, routes):
    """Whether MXNet's common-expression elimination (``MXNET_ELIMINATE_COMMON_EXPR``, on by
    default in bound executors and CachedOps) merges the routes into one: the same casts with
    the same attributes, in the same order."""
    if not env_bool("MXNET_ELIMINATE_COMMON_EXPR", True):
        return False
    shapes = {tuple((nodes[c].op, tuple(sorted(nodes[c].attrs.items())))
                    for c in route) for route in routes}
    return len(shapes) == 1


def _shaped_by_readers(nodes):
    """Nodes whose output shape MXNet learns only from the ops that read it.

    An op that creates a tensor with an unknown dimension (the begin state of a Gluon RNN is
    ``zeros(shape=(layers, 0, hidden))``, its batch size taken from the RNN op), and every op
    computed from one. The rounding op is an extension op, whose shape inference only runs
    forward (input to output): such a value keeps its cast pair.
    """
    late = set()
    for i, node in enumerate(nodes):
        if node.op == "null":
            continue
        if any(src in late for src, _, _ in node.inputs):
            late.add(i)
        elif not node.inputs and _unknown_dim(node.attrs.get("shape")):
            late.add(i)
    return late


def _unknown_dim(shape):
    try:
        dims = attr_ints(shape) or ()
    except ValueError:
        return True  # a shape we cannot read: do not rely on it
    return any(isinstance(d, int) and d <= 0 for d in dims)


def _copies_to_widening(nodes, readers, heads, node):
    """The casts from ``node`` through float16 copies to one of the emulation's widenings."""
    route = []
    while _cast_to(nodes[node], "float16") and (node, 0) not in heads:
        route.append(node)
        ups = readers((node, 0))
        if len(ups) != 1:
            return None
        node = ups[0]
    if _cast_to(nodes[node], "float32") and is_emulation_name(nodes[node].name):
        return route + [node]
    return None
