"""The one graph-JSON and type-inference layer: Symbol <-> JSON dict, dtypes and shapes.

Everything that reads or rewrites a Symbol graph (the emulation's graph pass, the symbolic
conversion, the diagnostics) goes through these helpers, so a graph is parsed one way, turned
back into a Symbol one way (:func:`load_graph`), rewritten with one bookkeeping
(:class:`Rebuild`), and its dtypes and shapes are inferred one way. Domain-specific rewrites
(which nodes to insert, drop or replace) stay with their callers.

A graph travels as a :class:`Graph`: the dict of ``sym.tojson(remove_amp_cast=False)``
(``nodes``, each with ``op``, ``name``, ``attrs``, ``inputs`` as ``[node, output, version]``;
``arg_nodes``; ``heads``), parsed once into columns (a node's op, name, shared attributes and
inputs, in a few arrays: under its file's size, where the parsed records are several times
it), with what is derived from it (readers, dtypes, shapes, the Symbol) computed when first
asked for and kept compact. Its nodes are read-only :class:`Node` views (``node.op``,
``node.name``, ``node.attrs``, ``node.inputs``); a changed graph is a new Graph
(:class:`Rebuild`, :meth:`Graph.with_attrs`, :meth:`Graph.with_nodes`), so nothing derived
can go stale. This module is the only one that reads the JSON dict; the
others read nodes by the attributes of :class:`Node` (and of :class:`Record`, a node being
built, which they change as a dict), never as ``node["op"]``: a Node's mapping form is there to
copy it (``Record(node, inputs=...)``), and ``tests/project/test_node_reads.py`` refuses a
dict-form read outside this module. An *entry* is a ``(node, output)`` pair.

A Graph and its Symbol travel together: :meth:`Graph.to_symbol` gives a Symbol that knows its
Graph, and :func:`as_graph` of that Symbol gives the same Graph back without MXNet writing the
graph to JSON again. Dtypes are inferred on the Symbol's internal outputs, so asking for the
dtype of any entry reads no JSON either.
"""
import array
import contextlib
import ctypes
import io
import json
import sys
import weakref
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

import mxnet as mx
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _DTYPE_NP_TO_MX

from .dtypes import BFLOAT16, FLOAT32, dtype_name
from .errors import one_line

