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
import contextlib
import os
import signal
import sys
import threading

__all__ = ["sigterm_cleans_up", "signals_held", "sigterm_raises"]


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
            or signal.getsignal(sigterm) is not signal.SIG_DFL:
        yield
        return
    received = []

    def handler(signum, frame):
        received.append(signum)
        if len(received) == 1:
            raise _Terminated()

    previous = signal.signal(sigterm, handler)
    try:
        yield
    finally:
        signal.signal(sigterm, previous)
        if received:  # the clean-up has run: now end as the signal asks
            signal.raise_signal(sigterm)


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
            handler = signal.getsignal(signum)
            if handler in (signal.SIG_IGN, None):
                continue
            previous[signum] = handler
            signal.signal(signum, note)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(arrived):
            handler = previous[signum]
            if handler is signal.SIG_DFL:
                signal.raise_signal(signum)
            elif callable(handler):
                handler(signum, None)


# registered: the fork hooks below, once per process; handler: the handler sigterm_raises set;
# forks: per forking thread's ident, the fork under way as (parent pid, forked by the main
# thread, SIGTERM blocked for it)
_AT_FORK = {"registered": False, "handler": None, "forks": {}}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SIGTERM = {signal.SIGTERM}


def _ours():
    """Whether SIGTERM's handler is the one :func:`sigterm_raises` set."""
    return _AT_FORK["handler"] is not None \
        and signal.getsignal(signal.SIGTERM) is _AT_FORK["handler"]


def _before_fork():
    """In the forking thread, just before ``fork``: block SIGTERM while our handler is set, so
    that a SIGTERM sent to the new child before it has put SIGTERM's default back (a pool
    terminated while a worker is still starting) waits for that and then kills it. Delivered
    earlier, it would trip our handler, which the reset then drops: the worker lives on and
    its pool's ``terminate`` waits for it forever."""
    blocked = _ours()
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
    if _ours():
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


def _register_fork_hooks():
    """Register the fork hooks above, once per process."""
    if not _AT_FORK["registered"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_child_default_sigterm)
        _AT_FORK["registered"] = True


@contextlib.contextmanager
def sigterm_raises(exception):
    """SIGTERM raises ``exception`` (a class) for the block, as SIGINT raises
    ``KeyboardInterrupt``, unless the process handles SIGTERM already or this is not the main
    thread; the previous handler is put back after it. Children forked meanwhile get
    SIGTERM's default back (and, forked by the main thread on Linux, SIGTERM when this
    process dies)."""
    previous = None
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def handler(signum, frame):
            raise exception()

        _register_fork_hooks()
        _AT_FORK["handler"] = handler
        previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
