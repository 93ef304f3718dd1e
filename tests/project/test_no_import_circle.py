"""mxmixed's modules import in one direction: no import circle, counting imports made inside
functions too (a circle hidden in a function is still a circle), and the training layer makes no
import of mxmixed modules inside functions.

The graph is read from the source (AST), so the test is quick and names the circle it finds.
Importing ``pkg.sub`` runs ``pkg/__init__.py`` first, so an import of a submodule also counts as
an import of its packages, except the packages the importer itself lives in (already running).
"""
import ast
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "mxmixed")
# the training layer and below: no `import` of an mxmixed module inside a function
NO_LOCAL_IMPORTS = ("_core/state.py", "_core/finite.py", "scaler.py", "training/_handle.py",
                    "training/_amp.py", "training/__init__.py")


def _modules():
    found = {}
    for dirpath, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def _ancestors(dotted):
    parts = dotted.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _imported_names(module, path, tree):
    base = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                source = ".".join(parts + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield node, source
            for alias in node.names:
                yield node, source + "." + alias.name


def import_graph():
    """{module: set of mxmixed modules it makes Python run}."""
    modules = _modules()
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        own = _ancestors(module)
        for _, target in _imported_names(module, path, tree):
            if target not in modules or target == module:
                continue
            for needed in ({target} | _ancestors(target)) - own - {module}:
                graph[module].add(needed)
    return graph


def find_cycle(graph):
    """One import circle as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_checker_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_mxmixed_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize("name", NO_LOCAL_IMPORTS)
def test_training_layer_has_no_imports_inside_functions(name):
    path = os.path.join(PACKAGE, name)
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    local = []
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and (node.level or
                                                         (node.module or "").startswith("mxmixed")):
                    local.append("%s:%d" % (name, node.lineno))
                elif isinstance(node, ast.Import) and any(a.name.startswith("mxmixed")
                                                          for a in node.names):
                    local.append("%s:%d" % (name, node.lineno))
    assert not local, "imports of mxmixed modules inside functions: %s" % ", ".join(local)
