"""Files from someone else, looked at before a parser sees them: nothing runs, nothing explodes.

:func:`check_json_depth` refuses JSON nested deeper than a limit (Python's parser recurses once
per level and ends in a ``RecursionError``), in time linear in the text. :func:`check_graph`
walks an MXNet graph (a ``-symbol.json``, parsed with :func:`json_object_pairs`) before
``mx.sym.load_json`` sees it: only ops of MXNet's registry that run no code named by the file,
every edge and head within its node's outputs, and caps on the attributes that size MXNet's
allocations. :func:`check_nd_bytes` walks a file in the format of ``mx.nd.save`` exactly as
MXNet 1.9.1 reads it and refuses anything MXNet would crash on, refuse, or allocate more than
the file holds for. :func:`nd_bytes` writes that format in memory. Every refusal is an
:class:`UnsafeFileError` of one line that names the file and what is wrong.

The package's rooms, by what they read: ``_json`` (the refusal, JSON text), ``_graph`` (a
graph's JSON, parsed), ``_nd`` (an array file's bytes); other packages import from here.
"""
from ._graph import (DENIED_OPS, MAX_COUNT_ATTR, MAX_GRAPH_BYTES, MAX_GRAPH_NODES,
                     check_graph, graph_outputs_limit)
from ._json import MAX_JSON_DEPTH, UnsafeFileError, check_json_depth, json_object_pairs
from ._nd import check_nd_bytes, nd_bytes

__all__ = ["UnsafeFileError", "MAX_JSON_DEPTH", "check_json_depth", "json_object_pairs",
           "MAX_GRAPH_BYTES", "MAX_GRAPH_NODES", "MAX_COUNT_ATTR", "DENIED_OPS", "graph_outputs_limit",
           "check_graph", "check_nd_bytes", "nd_bytes"]
