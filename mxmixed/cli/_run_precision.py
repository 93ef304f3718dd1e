"""The precision ``mxmixed run`` switches on around a script, and its closing line.

The CPU float16 emulation in ``auto`` mode (:func:`emulation_for_run`); with ``--amp bfloat16``
MXNet's bfloat16 AMP, with the ops of ``--fp32-op`` kept float32 (:func:`amp_context`,
:func:`fp32_ops_problem`, :func:`fp32_list`) and the script's own ``amp.init`` calls named
(:func:`script_amp_init_noted`); the watch on clipping by global norm of scaled gradients
(:func:`clip_watch`); and the run's last line on stderr (:func:`closing_line`).
"""
import contextlib
import math
import sys

from .._core.patches import Patches

__all__ = ["emulation_for_run", "amp_context", "loss_scale_of", "float16_from_outside",
           "fp32_ops_problem", "fp32_list", "missing_kernel_line", "script_amp_init_noted",
           "clip_watch", "trained_in", "run_facts", "closing_line"]


@contextlib.contextmanager
def emulation_for_run(requested):
    """The emulation in ``auto`` mode while the script runs, if requested; yields the report's
    ``emulation`` entry. It is switched off again only if this switched it on."""
    from .. import emulation as emu

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


def amp_context(amp):
    """The AMP the runner switches on for the script, or None; raises ValueError (one line)."""
    if amp is None or amp == "float16":
        return amp
    if amp != "bfloat16":
        raise ValueError("--amp takes float16 or bfloat16, got %r" % (amp,))
    from .._core.devices import bfloat16_support

    runs, why = bfloat16_support()
    if not runs:
        raise ValueError("--amp bfloat16 cannot run here: %s" % why)
    return amp


def loss_scale_of(loss_scale, amp):
    """``--loss-scale`` as :func:`mxmixed.init_trainer` takes it: 'dynamic' (also for None) or
    a positive float; raises ValueError (one line)."""
    if loss_scale is None:
        return "dynamic"
    if amp != "float16":
        raise ValueError("--loss-scale needs --amp float16 (bfloat16 needs no loss scaling)")
    if loss_scale == "dynamic":
        return loss_scale
    try:
        value = float(loss_scale)
    except (TypeError, ValueError):
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise ValueError("--loss-scale takes 'dynamic' or a positive number (1: no loss "
                         "scaling), got %r" % (loss_scale,))
    return value


@contextlib.contextmanager
def float16_from_outside(amp, loss_scale):
    """Under ``--amp float16``, loss scaling for the script's Gluon Trainers while it runs
    (:class:`mxmixed.training.OutsideAmp`); yields it, or None for any other run."""
    if amp != "float16":
        yield None
        return
    from ..training import OutsideAmp, init_trainer

    def say(text):
        print("mxmixed run: %s" % text, file=sys.stderr)

    patches = Patches("mxmixed run's float16 AMP from outside")
    try:
        yield OutsideAmp(init_trainer, loss_scale_of(loss_scale, amp), say=say).install(patches)
    finally:
        patches.undo()


def fp32_ops_problem(fp32_ops, target):
    """Why ``--fp32-op`` cannot be used as given, or None."""
    from mxnet.contrib import amp

    from ..training import resolves

    if target != "bfloat16":
        return "--fp32-op needs --amp bfloat16 (float16 runs keep ops float32 by themselves)"
    unknown = [op for op in fp32_ops if not resolves(op)]
    if unknown:
        return "--fp32-op %s: no such MXNet op (names as in mx.nd: im2col, _contrib_RROIAlign)" \
            % unknown[0]
    low = [op for op in fp32_ops if op in amp.lists.symbol_bf16.BF16_FUNCS]
    if low:
        return "--fp32-op %s: bfloat16 AMP casts it to bfloat16 whatever other lists say; " \
            "run without --amp to keep it float32" % low[0]
    return None


def fp32_list(fp32_ops):
    """AMP's bfloat16 float32 list with ``fp32_ops`` added; None (AMP's own) without them."""
    from mxnet.contrib import amp

    if not fp32_ops:
        return None
    ops = list(amp.lists.symbol_bf16.FP32_FUNCS)
    return ops + [op for op in fp32_ops if op not in ops]


def missing_kernel_line(exc):
    """MXNet's error when bfloat16 reached an op without a CPU bfloat16 kernel, in one line
    that names the kernel and the fix; None for any other error."""
    from ..training import missing_kernel

    found = missing_kernel(exc) if exc is not None else None
    if found is None:
        return None
    source, op = found
    return ("bfloat16 reached an op without a CPU bfloat16 kernel (MXNet's 'Unknown type enum "
            "12'%s names no op): keep it float32 with --fp32-op %s, or run without --amp"
            % (" in %s" % source if source else "", op or "OP"))