__all__ = ["Graph", "Node", "Record", "GraphTypeError", "GraphShapeError", "as_graph", "graph_text",
           "load_graph", "symbol_json",
           "Rebuild",
           "inline_nodes",
           "entry_dtypes", "infer_types", "infer_shapes", "var_dtype", "dtype_code",
           "attr_float", "attr_ints", "unused_name",
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


_EMPTY = MappingProxyType({})
_NODE_KEYS = frozenset(("op", "name", "attrs", "inputs"))
_INT = frozenset((int,))


class _Columns:
    """The nodes of a graph, a column per field: about an eighth of their parsed records.

    Per node: its op's name (shared by every node of the op), its name (all names in one
    string, each a slice of it, so that no small object per node outlives the parse), its
    attributes (one dict shared by every node with equal attributes in the same order; None:
    the record has no ``attrs``) and its inputs, three integers an entry in one array (node
    ``i``'s are ``entries[first[i]:first[i + 1]]``). A record of another form
    (``control_deps``, ``subgraphs``, an older format's keys, two-element entries) is kept
    whole in ``odd``. Never changed once built (:meth:`done`).
    """

    __slots__ = ("ops", "attrs", "first", "entries", "odd", "_names", "_blob", "_at", "_shared")

    def __init__(self):
        self.ops, self.attrs, self._names = [], [], []
        self._blob, self._at = None, None
        self.first = array.array("q", [0])
        self.entries = array.array("q")
        self.odd = {}
        self._shared = {}  # attributes by content while building

    def __len__(self):
        return len(self.first) - 1

    def name(self, i):
        """Node ``i``'s name."""
        raw = self.odd.get(i) if self.odd else None
        return self._blob[self._at[i]:self._at[i + 1]] if raw is None else raw["name"]

    def names(self):
        """Every node's name, in order (a new list)."""
        if self.odd:
            return [self.name(i) for i in range(len(self))]
        blob, at = self._blob, self._at
        return [blob[at[i]:at[i + 1]] for i in range(len(self))]

    def inputs(self, i):
        """Node ``i``'s entries, ``(node, output, version)`` tuples."""
        flat = self.entries[self.first[i]:self.first[i + 1]]
        return tuple(zip(flat[0::3], flat[1::3], flat[2::3]))

    def add(self, node):
        """Append ``node``: a :class:`Node`, a :class:`_Row` or a mapping (a record)."""
        if type(node) is Node and not node._cols.odd.get(node._i):
            cols, i = node._cols, node._i
            self._push(cols.ops[i], cols.name(i), cols.attrs[i],
                       cols.entries[cols.first[i]:cols.first[i + 1]])
        elif type(node) is _Row:
            self._push(node.op, node.name, self.shared(node.attrs), node.flat)
        else:
            row = _plain_row(node)
            if row is None:
                self._push_odd(node)
            else:
                self._push(row.op, row.name, self.shared(row.attrs), row.flat)

    def shared(self, attrs):
        """The dict of these attributes that equal nodes share (None stays None)."""
        if attrs is None:
            return None
        return self._shared.setdefault(tuple(attrs.items()), attrs)

    def _push(self, op, name, attrs, flat):
        self.ops.append(sys.intern(op))
        self._names.append(name)
        self.attrs.append(attrs)
        self.entries.extend(flat)
        self.first.append(len(self.entries))

    def _push_odd(self, record):
        raw = dict(record)
        if isinstance(raw.get("inputs"), (list, tuple)):
            raw["inputs"] = tuple(tuple(e) for e in raw["inputs"])
        if isinstance(raw.get("attrs"), Mapping) and not isinstance(raw["attrs"], dict):
            raw["attrs"] = dict(raw["attrs"])
        self.odd[len(self)] = raw
        op, name = raw.get("op"), raw.get("name")
        self.ops.append(sys.intern(op) if type(op) is str else op)
        self._names.append(name if type(name) is str else "")
        self.attrs.append(raw.get("attrs") if isinstance(raw.get("attrs"), dict) else None)
        self.first.append(len(self.entries))

    def done(self):
        """The columns, built: the names joined, the sharing table dropped."""
        self._at = array.array("q", [0])
        for name in self._names:
            self._at.append(self._at[-1] + len(name))
        self._blob, self._names, self._shared = "".join(self._names), None, None
        return self

    def records(self, start, stop):
        """Nodes ``start`` to ``stop`` as JSON-ready records (dicts; the shared attributes as
        they are, an entry as a list), to write them a slice at a time."""
        first, names = self.first, self.names() if self.odd else None
        flat = self.entries[first[start]:first[stop]].tolist()
        base, out = first[start], []
        for i in range(start, stop):
            raw = self.odd.get(i) if self.odd else None
            if raw is not None:
                out.append(raw)
                continue
            record = {"op": self.ops[i], "name": self._blob[self._at[i]:self._at[i + 1]]
                      if names is None else names[i]}
            if self.attrs[i] is not None:
                record["attrs"] = self.attrs[i]
            record["inputs"] = [flat[k - base:k - base + 3] for k in range(first[i], first[i + 1], 3)]
            out.append(record)
        return out


class _Row:
    """A node record in its plain form, as parsing makes it (before its columns)."""

    __slots__ = ("op", "name", "attrs", "flat")

    def __init__(self, op, name, attrs, flat):
        self.op, self.name, self.attrs, self.flat = op, name, attrs, flat


def _plain_row(record):
    """``record`` (a mapping) as a :class:`_Row`, or None where it is not of the plain form:
    ``op`` and ``name`` strings, ``attrs`` (optional) of strings, ``inputs`` of three integers
    an entry."""
    if not _NODE_KEYS.issuperset(record) or "inputs" not in record:
        return None
    op, name, inputs = record.get("op"), record.get("name"), record["inputs"]
    attrs = record.get("attrs")
    if type(op) is not str or type(name) is not str or not isinstance(inputs, (list, tuple)):
        return None
    if attrs is not None:
        if not isinstance(attrs, Mapping) or not all(
                type(k) is str and type(v) is str for k, v in attrs.items()):
            return None
        attrs = dict(attrs)
    elif "attrs" in record:
        return None
    flat = []
    for entry in inputs:
        if type(entry) not in (list, tuple) or len(entry) != 3:
            return None
        flat += entry
    if not _INT.issuperset(map(type, flat)):
        return None
    return _Row(op, name, attrs, flat)


def _parsed_node(pairs):
    """An ``object_pairs_hook``: a node in the plain form as a :class:`_Row` (no dict of its
    own while the graph is parsed), any other object as a dict."""
    record = dict(pairs)
    if "subgraphs" in record:
        record["subgraphs"] = _dicts(record["subgraphs"])
    if "inputs" in record and "op" in record:
        row = _plain_row(record)
        if row is not None:
            return row
    return record


def _columns_of_text(text):
    """The columns of a graph's JSON text and its other keys, each node put into the columns as
    it is parsed (no record per node outlives its parse); None where a node is of another form
    (control dependencies, subgraphs: the caller parses the text whole)."""
    cols, odd = _Columns(), []

    def hook(pairs):
        record = dict(pairs)
        if "inputs" in record and "op" in record:
            row = _plain_row(record)
            if row is None:
                odd.append(record)
                return record
            cols.add(row)
            return None
        return record

    data = json.loads(text, object_pairs_hook=hook)
    if odd or not isinstance(data, dict) or not isinstance(data.get("nodes"), list) \
            or len(data["nodes"]) != len(cols) or any(n is not None for n in data["nodes"]):
        return None
    return cols.done(), {k: v for k, v in data.items() if k not in ("nodes", "node_row_ptr")}


def _dicts(value):
    """``value`` with every :class:`_Row` in it back as a dict (a subgraph's nodes)."""
    if type(value) is _Row:
        return _row_dict(value)
    if isinstance(value, list):
        return [_dicts(v) for v in value]
    if isinstance(value, dict):
        return {k: _dicts(v) for k, v in value.items()}
    return value


def _row_dict(row):
    record = {"op": row.op, "name": row.name}
    if row.attrs is not None:
        record["attrs"] = row.attrs
    record["inputs"] = [list(row.flat[k:k + 3]) for k in range(0, len(row.flat), 3)]
    return record


class Node(Mapping):
    """One node of a :class:`Graph`, read-only: ``op``, ``name``, ``attrs``, ``inputs``.

    Also a read-only mapping of its record, to copy it (``Record(node, inputs=...)`` for a
    changed copy to hand to :class:`Rebuild`); other modules read it only by the attributes
    (``tests/project/test_node_reads.py``). ``inputs`` holds ``(node, output, version)``
    tuples; ``attrs`` is a read-only mapping (empty when the node has none).

    A Node is a view of its graph's columns (made when asked for, a few dozen bytes): the
    graph keeps no record per node.
    """

    __slots__ = ("_cols", "_i")

    def __init__(self, cols, i):
        self._cols = cols
        self._i = i

    @classmethod
    def of(cls, record):
        """A Node of one record (a mapping), on columns of its own."""
        cols = _Columns()
        cols.add(record)
        return cls(cols.done(), 0)

    def _odd(self):
        return self._cols.odd.get(self._i) if self._cols.odd else None

    @property
    def op(self):
        """str: the operator, ``'null'`` for a variable."""
        raw = self._odd()
        return self._cols.ops[self._i] if raw is None else raw["op"]

    @property
    def name(self):
        """str"""
        raw = self._odd()
        return self._cols.name(self._i) if raw is None else raw["name"]

    @property
    def attrs(self):
        """Mapping of str to str: the attributes (read-only)."""
        raw = self._odd()
        attrs = self._cols.attrs[self._i] if raw is None else raw.get("attrs")
        return _EMPTY if attrs is None else MappingProxyType(attrs)

    @property
    def inputs(self):
        """tuple of (int, int, int): the entries read, ``(node, output, version)``."""
        raw = self._odd()
        return self._cols.inputs(self._i) if raw is None else raw["inputs"]

    @property
    def is_variable(self):
        """bool: a graph input (``op == 'null'``)."""
        return self.op == "null"

    def _keys(self):
        raw = self._odd()
        if raw is not None:
            return list(raw)
        if self._cols.attrs[self._i] is None:
            return ["op", "name", "inputs"]
        return ["op", "name", "attrs", "inputs"]

    def __getitem__(self, key):
        raw = self._odd()
        if key == "attrs":
            if (raw is None and self._cols.attrs[self._i] is None) or \
                    (raw is not None and "attrs" not in raw):
                raise KeyError(key)
            return self.attrs
        if raw is not None:
            return raw[key]
        if key in ("op", "name", "inputs"):
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self):
        return len(self._keys())

    def __repr__(self):
        return "Node(%r)" % ({k: dict(v) if k == "attrs" else v for k, v in self.items()},)


