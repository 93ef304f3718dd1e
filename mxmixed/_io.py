"""The one atomic writer: checkpoints and converted models reach the disk whole or not at all.

:func:`atomic_write` writes one file, :func:`atomic_write_group` several files that belong
together (a converted model's ``prefix-symbol.json`` and ``prefix-0000.params``). Both:

* write each file to a temporary name in the target's own folder
  (``.<name>.<pid>.<tag>.tmp``), so that the final rename never crosses a filesystem;
* create it with mode ``0o666`` less the umask, as a plain ``open()`` would; the process umask
  is never changed;
* fsync the data, ``os.replace`` it over the target, then fsync the folder so that the rename
  itself is durable;
* remove their temporary files on any error, ``KeyboardInterrupt`` (SIGINT) and SIGTERM
  included: while a write is in progress in the main thread, a SIGTERM whose handler is still
  the default one aborts the write, the clean-up runs, and the signal is then delivered again
  with its default action (the process ends as SIGTERM would have ended it);
* sweep, before writing, the temporary files that an earlier process killed outright
  (SIGKILL, power loss) left beside the same target: those whose owner pid no longer runs on
  this machine.

A group write never destroys a good earlier group: every old target is first hard-linked to a
backup name beside it (``.<name>.<pid>.<tag>.bak``; a copy where the filesystem has no hard
links), the new files are renamed over the targets one by one, and if any step fails the
targets already replaced are restored from their backups (or removed, where there was no
earlier file). The backups are removed at the end. Only if a rollback itself fails (a second
fault) is a backup kept, and the error names it in a note; a later write to the same target
sweeps it once this process has ended.

.. note::
   Only a process killed *between* two renames of a group (a window of microseconds) can leave
   a mixed group behind; the next group write to the same place replaces it whole.
"""
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import zlib

__all__ = ["atomic_write", "atomic_write_group", "check_writable", "scratch_file", "sweep_stale"]

_HOST = "%04x" % (zlib.crc32(socket.gethostname().encode("utf-8", "replace")) & 0xFFFF)


class _Terminated(BaseException):
    """SIGTERM arrived while a write was in progress (raised to run the clean-up)."""


@contextlib.contextmanager
def _sigterm_cleans_up():
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


def _name(target, kind):
    folder, base = os.path.split(os.path.abspath(target))
    return os.path.join(folder, ".%s.%d.%s%s.%s" % (base, os.getpid(), _HOST,
                                                    secrets.token_hex(4), kind))


def _create(target, kind="tmp"):
    """A new empty file beside ``target``, mode 0o666 less the umask; returns its path."""
    while True:
        path = _name(target, kind)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return path


def _pid_alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's live process
        return True
    return True


def sweep_stale(target):
    """Remove the temporary files and backups of ``target`` left by dead processes.

    Only files named as this module names them, written on this machine (the name carries a
    tag of the host name) by a pid that no longer runs, are removed. Nothing is done on
    Windows, where a pid cannot be probed safely.

    Parameters
    ----------
    target : str
        The file whose litter to sweep.

    Returns
    -------
    list of str
        The paths removed.
    """
    if os.name == "nt":
        return []
    folder, base = os.path.split(os.path.abspath(target))
    pattern = re.compile(r"^\.%s\.(\d+)\.(?:(%s)[0-9a-f]{8}|[0-9a-f]{8})\.(?:tmp|bak)$"
                         % (re.escape(base), _HOST))
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            os.remove(path)
            removed.append(path)
    return removed


def _fill(path, content):
    if callable(content):
        content(path)
    else:
        if isinstance(content, str):
            content = content.encode("utf-8")
        with open(path, "wb") as fileobj:
            fileobj.write(content)
    with open(path, "rb") as fileobj:
        os.fsync(fileobj.fileno())


def _fsync_folder(folder):
    # Makes the renames durable on POSIX; not possible (nor needed) on Windows.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_quietly(paths):
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)


def _check_target(target):
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "the folder %s does not exist" % folder, target)
    if os.path.isdir(target):
        raise IsADirectoryError(21, "it is a folder", target)


