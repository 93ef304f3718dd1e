"""The one graph-JSON and type-inference layer: Symbol <-> JSON dict, dtypes and shapes.

Everything that reads or rewrites a Symbol graph (the emulation's graph pass, the symbolic
conversion, the diagnostics) goes through these helpers, so a graph is parsed one way, turned
back into a Symbol one way (:func:`load_graph`), rewritten with one bookkeeping
(:class:`Rebuild`), and its dtypes and shapes are inferred one way. Domain-specific rewrites
(which nodes to insert, drop or replace) stay with their callers.

A graph travels as a :class:`Graph`: the dict of ``sym.tojson(remove_amp_cast=False)``
(``nodes``, each with ``op``, ``name``, ``attrs``, ``inputs`` as ``[node, output, version]``;
``arg_nodes``; ``heads``), parsed once, with what is derived from it (readers, dtypes,
shapes, the Symbol) computed when first asked for and kept. This module is the only one that
reads the dict's keys. An *entry* is a ``(node, output)`` pair.
"""
import array
import contextlib
import ctypes
import io
import json

import numpy as np

import mxnet as mx
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _DTYPE_NP_TO_MX

from .dtypes import BFLOAT16, FLOAT32, dtype_name
from .errors import one_line

__all__ = ["Graph", "GraphTypeError", "GraphShapeError", "as_graph", "graph_json", "graph_text",
           "load_graph",
           "Rebuild",
           "inline_nodes",
           "consumed_entries",
           "entry_dtypes", "infer_types", "infer_shapes", "var_dtype", "dtype_code",
           "attr_float", "attr_ints",
           "cast_node", "pin_variable_dtypes", "CAST_OPS",
           "LOSS_OUTPUT_OPS", "BATCHNORM_OPS", "DETECTION_OPS"]

# ---------------------------------------------------------------- op-name lists
# The casts that MXNet's AMP pass inserts.
CAST_OPS = ("amp_cast", "amp_multicast")
# Loss-output ops of the Module API: their label input is unused at inference, where each is
# its plain activation; their grad_scale multiplies the head gradient in training.
LOSS_OUTPUT_OPS = ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
                   "MAERegressionOutput", "SVMOutput", "MakeLoss")
# Ops whose inputs 1..4 are gamma, beta, moving mean and moving variance: float32 always
# (cuDNN and MXNet's type inference require it for float16 data; MXNet issue #17164).
BATCHNORM_OPS = ("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm")
# Detection ops that a conversion keeps float32 by default. Box coordinates need float32:
# float16 has a step of 0.25 pixel at 512 and of 0.5 at 1024, and NMS, IoU and matching
# compare coordinates and scores. Several are in none of MXNet's AMP lists, so its pass leaves
# their float16 and float32 inputs unmatched.
DETECTION_OPS = (
    "_contrib_box_decode",            # SSD / Faster R-CNN: in no AMP list; anchors float32
    "_contrib_box_encode",            # training targets; in no AMP list
    "_contrib_box_nms",               # NMS on scores and coordinates (AMP: widest type)
    "_contrib_box_non_maximum_suppression",
    "_contrib_box_iou",
    "_contrib_bipartite_matching",
    "_contrib_MultiBoxPrior",         # anchors (AMP: float32 list)
    "_contrib_MultiBoxTarget",
    "_contrib_MultiBoxDetection",
    "_contrib_Proposal",              # Faster R-CNN region proposals
    "_contrib_MultiProposal",
    "ROIPooling",                     # ROI ops: box coordinates as inputs
    "_contrib_ROIAlign",
    "_contrib_RROIAlign",
    "_contrib_PSROIPooling",
    "_contrib_DeformablePSROIPooling",
)


class GraphTypeError(TypeError):
    """MXNet's type inference rejects a graph for the given input dtypes.

    Attributes
    ----------
    reason : str
        The informative last line of MXNet's message.
    """

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class GraphShapeError(ValueError):
    """MXNet's shape inference rejects a graph for the given input shapes.

    Attributes
    ----------
    error : mxnet.base.MXNetError
        MXNet's error, for callers that word their own message.
    """

    def __init__(self, error):
        super().__init__(one_line(error))
        self.error = error


