"""``mxmixed run SCRIPT [ARGS...]``: any MXNet training script in float16 on a CPU, unmodified.

The runner switches the CPU float16 emulation on in ``auto`` mode (only when no GPU is
visible), then runs the script as ``__main__`` with its own arguments, as ``python SCRIPT
ARGS...`` would: ``sys.argv`` is ``[SCRIPT, ARGS...]`` and ``sys.path[0]`` is the script's
folder. The script's exit code is returned and its errors surface as its own traceback.

With a report file it also records what happened in float16, for scripts that know nothing
about mxmixed: it hooks ``mxnet.gluon.Trainer.step`` / ``update``, ``mxnet.module.Module.update``
(what ``Module.fit`` calls per batch) and the AMP loss scaler's ``has_overflow`` from the
outside, and undoes the hooks when the script ends.

With ``--amp bfloat16`` MXNet's bfloat16 AMP is switched on before the script starts (no loss
scaling needed: bfloat16 has float32's exponent range), so a float32 script trains in bfloat16
through oneDNN, fast on CPUs with AVX512-BF16 or AMX; the float16 emulation stays off. A line
on stderr gives the median step time, to compare with a run without ``--amp``.

Usage: ``mxmixed run [--report FILE] [--no-emulation] [--amp bfloat16] SCRIPT [ARGS...]``,
or ``python -m mxmixed.run ...``.
"""
import contextlib
import datetime
import gc
import json
import os
import runpy
import secrets
import signal
import sys
import threading
import time
import traceback

from mxnet.gluon import Block, SymbolBlock, Trainer
from mxnet.module import Module

from . import emulation as emu
from .training._amp import amp_scope
from ._files.atomic import atomic_write, special_file
from ._core.graph import Graph
from ._core.patches import Patches
from ._core.state import bfloat16_native, bfloat16_support
from .diagnostics.nonfinite import nonfinite_gradients

__all__ = ["run_script", "StepRecorder", "ScriptTerminated", "layer_of_parameter", "LAYER_FROM"]


class StepRecorder:
    """Hooks on ``gluon.Trainer`` that record every optimizer step of a script.

    For each ``Trainer.step`` / ``Trainer.update`` call it records the step's wall time, the AMP
    loss scale the step's gradients were scaled with, whether the step was skipped on overflow
    (read from the trainer's ``_amp_loss_scaler.has_overflow``), and, once, the first parameter
    gradient that held inf or NaN. Without a loss scaler (``cast('float16')`` training) the
    gradients are checked before each update until the first non-finite one is found.

    .. note::
       The hooks patch the ``Trainer`` class and the scaler instances in place; always call
       :meth:`uninstall` (the runner does, also when the script raises).
    """

    def __init__(self):
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
            elif recorder.first_nonfinite is None:
                recorder._locate(trainer._params)
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
            if recorder.first_nonfinite is None:
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
    index = next((i for i, n in enumerate(nodes) if n["op"] == "null" and n["name"] == name),
                 None)
    for node in nodes:
        if index is not None and any(entry[0] == index for entry in node.get("inputs", ())):
            return "%s (%s)" % (node["name"], node["op"])
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


def _steps_note(recorder):
    """The report's first line: where its steps come from, or why it has none."""
    if not recorder.steps:
        return ("no optimizer step was seen: the run never called %s, so steps, step times "
                "and the non-finite check are empty" % ", ".join(HOOKS))
    names = {"step": "Trainer.step", "update": "Trainer.update"}
    calls = sorted({names.get(s["call"], s["call"]) for s in recorder.steps})
    return "%d optimizer steps recorded from %s" % (len(recorder.steps), ", ".join(calls))


def _write_json(path, payload):
    """Write ``payload`` as JSON atomically."""
    atomic_write(os.path.abspath(path), json.dumps(payload, indent=2, default=str) + "\n")


