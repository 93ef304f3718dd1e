"""Running a script as ``__main__`` for ``mxmixed run``, as ``python SCRIPT ARGS...`` would.

``sys.argv`` and ``sys.path[0]`` are set as python sets them (:func:`as_main`), SIGTERM stops
the script as SIGINT does (:func:`mxmixed._files.signals.sigterm_raises`), and the script's
exit status, error line and traceback (cut to the script's own frames) are what python would
give (:func:`run_main`, :func:`print_script_traceback`). What the runner does after the script
ends runs with the standard library as it was before it (:class:`StdlibKept`) and with
``sys.stdout`` / ``sys.stderr`` usable (:func:`streams_kept`), whatever the script replaced or
closed.
"""
import builtins
import contextlib
import io
import json
import json.encoder
import os
import runpy
import secrets
import shutil
import stat
import sys
import time
import traceback
import types
import zipfile

from ._streams import PipeSafe, Printable

__all__ = ["ScriptTerminated", "StdlibKept", "as_main", "run_main", "print_script_traceback",
           "streams_kept", "say", "safe_str", "error_line"]

# The clock that times the script, taken before any script runs (one may replace
# time.perf_counter for itself; StdlibKept puts it back only once the script has ended).
_CLOCK = time.perf_counter

# What the runner calls after the script has ended: the report's writer (mxmixed._files.atomic
# and json), the traceback's printer, and the streams put back.
_KEPT = (os, os.path, io, json, json.encoder, json.JSONEncoder, traceback, time, secrets,
         shutil, stat)
_MISSING = object()


class ScriptTerminated(BaseException):
    """SIGTERM arrived while the script ran (the runner turns it into a partial report)."""


class StdlibKept:
    """The functions of the standard library the runner uses after the script, as they were
    when this object was made (before the script ran).

    A script may replace ``json.dumps``, ``os.replace``, ``traceback.format_exception`` or a
    method of ``json.JSONEncoder`` for itself. :meth:`restoring` puts the runner's back for
    the rest of the run, so that the report goes through the one atomic writer whatever the
    script did, and then gives the script's own back.
    """

    def __init__(self):
        self._saved = [(holder, dict(vars(holder))) for holder in _KEPT]

    @contextlib.contextmanager
    def restoring(self):
        """Yields a function that puts back what the script replaced, for the rest of the
        block; on leaving it, the script's replacements are put back as they were."""
        replaced = []

        def restore():
            for holder, saved in self._saved:
                now = vars(holder)
                for name, value in saved.items():
                    if now.get(name, _MISSING) is not value:
                        replaced.append((holder, name, now.get(name, _MISSING)))
                        setattr(holder, name, value)

        try:
            yield restore
        finally:
            for holder, name, value in reversed(replaced):
                if value is _MISSING:
                    delattr(holder, name)
                else:
                    setattr(holder, name, value)


def say(line):
    """Write one line to stderr, whatever the script did to it: ``sys.stderr`` if it can take
    it, else descriptor 2, else nowhere. Never raises."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return
    except Exception:  # noqa: BLE001 - closed, None, or a stream of the script's that refuses
        pass
    try:
        os.write(2, (line + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def safe_str(value):
    """``str(value)``, or a placeholder when the script's ``__str__`` raises or returns no str
    (as Python's own traceback printing does)."""
    try:
        text = str(value)
    except BaseException:  # noqa: B902 - whatever its __str__ raises, SystemExit included
        return "<str() failed>"
    return text if isinstance(text, str) else "<str() failed>"


def _real(path):
    """``os.path.realpath(path)``, or ``path`` when it cannot be resolved (the script deleted
    the folder it ran in)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def print_script_traceback(exc, script):
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
            text = "".join(traceback.format_exception_only(type(exc), exc))
        else:
            text = "".join(traceback.format_exception(type(exc), exc, cut))
    except Exception:  # noqa: BLE001 - an exception Python's own formatting cannot take
        text = error_line(exc)
    say(text.rstrip("\n"))


def error_line(exc):
    """The script's error in one line: its type and the first line of its message, and for a
    SyntaxError where it is (``SyntaxError: '(' was never closed (train.py, line 3)``)."""
    name = safe_str(getattr(type(exc), "__name__", "exception"))
    message = safe_str(exc).strip().splitlines()
    line = "%s: %s" % (name, message[0]) if message else name
    if isinstance(exc, SyntaxError) and isinstance(exc.filename, str):
        line = "%s: %s (%s, line %s)" % (name, safe_str(exc.msg),
                                         os.path.basename(exc.filename), safe_str(exc.lineno))
    return line


def _exit_code(code):
    """The process exit status ``sys.exit(code)`` gives, printing a message code."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    say(safe_str(code))
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
        os.fstat(fd)
        return wrap(open(fd, "w", buffering=1, closefd=False, errors="backslashreplace"))
    except OSError:
        return wrap(io.StringIO())


@contextlib.contextmanager
def streams_kept():
    """``sys.stdout`` and ``sys.stderr`` put back after the script as they were, reopened on
    descriptors 1 and 2 when the script closed them."""
    saved = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stdout = _usable(saved[0], 1, PipeSafe)
        sys.stderr = _usable(saved[1], 2, Printable)


@contextlib.contextmanager
def as_main(script, argv):
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


def _exec_as_main(path):
    """Run the Python file ``path`` as ``__main__``, as ``python PATH`` does: ``__file__`` is
    ``path`` (absolute, as python 3.9+ makes it) and ``sys.argv[0]`` stays as the caller set it
    (``runpy.run_path`` would set it to ``path``; it still runs a zip archive)."""
    if zipfile.is_zipfile(path):
        runpy.run_path(path, run_name="__main__")
        return
    with open(path, "rb") as file:
        code = compile(file.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__=None,
                         __spec__=None, __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def run_main(script):
    """Run ``script`` (an absolute path) as ``__main__``: its ``status``, ``exit_code``,
    ``error`` (one line) and ``wall_s``, and the exception whose traceback is to be printed
    (None if none)."""
    raised = None
    start = _CLOCK()
    try:
        _exec_as_main(script)
        code, error, status = 0, None, "finished"
    except SystemExit as exc:
        code, error, status = _exit_code(exc.code), None, "finished"
    except KeyboardInterrupt:
        code, error, status = 130, "KeyboardInterrupt", "interrupted"
    except ScriptTerminated:
        code, error, status = 143, "SIGTERM", "interrupted"
    except BaseException as exc:  # noqa: B902 - the script's error, reported as its own
        raised = exc
        code, error, status = 1, error_line(exc), "finished"
    return {"status": status, "exit_code": code, "error": error,
            "wall_s": _CLOCK() - start}, raised
