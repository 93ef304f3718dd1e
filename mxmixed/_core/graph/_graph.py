"""The :class:`Graph` (a graph parsed once, with what is derived from it), its Symbol and JSON
text, its rewriting (:class:`Rebuild`, :func:`inline_nodes`, :func:`pin_variable_dtypes`) and
the dtypes of its entries."""
import array
import json
import weakref

import mxnet as mx

from ._columns import Columns, columns_of_text, parsed_node
from ._inference import GraphSymbol, infer_shapes, infer_types, linked_symbol, np_dtype
from ._attributes import dtype_code
from ._nodes import Node, NodeList, Record, json_ready, plain

__all__ = ["Graph", "as_graph", "load_graph", "graph_text", "Rebuild", "inline_nodes",
           "entry_dtypes", "pin_variable_dtypes"]


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
            parsed = columns_of_text(data)
            if parsed is not None:
                self._init(*parsed, symbol)
                return
            data = json.loads(data, object_pairs_hook=parsed_node)
        cols = Columns()
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
        self._nodes = NodeList(cols)
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
                            ensure_ascii=False, default=plain)[1:-1]
                 for start in range(0, len(cols), step)]
        parts = ['{"nodes": [', ", ".join(nodes), "]"]
        for key, value in self._meta.items():
            parts += [", ", json.dumps(key, ensure_ascii=False), ": ",
                      json.dumps(value, ensure_ascii=False, default=plain)]
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
        cols = Columns()
        for i, node in enumerate(self._nodes):
            cols.add(json_ready(records[i]) if i in records else node)
        return Graph._of(cols.done(), dict(self._meta))

    def entry_dtypes(self, entries, known):
        """:func:`entry_dtypes` of this graph, kept per ``entries`` and ``known`` (one byte an
        entry: the dtypes of a long graph's entries as a dict are several times its file)."""
        entries = [(e[0], e[1]) for e in entries]
        flat = array.array("q")
        for entry in entries:
            flat.extend(entry)
        key = (flat.tobytes(), tuple(sorted((n, np_dtype(t)) for n, t in known.items())))
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
            linked = linked_symbol(self._symbol, self)
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
    return json.dumps(graph, ensure_ascii=False, default=plain)


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
        self.nodes.extend(json_ready(node) for node in nodes)
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
        node = Record(json_ready(dict(node, inputs=[
            list(outer[src]) + [0] if src in outer else [index[src], out, 0]
            for src, out, _ in node.inputs])))
        index[j] = first_id + len(nodes)
        nodes.append(node)
    return nodes




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