class _NodeList(Sequence):
    """A graph's nodes in order, each a :class:`Node` made when read."""

    __slots__ = ("_cols",)

    def __init__(self, cols):
        self._cols = cols

    def __len__(self):
        return len(self._cols)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [Node(self._cols, j) for j in range(len(self._cols))[i]]
        n = len(self._cols)
        if not -n <= i < n:
            raise IndexError("node index out of range")
        return Node(self._cols, i % n)

    def __iter__(self):
        cols = self._cols
        return (Node(cols, i) for i in range(len(cols)))

    def __eq__(self, other):
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None


class Record(dict):
    """A node being built for a :class:`Rebuild` (a dict, changed as such), read as a
    :class:`Node` is: ``op``, ``name``, ``attrs``, ``inputs``."""

    op = property(lambda self: self["op"], doc="str")
    name = property(lambda self: self["name"], doc="str")
    attrs = property(lambda self: self.get("attrs") or {}, doc="dict of str to str")
    inputs = property(lambda self: self["inputs"], doc="list of entries")
    is_variable = property(lambda self: self["op"] == "null", doc="bool")


def _record(node):
    """A node record for a graph: a :class:`Node` as it is, or a dict made JSON-ready (a
    read-only mapping, such as a Node's ``attrs``, copied into a dict)."""
    if isinstance(node, Node):
        return node
    if any(isinstance(v, Mapping) and not isinstance(v, dict) for v in node.values()):
        node = {k: dict(v) if isinstance(v, Mapping) and not isinstance(v, dict) else v
                for k, v in node.items()}
    return node


