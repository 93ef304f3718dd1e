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
or ``python -m mxmixed.run ...``. What the steps did is recorded by
:class:`mxmixed.diagnostics.steps.StepRecorder`.
"""
import argparse
import contextlib
import datetime
import io
import json
import os
import runpy
import secrets
import signal
import sys
import threading
import time
import traceback

from .._core.patches import Patches
from .._files.atomic import atomic_write, special_file
from ._streams import PipeSafe, Printable

__all__ = ["run_script", "ScriptTerminated", "add_parser", "command", "main"]

# What the runner uses once the script has ended, taken before any script runs: a script may
# replace json.dumps, os.replace, time.perf_counter or traceback.format_exception for itself.
_DUMPS, _CLOCK = json.dumps, time.perf_counter
_FORMAT_EXCEPTION, _FORMAT_ONLY = traceback.format_exception, traceback.format_exception_only
_OS = {name: getattr(os, name) for name in ("open", "write", "fsync", "close", "replace",
                                            "unlink", "fstat", "getpid")}


def add_parser(sub):
    run = sub.add_parser(
        "run", help="run any MXNet training script with the CPU float16 emulation",
        description="Run SCRIPT as __main__ with ARGS, as 'python SCRIPT ARGS' would, with the "
                    "CPU float16 emulation switched on when no GPU is visible. Returns the "
                    "script's exit code. The script is never modified.")
    run.add_argument("--report", metavar="FILE",
                     help="write the float16 story as JSON: AMP loss scale per step, skipped "
                          "steps, the first non-finite gradient, step times")
    run.add_argument("--no-emulation", action="store_true",
                     help="run as plain MXNet, as a baseline")
    run.add_argument("--amp", choices=["bfloat16"], default=None,
                     help="switch MXNet's bfloat16 AMP on before the script starts (CPUs with "
                          "AVX-512; fast with AVX512-BF16 or AMX; no loss scaling needed) and "
                          "print the median step time")
    run.add_argument("--fp32-op", action="append", metavar="OP", dest="fp32_ops",
                     help="with --amp bfloat16: keep OP (an MXNet op name, such as im2col) in "
                          "float32, beside AMP's own float32 ops; repeat for several")
    run.add_argument("--unscale-before-clip", action="store_true",
                     help="unscale the gradients (amp.unscale) before the script clips them by "
                          "global norm while they carry the loss scale (gluon.utils."
                          "clip_global_norm, gluonnlp.utils.clip_grad_global_norm), so that its "
                          "threshold applies to the true gradients")
    run.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="the script's arguments (all of them, options included)")
    run.set_defaults(func=command)


def command(args):
    return run_script(args.script, args.args, report=args.report,
                      emulation=not args.no_emulation, amp=getattr(args, "amp", None),
                      unscale_before_clip=getattr(args, "unscale_before_clip", False),
                      fp32_ops=getattr(args, "fp32_ops", None))


def main(argv=None):
    """``python -m mxmixed.run ARGS``: the same as ``mxmixed run ARGS``."""
    from . import main as cli_main

    return cli_main(["run"] + list(sys.argv[1:] if argv is None else argv))


def _write_json(path, payload):
    """Write ``payload`` as JSON atomically."""
    atomic_write(os.path.abspath(path), _DUMPS(payload, indent=2, default=str) + "\n")


def _say(line):
    """Write one line to stderr, whatever the script did to it: ``sys.stderr`` if it can take
    it, else descriptor 2, else nowhere. Never raises."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return
    except Exception:  # noqa: BLE001 - closed, None, or a stream of the script's that refuses
        pass
    try:
        _OS["write"](2, (line + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def _safe_str(value):
    """``str(value)``, or a placeholder when the script's ``__str__`` raises or returns no str
    (as Python's own traceback printing does)."""
    try:
        text = str(value)
    except BaseException:  # noqa: B902 - whatever its __str__ raises, SystemExit included
        return "<str() failed>"
    return text if isinstance(text, str) else "<str() failed>"


def _report_write_error(report, err):
    """One line on stderr for a report that could not be written."""
    reason = err.strerror if isinstance(err, OSError) and err.strerror else _safe_str(err)
    _say("mxmixed run: error: --report %s: cannot write it: %s" % (report, reason))


class ScriptTerminated(BaseException):
    """SIGTERM arrived while the script ran (the runner turns it into a partial report)."""


def _terminate(signum, frame):
    raise ScriptTerminated()


# registered: the hooks below, once per process; forks: per forking thread's ident, the fork
# under way as (parent pid, forked by the main thread, SIGTERM blocked for it)
_AT_FORK = {"registered": False, "forks": {}}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SIGTERM = {signal.SIGTERM}


def _before_fork():
    """In the forking thread, just before ``fork``: block SIGTERM while our handler is set, so
    that a SIGTERM sent to the new child before it has put SIGTERM's default back (a pool
    terminated while a worker is still starting) waits for that and then kills it. Delivered
    earlier, it would trip our handler, which the reset then drops: the worker lives on and
    its pool's ``terminate`` waits for it forever."""
    blocked = signal.getsignal(signal.SIGTERM) is _terminate
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGTERM)
    _AT_FORK["forks"][threading.get_ident()] = (
        os.getpid(), threading.current_thread() is threading.main_thread(), blocked)


def _after_fork_in_parent():
    """In the forking thread, once ``fork`` has returned: SIGTERM as it was before."""
    state = _AT_FORK["forks"].pop(threading.get_ident(), None)
    if state and state[2]:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGTERM)


