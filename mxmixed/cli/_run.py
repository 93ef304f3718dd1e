"""``mxmixed run SCRIPT [ARGS...]``: any MXNet training script in float16 on a CPU, unmodified.

The runner switches the CPU float16 emulation on in ``auto`` mode (only when no GPU is
visible), then runs the script as ``__main__`` with its own arguments, as ``python SCRIPT
ARGS...`` would: ``sys.argv`` is ``[SCRIPT, ARGS...]``, ``__file__`` is SCRIPT made absolute
and ``sys.path[0]`` is the script's folder (``cli/_run_script``). The script's exit code is
returned and its errors surface as its own traceback.

With a report file it also records what happened in float16, for scripts that know nothing
about mxmixed: it hooks ``mxnet.gluon.Trainer.step`` / ``update``, ``mxnet.module.Module.update``
(what ``Module.fit`` calls per batch) and the AMP loss scaler's ``has_overflow`` from the
outside, and undoes the hooks when the script ends.

With ``--amp float16`` MXNet's float16 AMP is switched on before the script starts, each
Gluon Trainer is linked to a loss scaler, the loss is scaled at ``backward`` and clipping by
global norm sees the true gradients, for scripts with no float16 switch of their own
(``cli/_run_precision``, ``training.OutsideAmp``). With ``--amp bfloat16`` MXNet's bfloat16 AMP
is switched on (no loss scaling needed: bfloat16 has float32's exponent range), so a float32
script trains in bfloat16 through oneDNN, fast on CPUs with AVX512-BF16 or AMX; the float16
emulation stays off. A line on stderr gives the median step time, to compare with a run
without ``--amp``. The report is written by ``cli/_run_report``.

Usage: ``mxmixed run [--report FILE] [--no-emulation] [--amp float16|bfloat16]
[--loss-scale dynamic|N] SCRIPT [ARGS...]``,
or ``python -m mxmixed.run ...``. What the steps did is recorded by
:class:`mxmixed.diagnostics.steps.StepRecorder`.
"""
import argparse
import contextlib
import os
import sys

from .._files.signals import sigterm_raises
from ._run_precision import (amp_context, clip_watch, closing_line, emulation_for_run,
                             float16_from_outside, fp32_list, fp32_ops_problem, loss_scale_of,
                             missing_kernel_line, run_facts, script_amp_init_noted)
from ._run_report import (finish_report, report_of_rank, report_problem, report_write_error,
                          start_report, write_short_report)
from ._run_sigterm import (SigtermEnding, end_process, interrupted_line, threads_at_work,
                           unfinished_note)
from ._run_script import (ScriptTerminated, StdlibKept, as_main, error_line,
                          print_script_traceback, run_main, say, streams_kept)

__all__ = ["run_script", "ScriptTerminated", "add_parser", "command"]


def add_parser(sub):
    run = sub.add_parser(
        "run", help="run any MXNet training script with the CPU float16 emulation (--amp "
                    "float16: in float16 with loss scaling, unmodified)",
        description="Run SCRIPT as __main__ with ARGS, as 'python SCRIPT ARGS' would, with the "
                    "CPU float16 emulation switched on when no GPU is visible. Returns the "
                    "script's exit code. The script is never modified.")
    run.add_argument("--report", metavar="FILE",
                     help="write the float16 story as JSON: AMP loss scale per step, skipped "
                          "steps, the first non-finite gradient, step times")
    run.add_argument("--no-emulation", action="store_true",
                     help="run as plain MXNet, as a baseline")
    run.add_argument("--amp", choices=["float16", "bfloat16"], default=None,
                     help="switch MXNet's AMP on before the script starts. float16: every "
                          "Gluon Trainer gets a loss scaler, the loss is scaled at backward, "
                          "overflowing steps are skipped, and clipping by global norm sees the "
                          "true gradients (on a CPU under the float16 emulation: its numerics, "
                          "not its speed). bfloat16: CPUs with AVX-512, fast with AVX512-BF16 "
                          "or AMX, no loss scaling needed; prints the median step time")
    run.add_argument("--loss-scale", metavar="dynamic|N", default=None,
                     help="with --amp float16: 'dynamic' (the default: 65536 to start, halved "
                          "on overflow, doubled after 2000 clean steps) or a fixed scale N "
                          "(1: no loss scaling)")
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
                      fp32_ops=getattr(args, "fp32_ops", None),
                      loss_scale=getattr(args, "loss_scale", None), exit_after_sigterm=True)


