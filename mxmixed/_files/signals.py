"""Signals during a write and during a run: SIGTERM cleans up like Ctrl-C, no signal splits a
commit, and forked children keep SIGTERM's default.

:func:`sigterm_cleans_up` turns a SIGTERM whose action is the default one into an exception for
the duration of a write, so that temporary files are removed, and then ends the process as the
signal asked. :func:`signals_held` holds SIGINT and SIGTERM back during the renames of a write
and delivers them once the renames are done. Used by :mod:`mxmixed._files.atomic`.

:func:`sigterm_raises` turns SIGTERM into an exception for as long as a script runs (``mxmixed
run``: the report is then written), and gives the children the script forks SIGTERM's default
back, so that they die of it as under plain python.
"""
import _thread
import contextlib
import os
import signal
import sys
import threading

__all__ = ["sigterm_cleans_up", "signals_held", "sigterm_raises"]

# The functions of ``signal`` used here, taken when mxmixed is imported: a script run by
# ``mxmixed run`` may replace ``signal.pthread_sigmask`` or ``signal.signal`` for itself, and
# the fork hooks and the handlers' restoring must not call its replacements (a traceback of
# the runner's, or a mask left wrong).
_signal, _getsignal = signal.signal, signal.getsignal
_sigmask, _raise_signal = signal.pthread_sigmask, signal.raise_signal
_getpid, _getppid, _kill = os.getpid, os.getppid, os.kill


class _Terminated(BaseException):
    """SIGTERM arrived while a write was in progress (raised to run the clean-up)."""


@contextlib.contextmanager
def sigterm_cleans_up():
    """Turn a SIGTERM with the default action into an exception for the duration of a write.

    Only the main thread can install handlers, and only the default action needs changing: a
    handler the program installed itself (or SIG_IGN) is left alone. After the block, the
    previous handler is restored and a SIGTERM that arrived is raised again, so the process
    still ends as the signal asks, with its temporary files gone.
    """
    sigterm = getattr(signal, "SIGTERM", None)
    if sigterm is None or threading.current_thread() is not threading.main_thread() \
            or _getsignal(sigterm) is not signal.SIG_DFL:
        yield
        return
    received = []

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:
            raise _Terminated()

    previous = _signal(sigterm, handler)
    try:
        yield
    finally:
        _signal(sigterm, previous)
        if received:  # the clean-up has run: now end as the signal asks
            _raise_signal(sigterm)


_HELD_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM")
                      if hasattr(signal, name))


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM back for the block, and deliver them once it is done.

    Python runs signal handlers in the main thread only, between two bytecodes: replacing them
    for the block with one that only takes note is enough (in a worker thread there is nothing
    to do). A signal that was ignored stays ignored. After the block the handlers are put back
    and each signal that arrived is handed to its own handler, or raised again where that is
    the default action.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived, previous = [], {}

    def note(signum, frame):
        arrived.append(signum)

    try:  # a signal while the handlers are being swapped still finds them put back
        for signum in _HELD_SIGNALS:
            handler = _getsignal(signum)
            if handler in (signal.SIG_IGN, None):
                continue
            previous[signum] = handler
            _signal(signum, note)
        yield
    finally:
        for signum, handler in previous.items():
            _signal(signum, handler)
        for signum in dict.fromkeys(arrived):
            handler = previous[signum]
            if handler is signal.SIG_DFL:
                _raise_signal(signum)
            elif callable(handler):
                handler(signum, None)


# registered: the fork hooks below, once per process; handler: the handler sigterm_raises set;
# forks: per forking thread's ident, the fork under way as (parent pid, forked by the main
# thread, the signal mask before the fork, or None when SIGTERM was not blocked for it)
_AT_FORK = {"registered": False, "handler": None, "forks": {}}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SIGTERM = {signal.SIGTERM}


def _ours():
    """Whether SIGTERM's handler is the one :func:`sigterm_raises` set."""
    return _AT_FORK["handler"] is not None \
        and _getsignal(signal.SIGTERM) is _AT_FORK["handler"]


def _before_fork():
    """In the forking thread, just before ``fork``: block SIGTERM while our handler is set, so
    that a SIGTERM sent to the new child before it has put SIGTERM's default back (a pool
    terminated while a worker is still starting) waits for that and then kills it. Delivered
    earlier, it would trip our handler, which the reset then drops: the worker lives on and
    its pool's ``terminate`` waits for it forever. The mask before (the script's own, which
    may block SIGTERM itself) is kept, to be put back on both sides."""
    mask = _sigmask(signal.SIG_BLOCK, _SIGTERM) if _ours() else None
    _AT_FORK["forks"][threading.get_ident()] = (
        _getpid(), threading.current_thread() is threading.main_thread(), mask)