def _child_default_sigterm():
    """In a forked child (a DataLoader worker, a ``multiprocessing`` pool's worker), SIGTERM
    kills again: the runner's handler belongs to the script's own process. A pool ends its
    workers by SIGTERM; raising in them instead prints tracebacks and can leave the parent
    waiting forever in ``Pool.terminate``. On Linux a child forked by the main thread also
    gets SIGTERM when the run's process dies, however it dies (a second SIGTERM, SIGKILL),
    so that no worker outlives the run. A SIGTERM that came while SIGTERM was blocked across
    the fork is delivered once the default is back."""
    forks = _AT_FORK["forks"]
    parent, from_main, blocked = forks.pop(threading.get_ident(), (None, False, False))
    forks.clear()  # other threads' forks under way belong to the parent
    if signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if from_main and sys.platform.startswith("linux"):
            _die_with_parent(parent)
    if blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGTERM)


def _die_with_parent(parent):
    """Ask Linux for SIGTERM when the parent dies (PR_SET_PDEATHSIG); if it has died already,
    SIGTERM now."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _reset_sigterm_in_forked_children():
    """Register the fork hooks above, once per process."""
    if not _AT_FORK["registered"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_child_default_sigterm)
        _AT_FORK["registered"] = True


def _real(path):
    """``os.path.realpath(path)``, or ``path`` when it cannot be resolved (the script deleted
    the folder it ran in)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _print_script_traceback(exc, script):
    """Print ``exc`` with the runner's frames cut: from the script's first frame on; its one
    line when even that cannot be formatted."""
    try:
        tb = exc.__traceback__
        script = _real(script)
        here = {_real(__file__), _real(runpy.__file__)}
        cut = tb
        while cut is not None and _real(cut.tb_frame.f_code.co_filename) != script:
            cut = cut.tb_next
        if cut is None:  # no frame of the script ran: a SyntaxError, or an error loading it
            cut = tb
            while cut is not None and (cut.tb_frame.f_code.co_filename.startswith("<frozen ")
                                       or _real(cut.tb_frame.f_code.co_filename) in here):
                cut = cut.tb_next
        if cut is None:  # as Python reports a SyntaxError in the script it runs: no frames
            text = "".join(_FORMAT_ONLY(type(exc), exc))
        else:
            text = "".join(_FORMAT_EXCEPTION(type(exc), exc, cut))
    except Exception:  # noqa: BLE001 - an exception Python's own formatting cannot take
        text = _error_line(exc)
    _say(text.rstrip("\n"))


