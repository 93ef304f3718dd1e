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
can go stale. This package is the only one that reads the JSON dict; the
others read nodes by the attributes of :class:`Node` (and of :class:`Record`, a node being
built, which they change as a dict), never as ``node["op"]``: a Node's mapping form is there to
copy it (``Record(node, inputs=...)``), and ``tests/project/test_node_reads.py`` refuses a
dict-form read outside this module. An *entry* is a ``(node, output)`` pair.

A Graph and its Symbol travel together: :meth:`Graph.to_symbol` gives a Symbol that knows its
Graph, and :func:`as_graph` of that Symbol gives the same Graph back without MXNet writing the
graph to JSON again. Dtypes are inferred on the Symbol's internal outputs, so asking for the
dtype of any entry reads no JSON either.

The package's rooms: ``_columns`` (the private column storage), ``_nodes`` (:class:`Node`,
:class:`Record`), ``_graph`` (:class:`Graph`, :class:`Rebuild`), ``_inference`` (dtypes and
shapes through MXNet's C API, :class:`GraphSymbol`), ``_attributes`` (attribute values as MXNet's
parser reads them). The op-name lists live in :mod:`mxmixed._core.ops` and are re-exported here
for the modules that import them from the graph.
"""
from ..ops import BATCHNORM_OPS, CAST_OPS, DETECTION_OPS, LOSS_OUTPUT_OPS
from ._attributes import attr_float, attr_ints, dtype_code, unused_name, var_dtype
from ._graph import (Graph, Rebuild, as_graph, entry_dtypes, graph_text, inline_nodes, load_graph,
                     pin_variable_dtypes)
from ._inference import GraphShapeError, GraphTypeError, infer_shapes, infer_types, symbol_json
from ._nodes import Node, Record, cast_node

__all__ = ["Graph", "Node", "Record", "GraphTypeError", "GraphShapeError", "as_graph", "graph_text",
           "load_graph", "symbol_json",
           "Rebuild",
           "inline_nodes",
           "entry_dtypes", "infer_types", "infer_shapes", "var_dtype", "dtype_code",
           "attr_float", "attr_ints", "unused_name",
           "cast_node", "pin_variable_dtypes", "CAST_OPS",
           "LOSS_OUTPUT_OPS", "BATCHNORM_OPS", "DETECTION_OPS"]