class Graph:
    """A Symbol's graph, parsed once: its nodes, heads and inputs, and what is derived from them.

    The readers of each node, the dtypes and shapes MXNet infers (kept per set of known
    inputs) and the Symbol are computed when first asked for and kept. A caller that edits
    the nodes in place calls :meth:`changed` so that they are computed again.

    Parameters
    ----------
    data : dict or str or mxnet.symbol.Symbol
        The dict (not copied) or JSON text of ``sym.tojson(remove_amp_cast=False)``, or the
        Symbol itself.
    """

    def __init__(self, data):
        symbol = data if isinstance(data, mx.sym.Symbol) else None
        if symbol is not None:
            data = symbol.tojson(remove_amp_cast=False)
        self.json = json.loads(data) if isinstance(data, (str, bytes)) else data
        self.changed()
        self._symbol = symbol

    def changed(self):
        """Forget what was derived from the nodes (after editing them in place)."""
        self._readers = None
        self._consumers = None
        self._index = None
        self._symbol = None
        self._dtypes = {}

    @property
    def nodes(self):
        """list of dict: the nodes in order (``op``, ``name``, ``attrs``, ``inputs``)."""
        return self.json["nodes"]

    @property
    def heads(self):
        """list of list: the outputs, as entries ``[node, output, version]``."""
        return self.json["heads"]

    @property
    def arg_nodes(self):
        """list of int: the indices of the variable nodes."""
        return self.json["arg_nodes"]

    def index(self, name):
        """The index of the node called ``name`` (the last one, if several share it)."""
        if self._index is None:
            self._index = {node["name"]: i for i, node in enumerate(self.nodes)}
        return self._index[name]

    def readers(self, entry):
        """The nodes that read ``entry``, once per input that reads it, in graph order.

        Parameters
        ----------
        entry : (int, int)
            ``(node, output)``.

        Returns
        -------
        list of int
            A node that reads the entry twice is listed twice.
        """
        if self._readers is None:
            readers = {}
            for j, reader in enumerate(self.nodes):
                for src, out, _ in reader["inputs"]:
                    readers.setdefault((src, out), []).append(j)
            self._readers = readers
        return list(self._readers.get((entry[0], entry[1]), ()))

    def consumers(self, node):
        """The nodes that read any output of node ``node``, each once, in graph order.

        Parameters
        ----------
        node : int

        Returns
        -------
        list of int
        """
        if self._consumers is None:
            consumers = {}
            for j, reader in enumerate(self.nodes):
                for src, _, _ in reader["inputs"]:
                    consumers.setdefault(src, set()).add(j)
            self._consumers = {src: sorted(js) for src, js in consumers.items()}
        return list(self._consumers.get(node, ()))

    def consumed_entries(self):
        """Every entry read by a node or returned as a head, sorted (list of (int, int))."""
        return sorted({(src, out) for node in self.nodes for src, out, _ in node["inputs"]}
                      | {(src, out) for src, out, _ in self.heads})

    def with_heads(self, entries):
        """A Graph of the same nodes returning ``entries`` (``(node, output)`` pairs)."""
        return Graph(dict(self.json, heads=[[src, out, 0] for src, out in entries]))

    def entry_dtypes(self, entries, known):
        """:func:`entry_dtypes` of this graph, kept per ``entries`` and ``known``."""
        key = (tuple(entries), tuple(sorted((n, _np(t)) for n, t in known.items())))
        if key not in self._dtypes:
            self._dtypes[key] = entry_dtypes(self, entries, known)
        types, variables = self._dtypes[key]
        return dict(types), dict(variables)

    def infer_shapes(self, shapes, partial=False):
        """:func:`infer_shapes` of this graph's Symbol."""
        return infer_shapes(self.to_symbol(), shapes, partial=partial)

    def rebuild(self):
        """A :class:`Rebuild` that copies this graph into a new one."""
        return Rebuild(self)

    def to_symbol(self):
        """The graph as a Symbol (:func:`load_graph`), made once (the Symbol it was read from,
        if it was read from one and not changed since)."""
        if self._symbol is None:
            self._symbol = load_graph(self)
        return self._symbol


def as_graph(graph):
    """A :class:`Graph` from a Graph, a graph dict or a Symbol."""
    return graph if isinstance(graph, Graph) else Graph(graph)


def graph_json(sym):
    """The graph of a Symbol as a dict, every cast kept.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol

    Returns
    -------
    dict
    """
    return json.loads(sym.tojson(remove_amp_cast=False))


