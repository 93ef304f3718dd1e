"""Run a graph once, forward and backward, in an executor of its own, watching every tensor.

The executor gets copies of the parameters and auxiliary states, so the user's net, its
gradients and its BatchNorm statistics are left exactly as they were. MXNet's monitor
callback reports each op's outputs in execution order, forward nodes first and then the
backward nodes, so the first tensor the callback sees with a given property is the first one
computed with it.
"""
import contextlib
import ctypes
import os

import numpy as np

import mxnet as mx
from mxnet.base import NDArrayHandle

from .. import emulation
from ..emulation import emulate_symbol
from .._core.devices import is_cpu
from .._core.errors import one_line
from .._core.graph import as_graph, attr_float
from .._core.ops import LOSS_OUTPUT_OPS
from ._tracing import infer_shapes


@contextlib.contextmanager
def _quiet_subgraph_log():
    """Keep MXNet's "Subgraph backend MKLDNN is activated." out of a diagnostic's output (a
    user's own ``MXNET_SUBGRAPH_VERBOSE`` is kept). MXNet reads that variable once, at the
    process's first bind: after an earlier bind in the same process, the line may appear."""
    if "MXNET_SUBGRAPH_VERBOSE" in os.environ:
        yield
        return
    os.environ["MXNET_SUBGRAPH_VERBOSE"] = "0"
    try:
        yield
    finally:
        os.environ.pop("MXNET_SUBGRAPH_VERBOSE", None)


def with_loss_scale(sym, scale):
    """Multiply the ``grad_scale`` of MXNet's loss-output ops (SoftmaxOutput ...) by ``scale``.

    Loss-output ops ignore their head gradient, so this is how a loss scale reaches them.

    Returns
    -------
    mxnet.symbol.Symbol
    """
    graph = as_graph(sym)
    if scale == 1.0 or not any(n.op in LOSS_OUTPUT_OPS for n in graph.nodes):
        return sym
    return graph.with_attrs({
        i: {"grad_scale": repr(attr_float(node.attrs.get("grad_scale"), 1.0) * scale)}
        for i, node in enumerate(graph.nodes) if node.op in LOSS_OUTPUT_OPS}).to_symbol()


class Run:
    """One forward and backward pass of a graph with every op output passed to ``watch``.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The graph, loss included.
    inputs : dict of str to NDArray
        Data and labels (no gradient taken).
    params : dict of str to NDArray
        Argument values; copied.
    aux : dict of str to NDArray
        Auxiliary states; copied.
    grad_names : iterable of str
        The parameters that take a gradient.
    ctx : mxnet.Context
        Where to run; on a CPU float16 ops are emulated.
    """

    def __init__(self, sym, inputs, params, aux, grad_names, ctx):
        missing = [n for n in sym.list_arguments() if n not in inputs and n not in params]
        if missing:
            raise ValueError("no value for the graph input(s) %s; pass them as parameters or "
                             "inputs" % missing[:5])
        missing_aux = [n for n in sym.list_auxiliary_states() if n not in aux]
        if missing_aux:
            raise ValueError("no value for the auxiliary state(s) %s" % missing_aux[:5])
        infer_shapes(sym, {n: v.shape for n, v in inputs.items() if n in sym.list_arguments()},
                     partial=True)
        args = {}
        for name in sym.list_arguments():
            value = inputs[name] if name in inputs else params[name]
            args[name] = value.as_in_context(ctx).copy()
        aux_values = {n: aux[n].as_in_context(ctx).copy() for n in sym.list_auxiliary_states()}
        grad_names = [n for n in sym.list_arguments() if n in set(grad_names)]
        self.grads = {n: mx.nd.zeros(args[n].shape, ctx=ctx, dtype=args[n].dtype)
                      for n in grad_names}
        req = {n: ("write" if n in self.grads else "null") for n in args}
        types = {n: v.dtype for n, v in list(args.items()) + list(aux_values.items())}
        if is_cpu(ctx):
            sym = emulate_symbol(sym, types, carry=False)  # every float16 tensor watched
        self.sym = sym
        self.graph = as_graph(sym)
        self.args = args
        try:
            with emulation.emulated() if is_cpu(ctx) else contextlib.nullcontext(), \
                    _quiet_subgraph_log():
                self.exe = sym.bind(ctx, args, args_grad=self.grads or None, grad_req=req,
                                    aux_states=aux_values)
        except (mx.base.MXNetError, TypeError) as err:
            raise ValueError("the graph cannot run with these inputs (%s): %s"
                             % ({n: tuple(v.shape) for n, v in args.items()
                                 if n not in params}, one_line(err))) from None
        self.phase = None
        self._watch = None
        self._error = None
        self.exe.set_monitor_callback(self._callback)

    def _callback(self, name, handle):
        if self._watch is None or self._error is not None:
            return
        try:
            array = mx.nd.NDArray(ctypes.cast(handle, NDArrayHandle), writable=False)
            name = name.decode() if isinstance(name, bytes) else str(name)
            if not np.issubdtype(array.dtype, np.floating):
                return
            self._watch(self.phase, name, array)
        except Exception as err:  # noqa: BLE001 - a ctypes callback must not raise
            self._error = err

    def forward(self, watch=None):
        """Run the forward pass in training mode; ``watch(phase, name, array)`` sees each output."""
        self.phase, self._watch = "forward", watch
        try:
            outs = self.exe.forward(is_train=True)
            mx.nd.waitall()
        except mx.base.MXNetError as err:
            raise ValueError("the forward pass failed: %s" % one_line(err)) from None
        self._raise()
        return outs

    def backward(self, scale=1.0, watch=None):
        """Run the backward pass with head gradient ``scale`` (loss-output ops take it from
        their ``grad_scale``)."""
        self.phase, self._watch = "backward", watch
        heads = self.exe.outputs
        out_grads = [mx.nd.full(h.shape, scale, ctx=h.context, dtype=h.dtype) for h in heads]
        try:
            self.exe.backward(out_grads=out_grads)
            mx.nd.waitall()
        except mx.base.MXNetError as err:
            raise ValueError("the backward pass failed: %s" % one_line(err)) from None
        self._raise()

    def _raise(self):
        self._watch = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err


