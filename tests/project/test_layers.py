"""The package's layers: ``import mxmixed`` stays light, and imports point only down."""
import os
import sys

import pytest

from conftest import ROOT, run_command, run_python


def test_import_mxmixed_loads_nothing_of_the_tutorial():
    proc = run_python("import mxmixed, sys\n"
                      "loaded = sorted(m for m in sys.modules if m.startswith('mxmixed.tutorial'))\n"
                      "print('LOADED=%s' % loaded)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LOADED=[]" in proc.stdout


def test_tutorial_names_left_the_top_level_namespace():
    import mxmixed

    for name in ("digits_loaders", "digits_datasets", "DigitsCNN", "digits_cnn", "lstm_lm",
                 "stdlib_corpus", "BPTTBatches", "Vocabulary", "LSTMLanguageModel", "text",
                 "fit", "data", "models"):
        assert name not in mxmixed.__all__
    from mxmixed.tutorial import (DigitsCNN, compare_precisions, digits_arrays,  # noqa: F401
                                  digits_cnn, digits_loaders, evaluate, fit, format_comparison,
                                  text, train_precision)

    assert callable(fit) and hasattr(text, "train_language_model")


def _lint_imports():
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    if not os.path.exists(exe):
        pytest.skip("import-linter is not installed (pip install -c constraints.txt -e .[test])")
    return exe


def test_import_linter_contracts_hold():
    """`lint-imports` checks .importlinter: the layers, mxmixed.tutorial kept out of the core,
    symbolic and diagnostics independent."""
    proc = run_command([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " 0 broken" in proc.stdout


def _importlinter_layers():
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, ".importlinter"))
    raw = config["importlinter:contract:layers"]["layers"]
    return [sorted(p.strip() for p in line.replace("|", ":").split(":") if p.strip())
            for line in raw.strip().splitlines()]


def test_import_linter_marks_no_module_optional():
    """A module renamed or removed must break the contract, not pass it silently."""
    for layer in _importlinter_layers():
        assert not any(name.startswith("(") for name in layer), layer


def test_architecture_page_names_the_layers_that_import_linter_enforces():
    import re

    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as handle:
        text = handle.read()
    table = text.split("| layer | modules | may import |", 1)[1].split("\n\n", 1)[0]
    documented = []
    for row in table.strip().splitlines()[1:]:
        cells = re.sub(r"\(.*?\)", "", row.split("|")[2])  # names, less their descriptions
        documented.append(sorted(m.rstrip("/") for m in re.findall(r"`([\w/]+)`", cells)))
    assert documented == _importlinter_layers()


# Modules that import other modules by a computed name, and why: none of them is an mxmixed module.
COMPUTED_IMPORTS = {
    os.path.join("mxmixed", "tutorial", "text", "corpus.py"): "the standard library's modules, "
                                                              "for their docstrings",
}


def _string_imports(path):
    """Lines of ``importlib.import_module(...)`` / ``__import__(...)`` calls in ``path``, with
    what each imports: a literal name, or None when the name is computed."""
    import ast

    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in ("__import__",
                                                                         "import_module"))):
            first = node.args[0] if node.args else None
            found.append((node.lineno, first.value if isinstance(first, ast.Constant) else None))
    return found


def _package_files():
    for folder, _, files in os.walk(os.path.join(ROOT, "mxmixed")):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.relpath(os.path.join(folder, name), ROOT)


def test_no_mxmixed_module_is_imported_by_a_string():
    """import-linter sees import statements only: an mxmixed module imported by name (a string
    literal or a computed name) would hide an edge from the layer contracts."""
    hidden = {}
    for path in _package_files():
        for line, name in _string_imports(os.path.join(ROOT, path)):
            if name is None and path in COMPUTED_IMPORTS:
                continue
            if name is None or name.startswith(("mxmixed", ".")):
                hidden.setdefault(path, []).append(line)
    assert hidden == {}


def test_the_string_import_check_finds_one(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import importlib\n\ndef command():\n"
                       "    return importlib.import_module('mxmixed.' + 'symbolic')\n")
    assert _string_imports(str(planted)) == [(4, None)]


def _imports_inside_functions(path):
    import ast

    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if (isinstance(node, ast.ImportFrom)
                        and (node.level > 0 or (node.module or "").startswith("mxmixed"))) or \
                        (isinstance(node, ast.Import)
                         and any(a.name.startswith("mxmixed") for a in node.names)):
                    found.append(node.lineno)
    return sorted(set(found))


def test_only_the_cli_and_the_lazy_names_import_mxmixed_modules_inside_functions():
    """Imports point down, so none has to hide in a function. The exceptions load MXNet late on
    purpose: the CLI's commands (so that ``mxmixed --help`` loads no MXNet) and the package's
    lazy names (PEP 562)."""
    found = {}
    for path in _package_files():
        lines = _imports_inside_functions(os.path.join(ROOT, path))
        if lines:
            found[path] = lines
    for path in list(found):
        if path.startswith(os.path.join("mxmixed", "cli", "")) \
                or path == os.path.join("mxmixed", "__init__.py"):
            found.pop(path)
    assert found == {}