def run_script(script, argv=(), report=None, emulation=True, amp=None,
               unscale_before_clip=False, fp32_ops=None, loss_scale=None,
               exit_after_sigterm=False):
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
        False runs the script as plain MXNet, as a baseline. Ignored with ``amp='bfloat16'``.
    amp : {None, 'float16', 'bfloat16'}
        Switch MXNet's AMP on (in an :func:`mxmixed.amp_scope`, undone afterwards) before the
        script starts; a call of ``amp.init`` in the script is ignored, with one line saying
        so. ``'float16'``: every Gluon Trainer the script makes is linked to a loss scaler
        (:func:`mxmixed.init_trainer`), the loss is scaled at ``backward`` and overflowing
        steps are skipped (:class:`mxmixed.training.OutsideAmp`; a script that scales its loss
        itself keeps doing so), and clipping by global norm sees the true gradients.
        ``'bfloat16'``: without loss scaling; a line on stderr gives the median step time.
    unscale_before_clip : bool, default False
        Unscale the gradients before the script clips (or measures) them by global norm while
        they carry the loss scale; without it (and without ``amp='float16'``, which implies
        it) such a call is named in one warning line. Either way the report's
        ``scaled_clipping`` lists the call sites (:class:`mxmixed.training.ClipWatch`).
    fp32_ops : sequence of str, optional
        With ``amp='bfloat16'``: ops kept float32 besides AMP's own float32 list.
    loss_scale : {None, 'dynamic'} or str or float, optional
        With ``amp='float16'``: each Trainer's loss scale, dynamic (the default) or fixed
        (a positive number; 1 means no loss scaling).
    exit_after_sigterm : bool, default False
        The command line's ending: after SIGTERM the process ends (status 143) within
        ``cli._run_sigterm.GRACE_S`` seconds, report written, whatever threads the script
        left at work, as plain python ends at once; without it SIGTERM only stops the script.

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
    from ..training import amp_scope

    report = report_of_rank(os.path.abspath(report)) if report else None  # the script may chdir
    refusal = _refusal(script, report, amp, fp32_ops, loss_scale)
    if refusal:  # found before the script runs, not after an hour of training
        print("mxmixed run: error: %s" % refusal, file=sys.stderr)
        return 2
    header = None
    if report:
        try:  # replaces an earlier run's report at once: it can never pass for this one's
            header = start_report(report, script, argv)
        except (OSError, ValueError) as err:
            report_write_error(report, err)
            return 2
    # __file__ as python 3.9+ sets it: the path joined to the folder, not normalized
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    outcome, raised = None, None
    ending = SigtermEnding(report, header) if exit_after_sigterm else None
    with StdlibKept().restoring() as restore:
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(streams_kept())
                state = stack.enter_context(emulation_for_run(emulation and amp != "bfloat16"))
                state["amp"] = amp
                if amp:
                    stack.enter_context(amp_scope(target_dtype=amp, fp32_ops=fp32_list(fp32_ops),
                                                  emulate=False))
                    stack.enter_context(script_amp_init_noted(amp))
                outside = stack.enter_context(float16_from_outside(amp, loss_scale))
                recorder = (StepRecorder(locate=bool(report),
                                         loss=outside.take_loss if outside else None).install()
                            if report or amp or state["active"] else None)
                if recorder is not None:
                    stack.callback(recorder.uninstall)
                watch = stack.enter_context(clip_watch(
                    path, unscale_before_clip or amp == "float16", recorder,
                    "--unscale-before-clip" if unscale_before_clip else "--amp float16"))
                stack.enter_context(as_main(script, argv))
                if ending is not None:
                    ending.state, ending.recorder, ending.watch = state, recorder, watch
                stack.enter_context(sigterm_raises(
                    ScriptTerminated, deadline=ending.deadline() if ending else None))
                outcome, raised = run_main(path)
                restore()
                outcome["scaled_clipping"] = watch.records()
                outcome.update(run_facts(recorder, amp, outside))
                refused = outside.refusal(raised) if outside is not None else None
                if refused:
                    raised = None
                    say("mxmixed run: error: %s" % refused)
                    outcome.update(exit_code=2, error=refused)
        except Exception as err:  # noqa: BLE001 - undoing the hooks failed: the script broke them
            if outcome is None:  # setting the run up failed: the script never ran
                return _not_started(report, header, err)
            say("mxmixed run: warning: undoing the run's hooks after the script failed: %s"
                % error_line(err))
        _end_once(ending, outcome, lambda: _after_script(path, report, amp, header, outcome,
                                                         raised, state, recorder))
    if ending is not None and outcome["error"] == "SIGTERM" and "unfinished" in outcome:
        end_process(143)  # python's exit would wait for those threads
    return outcome["exit_code"]


def _end_once(ending, outcome, after_script):
    """``after_script()`` (the end of the run), unless SIGTERM's deadline (``ending``) has
    written it already; after SIGTERM the threads still at work go into ``outcome``."""
    if outcome["error"] == "SIGTERM" and threads_at_work():
        outcome["unfinished"] = unfinished_note(threads_at_work(), ended=True)
    if ending is None:
        after_script()
        return
    with ending.lock:  # else the deadline has written the end, and ends the process
        if not ending.done:
            ending.done = True
            after_script()


def _after_script(script, report, amp, header, outcome, raised, state, recorder):
    """The script's traceback or one line for it, the closing line, the report and, for an
    interrupted run, the line that says so."""
    missing = missing_kernel_line(raised) if amp == "bfloat16" else None
    if missing:
        say("mxmixed run: error: %s" % missing)
        outcome.update(exit_code=2, error=missing)
    elif raised is not None:
        print_script_traceback(raised, script)
    try:
        closing = closing_line(recorder, amp, state, outcome.get("trained_in"))
    except Exception as err:  # noqa: BLE001 - the script broke what the summary reads
        closing = "mxmixed run: no step time: %s" % error_line(err)
    if closing:
        say(closing)
    if report:
        finish_report(report, dict(header, **outcome), state, recorder)
    if outcome["status"] == "interrupted":
        say(interrupted_line(outcome, report))


def _not_started(report, header, err):
    """One line for a run whose set-up failed before the script started, and its report
    closed with ``status`` ``not started``; exit 2."""
    line = "the run could not be set up, and the script did not start: %s" % error_line(err)
    say("mxmixed run: error: %s" % line)
    if report:
        write_short_report(report, dict(header, status="not started", exit_code=2, error=line))
    return 2


def _refusal(script, report, amp, fp32_ops=None, loss_scale=None):
    """Why the run cannot start, in one line, or None: checked before the script runs."""
    if not os.path.isfile(script):
        return "script %s %s" % (script, "is a folder, not a Python file"
                                 if os.path.isdir(script) else "does not exist")
    problem = report_problem(report) if report else None
    if problem:
        return "--report %s: %s" % (report, problem)
    try:
        amp_context(amp)
        loss_scale_of(loss_scale, amp)
    except ValueError as err:
        return str(err)
    return fp32_ops_problem(fp32_ops, amp) if fp32_ops else None
