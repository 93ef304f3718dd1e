"""A bfloat16 graph run in float32 with bfloat16 rounding: validation where bfloat16 cannot run.

MXNet 1.9.1 runs bfloat16 ops through oneDNN, which needs AVX-512 (see
:func:`mxmixed.bfloat16_support`). Where it cannot, :func:`emulate_bfloat16` rewrites a converted
bfloat16 graph into a float32 one that rounds to bfloat16 wherever the bfloat16 graph holds a
bfloat16 tensor:

- a param stored in bfloat16 becomes float32 (exact: every bfloat16 value is a float32);
- an ``amp_cast`` to bfloat16 becomes a rounding to bfloat16 kept in float32;
- an ``amp_cast`` or ``amp_multicast`` to float32 becomes the identity;
- every other entry whose dtype is bfloat16 (the output of an op computing in bfloat16) gets a
  rounding after it: the op computes in float32 and its result is rounded once, as oneDNN's
  bfloat16 kernels accumulate in float32 and round their output.

The rounding is ``_mxmixed_round_bf16`` of the emulation's extension library (round to nearest
even, no AVX-512, no bfloat16 tensor). Where that library cannot be built, an ``amp_cast`` pair
(float32 -> bfloat16 -> float32) rounds instead: the same bits, except that it flushes
bfloat16 subnormals (below 1.2e-38) to zero, as oneDNN's casts do.
"""
import numpy as np

import mxnet as mx

from .._core.dtypes import BFLOAT16, FLOAT32
from .._core.graph import as_graph, cast_node, dtype_code
from .._core.ops import CAST_OPS
from ..emulation import round_bf16_op

__all__ = ["emulate_bfloat16", "emulation_note", "bfloat16_entries"]


def emulation_note(why):
    """The one line that says a validation ran under the bfloat16 emulation, and why."""
    return ("validated under a bfloat16 emulation (float32 arithmetic, bfloat16 rounding): this "
            "CPU cannot run MXNet's bfloat16 (%s)" % why)


def bfloat16_entries(graph, known):
    """The entries of ``graph`` (a Graph) read or returned whose inferred dtype is bfloat16.

    Parameters
    ----------
    graph : Graph
    known : dict of str to dtype
        Input dtypes.

    Returns
    -------
    list of (int, int)
    """
    entries = graph.consumed_entries()
    dtypes, _ = graph.entry_dtypes(entries, known)
    return [e for e in entries if dtypes.get(e) == BFLOAT16]


def _to_float32(array):
    """A bfloat16 NDArray as float32, exactly, in NumPy (no bfloat16 op runs)."""
    bits = array.asnumpy().view(np.uint16).astype(np.uint32) << 16
    return mx.nd.array(bits.view(np.float32), dtype=FLOAT32)


def emulate_bfloat16(sym, arg_params, aux_params, data_types):
    """The float32 emulation of a bfloat16 inference graph, and its float32 params.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        A converted bfloat16 graph (casts kept), in its inference form.
    arg_params, aux_params : dict of str to NDArray
    data_types : dict of str to dtype
        The dtypes of the data inputs (float32 for a converted bfloat16 model).

    Returns
    -------
    (mxnet.symbol.Symbol, dict, dict)
        The graph, holding no bfloat16 entry and no bfloat16 op, and the params with every
        bfloat16 one made float32.
    """
    graph = as_graph(sym)
    known = {n: np.dtype(v.dtype) for n, v in list(arg_params.items())
             + list(aux_params.items())}
    known.update(data_types)
    entries = graph.consumed_entries()  # an output nothing reads needs no rounding
    dtypes, variables = graph.entry_dtypes(entries, known)
    outputs = {}
    for src, out in entries:
        outputs.setdefault(src, []).append(out)
    op = round_bf16_op()
    new = graph.rebuild()
    exact = set()  # new entries that already hold bfloat16 values

    def rounded(name, entry):
        entry = tuple(entry[:2])
        if entry in exact:
            return entry
        if op is not None:
            node = {"op": op, "name": name, "attrs": {}, "inputs": [[entry[0], entry[1], 0]]}
            new.add(node)
        else:
            down = new.add(cast_node(name + "_bf16", "bfloat16", [entry[0], entry[1]]))
            new.add(cast_node(name, "float32", [down, 0]))
        exact.add((new.next_id - 1, 0))
        return new.next_id - 1, 0

    for i, node in enumerate(graph.nodes):
        name = node.name
        if node.op == "null":
            attrs = dict(node.attrs)
            node = dict(node, attrs=attrs)
            if variables.get(name) == BFLOAT16 or dtypes.get((i, 0)) == BFLOAT16:
                attrs["__dtype__"] = dtype_code(FLOAT32)
                new.place(i, new.add(node))
                exact.add((new.next_id - 1, 0))
            else:
                new.place(i, new.add(node))
            continue
        if node.op in CAST_OPS:
            # a cast to float32 is the identity; one to bfloat16 a rounding
            for k, source in enumerate(node.inputs):
                entry = tuple(new.entry(source)[:2])
                if dtypes.get((i, k)) == BFLOAT16:
                    entry = rounded("%s_bf16round%d" % (name, k) if k else name, entry)
                new.redirect((i, k), entry)
            continue
        node = new.mapped(node)
        attrs = node.attrs
        if attrs.get("dtype") == "bfloat16":  # an op that makes bfloat16 (zeros, Cast ...)
            node = dict(node, attrs=dict(attrs, dtype="float32"))
        new.place(i, new.add(node))
        placed = new.next_id - 1
        for k in outputs.get(i, ()):
            if dtypes.get((i, k)) == BFLOAT16:
                new.redirect((i, k), rounded(name + ("_bf16round" if k == 0 else
                                                    "_bf16round%d" % k), (placed, k)))
    out = new.graph().to_symbol()
    params = [{n: _to_float32(v) if np.dtype(v.dtype) == BFLOAT16 else v
               for n, v in group.items()} for group in (arg_params, aux_params)]
    return out, params[0], params[1]