class GraphSymbol(mx.sym.Symbol):
    """A Symbol made from a :class:`Graph`, which :func:`as_graph` gives back unparsed.

    It holds its Graph; the Graph holds it weakly, so that the two are freed as soon as the
    Symbol is unused, not at the next collection of reference cycles (a long graph's records
    are many times its file).
    """

    __slots__ = ("_graph", "__weakref__")

    def __repr__(self):
        return super().__repr__().replace("<GraphSymbol", "<Symbol", 1)


def _linked(handle_of, graph):
    """A :class:`GraphSymbol` on a new handle to the Symbol ``handle_of`` (no JSON)."""
    handle = mx.base.SymbolHandle()
    mx.base.check_call(mx.base._LIB.MXShallowCopySymbol(handle_of.handle, ctypes.byref(handle)))
    sym = GraphSymbol(handle)
    sym._graph = graph
    return sym


class Graph:
    """A Symbol's graph, parsed once: its nodes, heads and inputs, and what is derived from them.

    The readers of each node, the dtypes MXNet infers (kept per set of known inputs) and the
    Symbol are computed when first asked for and kept. The nodes are read-only
    (:class:`Node`): a changed graph is a new one. They are kept column by column, not as the
    parsed records (a long graph's records are several times its file); the stale
    ``node_row_ptr`` is not kept.

    Parameters
    ----------
    data : dict or str or mxnet.symbol.Symbol
        The dict (not changed; its records are copied into columns) or JSON text of
        ``sym.tojson(remove_amp_cast=False)``, or the Symbol itself (:func:`as_graph` gives a
        Symbol's Graph without parsing it again where it has one).
    """

    def __init__(self, data):
        symbol = data if isinstance(data, mx.sym.Symbol) else None
        if symbol is not None:
            data = symbol.tojson(remove_amp_cast=False)
        if isinstance(data, (str, bytes)):
            parsed = _columns_of_text(data)
            if parsed is not None:
                self._init(*parsed, symbol)
                return
            data = json.loads(data, object_pairs_hook=_parsed_node)
        cols = _Columns()
        for node in data["nodes"]:
            cols.add(node)
        self._init(cols.done(), {k: v for k, v in data.items()
                                 if k not in ("nodes", "node_row_ptr")}, symbol)

    @classmethod
    def _of(cls, cols, meta):
        graph = cls.__new__(cls)
        graph._init(cols, meta, None)
        return graph

    def _init(self, cols, meta, symbol):
        self._cols = cols
        self._meta = meta  # heads, arg_nodes, attrs (every key but the nodes)
        self._nodes = _NodeList(cols)
        self._readers = None
        self._consumers = None
        self._index = None
        self._consumed = None
        self._dtypes = {}
        self._symbol = symbol  # MXNet's graph, unlinked
        self._symbol_ref = None  # a weak reference to the GraphSymbol handed out
        self._typing = None
        # the graph whose Symbol's internal outputs type this one (None: this one; never
        # itself, which would keep every Graph alive until the next collection of cycles)
        self._base = None
        self.passes = set()  # graph passes that leave this graph as it is (emulation)

    @property
    def nodes(self):
        """Sequence of Node: the nodes in order."""
        return self._nodes

    @property
    def json(self):
        """dict: the graph as its JSON's dict (a new one each time, records and all)."""
        nodes = [{k: dict(v) if k == "attrs" else v for k, v in node.items()}
                 for node in self._nodes]
        return dict(self._meta, nodes=nodes)

    @property
    def heads(self):
        """list of list: the outputs, as entries ``[node, output, version]`` (a copy)."""
        return [list(head) for head in self._meta["heads"]]

    @property
    def arg_nodes(self):
        """list of int: the indices of the variable nodes (a copy)."""
        return list(self._meta["arg_nodes"])

    def text(self):
        """The graph as JSON text that MXNet's reader reads back as it was (see
        :func:`graph_text`), written from the columns a slice of nodes at a time (never a
        record per node for the whole graph)."""
        cols, step = self._cols, 4096
        nodes = [json.dumps(cols.records(start, min(start + step, len(cols))),
                            ensure_ascii=False, default=_plain)[1:-1]
                 for start in range(0, len(cols), step)]
        parts = ['{"nodes": [', ", ".join(nodes), "]"]
        for key, value in self._meta.items():
            parts += [", ", json.dumps(key, ensure_ascii=False), ": ",
                      json.dumps(value, ensure_ascii=False, default=_plain)]
        parts.append("}")
        return "".join(parts)

    def index(self, name):
        """The index of the node called ``name`` (the last one, if several share it)."""
        if self._index is None:
            self._index = {name: i for i, name in enumerate(self._cols.names())}
        return self._index[name]

    def _all_inputs(self):
        """``(reader, src, out)`` for every input of every node, in graph order."""
        cols = self._cols
        if not cols.odd:
            first, flat = cols.first, cols.entries
            for j in range(len(cols)):
                for k in range(first[j], first[j + 1], 3):
                    yield j, flat[k], flat[k + 1]
            return
        for j, reader in enumerate(self._nodes):
            for src, out, _ in reader.inputs:
                yield j, src, out

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
            for j, src, out in self._all_inputs():
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
            for j, src, _ in self._all_inputs():
                consumers.setdefault(src, set()).add(j)
            self._consumers = {src: sorted(js) for src, js in consumers.items()}
        return list(self._consumers.get(node, ()))

    def consumed_entries(self):
        """Every entry read by a node or returned as a head, sorted (list of (int, int))."""
        if self._consumed is None:
            flat = array.array("q")
            for entry in sorted({(src, out) for _, src, out in self._all_inputs()}
                                | {(src, out) for src, out, _ in self._meta["heads"]}):
                flat.extend(entry)
            self._consumed = flat
        return list(zip(self._consumed[0::2], self._consumed[1::2]))

    def with_heads(self, entries):
        """A Graph of the same nodes returning ``entries`` (``(node, output)`` pairs); its
        Symbol is made of this graph's Symbol, not from JSON."""
        graph = Graph._of(self._cols, dict(self._meta, heads=[[src, out, 0]
                                                              for src, out in entries]))
        graph._base = self._typed_by()
        return graph

    def with_attrs(self, changes):
        """A new Graph with some nodes' attributes changed.

        Parameters
        ----------
        changes : dict of int to dict
            For each node index, the attributes to set; a value of None removes the attribute.

        Returns
        -------
        Graph
            This graph when ``changes`` changes nothing.
        """
        records = {}
        for i, attrs in changes.items():
            node = self._nodes[i]
            old = dict(node["attrs"]) if "attrs" in node else {}
            new = dict(old)
            for key, value in attrs.items():
                if value is None:
                    new.pop(key, None)
                else:
                    new[key] = value
            if new != old:
                records[i] = dict(node, attrs=new)
        return self.with_nodes(records) if records else self

    def with_nodes(self, records):
        """A new Graph with the nodes at some indices replaced (``{index: record}``, a dict
        with ``op``, ``name``, ``attrs``, ``inputs`` in this graph's indices)."""
        cols = _Columns()
        for i, node in enumerate(self._nodes):
            cols.add(_record(records[i]) if i in records else node)
        return Graph._of(cols.done(), dict(self._meta))

    def entry_dtypes(self, entries, known):
        """:func:`entry_dtypes` of this graph, kept per ``entries`` and ``known`` (one byte an
        entry: the dtypes of a long graph's entries as a dict are several times its file)."""
        entries = [(e[0], e[1]) for e in entries]
        flat = array.array("q")
        for entry in entries:
            flat.extend(entry)
        key = (flat.tobytes(), tuple(sorted((n, _np(t)) for n, t in known.items())))
        if key not in self._dtypes:
            types, variables = self._infer_entries(entries, known)
            kinds = list(dict.fromkeys(types))
            code = {t: k for k, t in enumerate(kinds)}
            self._dtypes[key] = kinds, array.array("B", [code[t] for t in types]), variables
        kinds, codes, variables = self._dtypes[key]
        return dict(zip(entries, [kinds[c] for c in codes])), dict(variables)

    def _infer_entries(self, entries, known):
        """The dtypes of ``entries`` (``(node, output)`` pairs), in order, and of the inputs."""
        typing = self._typed_by()._internal_outputs()
        where = None if typing is None else [typing[1].get(e) for e in entries]
        if where is None or None in where:
            probe = Graph._of(self._cols, dict(self._meta, heads=[[src, out, 0]
                                                                 for src, out in entries]))
            arg_types, out_types, aux_types = infer_types(probe.to_symbol(), known)
            types = list(out_types)
        else:
            arg_types, out_types, aux_types = infer_types(typing[0], known)
            types = [out_types[k] for k in where]
        variables = {n: t for n, t in list(arg_types.items()) + list(aux_types.items())
                     if t is not None}
        return types, variables

    def _typed_by(self):
        """The graph whose Symbol's internal outputs type this one."""
        return self if self._base is None else self._base

    def _internal_outputs(self):
        """``(internals, where)`` of this graph's Symbol (:class:`_Positions`), or None where
        node names repeat (an internal output is known by its node's name) or a node's outputs
        are not listed together."""
        if self._typing is None:
            names = self._cols.names()
            self._typing = (None,)
            if len(set(names)) == len(names):
                internals = self.to_symbol().get_internals()
                index = {name: i for i, name in enumerate(names)}
                where = _Positions(len(names))
                for k in range(len(internals.list_outputs())):
                    node = index.get(internals[k].name)
                    if node is None or not where.append(node, k):
                        return None
                self._typing = (internals, where)
        return None if self._typing[0] is None else self._typing

    def infer_shapes(self, shapes, partial=False):
        """:func:`infer_shapes` of this graph's Symbol."""
        return infer_shapes(self.to_symbol(), shapes, partial=partial)

    def rebuild(self):
        """A :class:`Rebuild` that copies this graph into a new one."""
        return Rebuild(self)

    def to_symbol(self):
        """The graph as a Symbol that knows this Graph (:func:`as_graph`), the same one while
        it is in use; MXNet's graph is made once: from the Symbol it was read from, if any (no
        JSON), else with :func:`load_graph`."""
        linked = None if self._symbol_ref is None else self._symbol_ref()
        if linked is None:
            if self._symbol is None and self._base is not None:
                self._symbol = self._from_base()
            if self._symbol is None:
                self._symbol = load_graph(self)
            linked = _linked(self._symbol, self)
            self._symbol_ref = weakref.ref(linked)
        return linked

    def _from_base(self):
        """This graph's Symbol made of its base's internal outputs, or None (no JSON)."""
        typing = self._base._internal_outputs()
        heads = [(src, out) for src, out, _ in self._meta["heads"]]
        where = None if typing is None else [typing[1].get(head) for head in heads]
        if where is None or None in where:
            return None
        outputs = [typing[0][k] for k in where]
        return outputs[0] if len(outputs) == 1 else mx.sym.Group(outputs)


