"""What a script's optimizer steps did in float16, recorded from the outside (``mxmixed run --report``).

:class:`StepRecorder` hooks ``mxnet.gluon.Trainer.step`` / ``update``, ``mxnet.module.Module.update``
(what ``Module.fit`` calls per batch) and the AMP loss scaler's ``has_overflow``, for scripts that know
nothing about mxmixed, and undoes the hooks when asked. :func:`layer_of_parameter` names the layer that
owns a parameter whose gradient went non-finite.
"""
import array
import gc
import inspect
import math
import time
import weakref

import numpy as np
from mxnet.gluon import Block, SymbolBlock, Trainer
from mxnet.module import Module

from .._core.graph import Graph
from .._core.patches import Patches
from .nonfinite import nonfinite_gradients

__all__ = ["StepRecorder", "StepLog", "layer_of_parameter", "LAYER_FROM", "HOOKS", "steps_note"]

_ABSENT = -2  # the skipped column of a step without a loss scaler
_UNDECIDED = -1  # skipped: None (the scaler's check did not run)


class StepLog:
    """The records of the optimizer steps, held in columns of machine numbers.

    A record (:meth:`append`, ``log[i]``, iteration) is a dict: ``step``, ``call``,
    ``trainer``, ``call_s``, ``iteration_s`` (None for the first step), for a Trainer with
    an AMP loss scaler ``loss_scale``, ``skipped`` (None when its check did not run) and
    ``next_loss_scale``, and ``loss`` where the step's loss was seen. Held as dicts, a
    400,000-step run took about 200 MB; here each step costs 60 bytes, and a record is made
    only when read.
    """

    def __init__(self):
        self._step, self._trainer = array.array("q"), array.array("q")
        self._call, self._skipped = array.array("b"), array.array("b")
        self._call_s, self._iteration_s = array.array("d"), array.array("d")
        self._scale, self._next_scale = array.array("d"), array.array("d")
        self._loss, self._has_loss = array.array("d"), array.array("b")
        self._calls = []  # the call names, by their number in the call column

    def __len__(self):
        # the column appended last: a record another thread is appending is not counted yet
        return len(self._next_scale)

    def append(self, record):
        """Add one step's record (a dict with the keys above)."""
        call = record["call"]
        if call not in self._calls:
            self._calls.append(call)
        scaled = "loss_scale" in record
        skipped = record.get("skipped") if scaled else None
        iteration = record.get("iteration_s")
        self._step.append(record["step"])
        self._trainer.append(record["trainer"])
        self._call.append(self._calls.index(call))
        self._skipped.append(_ABSENT if not scaled else _UNDECIDED if skipped is None
                             else int(bool(skipped)))
        self._call_s.append(record["call_s"])
        self._iteration_s.append(math.nan if iteration is None else iteration)
        self._scale.append(record["loss_scale"] if scaled else math.nan)
        self._has_loss.append("loss" in record)
        self._loss.append(record.get("loss", math.nan))
        self._next_scale.append(record.get("next_loss_scale", math.nan) if scaled else math.nan)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = range(len(self))[index]  # negative indices; IndexError past the end
        record = {"step": self._step[index], "call": self._calls[self._call[index]],
                  "trainer": self._trainer[index]}
        skipped = self._skipped[index]
        if skipped != _ABSENT:
            record["loss_scale"] = self._scale[index]
            record["skipped"] = None if skipped == _UNDECIDED else bool(skipped)
        if self._has_loss[index]:
            record["loss"] = self._loss[index]
        iteration = self._iteration_s[index]
        record["call_s"] = self._call_s[index]
        record["iteration_s"] = None if math.isnan(iteration) else iteration
        if skipped != _ABSENT:
            record["next_loss_scale"] = self._next_scale[index]
        return record

    def __iter__(self):
        for index in range(len(self)):
            yield self[index]

    def calls(self):
        """The call names that made steps (``step``, ``update``, ``Module.update``).

        Returns
        -------
        list of str
        """
        return list(self._calls)

    def median_iteration_s(self):
        """The median of the ``iteration_s`` known (the upper one of two), or None.

        Returns
        -------
        float or None
        """
        # a copy: a view of the column would stop a thread of the script from appending to it
        times = np.array(self._iteration_s[:len(self)], dtype=np.float64)
        times = times[~np.isnan(times)]
        if not len(times):
            return None
        middle = len(times) // 2
        return float(np.partition(times, middle)[middle])


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
        self.steps = StepLog()
        self.first_nonfinite = None
        self._patches = Patches("mxmixed run's step recorder")
        self._last_end = None
        self._pending = None
        # id of a Trainer or Module -> (weak reference, its number): the script's objects are
        # never kept alive by the record of their steps
        self._known = {}
        self._float16 = []  # by number: whether it updated float16 parameters at its first step
        self._scalers = {}  # id of a hooked scaler -> (weak reference, the hook)
        self._installed = False

    # ------------------------------------------------------------------ hooks
    def install(self):
        """Patch ``Trainer.step``, ``Trainer.update`` and ``Module.update``."""
        for name in ("step", "update"):
            self._patches.patch(Trainer, name, self._wrap(Trainer.__dict__[name], name))
        self._patches.patch(Module, "update", self._wrap_module(Module.__dict__["update"]))
        self._installed = True
        return self

    def uninstall(self):
        """Restore ``Trainer``, ``Module`` and every hooked scaler still alive as they were (a
        scaler's hook that someone wrapped since stays beneath their wrapper, and only calls
        the scaler's own method from then on)."""
        self._installed = False
        self._patches.undo()
        for ref, hook in list(self._scalers.values()):
            scaler = ref()
            if scaler is not None and vars(scaler).get("has_overflow") is hook:
                del scaler.has_overflow
        self._scalers.clear()

    def _trainer_index(self, trainer):
        """The number of ``trainer`` (a Trainer or a Module) in the report, held weakly."""
        known = self._known.get(id(trainer))
        if known is not None and known[0]() is trainer:
            return known[1]
        number = len(self._float16)
        try:
            self._float16.append(_float16_params(trainer))
        except Exception:  # noqa: BLE001 - a Trainer the script broke: its step says so itself
            self._float16.append(False)
        key, table = id(trainer), self._known
        try:
            ref = weakref.ref(trainer, lambda _, key=key: table.pop(key, None))
        except TypeError:  # an object without weak references: numbered afresh each step
            return number
        table[key] = (ref, number)
        return number

    def updates_float16(self):
        """Whether a Trainer (or Module) the steps saw updated float16 parameters: the ones
        still alive as they are now, the others as they were at their first step.

        Returns
        -------
        bool
        """
        if any(self._float16):
            return True
        alive = [ref() for ref, _ in list(self._known.values())]
        return any(_float16_params(known) for known in alive if known is not None)

    def _hook_scaler(self, scaler):
        if scaler is None or "has_overflow" in getattr(scaler, "__dict__", {}) \
                or id(scaler) in self._scalers:
            return
        own = _weak_method(scaler.has_overflow)
        recorder = self

        def has_overflow(*args, **kwargs):
            overflow = own()(*args, **kwargs)
            if recorder._installed and recorder._pending is not None:
                recorder._pending["skipped"] = bool(overflow)
                if overflow and recorder.first_nonfinite is None and args:
                    recorder._locate(args[0])
            return overflow

        try:
            key, table = id(scaler), self._scalers
            ref = weakref.ref(scaler, lambda _, key=key: table.pop(key, None))
        except TypeError:  # no weak references: hooked through the registry, held strongly
            self._patches.patch(scaler, "has_overflow", has_overflow)
            return
        scaler.has_overflow = has_overflow
        table[key] = (ref, has_overflow)

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
        first = last = least = None
        skipped = []
        for s in self.steps:  # one pass: no list of the records is made
            if "loss_scale" not in s:
                continue
            if first is None:
                first = least = s["loss_scale"]
            last = s["next_loss_scale"]
            least = min(least, s["loss_scale"])
            if s.get("skipped"):
                skipped.append(s["step"])
        if isinstance(self.steps, StepLog):
            median = self.steps.median_iteration_s()
        else:
            times = sorted(s["iteration_s"] for s in self.steps if s["iteration_s"] is not None)
            median = times[len(times) // 2] if times else None
        out = {"steps": len(self.steps), "amp_loss_scaler": first is not None,
               "skipped": len(skipped), "skipped_steps": skipped,
               "median_iteration_s": median, "first_nonfinite": self.first_nonfinite}
        if first is not None:
            # first: what the first step's gradients carried; last: what the scaler holds after
            # the last step (MXNet moves it one step late); min: the least of all of these
            out["loss_scale_first"] = first
            out["loss_scale_last"] = last
            out["loss_scale_min"] = min(least, last)
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


def _weak_method(method):
    """A function that returns ``method``, holding its object weakly when it is a bound method:
    the recorder keeps the hook it puts in a scaler, and the hook must not keep the scaler."""
    if not inspect.ismethod(method):
        return lambda: method
    return weakref.WeakMethod(method)


def _float16_params(trainer):
    """Whether a Trainer (or a Module) updates float16 parameters."""
    params = getattr(trainer, "_params", None)
    if params is not None:
        return any(np.dtype(p.dtype) == np.float16 for p in params)
    group = getattr(trainer, "_exec_group", None)
    return group is not None and any(arrays and np.dtype(arrays[0].dtype) == np.float16
                                     for arrays in group.param_arrays)


HOOKS = ("mxnet.gluon.Trainer.step", "mxnet.gluon.Trainer.update", "mxnet.module.Module.update")


def steps_note(recorder):
    """The report's first line: where its steps come from, or why it has none."""
    if not recorder.steps:
        return ("no optimizer step was seen: the run never called %s, so steps, step times "
                "and the non-finite check are empty" % ", ".join(HOOKS))
    names = {"step": "Trainer.step", "update": "Trainer.update"}
    steps = recorder.steps
    made = steps.calls() if isinstance(steps, StepLog) else {s["call"] for s in steps}
    calls = sorted({names.get(call, call) for call in made})
    return "%d optimizer steps recorded from %s" % (len(recorder.steps), ", ".join(calls))
