"""Instrumented runs: a model with its layers' outputs exposed, for the search and calibration.

* :func:`probe_layers` runs a graph (float32 or converted) on batches with the outputs of the named
  layers added to its heads, and reduces them per layer while it runs (nothing large is kept);
* :func:`layer_peaks` gives the same largest |value| per layer without adding heads: an op hook
  reads each layer's output as the layer runs, so the graph keeps no more alive than in a plain
  run (the calibration; a graph of every layer exposed keeps every activation, and MXNet's
  bookkeeping for each, at once);
* :func:`layer_sensitivity` turns a float32 and a float16 probe into the error each layer *adds*:
  its own relative error against its float32 activation, less the largest error it receives
  from its inputs;
* :func:`underflow_layers` names layers (and outputs) whose float32 values are all below
  float16's smallest normal, 6.1e-5, where float16 keeps few or no significant digits.
"""

import bisect
import ctypes

import numpy as np

import mxnet as mx

from .._core.dtypes import FLOAT16_MIN_NORMAL
from .._core.graph import as_graph
from ._inference import inference_graph
from ._batch import DEFAULT_AXES
from ._validation import Runner, join_outputs, progress_bar

__all__ = ["layer_peaks", "layer_sensitivity", "probe_layers", "underflow_layers",
           "underflow_note"]


class _Stats:
    """Per layer: max |float32|, and against a reference, max |difference|."""

    def __init__(self, count):
        self.peak = np.zeros(count)
        self.diff = np.zeros(count)


def probe_layers(sym, arg_params, aux_params, names, batches, ctx, progress, desc, reference=None,
           keep=False, input_types=None):
    """Run ``sym`` with the layers ``names`` exposed.

    Parameters
    ----------
    reference : list of list of numpy.ndarray, optional
        Per batch, the layer activations of another run (from ``keep=True``) to diff against.
    keep : bool, default False
        Keep every layer's activations for every batch (the search's float32 run needs them;
        a calibration does not, and they are the bulk of its memory).

    Returns
    -------
    outputs : list of numpy.ndarray
        The graph's own outputs, concatenated over batches.
    stats : _Stats
        ``peak[k]`` = max |activation| of layer k (finite values), ``diff[k]`` = max
        |activation - reference| (inf where exactly one of the two is not finite).
    kept : list of list of numpy.ndarray
        Per batch, the activations (only with ``keep``; for the next probe).
    """
    graph = as_graph(inference_graph(sym))
    heads = [(src, out) for src, out, _ in graph.heads]
    probe = graph.with_heads(heads + [(graph.index(name), 0) for name in names])
    runner = Runner((probe.to_symbol(), arg_params, aux_params), ctx, input_types=input_types)
    outputs = [[] for _ in heads]
    stats = _Stats(len(names))
    kept = []
    for b, batch in enumerate(progress_bar(batches, progress, desc, total=len(batches))):
        outs = runner(batch)
        for store, out in zip(outputs, outs[:len(heads)]):
            store.append(out)
        acts = outs[len(heads):]
        for k, act in enumerate(acts):
            finite = np.abs(act[np.isfinite(act)])
            stats.peak[k] = max(stats.peak[k], float(finite.max(initial=0.0)))
            if reference is not None:
                ref = reference[b][k]
                same = (ref == act) | (np.isnan(ref) & np.isnan(act))
                diff = np.where(same, 0.0, np.abs(ref.astype(np.float64) - act))
                diff[~np.isfinite(diff)] = np.inf
                stats.diff[k] = max(stats.diff[k], float(diff.max(initial=0.0)))
        if keep:
            kept.append(acts)
    runner.release()
    return join_outputs(outputs, getattr(batches, "axes", DEFAULT_AXES)), stats, kept


def _named_nodes(graph):
    """``{name: node}`` of the op nodes of ``graph``, or None where MXNet's op hook could name
    two of them alike: a name given twice, or one that another begins with, followed by ``_``
    (the hook reports an output as the node's name, ``_`` and the output's name)."""
    index = {node.name: i for i, node in enumerate(graph.nodes) if not node.is_variable}
    if len(index) != sum(1 for node in graph.nodes if not node.is_variable):
        return None
    ordered = sorted(index)
    for name in ordered:
        k = bisect.bisect_left(ordered, name + "_")
        if k < len(ordered) and ordered[k].startswith(name + "_"):
            return None
    return index


class _PeakHook:
    """An op hook: the largest finite |value| of output 0 of the nodes ``wanted``
    (``{node: layer}``), per layer. ``index`` maps the op nodes' names to the nodes (see
    :func:`_named_nodes`); None where the graph's op nodes are named by their index.

    MXNet calls it once per output of each op as the op is pushed, output 0 first, with a new
    NDArray handle that the hook owns. Reading it waits for that op alone; the next op is
    pushed after the hook returns, so a buffer the graph reuses still holds this output.
    Errors are kept for :meth:`check` (ctypes drops what a callback raises).
    """

    def __init__(self, wanted, count, index=None):
        self.wanted = wanted
        self.index = index
        self.peak = np.zeros(count)
        self.done = set()
        self.error = None

    def _node(self, name):
        if self.index is None:
            head = name.split(b"_", 1)[0]
            return int(head) if head.isdigit() else None
        text = name.decode("utf-8", "replace")
        cut = text.rfind("_")
        while cut >= 0:
            node = self.index.get(text[:cut])
            if node is not None:
                return node
            cut = text.rfind("_", 0, cut)
        return None

    def __call__(self, name, op_name, handle):
        array = mx.nd.NDArray(ctypes.cast(handle, mx.base.NDArrayHandle), writable=False)
        if self.error is not None:
            return
        node = self._node(name)
        k = self.wanted.get(node)
        if k is None or node in self.done:
            return
        self.done.add(node)
        try:
            act = array.asnumpy().astype(np.float32, copy=False)
            finite = np.abs(act[np.isfinite(act)])
            self.peak[k] = max(self.peak[k], float(finite.max(initial=0.0)))
        except BaseException as err:  # raised again by check(), outside the ctypes callback
            self.error = err

    def check(self):
        """Raise what a call raised; start the next batch."""
        self.done = set()
        if self.error is not None:
            raise self.error


