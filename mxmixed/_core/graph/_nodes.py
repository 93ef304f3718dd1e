"""A graph's nodes as the other modules read them: read-only :class:`Node` views of the columns,
:class:`Record` for a node being built, and the cast node the passes insert."""
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ..dtypes import dtype_name
from ._columns import Columns, ColumnView

__all__ = ["Node", "NodeList", "Record", "json_ready", "plain", "cast_node"]

_EMPTY = MappingProxyType({})


class Node(ColumnView, Mapping):
    """One node of a :class:`~.Graph`, read-only: ``op``, ``name``, ``attrs``, ``inputs``.

    Also a read-only mapping of its record, to copy it (``Record(node, inputs=...)`` for a
    changed copy to hand to :class:`~.Rebuild`); other modules read it only by the attributes
    (``tests/project/test_node_reads.py``). ``inputs`` holds ``(node, output, version)``
    tuples; ``attrs`` is a read-only mapping (empty when the node has none).

    A Node is a view of its graph's columns (made when asked for, a few dozen bytes): the
    graph keeps no record per node.
    """

    __slots__ = ()

    @classmethod
    def of(cls, record):
        """A Node of one record (a mapping), on columns of its own."""
        cols = Columns()
        cols.add(record)
        return cls(cols.done(), 0)

    @property
    def op(self):
        """str: the operator, ``'null'`` for a variable."""
        return self._cols.op(self._i)

    @property
    def name(self):
        """str"""
        return self._cols.name(self._i)

    @property
    def attrs(self):
        """Mapping of str to str: the attributes (read-only)."""
        attrs = self._cols.node_attrs(self._i)
        return _EMPTY if attrs is None else MappingProxyType(attrs)

    @property
    def inputs(self):
        """tuple of (int, int, int): the entries read, ``(node, output, version)``."""
        return self._cols.inputs(self._i)

    @property
    def is_variable(self):
        """bool: a graph input (``op == 'null'``)."""
        return self.op == "null"

    def __getitem__(self, key):
        cols, i = self._cols, self._i
        if key == "attrs":
            if not cols.has_attrs(i):
                raise KeyError(key)
            return self.attrs
        raw = cols.raw(i)
        if raw is not None:
            return raw[key]
        if key in ("op", "name", "inputs"):
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self):
        return iter(self._cols.keys(self._i))

    def __len__(self):
        return len(self._cols.keys(self._i))

    def __repr__(self):
        return "Node(%r)" % ({k: dict(v) if k == "attrs" else v for k, v in self.items()},)


class NodeList(Sequence):
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
    """A node being built for a :class:`~.Rebuild` (a dict, changed as such), read as a
    :class:`Node` is: ``op``, ``name``, ``attrs``, ``inputs``."""

    op = property(lambda self: self["op"], doc="str")
    name = property(lambda self: self["name"], doc="str")
    attrs = property(lambda self: self.get("attrs") or {}, doc="dict of str to str")
    inputs = property(lambda self: self["inputs"], doc="list of entries")
    is_variable = property(lambda self: self["op"] == "null", doc="bool")


def json_ready(node):
    """A node record for a graph: a :class:`Node` as it is, or a dict made JSON-ready (a
    read-only mapping, such as a Node's ``attrs``, copied into a dict)."""
    if isinstance(node, Node):
        return node
    if any(isinstance(v, Mapping) and not isinstance(v, dict) for v in node.values()):
        node = {k: dict(v) if isinstance(v, Mapping) and not isinstance(v, dict) else v
                for k, v in node.items()}
    return node


def plain(value):
    """A read-only mapping (a :class:`Node`, its ``attrs``) as JSON sees it: a dict."""
    if isinstance(value, Node):
        return {k: dict(v) if k == "attrs" else v for k, v in value.items()}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError("%s is not JSON serializable" % type(value).__name__)


def cast_node(name, dtype, entry):
    """An ``amp_cast`` node dict reading ``entry`` (``[node, output, ...]``)."""
    return Record(op="amp_cast", name=name, attrs={"dtype": dtype_name(dtype)},
                  inputs=[[entry[0], entry[1], 0]])