def _report_write_error(report, err):
    """One line on stderr for a report that could not be written."""
    reason = err.strerror if isinstance(err, OSError) and err.strerror else err
    print("mxmixed run: error: --report %s: cannot write it: %s" % (report, reason),
          file=sys.stderr)


class ScriptTerminated(BaseException):
    """SIGTERM arrived while the script ran (the runner turns it into a partial report)."""


def _terminate(signum, frame):
    raise ScriptTerminated()


def _print_script_traceback(exc, script):
    """Print ``exc`` with the runner's frames cut: from the script's first frame on."""
    tb = exc.__traceback__
    script = os.path.realpath(script)
    here = {os.path.realpath(__file__), os.path.realpath(runpy.__file__)}
    cut = tb
    while cut is not None and os.path.realpath(cut.tb_frame.f_code.co_filename) != script:
        cut = cut.tb_next
    if cut is None:  # no frame of the script ran: a SyntaxError, or an error while loading it
        cut = tb
        while cut is not None and (cut.tb_frame.f_code.co_filename.startswith("<frozen ")
                                   or os.path.realpath(cut.tb_frame.f_code.co_filename) in here):
            cut = cut.tb_next
    if cut is None:  # as Python reports a SyntaxError in the script it runs: no frames
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
    else:
        sys.stderr.write("".join(traceback.format_exception(type(exc), exc, cut)))
    sys.stderr.flush()


def _error_line(exc):
    """The script's error in one line: its type and the first line of its message, and for a
    SyntaxError where it is (``SyntaxError: '(' was never closed (train.py, line 3)``)."""
    message = str(exc).strip().splitlines()
    line = "%s: %s" % (type(exc).__name__, message[0]) if message else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        line = "%s: %s (%s, line %s)" % (type(exc).__name__, exc.msg,
                                         os.path.basename(exc.filename), exc.lineno)
    return line


