"""The public API (the top level, the training modules, the diagnostics, symbolic and the
emulation) carries type hints,
and every hint names something that exists (a string annotation is resolved here, not only
parsed)."""
import importlib
import inspect
import typing

import matplotlib.figure
import mxnet as mx
import pytest

MODULES = ["mxmixed", "mxmixed.training", "mxmixed.scaler", "mxmixed.checkpoint",
           "mxmixed.optim", "mxmixed.distributed", "mxmixed.diagnostics", "mxmixed.symbolic",
           "mxmixed.emulation"]
# classes users build themselves (LossScaler): their __init__ too; the diagnostics' reports
# are built by the diagnostics, so only their methods and properties count
BUILT_BY_USERS = ("mxmixed.training", "mxmixed.scaler", "mxmixed.checkpoint", "mxmixed.optim",
                  "mxmixed.distributed")


def _public_callables():
    seen = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isfunction(obj):
                seen["%s.%s" % (name, attr)] = obj
            elif inspect.isclass(obj) and not issubclass(obj, BaseException):
                for meth_name, meth in vars(obj).items():
                    if meth_name.startswith("_") and not (
                            meth_name == "__init__" and name in BUILT_BY_USERS):
                        continue
                    func = getattr(meth, "__func__", None) or getattr(meth, "fget", None) or meth
                    if inspect.isfunction(func) and func.__qualname__.startswith(obj.__name__):
                        seen["%s.%s.%s" % (name, attr, meth_name)] = func
    return seen


CALLABLES = _public_callables()


def test_the_public_api_was_found():
    assert {"mxmixed.training.init_trainer", "mxmixed.scaler.LossScaler.update",
            "mxmixed.scaler.LossScaler.loss_scale", "mxmixed.checkpoint.load",
            "mxmixed.distributed.save_checkpoint", "mxmixed.diagnostics.find_overflow_symbol",
            "mxmixed.diagnostics.plot_gradient_range", "mxmixed.symbolic.convert",
            "mxmixed.symbolic.ValidationReport.passes"} <= set(CALLABLES)
    assert {"mxmixed.init", "mxmixed.amp_scope", "mxmixed.emulation.enable",
            "mxmixed.emulation.emulate_symbol"} <= set(CALLABLES)


@pytest.mark.parametrize("path", sorted(CALLABLES))
def test_every_parameter_and_the_return_are_annotated(path):
    func = CALLABLES[path]
    signature = inspect.signature(func)
    missing = [p.name for p in signature.parameters.values()
               if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
    if signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    assert not missing, "%s: no annotation for %s" % (path, ", ".join(missing))
    # string annotations (imports kept out of the module) must name real things
    typing.get_type_hints(func, localns={"mx": mx, "matplotlib": matplotlib})