class Namer:
    """Turn the monitor's tensor names into graph nodes and the entries they are gradients of.

    Parameters
    ----------
    graph : mxmixed._core.graph.Graph
        The executed graph, emulation casts included.
    arg_shapes : dict of str to tuple
        Shapes of the graph's arguments and auxiliary states.
    """

    def __init__(self, graph, arg_shapes, grad_names=()):
        self.nodes = graph.nodes
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.shapes = {self.index[n]: [tuple(s)] for n, s in arg_shapes.items()
                       if n in self.index}
        grad_names = set(grad_names)
        self._needs_grad = set()
        for i, node in enumerate(self.nodes):  # nodes come in topological order
            if node.op == "null":
                if node.name in grad_names:
                    self._needs_grad.add(i)
            elif any(src in self._needs_grad for src, _, _ in node.inputs):
                self._needs_grad.add(i)

    def computed(self, source):
        """Whether the backward pass writes the gradient of an entry.

        MXNet still hands the monitor the buffers of gradients nobody asked for (the data's,
        the label's, anything upstream only of them); they hold whatever memory they got.
        """
        return source is None or source[0] in self._needs_grad

    def record_forward(self, name, shape):
        """Remember the shape of a forward output, in output order."""
        found = self.split(name)
        if found is not None and not found[1].startswith("backward"):
            self.shapes.setdefault(found[0], []).append(tuple(shape))

    def split(self, name):
        """``(node index, rest)`` for a monitor name ``<node>_<rest>``, or None."""
        cut = len(name)
        while True:
            cut = name.rfind("_", 0, cut)
            if cut <= 0:
                return None
            if name[:cut] in self.index:
                return self.index[name[:cut]], name[cut + 1:]

    def backward_source(self, name, shape):
        """For a backward tensor: ``(node index, input position, source entry)``.

        The tensor is the gradient of input ``k`` of node ``i``; the source entry
        ``(src, out)`` is what that input reads. Entries are None where the name or the shapes
        do not say it for sure.
        """
        found = self.split(name)
        if found is None or not found[1].startswith("backward"):
            return None, None, None
        i, rest = found
        digits = rest[len("backward_output"):] if rest.startswith("backward_output") else None
        if digits is None:
            return i, None, None
        k = int(digits) if digits else 0
        inputs = self.nodes[i].inputs
        if k >= len(inputs):
            return i, None, None
        src, out, _ = inputs[k]
        known = self.shapes.get(src)
        if known is not None and out < len(known) and known[out] != tuple(shape):
            return i, None, None
        return i, k, (src, out)
