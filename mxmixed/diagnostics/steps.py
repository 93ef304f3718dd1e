"""What a script's optimizer steps did in float16, recorded from the outside (``mxmixed run --report``).

:class:`StepRecorder` hooks ``mxnet.gluon.Trainer.step`` / ``update``, ``mxnet.module.Module.update``
(what ``Module.fit`` calls per batch) and the AMP loss scaler's ``has_overflow``, for scripts that know
nothing about mxmixed, and undoes the hooks when asked. :func:`layer_of_parameter` names the layer that
owns a parameter whose gradient went non-finite.
"""
import gc
import time

from mxnet.gluon import Block, SymbolBlock, Trainer
from mxnet.module import Module

from .._core.graph import Graph
from .._core.patches import Patches
from .nonfinite import nonfinite_gradients

__all__ = ["StepRecorder", "layer_of_parameter", "LAYER_FROM", "HOOKS", "steps_note"]


class StepRecorder:
    """Hooks on ``gluon.Trainer`` that record every optimizer step of a script.

    For each ``Trainer.step`` / ``Trainer.update`` call it records the step's wall time, the AMP
    loss scale the step's gradients were scaled with, whether the step was skipped on overflow
    (read from the trainer's ``_amp_loss_scaler.has_overflow``), and, once, the first parameter
    gradient that held inf or NaN. Without a loss scaler (``cast('float16')`` training) the
    gradients are checked before each update until the first non-finite one is found.

    Parameters
    ----------
    locate : bool, default True
        Check the gradients of Trainers without a loss scaler before each update, for the
        first non-finite one (a scaler's overflow is located either way). False records only
        the steps and their times.
    loss : callable, optional
        Called at each Trainer step, returns the loss of the step (or None): recorded as the
        step's ``loss`` (``mxmixed run --amp float16`` sees it at ``backward``).

    .. note::
       The hooks patch the ``Trainer`` class and the scaler instances in place; always call
       :meth:`uninstall` (the runner does, also when the script raises).
    """

    def __init__(self, locate=True, loss=None):
        self.locate = locate
        self._loss = loss
        self.steps = []
        self.first_nonfinite = None
        self.trainers = []
        self._patches = Patches("mxmixed run's step recorder")
        self._last_end = None
        self._pending = None

    # ------------------------------------------------------------------ hooks
    def install(self):
        """Patch ``Trainer.step``, ``Trainer.update`` and ``Module.update``."""
        for name in ("step", "update"):
            self._patches.patch(Trainer, name, self._wrap(Trainer.__dict__[name], name))
        self._patches.patch(Module, "update", self._wrap_module(Module.__dict__["update"]))
        return self

    def uninstall(self):
        """Restore ``Trainer``, ``Module`` and every hooked scaler exactly as they were."""
        self._patches.undo()

    def _trainer_index(self, trainer):
        for n, known in enumerate(self.trainers):
            if known is trainer:
                return n
        self.trainers.append(trainer)
        return len(self.trainers) - 1

    def _hook_scaler(self, scaler):
        if scaler is None or "has_overflow" in getattr(scaler, "__dict__", {}):
            return
        original = scaler.has_overflow
        recorder = self

        def has_overflow(*args, **kwargs):
            overflow = original(*args, **kwargs)
            if recorder._pending is not None:
                recorder._pending["skipped"] = bool(overflow)
                if overflow and recorder.first_nonfinite is None and args:
                    recorder._locate(args[0])
            return overflow

        self._patches.patch(scaler, "has_overflow", has_overflow)

    def _locate(self, params, module=None):
        params = list(params)
        found = nonfinite_gradients(params)
        if found:
            name, kind = found.origin
            self.first_nonfinite = dict(
                {"step": len(self.steps) + 1, "tensor": "gradient of %s" % name, "kind": kind},
                **layer_of_parameter(name, params, module),
                parameters_affected=len(found), parameters_checked=found.total,
                description=found.describe())
        return bool(found)

    def _wrap(self, original, name):
        recorder = self

        def hooked(trainer, *args, **kwargs):
            scaler = getattr(trainer, "_amp_loss_scaler", None)
            recorder._hook_scaler(scaler)
            record = {"step": len(recorder.steps) + 1, "call": name,
                      "trainer": recorder._trainer_index(trainer)}
            if scaler is not None:
                record["loss_scale"] = float(scaler.loss_scale)
                record["skipped"] = None
            elif recorder.locate and recorder.first_nonfinite is None:
                recorder._locate(trainer._params)
            if recorder._loss is not None:
                loss = recorder._loss()
                if loss is not None:
                    record["loss"] = loss
            recorder._pending = record
            start = time.perf_counter()
            try:
                return original(trainer, *args, **kwargs)
            finally:
                end = time.perf_counter()
                recorder._pending = None
                record["call_s"] = end - start
                record["iteration_s"] = (None if recorder._last_end is None
                                         else end - recorder._last_end)
                recorder._last_end = end
                if scaler is not None:
                    record["next_loss_scale"] = float(scaler.loss_scale)
                recorder.steps.append(record)

        hooked.__wrapped__ = original
        hooked.__name__ = original.__name__
        hooked.__doc__ = original.__doc__
        return hooked

    def _wrap_module(self, original):
        """``Module.update`` (``Module.fit`` calls it once per batch): one step each call."""
        recorder = self

        def hooked(module, *args, **kwargs):
            record = {"step": len(recorder.steps) + 1, "call": "Module.update",
                      "trainer": recorder._trainer_index(module)}
            if recorder.locate and recorder.first_nonfinite is None:
                recorder._locate(_module_gradients(module), module)
            start = time.perf_counter()
            try:
                return original(module, *args, **kwargs)
            finally:
                end = time.perf_counter()
                record["call_s"] = end - start
                record["iteration_s"] = (None if recorder._last_end is None
                                         else end - recorder._last_end)
                recorder._last_end = end
                recorder.steps.append(record)

        hooked.__wrapped__ = original
        hooked.__name__ = original.__name__
        hooked.__doc__ = original.__doc__
        return hooked

    # ------------------------------------------------------------------ summary
    def summary(self):
        """What the steps add up to: counts, skipped steps, loss scales, step times.

        Returns
        -------
        dict
        """
        scaled = [s for s in self.steps if "loss_scale" in s]
        skipped = [s["step"] for s in scaled if s.get("skipped")]
        times = sorted(s["iteration_s"] for s in self.steps if s["iteration_s"] is not None)
        out = {"steps": len(self.steps), "amp_loss_scaler": bool(scaled),
               "skipped": len(skipped), "skipped_steps": skipped,
               "median_iteration_s": times[len(times) // 2] if times else None,
               "first_nonfinite": self.first_nonfinite}
        if scaled:
            # first: what the first step's gradients carried; last: what the scaler holds after
            # the last step (MXNet moves it one step late); min: the least of all of these
            out["loss_scale_first"] = scaled[0]["loss_scale"]
            out["loss_scale_last"] = scaled[-1]["next_loss_scale"]
            out["loss_scale_min"] = min([s["loss_scale"] for s in scaled]
                                        + [out["loss_scale_last"]])
        return out


#: How the report's ``layer`` was found, by the ``layer_from`` it names.
LAYER_FROM = {
    "block": "the Gluon block that holds the parameter (its path from the outermost block)",
    "graph": "the op of the Module's (or SymbolBlock's) graph that reads the parameter",
    "name": "the parameter's name without its last part (no live block or graph holds it)",
}


def layer_of_parameter(name, params, module=None):
    """The layer that owns the parameter ``name``, for the report.

    ``mxmixed run`` sees the Trainer (or the Module), not the batch or the loss, so it cannot
    run :func:`mxmixed.diagnostics.find_overflow`; it maps the parameter to its owner instead:
    the Gluon block that holds it (among the live blocks), the op of a Module's or a
    SymbolBlock's graph that reads it, or else its name's prefix.

    Parameters
    ----------
    name : str
        The parameter's name.
    params : list
        The Trainer's parameters (``mxnet.gluon.Parameter``), or the Module's gradients.
    module : mxnet.module.Module, optional

    Returns
    -------
    dict
        ``layer`` (``'HybridSequential[1] (Dense, dense1)'``, ``'fc1 (FullyConnected)'``) and
        ``layer_from`` (a key of :data:`LAYER_FROM`).
    """
    if module is not None:
        layer = _graph_reader(module.symbol, name)
        if layer:
            return {"layer": layer, "layer_from": "graph"}
    else:
        param = next((p for p in params if getattr(p, "name", None) == name), None)
        found = _gluon_owner(param) if param is not None else None
        if found:
            return {"layer": found[0], "layer_from": found[1]}
    return {"layer": name.rsplit("_", 1)[0] if "_" in name else name, "layer_from": "name"}


def _graph_reader(sym, name):
    """'node (op)' of the first op of ``sym`` that reads the variable ``name``, or None."""
    nodes = Graph(sym.tojson()).nodes  # AMP's casts left out: the reader is the layer
    index = next((i for i, n in enumerate(nodes) if n.op == "null" and n.name == name),
                 None)
    for node in nodes:
        if index is not None and any(entry[0] == index for entry in node.inputs):
            return "%s (%s)" % (node.name, node.op)
    return None


def _gluon_owner(param):
    """('Outer[1].inner (Type, name)', 'block') for the live Gluon block that holds ``param``,
    ('node (op)', 'graph') for a SymbolBlock's parameter, or None."""
    blocks = [o for o in gc.get_objects() if isinstance(o, Block)]
    owner = next((b for b in blocks if any(p is param for p in b._reg_params.values())), None)
    if owner is None:
        return None
    if isinstance(owner, SymbolBlock) and getattr(owner, "_cached_graph", ()):
        layer = _graph_reader(owner._cached_graph[1], param.name)
        return (layer, "graph") if layer else None
    parents = {id(child): (block, key) for block in blocks
               for key, child in block._children.items()}
    path, block = "", owner
    while id(block) in parents:
        block, key = parents[id(block)]
        path = ("[%s]" % key if str(key).isdigit() else ".%s" % key) + path
    return "%s%s (%s, %s)" % (type(block).__name__, path, type(owner).__name__, owner.name), \
        "block"


class _ModuleGradient:
    """A Module parameter's gradients, shaped as the Gluon ``Parameter`` the checker reads."""

    grad_req = "write"

    def __init__(self, name, grads):
        self.name, self._grad = name, grads

    def list_grad(self):
        return self._grad


def _module_gradients(module):
    """The gradients a ``Module.update`` is about to apply, per parameter."""
    group = getattr(module, "_exec_group", None)
    if group is None or not getattr(group, "grad_arrays", None):
        return []
    return [_ModuleGradient(name, [g for g in grads if g is not None])
            for name, grads in zip(group.param_names, group.grad_arrays)
            if grads and any(g is not None for g in grads)]


HOOKS = ("mxnet.gluon.Trainer.step", "mxnet.gluon.Trainer.update", "mxnet.module.Module.update")


def steps_note(recorder):
    """The report's first line: where its steps come from, or why it has none."""
    if not recorder.steps:
        return ("no optimizer step was seen: the run never called %s, so steps, step times "
                "and the non-finite check are empty" % ", ".join(HOOKS))
    names = {"step": "Trainer.step", "update": "Trainer.update"}
    calls = sorted({names.get(s["call"], s["call"]) for s in recorder.steps})
    return "%d optimizer steps recorded from %s" % (len(recorder.steps), ", ".join(calls))