def load_graph(graph):
    """A Symbol from a graph (``node_row_ptr``, stale after a rewrite, dropped).

    Parameters
    ----------
    graph : Graph or dict

    Returns
    -------
    mxnet.symbol.Symbol
    """
    graph = graph.json if isinstance(graph, Graph) else graph
    return mx.sym.load_json(graph_text({k: v for k, v in graph.items() if k != "node_row_ptr"}))


def graph_text(graph):
    """A graph dict as JSON text that MXNet's reader reads back as it was.

    MXNet's reader knows no ``\\u`` escape ("unknown string escape \\u"): names in any
    script (``réseau_conv0``, ``网络_conv0``) are written as they are, never escaped.

    Parameters
    ----------
    graph : dict

    Returns
    -------
    str
    """
    return json.dumps(graph, ensure_ascii=False)


class Rebuild:
    """A graph copied into a new node list in one pass, every old entry mapped to a new one.

    The one rebuild of the package: the emulation's graph pass, its float32 carry and GPU
    rewrites, the conversion core's settling pass and the symbolic graph edits all walk the old
    nodes in order and say, for each, what goes into the new list:

    - :meth:`mapped`: a copy of an old node reading the new entries;
    - :meth:`add`: append new nodes (their inputs in new indices), e.g. casts;
    - :meth:`place`: the new node that holds an old node's outputs (a node not placed is
      dropped, and nothing may read it unless it is redirected);
    - :meth:`redirect`: readers of one old output read another new entry instead.

    :meth:`graph` then gives the new :class:`Graph`: heads and control dependencies mapped,
    ``arg_nodes`` recomputed, the stale ``node_row_ptr`` left out, other keys (``attrs``) kept.

    Parameters
    ----------
    graph : Graph or dict
        The old graph. It is not changed.
    """

    def __init__(self, graph):
        self.old = as_graph(graph)
        self.nodes = []
        self._index = {}
        self._where = {}

    @property
    def next_id(self):
        """The index the next added node gets."""
        return len(self.nodes)

    def entry(self, entry):
        """The new entry ``[node, output, version]`` that stands for an old one."""
        key = (entry[0], entry[1])
        src, out = self._where[key] if key in self._where else (self._index[key[0]], key[1])
        return [src, out, entry[2] if len(entry) > 2 else 0]

    def mapped(self, node):
        """A copy of old ``node`` whose inputs are the new entries."""
        return dict(node, inputs=[self.entry(e) for e in node["inputs"]])

    def add(self, *nodes):
        """Append nodes (inputs in new indices); the index of the last one."""
        self.nodes.extend(nodes)
        return len(self.nodes) - 1

    def place(self, old_id, new_id):
        """Old node ``old_id``'s outputs are new node ``new_id``'s, output for output."""
        self._index[old_id] = new_id

    def _node_for(self, old_id):
        """The new node that stands for old node ``old_id`` (None: dropped)."""
        if old_id in self._index:
            return self._index[old_id]
        where = self._where.get((old_id, 0))
        return None if where is None else where[0]

    def redirect(self, old_entry, new_entry):
        """Readers of old ``(node, output)`` read new ``(node, output)`` instead."""
        self._where[(old_entry[0], old_entry[1])] = (new_entry[0], new_entry[1])

    def graph(self, heads=None):
        """The new graph; ``heads`` (old entries) replaces the old graph's heads if given.

        A node's ``control_deps`` hold old node indices (copied with the old node) and are
        mapped to the new nodes that stand for them; a dependency on a dropped node is
        dropped.
        """
        for k, node in enumerate(self.nodes):
            if node.get("control_deps"):
                self.nodes[k] = dict(node, control_deps=[
                    new for new in (self._node_for(d) for d in node["control_deps"])
                    if new is not None])
        out = {k: v for k, v in self.old.json.items() if k != "node_row_ptr"}
        out.update(nodes=self.nodes,
                   arg_nodes=[j for j, node in enumerate(self.nodes) if node["op"] == "null"],
                   heads=[self.entry(e) for e in (self.old.heads if heads is None else heads)])
        out.setdefault("attrs", {})
        return Graph(out)


