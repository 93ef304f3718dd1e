"""Signals during a write: SIGTERM cleans up like Ctrl-C, and no signal splits a commit.

:func:`sigterm_cleans_up` turns a SIGTERM whose action is the default one into an exception for
the duration of a write, so that temporary files are removed, and then ends the process as the
signal asked. :func:`signals_held` holds SIGINT and SIGTERM back during the renames of a write
and delivers them once the renames are done. Used by :mod:`mxmixed._files.atomic`.
"""
import contextlib
import signal
import threading

__all__ = ["sigterm_cleans_up", "signals_held"]


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