@contextlib.contextmanager
def script_amp_init_noted(target):
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


@contextlib.contextmanager
def clip_watch(script, unscale, recorder, unscaled_by="--unscale-before-clip"):
    """Clipping of scaled gradients named (one line) or fixed, while the script runs."""
    from ..training import ClipWatch

    def say(record, text):
        print("mxmixed run: %s%s" % ("" if unscale else "warning: ", text), file=sys.stderr)

    step = (lambda: len(recorder.steps) + 1) if recorder is not None else None
    patches = Patches("mxmixed run's clipping watch")
    watch = ClipWatch(unscale=unscale, script=script, say=say, step=step,
                      unscaled_by=unscaled_by)
    try:
        yield watch.install(patches)
    finally:
        patches.undo()
        watch.uninstall()


def _step_line(summary, amp):
    from .._core.devices import bfloat16_native

    median = summary["median_iteration_s"]
    if median is None:
        return "mxmixed run: %d optimizer step(s), too few to time (%s)" % (
            summary["steps"], amp or "float32")
    if amp:
        how = "bfloat16 AMP, %s" % ("native %s" % bfloat16_native() if bfloat16_native()
                                     else "emulated by oneDNN: slower than float32")
    else:
        how = "as the script runs it"
    return "mxmixed run: %d optimizer steps, median step %.4f s (%s)%s" % (
        summary["steps"], median, how, _speed_note() if amp == "bfloat16" else "")


def _speed_note():
    """What bfloat16 AMP measured of each block's training step against float32, or ''."""
    from ..training import bfloat16_speed

    parts = [("%s not measured" % r.block) if r.skipped else "%s %.2fx%s" % (
        r.block, r.speedup, " (slower)" if r.slower else "") for r in bfloat16_speed()]
    return "; bfloat16 against float32, per block: %s" % ", ".join(parts) if parts else ""


def trained_in(recorder, amp):
    """What the run's optimizer steps trained in: 'float16' (AMP's loss scaler, float16
    parameters, or float16 AMP), 'bfloat16', 'float32', or None when no step was seen."""
    from ..training import amp_target

    if recorder is None or not recorder.steps:
        return None
    if amp:
        return amp
    target = amp_target()
    if target == "bfloat16":
        return "bfloat16"
    if target == "float16" or recorder.summary()["amp_loss_scaler"] \
            or recorder.updates_float16():
        return "float16"
    return "float32"


def run_facts(recorder, amp, outside):
    """The report's entries about the run's precision: ``trained_in``; under ``--amp float16``
    what the runner switched on (``amp_float16``); under bfloat16 AMP each block's training
    step measured against float32 (``bfloat16_speed``, :func:`mxmixed.training.bfloat16_speed`)."""
    from ..training import bfloat16_speed

    facts = {"trained_in": trained_in(recorder, amp)}
    if amp == "bfloat16" or bfloat16_speed():
        facts["bfloat16_speed"] = [record.as_dict() for record in bfloat16_speed()]
    if outside is not None:
        facts["amp_float16"] = outside.summary()
    return facts


def closing_line(recorder, amp, state, trained=None):
    """The run's last line: bfloat16 AMP's step time; what float16 did to the optimizer steps
    of a script that trained in float16; that a script trained in float32 did so; None
    without optimizer steps seen."""
    if recorder is None:
        return None
    summary = recorder.summary()
    if amp == "bfloat16":
        return _step_line(summary, amp)
    if trained == "float32" and summary["steps"]:
        return ("mxmixed run: %d optimizer steps, all in float32: the script never trained in "
                "float16 (no AMP, no float16 parameters); --amp float16 trains it in float16"
                % summary["steps"])
    if not (state["active"] or amp) or not summary["steps"] or not (
            amp or summary["amp_loss_scaler"]
            or recorder.updates_float16()):
        return None
    how = ["--amp float16"] if amp else []
    if state["active"]:
        how.append("emulated on the CPU: its numerics, not its speed")
    line = "mxmixed run: %d optimizer steps in float16 (%s)" % (summary["steps"], ", ".join(how))
    if summary["amp_loss_scaler"]:
        line += ", %d skipped on overflow, loss scale %g -> %g" % (
            summary["skipped"], summary["loss_scale_first"], summary["loss_scale_last"])
    else:
        line += ", no AMP loss scaler (a scale the script applies itself is not seen)"
    found = summary["first_nonfinite"]
    if found:
        line += ", first non-finite gradient at step %d (%s)" % (found["step"], found["layer"])
    median = summary["median_iteration_s"]
    return line + (", median step %.4f s" % median if median is not None else "")

