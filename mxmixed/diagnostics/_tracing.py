"""Tracing a Gluon net to the graph the diagnostics read: the checks before it, the trace, the
shape and dtype of every graph entry, and names that point back to Gluon blocks.

Every diagnostic works on a Symbol graph. A Gluon ``HybridBlock`` is traced by calling it on
``mx.sym.var('data')``; that does not touch its cached graph, its parameters or its gradients.
"""
from typing import Dict, Tuple, Union

import numpy as np

import mxnet as mx
from mxnet import gluon

from .. import emulation
from .._core.dtypes import FLOAT16
from .._core.errors import one_line
from .._core.graph import GraphShapeError, GraphTypeError, as_graph, infer_types
from .._core.graph import infer_shapes as infer_graph_shapes
from .._core.params import is_param_name

DATA = "data"
LABEL = "label"

# The annotations of the public functions: a batch (data, or data and label) and input shapes.
Batch = Union[mx.nd.NDArray, Tuple[mx.nd.NDArray, mx.nd.NDArray]]
InputShape = Union[Tuple[int, ...], Dict[str, Tuple[int, ...]]]


# ---------------------------------------------------------------- inputs
def as_ndarray(value, name):
    """An NDArray from an NDArray or anything NumPy can turn into an array."""
    if isinstance(value, mx.nd.NDArray):
        return value
    try:
        return mx.nd.array(np.asarray(value), dtype=np.asarray(value).dtype)
    except (TypeError, ValueError) as err:
        raise TypeError("%s must be an NDArray or a NumPy array, got %s (%s)"
                        % (name, type(value).__name__, err)) from None


def split_batch(batch):
    """``(X, y)`` from a batch given as ``(X, y)``, ``[X, y]`` or ``X`` alone (then y is None)."""
    if isinstance(batch, (tuple, list)):
        if len(batch) != 2:
            raise ValueError("a batch is (X, y) or X alone, got a sequence of %d items"
                             % len(batch))
        return as_ndarray(batch[0], "X"), as_ndarray(batch[1], "y")
    if batch is None:
        raise ValueError("a batch is needed: (X, y), or X alone")
    return as_ndarray(batch, "X"), None


def check_block(net, what, for_symbols=None):
    """Refuse what cannot be traced to a Symbol, with the reason."""
    if isinstance(net, mx.sym.Symbol):
        raise TypeError("%s takes a Gluon HybridBlock; %s" % (
            what, "for a Symbol use %s" % for_symbols if for_symbols else
            "wrap a Symbol with gluon.SymbolBlock(outputs, inputs) and load its parameters"))
    if not isinstance(net, gluon.Block):
        raise TypeError("%s needs a Gluon HybridBlock, got %s" % (what, type(net).__name__))
    if not isinstance(net, gluon.HybridBlock):
        raise TypeError(
            "%s needs a HybridBlock (nn.HybridSequential, gluoncv models, SymbolBlock ...) "
            "because it reads the net's graph; '%s' is a plain gluon.Block, whose forward is "
            "arbitrary Python. Write it as a HybridBlock, or check its HybridBlock children "
            "one by one." % (what, type(net).__name__))


def named_params(net):
    """The net's parameters by name, in creation order."""
    return {p.name: p for p in net.collect_params().values()}


def check_initialized(net, X=None):
    """Raise a clear error for an uninitialized net; finish deferred initialization with X.

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock
    X : NDArray, optional
        A batch to complete deferred initialization with (run once in inference mode).
    """
    params = named_params(net)
    if not params:
        raise ValueError("the net '%s' has no parameters" % net.name)
    missing = [n for n, p in params.items() if p._data is None and not p._deferred_init]
    if missing:
        raise RuntimeError("the net is not initialized: %d parameter(s) have no value (%s%s); "
                           "call net.initialize() first"
                           % (len(missing), ", ".join(missing[:3]),
                              " ..." if len(missing) > 3 else ""))
    deferred = [n for n, p in params.items() if p._data is None and p._deferred_init]
    if deferred:
        if X is None:
            raise RuntimeError("the parameters of the net are not initialized yet (deferred "
                               "initialization, e.g. %s): run one batch through it first"
                               % deferred[0])
        try:
            with emulation.emulated(), mx.autograd.pause(train_mode=False):
                net(X)
        except mx.base.MXNetError as err:
            raise ValueError("the batch does not fit the net (input shape %s): %s"
                             % (tuple(X.shape), one_line(err))) from None
    return params