class _Positions:
    """Where each entry ``(node, output)`` of a graph sits among its Symbol's internal outputs,
    which MXNet lists node by node, outputs in order: per node, the position of its output 0
    and its number of outputs (two machine integers a node, not a dict entry an output)."""

    __slots__ = ("first", "count")

    def __init__(self, size):
        self.first = array.array("q", [0]) * size
        self.count = array.array("q", [0]) * size

    def append(self, node, k):
        """Internal output ``k`` is the next output of ``node``; False where it does not follow
        the node's earlier outputs."""
        if self.count[node] == 0:
            self.first[node] = k
        elif self.first[node] + self.count[node] != k:
            return False
        self.count[node] += 1
        return True

    def get(self, entry):
        """The position of ``entry`` (``(node, output, ...)``), or None where it has none."""
        node, out = entry[0], entry[1]
        if 0 <= node < len(self.count) and 0 <= out < self.count[node]:
            return self.first[node] + out
        return None


def as_graph(graph):
    """The :class:`Graph` of a Graph, a graph dict or a Symbol: a Symbol made by
    :meth:`Graph.to_symbol` gives its Graph back; another Symbol is written to JSON once."""
    if isinstance(graph, Graph):
        return graph
    if isinstance(graph, GraphSymbol) and getattr(graph, "_graph", None) is not None:
        return graph._graph
    return Graph(graph)


