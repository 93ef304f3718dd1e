"""How ``mxmixed run`` ends on SIGTERM: within about a second, as plain python ends at once,
whatever the script's threads are doing.

SIGTERM stops the script as SIGINT does (``_files.signals.sigterm_raises``), so that its report
is written. Unwinding it may not end the process: a ``with ThreadPoolExecutor()`` block waits for
its work on the way out, and python's exit waits for every non-daemon thread. Plain python
dies of SIGTERM at once. So the first SIGTERM also starts a deadline (:data:`GRACE_S`): if the
runner has not written the report by then, the deadline writes it (``interrupted``, with the
threads still at work named under ``unfinished``); either way the process then ends with
status 143 without waiting for the threads, as python would. Only the command line arms it
(``run_script`` called from Python returns instead).
"""
import os
import sys
import threading
import time

from ._run_report import finish_report
from ._run_script import say

__all__ = ["GRACE_S", "SigtermEnding", "interrupted_line", "threads_at_work", "unfinished_note",
           "end_process"]

#: Seconds between SIGTERM and the end of the run, whatever the script still does.
GRACE_S = 1.0

# how long the end waits for the standard streams to be flushed (a full pipe nobody reads
# must not keep the process alive)
_FLUSH_S = 0.5


def threads_at_work():
    """The names of the threads that python's exit would wait for (non-daemon, alive, other
    than the main thread).

    Returns
    -------
    list of str
    """
    main, running = threading.main_thread(), sys._current_frames()
    # running, not is_alive(): a join() that SIGTERM's exception interrupted marks a thread
    # that still runs as stopped (Python 3.11's threading, bpo-45274)
    return [t.name for t in threading.enumerate()
            if t is not main and not t.daemon and t.ident in running]


def interrupted_line(outcome, report):
    """The run's last line when the script was interrupted (SIGINT or SIGTERM)."""
    return "mxmixed run: the script was interrupted (%s), exit %d%s" % (
        "Ctrl-C" if outcome["error"] == "KeyboardInterrupt" else outcome["error"],
        outcome["exit_code"], "; the report says so: %s" % report if report else "")


def unfinished_note(threads, ended):
    """The report's ``unfinished`` line for ``threads`` still at work after SIGTERM."""
    what = "the script ended" if ended else "the script had not ended %g s after it" % GRACE_S
    if threads:
        return ("SIGTERM: %s, with threads at work (%s); the run ended without waiting for "
                "them, as python ends on SIGTERM" % (what, ", ".join(threads)))
    return "SIGTERM: %s; the run ended without waiting for it, as python ends on SIGTERM" % what


def end_process(code):
    """Flush the standard streams (for at most :data:`_FLUSH_S`) and end the process with
    ``code`` at once: no thread, ``atexit`` function or child is waited for."""
    flushed = threading.Event()

    def flush():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - closed or replaced by the script
                pass
        flushed.set()

    threading.Thread(target=flush, daemon=True).start()
    flushed.wait(_FLUSH_S)
    os._exit(code)


class SigtermEnding:
    """The end of a run that SIGTERM interrupted: the report written once, by whichever comes
    first, the runner after the script or the deadline.

    Parameters
    ----------
    report : str or None
        The report's path.
    header : dict or None
        The report as started.

    Attributes
    ----------
    lock : threading.Lock
        Held while either side writes the end of the run.
    done : bool
        Whether the end of the run has been written.
    state, recorder, watch
        The report's ``emulation`` entry, the step recorder and the clipping watch, once
        the runner has set them up.
    """

    def __init__(self, report, header):
        self.report, self.header = report, header
        self.lock = threading.Lock()
        self.done = False
        self.state = self.recorder = self.watch = None
        self.started = time.perf_counter()

    def deadline(self):
        """``(seconds, end)`` for ``sigterm_raises``."""
        return GRACE_S, self.end

    def end(self):
        """At the deadline: write the end of the run unless the runner has, then end the
        process (143)."""
        with self.lock:
            if not self.done:
                self.done = True
                outcome = {"status": "interrupted", "exit_code": 143, "error": "SIGTERM",
                           "wall_s": time.perf_counter() - self.started,
                           "unfinished": unfinished_note(threads_at_work(), ended=False)}
                try:
                    outcome["scaled_clipping"] = self.watch.records() if self.watch else []
                    if self.report and self.recorder is not None:
                        finish_report(self.report, dict(self.header, **outcome), self.state,
                                      self.recorder)
                except Exception as err:  # noqa: BLE001 - the process ends all the same
                    say("mxmixed run: error: --report %s: cannot write it: %s"
                        % (self.report, err))
                say(interrupted_line(outcome, self.report))
        end_process(143)