def check_has_gradients(params):
    """Raise when no parameter takes a gradient."""
    if all(p.grad_req == "null" for p in params.values()):
        raise ValueError("the net has no gradients: every parameter has grad_req='null' "
                         "(frozen, or set with collect_params().setattr('grad_req', 'null')); "
                         "give the parameters to be trained grad_req='write'")


# ---------------------------------------------------------------- tracing
def trace(net, loss_fn=None, with_label=False):
    """The net's graph (and its loss on top) as a Symbol, under the AMP state of the caller.

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock
    loss_fn : mxnet.gluon.HybridBlock or callable, optional
        Applied as ``loss_fn(out, label)``; must accept Symbols.
    with_label : bool
        Whether a ``label`` variable is created (needed with a loss).

    Returns
    -------
    mxnet.symbol.Symbol
    """
    data = mx.sym.var(DATA)
    try:
        out = net(data)
    except mx.base.MXNetError as err:
        raise ValueError("the net could not be traced to a graph: %s" % one_line(err)) from None
    if isinstance(out, (list, tuple)):
        if loss_fn is not None:
            raise ValueError("the net returns %d outputs; a loss_fn needs exactly one" % len(out))
        out = mx.sym.Group(list(out))
    if loss_fn is None:
        return out
    if not with_label:
        raise ValueError("a loss_fn needs labels: pass the batch as (X, y)")
    try:
        return loss_fn(out, mx.sym.var(LABEL))
    except (TypeError, AttributeError, mx.base.MXNetError) as err:
        raise TypeError("loss_fn must accept Symbols (a gluon.loss.Loss or another "
                        "HybridBlock): %s" % err) from None


def strip_amp_casts(sym):
    """The graph without AMP's ``amp_cast``/``amp_multicast`` nodes (a float32 graph)."""
    return mx.sym.load_json(sym.tojson(remove_amp_cast=True))


def has_float16(sym, arg_dtypes=None):
    """Whether a graph computes in float16: a float16 cast or a float16 input."""
    for node in as_graph(sym).nodes:
        attrs = node.attrs
        if node.op in ("amp_cast", "Cast", "cast") and attrs.get("dtype") == "float16":
            return True
        if node.op == "amp_multicast":
            return True
    return any(np.dtype(t) == FLOAT16 for t in (arg_dtypes or {}).values())


def infer_shapes(sym, shapes, partial=False):
    """``sym.infer_shape`` with a clear error for shapes that do not fit.

    Returns
    -------
    (dict, list, dict)
        Argument shapes by name, output shapes, auxiliary shapes by name.
    """
    try:
        found = infer_graph_shapes(sym, shapes, partial=partial)
    except GraphShapeError as err:
        raise ValueError("the input shape %s does not fit the graph: %s"
                         % (_fmt_shapes(shapes), one_line(err.error))) from None
    if found is None:
        raise ValueError("the input shape %s is not enough to infer the graph's shapes; give "
                         "the shapes of all its inputs %s"
                         % (_fmt_shapes(shapes), data_inputs(sym)))
    return found


def data_inputs(sym):
    return [n for n in sym.list_arguments() if not is_param_name(n)]


def _fmt_shapes(shapes):
    if len(shapes) == 1:
        return str(tuple(next(iter(shapes.values()))))
    return str({k: tuple(v) for k, v in shapes.items()})