def _error_line(exc):
    """The script's error in one line: its type and the first line of its message, and for a
    SyntaxError where it is (``SyntaxError: '(' was never closed (train.py, line 3)``)."""
    name = _safe_str(getattr(type(exc), "__name__", "exception"))
    message = _safe_str(exc).strip().splitlines()
    line = "%s: %s" % (name, message[0]) if message else name
    if isinstance(exc, SyntaxError) and isinstance(exc.filename, str):
        line = "%s: %s (%s, line %s)" % (name, _safe_str(exc.msg),
                                         os.path.basename(exc.filename), _safe_str(exc.lineno))
    return line


def _exit_code(code):
    """The process exit status ``sys.exit(code)`` gives, printing a message code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    _say(_safe_str(code))
    return 1


def _usable(stream, fd, wrap):
    """``stream`` if it is open, else a new one on descriptor ``fd`` (a buffer that nobody
    reads if that is closed too), wrapped by ``wrap``: the runner writes after a script that
    closed it."""
    try:
        if not stream.closed:
            return stream
    except Exception:  # noqa: BLE001 - whatever the stream's own state raises
        pass
    try:
        _OS["fstat"](fd)
        return wrap(open(fd, "w", buffering=1, closefd=False, errors="backslashreplace"))
    except OSError:
        return wrap(io.StringIO())


@contextlib.contextmanager
def _streams_kept():
    """``sys.stdout`` and ``sys.stderr`` put back after the script as they were, reopened on
    descriptors 1 and 2 when the script closed them."""
    saved = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stdout = _usable(saved[0], 1, PipeSafe)
        sys.stderr = _usable(saved[1], 2, Printable)


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
    from .._core.state import bfloat16_support

    runs, why = bfloat16_support()
    if not runs:
        raise ValueError("--amp bfloat16 cannot run here: %s" % why)
    return amp


def _step_line(summary, amp):
    from .._core.state import bfloat16_native

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


def _closing_line(recorder, amp, state):
    """The run's last line: bfloat16 AMP's step time, or what float16 did to the optimizer
    steps of a script that trained in float16 under the emulation; None for any other run."""
    if recorder is None:
        return None
    summary = recorder.summary()
    if amp:
        return _step_line(summary, amp)
    if not (state["active"] and summary["steps"]) or not (
            summary["amp_loss_scaler"] or any(_float16_params(t) for t in recorder.trainers)):
        return None
    line = "mxmixed run: %d optimizer steps in float16 (emulated on the CPU: its numerics, " \
        "not its speed)" % summary["steps"]
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


def _float16_params(trainer):
    """Whether a Trainer (or a Module) updates float16 parameters."""
    import numpy as np

    params = getattr(trainer, "_params", None)
    if params is not None:
        return any(np.dtype(p.dtype) == np.float16 for p in params)
    group = getattr(trainer, "_exec_group", None)
    return group is not None and any(arrays and np.dtype(arrays[0].dtype) == np.float16
                                     for arrays in group.param_arrays)


def run_script(script, argv=(), report=None, emulation=True, amp=None,
               unscale_before_clip=False, fp32_ops=None):
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
    unscale_before_clip : bool, default False
        Unscale the gradients before the script clips (or measures) them by global norm while
        they carry the loss scale; without it such a call is named in one warning line. Either
        way the report's ``scaled_clipping`` lists the call sites
        (:class:`mxmixed.training._clipwatch.ClipWatch`).
    fp32_ops : sequence of str, optional
        With ``amp``: ops kept float32 besides AMP's own float32 list.

    Returns
    -------
    int
        The script's exit status: 0 when it ends normally, its ``SystemExit`` code, 1 on an
        uncaught exception (its traceback is printed from the script's own frames on), 130 on
        SIGINT (``KeyboardInterrupt``), 143 on SIGTERM (unless the script handles SIGTERM
        itself), 2 when the script does not exist or the report cannot be written there
        (checked before the script runs: a missing folder, a folder, a symbolic link, a device
        or a FIFO). A final report that cannot be written (a full disk) is one line on stderr
        and leaves the script's exit status as it is. Under ``amp``, 2 also when bfloat16
        reached an op without a CPU bfloat16 kernel (MXNet's "Unknown type enum 12"): one line
        naming the kernel and ``--fp32-op``, instead of the traceback.
    """
    from ..diagnostics.steps import StepRecorder
    from ..training._amp import amp_scope

    report = _report_of_rank(os.path.abspath(report)) if report else None  # the script may chdir
    refusal = _refusal(script, report, amp, fp32_ops)
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
    outcome, raised = None, None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_streams_kept())
            state = stack.enter_context(_emulation_for_run(emulation and not amp))
            state["amp"] = amp
            recorder = (StepRecorder(locate=bool(report)).install()
                        if report or amp or state["active"] else None)
            if recorder is not None:
                stack.callback(recorder.uninstall)
            if amp:
                stack.enter_context(amp_scope(target_dtype=amp, fp32_ops=_fp32_list(fp32_ops)))
                stack.enter_context(_script_amp_init_noted(amp))
            watch = stack.enter_context(_clip_watch(script, unscale_before_clip, recorder))
            stack.enter_context(_as_main(script, argv))
            stack.enter_context(_sigterm_as_interrupt())
            start = _CLOCK()
            outcome, raised = _run_main(script)
            outcome["wall_s"] = _CLOCK() - start
            outcome["scaled_clipping"] = watch.records()
    except Exception as err:  # noqa: BLE001 - undoing the hooks failed: the script broke them
        if outcome is None:
            raise
        _say("mxmixed run: warning: undoing the run's hooks after the script failed: %s"
             % _error_line(err))
    missing = _missing_kernel_line(raised) if amp else None
    if missing:
        _say("mxmixed run: error: %s" % missing)
        outcome.update(exit_code=2, error=missing)
    elif raised is not None:
        _print_script_traceback(raised, script)
    try:
        closing = _closing_line(recorder, amp, state)
    except Exception as err:  # noqa: BLE001 - the script broke what the summary reads
        closing = "mxmixed run: no step time: %s" % _error_line(err)
    if closing:
        _say(closing)
    if report:
        _finish_report(report, dict(header, **outcome), state, recorder)
    if outcome["status"] == "interrupted":
        _say("mxmixed run: the script was interrupted (%s), exit %d%s"
             % ("Ctrl-C" if outcome["error"] == "KeyboardInterrupt" else outcome["error"],
                outcome["exit_code"], "; the report says so: %s" % report if report else ""))
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


