"""A graph's nodes stored column by column: the private storage under :class:`~.Graph`.

A graph's parsed records (a dict, three lists and their small objects per node) are several
times its file; here a node's op, name, attributes and inputs sit in a few arrays instead, under
the file's size. Parsing feeds them a node at a time (:func:`columns_of_text`: no record per node
outlives its parse). A record of another form (``control_deps``, ``subgraphs``, an older format's
keys, two-element entries) is kept whole, and the accessors of :class:`Columns` answer for both
forms, so that the views over them (:class:`~._nodes.Node`) read one way.
"""
import array
import json
import sys
from collections.abc import Mapping

__all__ = ["Columns", "ColumnView", "Row", "columns_of_text", "parsed_node"]

_NODE_KEYS = frozenset(("op", "name", "attrs", "inputs"))
_INT = frozenset((int,))


class ColumnView:
    """A view of one node of a :class:`Columns` (node ``_i`` of ``_cols``); the public one is
    :class:`~._nodes.Node`. :meth:`Columns.add` copies a view's node column to column."""

    __slots__ = ("_cols", "_i")

    def __init__(self, cols, i):
        self._cols = cols
        self._i = i


class Columns:
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

    def raw(self, i):
        """Node ``i``'s record where it is of another form (kept whole), else None."""
        return self.odd.get(i) if self.odd else None

    def op(self, i):
        """Node ``i``'s op."""
        raw = self.raw(i)
        return self.ops[i] if raw is None else raw["op"]

    def name(self, i):
        """Node ``i``'s name."""
        raw = self.raw(i)
        return self._blob[self._at[i]:self._at[i + 1]] if raw is None else raw["name"]

    def node_attrs(self, i):
        """Node ``i``'s attributes, a dict (None: its record has no ``attrs``)."""
        raw = self.raw(i)
        return self.attrs[i] if raw is None else raw.get("attrs")

    def has_attrs(self, i):
        """Whether node ``i``'s record has ``attrs``."""
        raw = self.raw(i)
        return self.attrs[i] is not None if raw is None else "attrs" in raw

    def keys(self, i):
        """The keys of node ``i``'s record, in order."""
        raw = self.raw(i)
        if raw is not None:
            return list(raw)
        return ["op", "name", "inputs"] if self.attrs[i] is None else ["op", "name", "attrs", "inputs"]

    def names(self):
        """Every node's name, in order (a new list)."""
        if self.odd:
            return [self.name(i) for i in range(len(self))]
        blob, at = self._blob, self._at
        return [blob[at[i]:at[i + 1]] for i in range(len(self))]

    def inputs(self, i):
        """Node ``i``'s entries, ``(node, output, version)`` tuples (a record of another form:
        as it has them)."""
        raw = self.raw(i)
        if raw is not None:
            return raw["inputs"]
        flat = self.entries[self.first[i]:self.first[i + 1]]
        return tuple(zip(flat[0::3], flat[1::3], flat[2::3]))

    def add(self, node):
        """Append ``node``: a :class:`ColumnView` (a Node), a :class:`Row` or a mapping (a
        record)."""
        if isinstance(node, ColumnView) and not node._cols.odd.get(node._i):
            cols, i = node._cols, node._i
            self._push(cols.ops[i], cols.name(i), cols.attrs[i],
                       cols.entries[cols.first[i]:cols.first[i + 1]])
        elif type(node) is Row:
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


class Row:
    """A node record in its plain form, as parsing makes it (before its columns)."""

    __slots__ = ("op", "name", "attrs", "flat")

    def __init__(self, op, name, attrs, flat):
        self.op, self.name, self.attrs, self.flat = op, name, attrs, flat


def _plain_row(record):
    """``record`` (a mapping) as a :class:`Row`, or None where it is not of the plain form:
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
    return Row(op, name, attrs, flat)


def parsed_node(pairs):
    """An ``object_pairs_hook``: a node in the plain form as a :class:`Row` (no dict of its
    own while the graph is parsed), any other object as a dict."""
    record = dict(pairs)
    if "subgraphs" in record:
        record["subgraphs"] = _dicts(record["subgraphs"])
    if "inputs" in record and "op" in record:
        row = _plain_row(record)
        if row is not None:
            return row
    return record


def columns_of_text(text):
    """The columns of a graph's JSON text and its other keys, each node put into the columns as
    it is parsed (no record per node outlives its parse); None where a node is of another form
    (control dependencies, subgraphs: the caller parses the text whole)."""
    cols, odd = Columns(), []

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
    """``value`` with every :class:`Row` in it back as a dict (a subgraph's nodes)."""
    if type(value) is Row:
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