def normalize_input_shape(sym, input_shape):
    """A ``{name: shape}`` dict from a shape tuple (for the single data input) or a dict."""
    if isinstance(input_shape, dict):
        shapes = {k: tuple(int(d) for d in v) for k, v in input_shape.items()}
    else:
        try:
            shape = tuple(int(d) for d in input_shape)
        except TypeError:
            raise TypeError("input_shape must be a tuple such as (32, 3, 224, 224) or a dict "
                            "{input name: shape}, got %r" % (input_shape,)) from None
        names = [n for n in sym.list_arguments() if n == DATA]
        if not names:
            raise ValueError("the graph has no input named 'data' (its arguments are %s); pass "
                             "input_shape as a dict {name: shape}" % sym.list_arguments()[:6])
        shapes = {DATA: shape}
    unknown = set(shapes) - set(sym.list_arguments())
    if unknown:
        raise ValueError("input_shape names %s, which the graph does not have (its inputs: %s)"
                         % (sorted(unknown), data_inputs(sym)))
    for name, shape in shapes.items():
        if not shape or any(d <= 0 for d in shape):
            raise ValueError("input shape %s for '%s' must have positive dimensions"
                             % (shape, name))
    return shapes


class GraphInfo:
    """Shape and dtype of every visible output of every node of a graph.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    shapes : dict of str to tuple
        Input shapes (at least the data).
    dtypes : dict of str to dtype, optional
        Input dtypes; others come from ``__dtype__`` attributes and inference.
    """

    def __init__(self, sym, shapes, dtypes=None):
        self.sym = sym
        self.graph = as_graph(sym)
        self.nodes = self.graph.nodes
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        internals = sym.get_internals()
        n_out = len(internals.list_outputs())
        owners = [internals[j].name for j in range(n_out)]
        self.arg_shapes, _, self.aux_shapes = infer_shapes(sym, shapes)
        _, out_shapes, _ = infer_shapes(internals, shapes)
        try:
            self.arg_dtypes, out_types, self.aux_dtypes = infer_types(internals, dtypes or {})
        except GraphTypeError as err:
            raise TypeError("the graph's dtypes do not fit together: %s" % err.reason) from None
        self._outputs = {}
        for j, owner in enumerate(owners):
            self._outputs.setdefault(owner, []).append((tuple(out_shapes[j]), out_types[j]))

    def output(self, node_index, k=0):
        """(shape, dtype) of output ``k`` of a node (a variable's own shape and dtype)."""
        return self._outputs[self.nodes[node_index].name][k]

    def outputs(self, node_index):
        """All visible (shape, dtype) outputs of a node."""
        return self._outputs[self.nodes[node_index].name]

    def input(self, node_index, k):
        """(shape, dtype) of input ``k`` of a node."""
        src, out, _ = self.nodes[node_index].inputs[k]
        return self.output(src, out)

    def op_nodes(self, ops=None):
        """Indices of the op nodes (of the given op types), in graph order."""
        return [i for i, node in enumerate(self.nodes)
                if node.op != "null" and (ops is None or node.op in ops)]

    def consumers(self, node_index):
        """Indices of the nodes that read any output of a node."""
        return self.graph.consumers(node_index)

    def attrs(self, node_index):
        return self.nodes[node_index].attrs


def is_cast(node):
    """Whether a node is a dtype cast (AMP's or the emulation's)."""
    return node.op in ("amp_cast", "amp_multicast", "Cast", "cast")




# ---------------------------------------------------------------- names of Gluon blocks
def block_paths(net, root="net"):
    """``[(prefix, 'net.features[0] (Conv2D)')]`` for every block of a net, longest prefix first.

    Parameters
    ----------
    net : mxnet.gluon.Block
    root : str, default 'net'
        How the top block is written.
    """
    found = []

    def walk(block, path):
        if block.prefix:
            found.append((block.prefix, "%s (%s)" % (path, type(block).__name__)))
        for key, child in block._children.items():
            key = str(key)
            walk(child, "%s[%s]" % (path, key) if key.isdigit() else "%s.%s" % (path, key))

    walk(net, root)
    found.sort(key=lambda item: -len(item[0]))
    return found


def layer_of(node_name, paths):
    """The Gluon block a node belongs to, or None (the deepest block whose prefix matches)."""
    for prefix, label in paths or ():
        if node_name.startswith(prefix):
            return label
    return None