def load_graph(graph):
    """A Symbol from a graph (``node_row_ptr``, stale after a rewrite, dropped).

    Parameters
    ----------
    graph : Graph or dict

    Returns
    -------
    mxnet.symbol.Symbol
    """
    if isinstance(graph, Graph):
        return mx.sym.load_json(graph.text())
    return mx.sym.load_json(graph_text({k: v for k, v in graph.items() if k != "node_row_ptr"}))


def symbol_json(sym):
    """``sym.tojson(remove_amp_cast=False)`` as MXNet writes it, in bytes (UTF-8): the text
    written to a file without a decoded copy of a long graph's JSON beside MXNet's.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol

    Returns
    -------
    bytes
    """
    text = ctypes.c_char_p()
    mx.base.check_call(mx.base._LIB.MXSymbolSaveToJSON(sym.handle, ctypes.byref(text)))
    return text.value


def _plain(value):
    """A read-only mapping (a :class:`Node`, its ``attrs``) as JSON sees it: a dict."""
    if isinstance(value, Node):
        return {k: dict(v) if k == "attrs" else v for k, v in value.items()}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError("%s is not JSON serializable" % type(value).__name__)


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
    return json.dumps(graph, ensure_ascii=False, default=_plain)


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
        """A copy of old ``node`` (a :class:`Node` or dict) whose inputs are the new entries:
        a :class:`Record`, with the attributes copied, to change before :meth:`add`."""
        record = Record(node, inputs=[self.entry(e) for e in node["inputs"]])
        if "attrs" in record:
            record["attrs"] = dict(record["attrs"])
        return record

    def node(self, new_id):
        """New node ``new_id``, added so far, as a :class:`Node`."""
        return Node.of(self.nodes[new_id])

    def add(self, *nodes):
        """Append nodes (inputs in new indices); the index of the last one."""
        self.nodes.extend(_record(node) for node in nodes)
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
        out = dict(self.old._meta)
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
    list of Record
        The op nodes of ``sub`` in order, reading graph entries; the last gives its output.
        The casts that AMP's wrappers of ``mx.sym`` put into a subgraph built after
        ``amp.init`` are left out: the subgraph computes as it was written.
    """
    graph = Graph(sub.tojson(remove_amp_cast=True))
    outer = {j: inputs[n.name][:2] for j, n in enumerate(graph.nodes) if n.is_variable}
    nodes, index = [], {}
    for j, node in enumerate(graph.nodes):
        if j in outer:
            continue
        node = Record(_record(dict(node, inputs=[
            list(outer[src]) + [0] if src in outer else [index[src], out, 0]
            for src, out, _ in node.inputs])))
        index[j] = first_id + len(nodes)
        nodes.append(node)
    return nodes


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
        The entries to type, e.g. :meth:`Graph.consumed_entries`.
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
    return as_graph(graph).entry_dtypes(entries, known)


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


def unused_name(base, taken):
    """``base``, or ``base`` with the first number that makes it a name not in ``taken``.

    Parameters
    ----------
    base : str
    taken : container of str

    Returns
    -------
    str
    """
    name, k = base, 0
    while name in taken:
        k += 1
        name = "%s%d" % (base, k)
    return name


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
    code = node.get("attrs", {}).get("__dtype__")  # a Node or a record being built
    if code is None or code == "-1":
        return default
    return np.dtype(_DTYPE_MX_TO_NP[int(code)])


def dtype_code(dtype):
    """MXNet's integer code of a dtype, as the string a ``__dtype__`` attribute holds."""
    dtype = np.dtype(dtype)
    return str(_DTYPE_NP_TO_MX[dtype] if dtype == BFLOAT16 else _DTYPE_NP_TO_MX[dtype.type])