def check_writable(paths):
    """Check, before any expensive work, that :func:`atomic_write_group` could write ``paths``.

    For each path: its folder exists, it is not a folder, a file can be created beside it (the
    temporary file is removed at once), and an existing file there can be opened for writing
    (an immutable file cannot, even by root). Nothing is changed.

    Parameters
    ----------
    paths : list of str

    Raises
    ------
    OSError
        The first problem found (FileNotFoundError, IsADirectoryError, PermissionError ...),
        with the path in its ``filename``.
    """
    for path in paths:
        path = os.fspath(path)
        _check_target(path)
        _remove_quietly([_create(path)])
        if os.path.lexists(path):
            os.close(os.open(path, os.O_WRONLY | getattr(os, "O_BINARY", 0)))


def _backup(target):
    """A backup of an existing ``target`` beside it (a hard link, else a copy); None if absent."""
    if not os.path.lexists(target):
        return None
    backup = _name(target, "bak")
    try:
        os.link(target, backup)
    except OSError:  # no hard links here, or an immutable file: copy it
        try:
            shutil.copy2(target, backup)
        except BaseException:
            _remove_quietly([backup])
            raise
    return backup


def atomic_write_group(contents):
    """Write several files so that either all of them are replaced, or none is touched.

    Parameters
    ----------
    contents : list of (str, bytes or str or callable)
        Each target path with what goes into it: bytes, text (written as UTF-8), or a function
        that gets the path of an empty temporary file beside the target and fills it (for
        writers that want a file name, such as ``mx.nd.save``).

    Raises
    ------
    OSError
        When a file cannot be written or replaced. Every target is then as it was before the
        call and no temporary file or backup is left.
    """
    contents = [(os.fspath(path), content) for path, content in contents]
    for path, _ in contents:
        _check_target(path)
    temps, backups, replaced = [], {}, []
    with _sigterm_cleans_up():
        try:
            for path, _ in contents:
                sweep_stale(path)
            for path, content in contents:
                temps.append(_create(path))
                _fill(temps[-1], content)
            if len(contents) > 1:
                for path, _ in contents:
                    backups[path] = _backup(path)
            for (path, _), temp in zip(contents, temps):
                os.replace(temp, path)
                replaced.append(path)
            for folder in sorted({os.path.dirname(os.path.abspath(p)) for p, _ in contents}):
                _fsync_folder(folder)
        except BaseException as err:
            kept = _restore(replaced, backups)
            _remove_quietly(temps)
            if kept and hasattr(err, "add_note"):
                err.add_note("could not put back the earlier %s; its copy is kept at %s"
                             % tuple(", ".join(x) for x in zip(*kept)))
            raise
        finally:
            _remove_quietly(b for b in backups.values() if b is not None)


def _restore(replaced, backups):
    """Put back the earlier files of the targets already replaced (rollback of a group).

    Returns the (target, backup) pairs that could not be put back; those backups are kept (they
    are the only copy of the earlier files) and the caller names them.
    """
    kept = []
    for path in reversed(replaced):
        backup = backups.get(path)
        try:
            if backup is None:
                os.remove(path)
            else:
                os.replace(backup, path)
                backups[path] = None
        except OSError:
            if backup is not None:
                kept.append((path, backup))
                backups[path] = None
    return kept


def atomic_write(path, content):
    """Write one file atomically: ``path`` holds either its earlier content or all of the new.

    Parameters
    ----------
    path : str or os.PathLike
    content : bytes, str or callable
        As in :func:`atomic_write_group`.

    Raises
    ------
    OSError
        When the file cannot be written; an earlier file at ``path`` is then intact and no
        temporary file is left.
    """
    atomic_write_group([(path, content)])


@contextlib.contextmanager
def scratch_file(target):
    """A temporary file beside ``target``, removed on exit (for writers that need a path).

    It is named like the temporary files of :func:`atomic_write`, so that one left by a killed
    process is swept by the next write to ``target``.

    Parameters
    ----------
    target : str

    Yields
    ------
    str
        The path of an empty file.
    """
    with _sigterm_cleans_up():
        path = _create(os.fspath(target))
        try:
            yield path
        finally:
            _remove_quietly([path])