def _refusal(script, report, amp, fp32_ops=None):
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
    return _fp32_ops_problem(fp32_ops, amp) if fp32_ops else None


def _fp32_ops_problem(fp32_ops, target):
    """Why ``--fp32-op`` cannot be used as given, or None."""
    from mxnet.contrib import amp

    from ..training._unlisted import resolves

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


def _fp32_list(fp32_ops):
    """AMP's bfloat16 float32 list with ``fp32_ops`` added; None (AMP's own) without them."""
    from mxnet.contrib import amp

    if not fp32_ops:
        return None
    ops = list(amp.lists.symbol_bf16.FP32_FUNCS)
    return ops + [op for op in fp32_ops if op not in ops]


def _missing_kernel_line(exc):
    """MXNet's error when bfloat16 reached an op without a CPU bfloat16 kernel, in one line
    that names the kernel and the fix; None for any other error."""
    from ..training._unlisted import missing_kernel

    found = missing_kernel(exc) if exc is not None else None
    if found is None:
        return None
    source, op = found
    return ("bfloat16 reached an op without a CPU bfloat16 kernel (MXNet's 'Unknown type enum "
            "12'%s names no op): keep it float32 with --fp32-op %s, or run without --amp"
            % (" in %s" % source if source else "", op or "OP"))


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