def _exit_code(code):
    """The process exit status ``sys.exit(code)`` gives, printing a message code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _report_problem(report):
    """Why the report cannot be written at ``report`` (checked before the script runs), or None."""
    folder = os.path.dirname(report)
    if os.path.isdir(report):
        return "is a folder; give a file name, such as %s" % os.path.join(report, "report.json")
    if not os.path.isdir(folder):
        return "the folder %s does not exist" % folder
    if not os.access(folder, os.W_OK | os.X_OK):
        return "the folder %s is not writable" % folder
    kind = special_file(report)
    if kind is not None:  # renaming over it would replace the link or device by a plain file
        return "is %s, not a regular file; mxmixed never writes over one" % kind
    return None


@contextlib.contextmanager
def _script_amp_init_noted(target):
    """While the script runs under ``--amp``, its own ``amp.init`` calls say so in one line.

    MXNet's second ``amp.init`` is a silent no-op; here the script learns that its call is
    ignored and that AMP runs in ``target``.
    """
    from mxnet.contrib import amp

    original = amp.amp.init
    said = []

    def init(target_dtype="float16", *args, **kwargs):
        if not said:
            said.append(True)
            print("mxmixed run: the script calls amp.init(target_dtype=%r) but --amp %s "
                  "switched AMP on already; its call is ignored (run without --amp to let the "
                  "script choose)" % (str(target_dtype), target), file=sys.stderr)

    init.__doc__ = original.__doc__
    patches = Patches("mxmixed run's amp.init note")
    try:
        patches.patch(amp, "init", init)
        patches.patch(amp.amp, "init", init)
        yield
    finally:
        patches.undo()


def _amp_context(amp):
    """The AMP the runner switches on for the script, or None; raises ValueError (one line)."""
    if amp is None:
        return None
    if amp != "bfloat16":
        raise ValueError("--amp takes bfloat16 only (float16 training needs the script's own "
                         "loss scaling: use mxmixed.init_trainer / scale_loss in it)")
    runs, why = bfloat16_support()
    if not runs:
        raise ValueError("--amp bfloat16 cannot run here: %s" % why)
    return amp


def _step_line(summary, amp):
    median = summary["median_iteration_s"]
    if median is None:
        return "mxmixed run: %d optimizer step(s), too few to time (%s)" % (
            summary["steps"], amp or "float32")
    if amp:
        how = "bfloat16 AMP, %s" % ("native %s" % bfloat16_native() if bfloat16_native()
                                     else "emulated by oneDNN: slower than float32")
    else:
        how = "as the script runs it"
    return "mxmixed run: %d optimizer steps, median step %.4f s (%s)" % (
        summary["steps"], median, how)


def run_script(script, argv=(), report=None, emulation=True, amp=None):
    """Run ``script`` as ``__main__`` with ``argv``, as ``python script argv...`` would.

    Parameters
    ----------
    script : str
        Path of the Python script; it is never modified.
    argv : sequence of str
        The script's arguments (``sys.argv[1:]`` inside it).
    report : str, optional
        Write the float16 story of the run here as JSON: the loss scale per step, skipped
        steps, the first non-finite gradient, step times. Before the script starts, the file
        is replaced by one whose ``status`` is ``"running"`` (with this run's ``run_id``), so
        that an earlier run's report is never taken for this one's, even if this process is
        killed; at the end ``status`` is ``"finished"`` or ``"interrupted"`` (SIGINT,
        SIGTERM). Under ``horovodrun``, rank k > 0 writes ``NAME.rank<k>.EXT`` instead.
    emulation : bool, default True
        Switch the CPU float16 emulation on in ``auto`` mode (only when no GPU is visible).
        False runs the script as plain MXNet, as a baseline. Ignored with ``amp``.
    amp : {None, 'bfloat16'}
        Switch MXNet's bfloat16 AMP on (in an :func:`mxmixed.amp_scope`, undone afterwards)
        before the script starts, without loss scaling; a line on stderr gives the median
        step time. A call of ``amp.init`` in the script is ignored, with one line saying so.

    Returns
    -------
    int
        The script's exit status: 0 when it ends normally, its ``SystemExit`` code, 1 on an
        uncaught exception (its traceback is printed from the script's own frames on), 130 on
        SIGINT (``KeyboardInterrupt``), 143 on SIGTERM (unless the script handles SIGTERM
        itself), 2 when the script does not exist or the report cannot be written there
        (checked before the script runs: a missing folder, a folder, a symbolic link, a device
        or a FIFO). A final report that cannot be written (a full disk) is one line on stderr
        and leaves the script's exit status as it is.
    """
    report = _report_of_rank(os.path.abspath(report)) if report else None  # the script may chdir
    refusal = _refusal(script, report, amp)
    if refusal:  # found before the script runs, not after an hour of training
        print("mxmixed run: error: %s" % refusal, file=sys.stderr)
        return 2
    header = None
    if report:
        try:  # replaces an earlier run's report at once: it can never pass for this one's
            header = _start_report(report, script, argv)
        except (OSError, ValueError) as err:
            _report_write_error(report, err)
            return 2
    with contextlib.ExitStack() as stack:
        state = stack.enter_context(_emulation_for_run(emulation and not amp))
        state["amp"] = amp
        recorder = StepRecorder().install() if report or amp else None
        if recorder is not None:
            stack.callback(recorder.uninstall)
        if amp:
            stack.enter_context(amp_scope(target_dtype=amp))
            stack.enter_context(_script_amp_init_noted(amp))
        stack.enter_context(_as_main(script, argv))
        stack.enter_context(_sigterm_as_interrupt())
        start = time.perf_counter()
        outcome = _run_main(script)
        outcome["wall_s"] = time.perf_counter() - start
    if amp:
        print(_step_line(recorder.summary(), amp), file=sys.stderr)
    if report:
        _finish_report(report, dict(header, **outcome), state, recorder)
    if outcome["status"] == "interrupted":
        print("mxmixed run: the script was interrupted (%s), exit %d%s"
              % ("Ctrl-C" if outcome["error"] == "KeyboardInterrupt" else outcome["error"],
                 outcome["exit_code"], "; the report says so: %s" % report if report else ""),
              file=sys.stderr)
    return outcome["exit_code"]


def _report_of_rank(report, environ=None):
    """Where this process writes ``report``: under ``horovodrun`` (``HOROVOD_RANK`` of a job of
    ``HOROVOD_SIZE`` > 1) rank k > 0 writes ``NAME.rank<k>.EXT`` beside rank 0's ``NAME.EXT``,
    so that no rank overwrites another's."""
    env = os.environ if environ is None else environ
    try:
        rank, size = int(env.get("HOROVOD_RANK", "0")), int(env.get("HOROVOD_SIZE", "1"))
    except ValueError:
        return report
    if size < 2 or rank < 1:
        return report
    stem, ext = os.path.splitext(report)
    return "%s.rank%d%s" % (stem, rank, ext)


def _refusal(script, report, amp):
    """Why the run cannot start, in one line, or None: checked before the script runs."""
    if not os.path.isfile(script):
        return "script %s %s" % (script, "is a folder, not a Python file"
                                 if os.path.isdir(script) else "does not exist")
    problem = _report_problem(report) if report else None
    if problem:
        return "--report %s: %s" % (report, problem)
    try:
        _amp_context(amp)
    except ValueError as err:
        return str(err)
    return None


def _start_report(report, script, argv):
    """Write the report that says ``running`` and return it (OSError when it cannot be)."""
    header = {"status": "running", "run_id": secrets.token_hex(8), "pid": os.getpid(),
              "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "script": os.path.abspath(script), "argv": list(argv)}
    _write_json(report, header)
    return header


@contextlib.contextmanager
def _emulation_for_run(requested):
    """The emulation in ``auto`` mode while the script runs, if requested; yields the report's
    ``emulation`` entry. It is switched off again only if this switched it on."""
    was_active = emu.emulation_active()
    if requested:
        emu.enable(mode="auto")
    state = {"requested": bool(requested), "active": emu.emulation_active(),
             "description": emu.describe()}
    try:
        yield state
    finally:
        if requested and not was_active and emu.emulation_active():
            emu.disable()


@contextlib.contextmanager
def _as_main(script, argv):
    """``sys.argv`` and ``sys.path[0]`` as ``python script argv...`` sets them; restored after."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script] + list(argv)
    script_dir = os.path.dirname(os.path.abspath(script))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM stops the script as SIGINT does (so that a report is written), unless the
    process handles SIGTERM already or this is not the main thread."""
    sigterm = None
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        sigterm = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


def _run_main(script):
    """Run ``script`` as ``__main__``: its ``status``, ``exit_code`` and ``error`` (one line)."""
    try:
        runpy.run_path(script, run_name="__main__")
        code, error, status = 0, None, "finished"
    except SystemExit as exc:
        code, error, status = _exit_code(exc.code), None, "finished"
    except KeyboardInterrupt:
        code, error, status = 130, "KeyboardInterrupt", "interrupted"
    except ScriptTerminated:
        code, error, status = 143, "SIGTERM", "interrupted"
    except BaseException as exc:  # noqa: B902 - the script's error, reported as its own
        _print_script_traceback(exc, script)
        code, error, status = 1, _error_line(exc), "finished"
    return {"status": status, "exit_code": code, "error": error}


def _finish_report(report, final, state, recorder):
    """Write the final report; one line on stderr if it cannot be (the exit status stands)."""
    try:
        final = dict(final, emulation=state, summary=recorder.summary(), steps=recorder.steps)
        _write_json(report, dict({"note": _steps_note(recorder)}, **final))
    except (OSError, ValueError) as err:
        _report_write_error(report, err)


if __name__ == "__main__":  # python -m mxmixed.run ... is mxmixed run ...
    from .cli import main as _cli_main

    sys.exit(_cli_main(["run"] + sys.argv[1:]))