def inline_nodes(sub, inputs, first_id):
    """The nodes of Symbol ``sub``, to be placed in a graph from index ``first_id`` on.

    Parameters
    ----------
    sub : mxnet.symbol.Symbol
        A one-output graph built on placeholder variables.
    inputs : dict of str to list
        For each placeholder's name, the graph entry (``[node, output, ...]``) it stands for.
    first_id : int
        Index the first returned node will have.

    Returns
    -------
    list of dict
        The op nodes of ``sub`` in order, reading graph entries; the last gives its output.
        The casts that AMP's wrappers of ``mx.sym`` put into a subgraph built after
        ``amp.init`` are left out: the subgraph computes as it was written.
    """
    graph = Graph(sub.tojson(remove_amp_cast=True))
    outer = {j: inputs[n["name"]][:2] for j, n in enumerate(graph.nodes) if n["op"] == "null"}
    nodes, index = [], {}
    for j, node in enumerate(graph.nodes):
        if j in outer:
            continue
        node = dict(node, inputs=[list(outer[src]) + [0] if src in outer else [index[src], out, 0]
                                  for src, out, _ in node["inputs"]])
        index[j] = first_id + len(nodes)
        nodes.append(node)
    return nodes


def consumed_entries(graph):
    """Every entry read by a node or returned as a head, sorted (:meth:`Graph.consumed_entries`).

    Parameters
    ----------
    graph : Graph or dict

    Returns
    -------
    list of (int, int)
    """
    return as_graph(graph).consumed_entries()


def _np(dtype):
    return None if dtype is None else np.dtype(dtype)


def infer_types(sym, known):
    """``sym.infer_type_partial`` with NumPy dtypes and names, for the inputs the graph has.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    known : dict of str to dtype
        Input dtypes; names the graph does not have are ignored.

    Returns
    -------
    (dict, list, dict)
        Argument dtypes by name, output dtypes, auxiliary dtypes by name (None: unknown).

    Raises
    ------
    GraphTypeError
        When MXNet's type inference rejects the graph.
    """
    names = set(sym.list_inputs())
    try:
        arg_types, out_types, aux_types = _infer_type_partial(
            sym, {n: t for n, t in known.items() if n in names and t is not None})
    except mx.base.MXNetError as err:
        raise GraphTypeError(one_line(err)) from None
    return ({n: _np(t) for n, t in zip(sym.list_arguments(), arg_types)},
            [_np(t) for t in out_types],
            {n: _np(t) for n, t in zip(sym.list_auxiliary_states(), aux_types)})


def _infer_type_partial(sym, known):
    """``sym.infer_type_partial(**known)``, bfloat16 included: MXNet's own method looks dtypes
    up by their NumPy scalar type, which bfloat16 (a structured dtype) does not have, and so
    silently drops a bfloat16 input from what it knows. A dtype MXNet has no code for stays
    unknown, as there."""
    keys, codes = [], []
    for name, dtype in known.items():
        try:
            codes.append(int(dtype_code(dtype)))
        except (KeyError, TypeError):  # no MXNet dtype (int16): unknown, as MXNet's method has it
            continue
        keys.append(name)
    sizes = [mx.base.mx_uint() for _ in range(3)]
    data = [ctypes.POINTER(ctypes.c_int)() for _ in range(3)]
    complete = ctypes.c_int()
    mx.base.check_call(mx.base._LIB.MXSymbolInferTypePartial(
        sym.handle, mx.base.mx_uint(len(keys)), mx.base.c_str_array(keys),
        mx.base.c_array_buf(ctypes.c_int, array.array("i", codes)),
        ctypes.byref(sizes[0]), ctypes.byref(data[0]), ctypes.byref(sizes[1]),
        ctypes.byref(data[1]), ctypes.byref(sizes[2]), ctypes.byref(data[2]),
        ctypes.byref(complete)))
    return tuple([_DTYPE_MX_TO_NP[data[k][i]] for i in range(sizes[k].value)] for k in range(3))


def entry_dtypes(graph, entries, known):
    """Infer the dtype of graph entries with MXNet's own type inference.

    Parameters
    ----------
    graph : Graph or dict
    entries : list of (int, int)
        The entries to type, e.g. :func:`consumed_entries`.
    known : dict of str to dtype
        Input dtypes.

    Returns
    -------
    (dict, dict)
        Dtype of each entry (None: unknown) and the inferred dtype of each graph input.

    Raises
    ------
    GraphTypeError
        When MXNet's type inference rejects the graph.
    """
    probe = as_graph(graph).with_heads(entries)
    arg_types, out_types, aux_types = infer_types(probe.to_symbol(), known)
    variables = {n: t for n, t in list(arg_types.items()) + list(aux_types.items())
                 if t is not None}
    return dict(zip(entries, out_types)), variables


