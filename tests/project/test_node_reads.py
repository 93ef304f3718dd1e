"""Graph nodes are read through :class:`mxmixed._core.graph.Node`'s attributes (``node.op``,
``node.name``, ``node.inputs``, ``node.attrs``), never in the dict form ``node["op"]``, outside
``_core/graph/``, the one package that reads a graph's JSON dict (its docstring says so). Read
from the code's syntax tree: a write into a node being built (``record["inputs"] = ...``) is
not a read."""
import ast
import os

from conftest import ROOT

NODE_KEYS = {"op", "name", "inputs", "attrs"}
# Modules whose dicts with these keys are not graph nodes, and why.
OTHER_DICTS = {
    "mxmixed/_core/graph/": "the one reader of the graph's JSON dict (every module of it)",
    "mxmixed/_files/untrusted/_graph.py": "checks the raw JSON of a -symbol.json before any Graph exists",
    "mxmixed/checkpoint/_format.py": "a checkpoint manifest's rows",
    "mxmixed/checkpoint/_plain.py": "a stored object's body",
    "mxmixed/checkpoint/_trainer.py": "a trainer file's records",
    "mxmixed/emulation/_round16.py": "the rounding library's state",
}
# Functions whose node dicts are MXNet's own, handed to them by MXNet's code, and why.
OTHER_FUNCTIONS = {
    ("mxmixed/symbolic/_onnx_graph.py", "convert"): "MXNet's ONNX exporter calls it with its "
                                                   "own node dict",
}


def _key(node):
    return node.value if isinstance(node, ast.Constant) and node.value in NODE_KEYS else None


def _outside(tree, relative):
    """The nodes of ``tree`` outside the functions OTHER_FUNCTIONS names for this module."""
    skipped = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               and (relative, f.name) in OTHER_FUNCTIONS for n in ast.walk(f)}
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def _dict_form_reads(tree, relative=""):
    """``x["op"]`` read (not written) and ``x.get("op")``, for the four node keys."""
    for node in _outside(tree, relative):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _key(node.slice):
            yield node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "setdefault", "pop") and node.args \
                and _key(node.args[0]):
            yield node


def test_graph_nodes_are_read_by_attribute_outside_core_graph():
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "mxmixed")):
        for name in sorted(files):
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
            if not name.endswith(".py") or relative in OTHER_DICTS \
                    or os.path.dirname(relative) + "/" in OTHER_DICTS:
                continue
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            found += ["%s:%d: %s" % (relative, read.lineno, ast.unparse(read))
                      for read in _dict_form_reads(tree, relative)]
    assert found == [], "read graph nodes as node.op, node.name, node.inputs, node.attrs"
