"""The Examples sections of the docstrings run, and print what they show (issue 19).

Every docstring example of every module under ``mxmixed/`` (private modules included: that is
where most public functions are defined) runs with :mod:`doctest`, with ``ELLIPSIS`` and
``NORMALIZE_WHITESPACE``, in a fresh interpreter and a temporary working folder. ``mxmixed.init``
cannot be undone, so a docstring whose example calls ``init(`` runs in a process of its own;
all the others share one process (examples use ``mxmixed.amp_scope``, which undoes AMP on exit).

``test_core_public_names_have_examples`` checks that the core public names have an example.
"""
import doctest
import importlib
import inspect
import os
import pkgutil
import re
import sys
from pathlib import Path

import pytest

from conftest import run_command

ROOT = Path(__file__).resolve().parents[2]
ISOLATED = re.compile(r"(^|[^\w.])(mxmixed\.)?init\(", re.M)
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# The core of issue 19: each of these needs an Examples section that runs.
CORE_EXAMPLES = [
    "mxmixed.init", "mxmixed.amp_scope", "mxmixed.init_trainer", "mxmixed.loss_scaler",
    "mxmixed.scale_loss", "mxmixed.unscale", "mxmixed.clip_global_norm", "mxmixed.step",
    "mxmixed.amp_initialized", "mxmixed.LossScaler",
    "mxmixed.optim.multi_precision_trainer", "mxmixed.optim.master_weights",
    "mxmixed.tutorial.master.make_master_params", "mxmixed.tutorial.master.grads_to_master",
    "mxmixed.tutorial.master.sgd_momentum_step", "mxmixed.tutorial.master.master_to_model",
    "mxmixed.checkpoint.save", "mxmixed.checkpoint.load", "mxmixed.checkpoint.read_manifest",
    "mxmixed.symbolic.convert", "mxmixed.symbolic.validate", "mxmixed.symbolic.search_fp32_layers",
    "mxmixed.symbolic.load_float16", "mxmixed.symbolic.convert_hybrid_block",
    "mxmixed.diagnostics.float16_shares", "mxmixed.diagnostics.gradient_stats",
    "mxmixed.diagnostics.recommend_loss_scale", "mxmixed.diagnostics.find_overflow",
    "mxmixed.diagnostics.nonfinite_gradients", "mxmixed.diagnostics.tensor_core_audit",
    "mxmixed.diagnostics.memory_report",
]

# Run in a fresh interpreter: argv holds "module::test name" pairs.
RUNNER = r"""
import doctest, importlib, sys
wanted = {}
for arg in sys.argv[1:]:
    module, name = arg.split("::", 1)
    wanted.setdefault(module, set()).add(name)
runner = doctest.DocTestRunner(optionflags=%d)
for module, names in wanted.items():
    for test in doctest.DocTestFinder().find(importlib.import_module(module)):
        if test.name in names:
            runner.run(test)
            names.discard(test.name)
    assert not names, "doctests not found: %%s" %% sorted(names)
result = runner.summarize(verbose=False)
sys.exit(1 if result.failed else 0)
""" % OPTIONS


def _modules():
    import mxmixed

    names = ["mxmixed"]
    for info in pkgutil.walk_packages(mxmixed.__path__, "mxmixed.", onerror=lambda n: None):
        if info.name.rsplit(".", 1)[-1] != "__main__":   # importing it runs the command line
            names.append(info.name)
    return names


def _doctests():
    """``(module, test)`` for every docstring of the package that holds examples."""
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        if module.__name__ != name:
            continue
        for test in doctest.DocTestFinder().find(module):
            inner = test.name[len(name) + 1:].split(".") if test.name != name else []
            # Private helpers are skipped: some wrap MXNet's functions and carry MXNet's own
            # docstrings (functools.wraps), whose examples are not ours.
            if test.examples and not any(part.startswith("_") for part in inner):
                found.append((name, test))
    return found


def _groups():
    shared, alone = [], []
    for module, test in _doctests():
        key = "%s::%s" % (module, test.name)
        source = "".join(example.source for example in test.examples)
        (alone if ISOLATED.search(source) else shared).append(key)
    return [pytest.param(shared, id="shared")] + [pytest.param([k], id=k) for k in alone]


@pytest.mark.slow
@pytest.mark.parametrize("tests", _groups())
def test_docstring_examples_run(tests, tmp_path):
    if not tests:
        pytest.skip("no docstring examples yet")
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = run_command([sys.executable, "-c", RUNNER] + tests, cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert proc.returncode == 0, "docstring examples failed:\n%s\n%s" % (
        proc.stdout[-6000:], proc.stderr[-2000:])


def _resolve(qualname):
    module, _, attr = qualname.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def test_core_public_names_have_examples():
    missing = []
    for name in CORE_EXAMPLES:
        doc = inspect.getdoc(_resolve(name)) or ""
        if not re.search(r"^Examples\n-+\n(.*\n)*?>>> ", doc, re.M):
            missing.append(name)
    assert not missing, ("no Examples section (numpydoc, with >>> lines) in the docstring of: "
                         + ", ".join(missing))


def test_isolation_rule_spots_init_calls():
    assert ISOLATED.search(">>> mxmixed.init()\n") and ISOLATED.search("init(emulate=True)\n")
    assert not ISOLATED.search("mxmixed.init_trainer(trainer)\n")
    assert not ISOLATED.search("net.initialize()\nmxnet.amp.init()\n")