def infer_shapes(sym, shapes, partial=False):
    """``sym.infer_shape`` (or its partial form) with the arguments and aux states by name.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    shapes : dict of str to tuple
    partial : bool, default False

    Returns
    -------
    (dict, list, dict) or None
        Argument shapes by name, output shapes, auxiliary shapes by name; None when the
        shapes given are not enough (full inference only).

    Raises
    ------
    GraphShapeError
        When MXNet's shape inference rejects the shapes.
    """
    try:
        # MXNet prints the arguments to stdout before raising; the error says it all
        with contextlib.redirect_stdout(io.StringIO()):
            infer = sym.infer_shape_partial if partial else sym.infer_shape
            arg, out, aux = infer(**shapes)
    except mx.base.MXNetError as err:
        raise GraphShapeError(err) from None
    if arg is None:
        return None
    return (dict(zip(sym.list_arguments(), arg)), out,
            dict(zip(sym.list_auxiliary_states(), aux)))


def attr_float(value, default):
    """A float attribute as MXNet's parser reads it: ``'0.001f'`` is 0.001.

    Parameters
    ----------
    value : str or float or None
        The attribute's text (None: not given).
    default : float

    Returns
    -------
    float

    Raises
    ------
    ValueError
        When the text is no number (MXNet refuses it too, when it loads the graph).
    """
    if value is None:
        return float(default)
    text = str(value)
    try:
        return float(text)
    except ValueError:
        if text[-1:] not in ("f", "F"):
            raise
        return float(text[:-1])


def attr_ints(value):
    """A tuple attribute as MXNet's parser reads it: ``'(3L, 3L)'``, ``'[3,3]'``, ``'(3,)'``.

    Parameters
    ----------
    value : str or tuple or None
        The attribute's text (None: not given).

    Returns
    -------
    tuple of (int or None), or None
        None for ``'None'`` or an empty text; an element written ``None`` is None. A single
        number (``'3'``) is a tuple of one, as MXNet reads it.

    Raises
    ------
    ValueError
        When an element is no integer (MXNet refuses it too, when it loads the graph).
    """
    if value is None or isinstance(value, (tuple, list)):
        return None if value is None else tuple(value)
    text = str(value).strip()
    if text in ("", "None"):
        return None
    if text[:1] in "([" and text[-1:] in ")]":
        text = text[1:-1]
    items = [item.strip() for item in text.split(",")]
    if items and not items[-1]:
        items.pop()  # '(3,)'
    return tuple(None if item == "None" else int(item[:-1] if item[-1:] == "L" else item)
                 for item in items)


def var_dtype(node, default=FLOAT32):
    """The dtype a variable node declares with ``__dtype__``, or ``default``."""
    code = node.get("attrs", {}).get("__dtype__")
    if code is None or code == "-1":
        return default
    return np.dtype(_DTYPE_MX_TO_NP[int(code)])


def dtype_code(dtype):
    """MXNet's integer code of a dtype, as the string a ``__dtype__`` attribute holds."""
    dtype = np.dtype(dtype)
    return str(_DTYPE_NP_TO_MX[dtype] if dtype == BFLOAT16 else _DTYPE_NP_TO_MX[dtype.type])


def cast_node(name, dtype, entry):
    """An ``amp_cast`` node dict reading ``entry`` (``[node, output, ...]``)."""
    return {"op": "amp_cast", "name": name, "attrs": {"dtype": dtype_name(dtype)},
            "inputs": [[entry[0], entry[1], 0]]}


def pin_variable_dtypes(graph, variables, given=None):
    """Record each input's inferred dtype on its node, unless it declares one.

    Inference may derive a weight's dtype from the op that consumes it; once a cast sits in
    between, nothing could, so the dtype the original graph implied is written down.

    Parameters
    ----------
    graph : Graph or dict
        Changed in place.
    variables : dict of str to dtype
    given : dict of str to dtype, optional
        The dtypes of the arrays a run binds. They replace a declared ``__dtype__``, which can
        be stale: a ``SymbolBlock`` cast to float16 keeps its symbol's float32 declarations.
    """
    given = given or {}
    graph = as_graph(graph)
    for node in graph.nodes:
        if node["op"] == "null" and node["name"] in variables:
            attrs = node.setdefault("attrs", {})
            if node["name"] in given:
                attrs["__dtype__"] = dtype_code(given[node["name"]])
            else:
                attrs.setdefault("__dtype__", dtype_code(variables[node["name"]]))
    graph.changed()
