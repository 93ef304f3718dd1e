"""``mxmixed run SCRIPT [ARGS...]``: any MXNet training script in float16 on a CPU, unmodified.

The runner switches the CPU float16 emulation on in ``auto`` mode (only when no GPU is
visible), then runs the script as ``__main__`` with its own arguments, as ``python SCRIPT
ARGS...`` would: ``sys.argv`` is ``[SCRIPT, ARGS...]`` and ``sys.path[0]`` is the script's
folder. The script's exit code is returned and its errors surface as its own traceback.

With a report file it also records what happened in float16, for scripts that know nothing
about mxmixed: it hooks ``mxnet.gluon.Trainer.step`` / ``update`` and the AMP loss scaler's
``has_overflow`` from the outside, and undoes the hooks when the script ends.

With ``--amp bfloat16`` MXNet's bfloat16 AMP is switched on before the script starts (no loss
scaling needed: bfloat16 has float32's exponent range), so a float32 script trains in bfloat16
through oneDNN, fast on CPUs with AVX512-BF16 or AMX; the float16 emulation stays off. A line
on stderr gives the median step time, to compare with a run without ``--amp``.

Usage: ``mxmixed run [--report FILE] [--no-emulation] [--amp bfloat16] SCRIPT [ARGS...]``,
or ``python -m mxmixed.run ...``.
"""
import contextlib
import json
import os
import runpy
import sys
import time
import traceback

from mxnet.gluon import Trainer

from . import emulation as emu
from ._amp import amp_scope
from ._state import bfloat16_native, bfloat16_support
from ._io import atomic_write
from .diagnostics.nonfinite import nonfinite_gradients

__all__ = ["run_script", "StepRecorder"]


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
        self._originals = {}
        self._scalers = []
        self._last_end = None
        self._pending = None

    # ------------------------------------------------------------------ hooks
    def install(self):
        """Patch ``Trainer.step`` and ``Trainer.update``."""
        for name in ("step", "update"):
            original = Trainer.__dict__[name]
            self._originals[name] = original
            setattr(Trainer, name, self._wrap(original, name))
        return self

    def uninstall(self):
        """Restore ``Trainer`` and every hooked scaler exactly as they were."""
        for name, original in self._originals.items():
            setattr(Trainer, name, original)
        self._originals = {}
        for scaler in self._scalers:
            if "has_overflow" in getattr(scaler, "__dict__", {}):
                del scaler.has_overflow
        self._scalers = []

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

        scaler.has_overflow = has_overflow
        self._scalers.append(scaler)

    def _locate(self, params):
        found = nonfinite_gradients(list(params))
        if found:
            name, kind = found.origin
            self.first_nonfinite = {
                "step": len(self.steps) + 1, "tensor": "gradient of %s" % name, "kind": kind,
                "parameters_affected": len(found), "parameters_checked": found.total,
                "description": found.describe()}
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
            out["loss_scale_first"] = scaled[0]["loss_scale"]
            out["loss_scale_last"] = scaled[-1]["next_loss_scale"]
            out["loss_scale_min"] = min(s["loss_scale"] for s in scaled)
        return out


def _write_json(path, payload):
    """Write ``payload`` as JSON atomically."""
    atomic_write(os.path.abspath(path), json.dumps(payload, indent=2, default=str) + "\n")


def _print_script_traceback(exc, script):
    """Print ``exc`` with the runner's frames cut: from the script's first frame on."""
    tb = exc.__traceback__
    script = os.path.realpath(script)
    here = {os.path.realpath(__file__), os.path.realpath(runpy.__file__)}
    cut = tb
    while cut is not None and os.path.realpath(cut.tb_frame.f_code.co_filename) != script:
        cut = cut.tb_next
    if cut is None:  # e.g. a SyntaxError: no frame of the script ran; drop only our own
        cut = tb
        while cut is not None and os.path.realpath(cut.tb_frame.f_code.co_filename) in here:
            cut = cut.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, cut)))
    sys.stderr.flush()


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
    amp.init = amp.amp.init = init
    try:
        yield
    finally:
        amp.init = amp.amp.init = original


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
        steps, the first non-finite gradient, step times.
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
        uncaught exception (its traceback is printed from the script's own frames on), 2 when
        the script does not exist or the report cannot be written there (checked before the
        script runs).
    """
    if not os.path.isfile(script):
        print("mxmixed run: error: script %s %s" % (script, "is a folder, not a Python file"
              if os.path.isdir(script) else "does not exist"), file=sys.stderr)
        return 2
    report = os.path.abspath(report) if report else None  # the script may chdir
    problem = _report_problem(report) if report else None
    if problem:  # found before the script runs, not after an hour of training
        print("mxmixed run: error: --report %s: %s" % (report, problem), file=sys.stderr)
        return 2
    try:
        amp = _amp_context(amp)
    except ValueError as err:
        print("mxmixed run: error: %s" % err, file=sys.stderr)
        return 2
    if amp:
        emulation = False
    was_active = emu.emulation_active()
    if emulation:
        emu.enable(mode="auto")
    state = {"requested": bool(emulation), "active": emu.emulation_active(),
             "description": emu.describe() if hasattr(emu, "describe") else None}
    state["amp"] = amp
    recorder = StepRecorder().install() if report or amp else None
    scope = contextlib.ExitStack()
    if amp:
        scope.enter_context(amp_scope(target_dtype=amp))
        scope.enter_context(_script_amp_init_noted(amp))
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script] + list(argv)
    script_dir = os.path.dirname(os.path.abspath(script))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    error, start = None, time.perf_counter()
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        code, error = 130, "KeyboardInterrupt"
    except BaseException as exc:  # noqa: B902 - the script's error, reported as its own
        _print_script_traceback(exc, script)
        code, error = 1, "".join(traceback.format_exception_only(type(exc), exc)).strip()
    finally:
        wall = time.perf_counter() - start
        scope.close()
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if recorder is not None:
            recorder.uninstall()
        if emulation and not was_active and emu.emulation_active():
            emu.disable()
    if amp and recorder is not None:
        print(_step_line(recorder.summary(), amp), file=sys.stderr)
    if report:
        _write_json(report, {
            "script": os.path.abspath(script), "argv": list(argv), "exit_code": code,
            "error": error, "wall_s": wall, "emulation": state,
            "summary": recorder.summary(), "steps": recorder.steps})
    return code


if __name__ == "__main__":  # python -m mxmixed.run ... is mxmixed run ...
    from .cli import main as _cli_main

    sys.exit(_cli_main(["run"] + sys.argv[1:]))