@contextlib.contextmanager
def _clip_watch(script, unscale, recorder):
    """Clipping of scaled gradients named (one line) or fixed, while the script runs."""
    from ..training._clipwatch import ClipWatch

    def say(record, text):
        print("mxmixed run: %s%s" % ("" if unscale else "warning: ", text), file=sys.stderr)

    step = (lambda: len(recorder.steps) + 1) if recorder is not None else None
    patches = Patches("mxmixed run's clipping watch")
    watch = ClipWatch(unscale=unscale, script=script, say=say, step=step)
    try:
        yield watch.install(patches)
    finally:
        patches.undo()
        watch.uninstall()


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
        if not isinstance(sys.path, list):  # the script rebound it
            sys.path = []
        sys.path[:] = saved_path


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM stops the script as SIGINT does (so that a report is written), unless the
    process handles SIGTERM already or this is not the main thread. Forked children get
    SIGTERM's default back."""
    sigterm = None
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _reset_sigterm_in_forked_children()
        sigterm = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


def _run_main(script):
    """Run ``script`` as ``__main__``: its ``status``, ``exit_code`` and ``error`` (one line),
    and the exception whose traceback is to be printed (None if none)."""
    raised = None
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
        raised = exc
        code, error, status = 1, _error_line(exc), "finished"
    return {"status": status, "exit_code": code, "error": error}, raised


def _finish_report(report, final, state, recorder):
    """Write the final report; when it cannot be written (a full disk, or what it needs broken
    by the script), one line on stderr and a shorter report of the status, exit code and
    error in its place, if that fits (the exit status stands)."""
    from ..diagnostics.steps import steps_note

    try:
        full = dict(final, emulation=state, summary=recorder.summary(), steps=recorder.steps)
        full = dict({"note": steps_note(recorder)}, **full)
        _write_json(report, full)
    except Exception as err:  # noqa: BLE001 - a full disk, or what the script replaced
        why = err
    else:
        _draw_report(report, full)
        return
    _report_write_error(report, why)
    try:
        _write_short(report, dict(final, note="the full report could not be written (%s); "
                                              "this is its status, exit code and error"
                                              % (_error_line(why),)))
    except Exception:  # noqa: BLE001 - said once, in the error line above
        pass


def _json_text(value):
    """``value`` (None, a bool, a number, a str, or a list or dict of them) as JSON, with
    nothing the script may have replaced: no json module, only built-in types' methods."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return "%d" % value
    if isinstance(value, float):
        return repr(float(value)) if value == value and abs(value) != float("inf") else "null"
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(_json_text(item) for item in value)
    if isinstance(value, dict):
        return "{\n  %s\n}" % ",\n  ".join("%s: %s" % (_json_text(str(k)), _json_text(v))
                                          for k, v in value.items())
    text = value if isinstance(value, str) else _safe_str(value)
    return '"%s"' % "".join(c if c >= " " and c not in '"\\' and not "\ud800" <= c <= "\udfff"
                            else "\\u%04x" % ord(c) for c in text)


def _write_short(report, payload):
    """Write ``payload`` to ``report`` through a temporary file and a rename, with the ``os``
    functions taken before the script ran."""
    tmp = "%s.%d.tmp" % (report, _OS["getpid"]())
    fd = _OS["open"](tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        _OS["write"](fd, (_json_text(payload) + "\n").encode("utf-8"))
        _OS["fsync"](fd)
    finally:
        _OS["close"](fd)
    try:
        _OS["replace"](tmp, report)
    except OSError:
        _OS["unlink"](tmp)
        raise


def _draw_report(report, data):
    """Draw the report's picture beside it (``R.png``), from the report as written (its JSON
    read back); any failure is one line on stderr."""
    from ..diagnostics.plots import plot_run, run_picture_path

    picture = run_picture_path(report)
    try:
        buffer = io.BytesIO()
        plot_run(json.loads(_DUMPS(data, default=str))).savefig(buffer, format="png", dpi=100)
        atomic_write(picture, buffer.getvalue())
    except Exception as err:  # noqa: BLE001 - a picture never changes the script's exit status
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        _say("mxmixed run: error: cannot draw the report's picture %s: %s"
             % (picture, _error_line(reason) if not isinstance(reason, str) else reason))
