"""No module imports another package's private module, or a private name of another module.

A module whose name starts with an underscore is private to the package that holds it
(``symbolic/_inference.py`` to ``mxmixed.symbolic``; ``_core`` and ``_files`` to ``mxmixed``,
whose every package may import them), and a name with an underscore is private to its module
(docs/architecture.md, "The layers"). Where another package needs something, it is public
there. Read from the syntax tree: function-level imports (the CLI's) count too.
"""
import ast
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "mxmixed")


def _module_name(path, root):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts), parts[-1] == "__init__"


def _imports(path, root):
    """``(line, module, name)`` for each import of ``path``: the module imported, resolved, and
    the name taken from it (None for ``import module``)."""
    name, is_package = _module_name(path, root)
    package = name if is_package else name.rpartition(".")[0]
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                yield node.lineno, module, alias.name


def _owner(module):
    """The package a module is private to (``mxmixed.symbolic`` for
    ``mxmixed.symbolic._inference``), or None for a public one."""
    parts = module.split(".")
    for k, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:k])
    return None


def _is_module(name, root):
    path = os.path.join(root, *name.split("."))
    return os.path.isfile(path + ".py") or os.path.isdir(path)


def private_imports(path, root=ROOT):
    """The imports of ``path`` that reach into another package's private module or name."""
    importer, _ = _module_name(path, root)
    found = []
    for line, module, name in _imports(path, root):
        if not module.startswith("mxmixed"):
            continue
        if name is not None and _is_module(module + "." + name, root):
            module, name = module + "." + name, None  # ``from package import module``
        owner = _owner(module)
        if owner is not None and not (importer + ".").startswith(owner + "."):
            found.append("%s:%d imports %s" % (os.path.relpath(path, root), line, module))
        elif (name is not None and name.startswith("_") and not name.startswith("__")
              and module != importer):
            found.append("%s:%d imports the private name %s from %s"
                         % (os.path.relpath(path, root), line, name, module))
    return sorted(set(found))


def _package_files():
    for folder, _, files in os.walk(PACKAGE):
        for file_name in sorted(files):
            if file_name.endswith(".py"):
                yield os.path.join(folder, file_name)


def test_no_module_imports_another_packages_private_module_or_a_private_name():
    found = []
    for path in _package_files():
        found += private_imports(path)
    assert found == [], "give the name a public home in its package:\n" + "\n".join(found)


@pytest.mark.parametrize("source, where, expected", [
    ("from ..symbolic._inference import inference_graph\n", "mxmixed/cli/_samples.py", 1),
    ("from ..symbolic import _inference\n", "mxmixed/cli/_samples.py", 1),
    ("import mxmixed.emulation._names\n", "mxmixed/diagnostics/overflow.py", 1),
    ("from ._plain import _Object\n", "mxmixed/checkpoint/_trainer.py", 1),
    ("from .vocab import _check_int\n", "mxmixed/tutorial/text/model.py", 1),
    ("from ._inference import symbol_block\n", "mxmixed/symbolic/_blocks.py", 0),
    ("from .._core.graph import as_graph\n", "mxmixed/symbolic/_blocks.py", 0),
    ("from ..emulation import emulate_symbol\n", "mxmixed/symbolic/_blocks.py", 0),
    ("from .._version import __version__\n", "mxmixed/cli/_info.py", 0),
])
def test_a_private_import_is_found_however_it_is_written(source, where, expected, tmp_path):
    for module in ("mxmixed/symbolic/_inference.py", "mxmixed/emulation/_names.py", where):
        path = tmp_path.joinpath(*module.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source if module == where else "", encoding="utf-8")
    assert len(private_imports(str(tmp_path.joinpath(*where.split("/"))), str(tmp_path))) == expected
