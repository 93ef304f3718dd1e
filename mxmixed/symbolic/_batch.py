"""Which axis of each data input and of each output is the batch, as the graph defines it.

Recurrent language models take time-major inputs (``(T, N)``) and return states whose batch
axis is 1 (``(layers, N, hidden)``); a calibration or a validation that splits the samples, or
joins the outputs of several batches, must do it along that axis, never along axis 0 by
assumption. :func:`batch_axes` finds the axes by shape inference: the batch is the size that
can change in every data input at once (states fed as inputs change with it) while the graph
still type-checks, and the ops whose batch axis is known (a Convolution's axis 0, an RNN's
axis 1, a ``batch_dot``'s axis 0, the interleaved attention's axis 1) tell the batch from a free
time axis. The outputs' batch axes are the axes that change with it.
"""
import itertools
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import mxnet as mx

from .._core.graph import as_graph

__all__ = ["BatchAxes", "batch_axes", "DEFAULT_AXES"]

# op -> (input index, its batch axis, its time axis or None): ops whose layout fixes the batch
_ANCHORS = {
    "Convolution": (0, 0, None),
    "Deconvolution": (0, 0, None),
    "Pooling": (0, 0, None),
    "RNN": (0, 1, 0),
    "batch_dot": (0, 0, None),
    "_contrib_interleaved_matmul_selfatt_qk": (0, 1, 0),
    "_contrib_interleaved_matmul_selfatt_valatt": (0, 1, 0),
    "_contrib_interleaved_matmul_encdec_qk": (0, 1, 0),
    "_contrib_interleaved_matmul_encdec_valatt": (0, 1, 0),
}
_MOST_COMBINATIONS = 64


@dataclass(frozen=True)
class BatchAxes:
    """The batch axis of each data input (by name) and of each output (None: the output does
    not depend on the batch: one batch's output stands for all)."""

    inputs: Dict[str, Optional[int]]
    outputs: Optional[Tuple[Optional[int], ...]] = None

    def input_axis(self, name):
        """The batch axis of data input ``name`` (int, None: not batched; 0 when unknown)."""
        return self.inputs.get(name, 0)

    def output_axis(self, k):
        """The batch axis of output ``k`` (int or None; 0 when unknown)."""
        if self.outputs is None or k >= len(self.outputs):
            return 0
        return self.outputs[k]


DEFAULT_AXES = BatchAxes({})


def _entry_name(graph, src, out, counts):
    node = graph.nodes[src]
    if node.is_variable:
        return node.name
    return "%s_output" % node.name if counts.get(src, 1) == 1 else "%s_output%d" % (node.name, out)


def _infer(sym, probes, shapes):
    """Output shapes and the shapes of the ``probes`` symbols, or None where the graph does not
    type-check with ``shapes``."""
    try:
        _, outs, _ = sym._infer_shape_impl(False, **shapes)
        probed = []
        if probes is not None:
            wanted = set(probes.list_arguments())
            _, probed, _ = probes._infer_shape_impl(
                True, **{n: s for n, s in shapes.items() if n in wanted})
    except Exception:  # MXNetError; a bare Exception for a tensor over 2^31 elements
        return None
    if outs is None or any(s is None for s in outs):
        return None
    return [tuple(s) for s in outs], [tuple(s) if s else () for s in probed]


def _anchor_probes(sym):
    """One symbol grouping the data inputs of the anchor ops, and per entry (batch, time)."""
    graph = as_graph(sym)
    internals = sym.get_internals()
    names = {n: i for i, n in enumerate(internals.list_outputs())}
    counts = {}
    for src, out in ((i[0], i[1]) for node in graph.nodes for i in node.inputs):
        counts[src] = max(counts.get(src, 1), out + 1)
    picked, axes = [], []
    for node in graph.nodes:
        anchor = _ANCHORS.get(node.op)
        if anchor is None or len(node.inputs) <= anchor[0]:
            continue
        src, out = node.inputs[anchor[0]][:2]
        name = _entry_name(graph, src, out, counts)
        if name not in names:
            name = "%s_output%d" % (graph.nodes[src].name, out)
            if name not in names:
                continue
        picked.append(internals[names[name]])
        axes.append(anchor[1:])
        if len(picked) >= 64:
            break
    return (mx.sym.Group(picked) if picked else None), axes


def _votes(before, after, axes):
    """+1 per anchor whose batch axis changed, -1 per anchor changed elsewhere only (or at its
    time axis)."""
    votes = 0
    for b, a, (batch, time) in zip(before, after, axes):
        if b == a or len(b) != len(a) or batch >= len(b):
            continue
        changed = [k for k in range(len(b)) if b[k] != a[k]]
        if time is not None and time in changed:
            votes -= 1
        elif batch in changed:
            votes += 1
        else:
            votes -= 1
    return votes


def batch_axes(sym, shapes):
    """The batch axes of the data inputs and outputs of ``sym``.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The inference graph.
    shapes : dict of str to tuple
        The shape of each data input's samples as given (the whole set, or one batch).

    Returns
    -------
    BatchAxes
        Axis 0 for every input and output where shape inference cannot tell (a graph that does
        not type-check with ``shapes``, or whose every size is free).
    """
    shapes = {n: tuple(int(d) for d in s) for n, s in shapes.items()}
    if not shapes or any(len(s) == 0 for s in shapes.values()):
        return DEFAULT_AXES
    probes, anchor_axes = _anchor_probes(sym)
    base = _infer(sym, probes, shapes)
    if base is None:
        return DEFAULT_AXES
    outs, anchors = base
    known = {d for s in list(shapes.values()) + outs + anchors for d in s}
    sizes = []
    for axis in range(max(len(s) for s in shapes.values())):
        for s in shapes.values():
            if axis < len(s) and s[axis] not in sizes:
                sizes.append(s[axis])
    neutral = None
    for n in sizes:
        other = n + 1  # the next size that no axis has: small, and told apart from the rest
        while other in known:
            other += 1
        options = [[k for k, d in enumerate(s) if d == n] or [None] for s in shapes.values()]
        for combo in itertools.islice(itertools.product(*options), _MOST_COMBINATIONS):
            if all(k is None for k in combo):
                continue
            changed = {name: tuple(other if k == axis else d for k, d in enumerate(s))
                       for (name, s), axis in zip(shapes.items(), combo)}
            result = _infer(sym, probes, changed)
            if result is None:
                continue
            votes = _votes(anchors, result[1], anchor_axes)
            if votes < 0:
                continue
            found = BatchAxes(dict(zip(shapes, combo)),
                              tuple(_output_axis(b, a, n, other)
                                    for b, a in zip(outs, result[0])))
            if votes > 0:
                return found
            if neutral is None:
                neutral = found
    return neutral or DEFAULT_AXES


def _output_axis(before, after, n, other):
    if len(before) != len(after):
        return 0
    exact = [k for k in range(len(before)) if before[k] == n and after[k] == other]
    if exact:
        return exact[0]
    changed = [k for k in range(len(before)) if before[k] != after[k]]
    return changed[0] if changed else None