def layer_peaks(sym, arg_params, aux_params, names, batches, ctx, progress, desc,
                input_types=None):
    """Run ``sym`` on ``batches``; the largest finite |value| of each named layer's output.

    The layers' outputs are read by an op hook as each runs (:class:`_PeakHook`), not added to
    the graph's heads: the run keeps alive what a plain run keeps. Where the hook could name two
    nodes alike (:func:`_named_nodes`), the graph that runs has its op nodes named by their
    index. A layer whose output 0 no node reads is made a head, so that MXNet computes it.

    Parameters
    ----------
    sym, arg_params, aux_params
        The model (float32: the calibration runs the model given).
    names : list of str
        The layers to read.
    batches : list
        NumPy batches, as :class:`Runner` takes them.
    ctx : mxnet.Context
    progress : bool
    desc : str
        The progress bar's words.
    input_types : dict of str to numpy.dtype, optional
        Dtypes of integer data inputs.

    Returns
    -------
    outputs : list of numpy.ndarray
        The graph's own outputs, concatenated over batches.
    peaks : numpy.ndarray
        ``peaks[k]``: the largest finite |value| of layer ``names[k]`` (the last node of that
        name), 0 where it has none.
    """
    graph = as_graph(inference_graph(sym))
    heads = [(src, out) for src, out, _ in graph.heads]
    wanted = {graph.index(name): k for k, name in enumerate(names)}
    consumed = set(graph.consumed_entries())
    extra = [(i, 0) for i in sorted(wanted) if (i, 0) not in consumed]
    index = _named_nodes(graph)
    if index is None:
        graph = graph.with_nodes({i: dict(node, name=str(i))
                                  for i, node in enumerate(graph.nodes) if not node.is_variable})
    probe = graph.with_heads(heads + extra) if extra else graph
    runner = Runner((probe.to_symbol(), arg_params, aux_params), ctx, input_types=input_types)
    hook = _PeakHook(wanted, len(names), index)
    runner.block.register_op_hook(hook)
    outputs = [[] for _ in heads]
    for batch in progress_bar(batches, progress, desc, total=len(batches)):
        outs = runner(batch)
        hook.check()
        for store, out in zip(outputs, outs[:len(heads)]):
            store.append(out)
    runner.release()
    return join_outputs(outputs, getattr(batches, "axes", DEFAULT_AXES)), hook.peak


def layer_sensitivity(graph, names, peak32, diff16):
    """The error each layer adds: its relative error less the most it gets from its inputs.

    Returns
    -------
    numpy.ndarray
        One score per name; inf for a layer that turns finite inputs into inf or NaN.
    """
    own = {}
    for name, peak, diff in zip(names, peak32, diff16):
        own[name] = diff / peak if peak > 0 else (0.0 if diff == 0 else np.inf)
    nodes = graph.nodes
    carried = [0.0] * len(nodes)  # the error on each node's output
    received = {}
    for i, node in enumerate(nodes):
        incoming = max((carried[src] for src, _, _ in node.inputs), default=0.0)
        received[node.name] = incoming
        carried[i] = own.get(node.name, incoming)
    scores = np.zeros(len(names))
    for k, name in enumerate(names):
        mine, before = own[name], received.get(name, 0.0)
        if np.isinf(mine):
            scores[k] = np.inf if not np.isinf(before) else 0.0
        else:
            scores[k] = max(0.0, mine - before)
    return scores


def underflow_layers(names, peaks, outputs, limit=FLOAT16_MIN_NORMAL):
    """Layers and outputs whose float32 values all lie below float16's smallest normal."""
    tiny = [name for name, peak in zip(names, peaks) if 0 < peak < limit]
    heads = [k for k, out in enumerate(outputs)
             if 0 < float(np.abs(out[np.isfinite(out)]).max(initial=0.0)) < limit]
    return tiny, heads


def underflow_note(tiny, heads, outputs):
    parts = []
    if heads:
        parts.append("output(s) %s" % ", ".join(str(k) for k in heads))
    if tiny:
        shown = ", ".join(tiny[:5]) + (" and %d more" % (len(tiny) - 5) if len(tiny) > 5 else "")
        parts.append("%d layer(s) (%s)" % (len(tiny), shown))
    peak = max((float(np.abs(o[np.isfinite(o)]).max(initial=0.0)) for o in outputs),
               default=0.0)
    return ("float16 underflow: on the calibration data %s stay below float16's smallest "
            "normal %.3g (largest |output| %.3g); float16 flushes such values toward 0. "
            "Check with validate() and keep the layers float32 with search_fp32_layers()"
            % (" and ".join(parts), FLOAT16_MIN_NORMAL, peak))