def _after_fork_in_parent():
    """In the forking thread, once ``fork`` has returned: the signal mask as it was before."""
    state = _AT_FORK["forks"].pop(threading.get_ident(), None)
    if state and state[2] is not None:
        _sigmask(signal.SIG_SETMASK, state[2])


def _child_default_sigterm():
    """In a forked child (a DataLoader worker, a ``multiprocessing`` pool's worker), SIGTERM
    kills again: the runner's handler belongs to the script's own process. A pool ends its
    workers by SIGTERM; raising in them instead prints tracebacks and can leave the parent
    waiting forever in ``Pool.terminate``. The child's signal mask is the parent's before the
    fork: a SIGTERM the script blocked stays blocked, and one that came while the hook blocked
    it is delivered once the default is back. On Linux a daemonic ``multiprocessing`` child
    forked by the main thread (a pool's or a DataLoader's worker, which ``multiprocessing``
    ends with its parent anyway) also gets SIGTERM when the run's process dies, however it dies
    (a second SIGTERM, SIGKILL), so that no worker outlives the run; any other child (a helper
    forked to outlive the script) lives on as under plain python."""
    forks = _AT_FORK["forks"]
    parent, from_main, mask = forks.pop(threading.get_ident(), (None, False, None))
    forks.clear()  # other threads' forks under way belong to the parent
    if _ours():
        _signal(signal.SIGTERM, signal.SIG_DFL)
        if from_main and sys.platform.startswith("linux") and _daemonic_worker(sys._getframe(1)):
            _die_with_parent(parent)
    if mask is not None:
        _sigmask(signal.SIG_SETMASK, mask)


def _daemonic_worker(frame):
    """Whether the fork of this child (``frame`` called ``os.fork``) is ``multiprocessing``'s
    start of a daemonic process: ``Popen._launch(process_obj)`` of its fork start method."""
    process = sys.modules.get("multiprocessing.process")
    if process is None or frame is None or frame.f_code.co_name != "_launch":
        return False
    launched = frame.f_locals.get("process_obj")
    return isinstance(launched, process.BaseProcess) and bool(launched.daemon)


def _die_with_parent(parent):
    """Ask Linux for SIGTERM when the parent dies (PR_SET_PDEATHSIG); if it has died already,
    SIGTERM now."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if _getppid() != parent:
        _kill(_getpid(), signal.SIGTERM)


def _register_fork_hooks():
    """Register the fork hooks above, once per process."""
    if not _AT_FORK["registered"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_child_default_sigterm)
        _AT_FORK["registered"] = True


@contextlib.contextmanager
def sigterm_raises(exception, deadline=None):
    """SIGTERM raises ``exception`` (a class) for the block, as SIGINT raises
    ``KeyboardInterrupt``, unless the process handles SIGTERM already or this is not the main
    thread; the previous handler is put back after it. Children forked meanwhile get
    SIGTERM's default back (and, daemonic ``multiprocessing`` workers forked by the main
    thread on Linux, SIGTERM when this process dies).

    Parameters
    ----------
    exception : type
    deadline : (float, callable), optional
        ``(seconds, end)``: the first SIGTERM also starts a thread that calls ``end()`` that
        many seconds later, even after the block, for a process that the unwinding of
        ``exception`` does not end in time (a thread or an executor at work that python's exit
        waits for, where plain python dies of SIGTERM at once). ``end`` should end the
        process.
    """
    previous = None
    if threading.current_thread() is threading.main_thread() \
            and _getsignal(signal.SIGTERM) is signal.SIG_DFL:
        armed = []

        def handler(signum, frame):
            if deadline is not None and not armed:
                armed.append(True)
                # a thread of _thread's: threading's own locks may be held by the code this
                # handler interrupted
                _thread.start_new_thread(_after, deadline)
            raise exception()

        _register_fork_hooks()
        _AT_FORK["handler"] = handler
        previous = _signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if previous is not None:
            _signal(signal.SIGTERM, previous)


def _after(seconds, end):
    import time

    time.sleep(seconds)
    end()
