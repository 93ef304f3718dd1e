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


def _names_mxmixed(args):
    """Whether an ``import_module`` argument is a literal "mxmixed..." or "mxmixed." + name."""
    import ast

    first = args[0] if args else None
    if isinstance(first, ast.BinOp):
        first = first.left
    return isinstance(first, ast.Constant) and str(first.value).startswith("mxmixed")


def _imports_inside_functions(path):
    import ast

    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                own = (isinstance(node, ast.ImportFrom)
                       and (node.level > 0 or (node.module or "").startswith("mxmixed"))) or \
                      (isinstance(node, ast.Import)
                       and any(a.name.startswith("mxmixed") for a in node.names)) or \
                      (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                       and node.func.attr == "import_module" and _names_mxmixed(node.args))
                if own:
                    found.append(node.lineno)
    return sorted(set(found))


def test_only_the_cli_imports_mxmixed_modules_inside_functions():
    """Imports point down, so none has to hide in a function. The exceptions load MXNet late on
    purpose: the CLI's heavy subcommands (info, demo, convert, run), 3 import sites at most, and
    the package's lazy names, 2 (``importlib.import_module`` calls count as imports)."""
    package = os.path.join(ROOT, "mxmixed")
    found = {}
    for folder, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                lines = _imports_inside_functions(path)
                if lines:
                    found[os.path.relpath(path, ROOT)] = lines
    cli_lines = [line for path in list(found) if path.startswith(os.path.join("mxmixed", "cli", ""))
                 for line in found.pop(path)]
    lazy_lines = found.pop(os.path.join("mxmixed", "__init__.py"), [])
    assert found == {}
    assert len(cli_lines) <= 3
    assert len(lazy_lines) <= 2  # the package's PEP 562 __getattr__: modules, then names