def cast_node(name, dtype, entry):
    """An ``amp_cast`` node dict reading ``entry`` (``[node, output, ...]``)."""
    return Record(op="amp_cast", name=name, attrs={"dtype": dtype_name(dtype)},
                  inputs=[[entry[0], entry[1], 0]])


def pin_variable_dtypes(graph, variables, given=None):
    """Record each input's inferred dtype on its node, unless it declares one.

    Inference may derive a weight's dtype from the op that consumes it; once a cast sits in
    between, nothing could, so the dtype the original graph implied is written down.

    Parameters
    ----------
    graph : Graph or dict
    variables : dict of str to dtype
    given : dict of str to dtype, optional
        The dtypes of the arrays a run binds. They replace a declared ``__dtype__``, which can
        be stale: a ``SymbolBlock`` cast to float16 keeps its symbol's float32 declarations.

    Returns
    -------
    Graph
        A new graph (the same one when nothing changes).
    """
    given = given or {}
    graph = as_graph(graph)
    changes = {}
    for i, node in enumerate(graph.nodes):
        if node.is_variable and node.name in variables:
            if node.name in given:
                changes[i] = {"__dtype__": dtype_code(given[node.name])}
            elif "__dtype__" not in node.attrs:
                changes[i] = {"__dtype__": dtype_code(variables[node.name])}
    return graph.with_attrs(changes)
