"""The one atomic writer: checkpoints, converted pairs and reports reach the disk whole, or not.

:func:`atomic_write` writes one file, :func:`atomic_write_group` several files that belong
together (a converted model's ``prefix-symbol.json`` and ``prefix-0000.params``). Both:

* refuse a target that exists and is not a regular file (a symbolic link, a device such as
  ``/dev/null``, a FIFO, a socket) with :class:`NotRegularFileError` (an ``OSError``): renaming
  over it would replace the link or the device with a plain file, and writing through it would
  write where the caller did not look. Nothing is changed;
* write each file to a temporary name in the target's own folder
  (``.<name>.<pid>.<tag>.tmp``), so that the final rename never crosses a filesystem. Where
  that name would be longer than the filesystem allows (``NAME_MAX``, 255 bytes: the name of
  the target takes up to 226), ``<name>`` is the target's name cut short, ``~`` and a hash of
  it, so that any name the filesystem holds can be written; a target name it cannot hold is
  refused first (``ENAMETOOLONG``, naming the target);
* name the target in every error, never a temporary file, backup or lock beside it;
* create it with mode ``0o666`` less the umask, as a plain ``open()`` would; the process umask
  is never changed;
* fsync the data, ``os.replace`` it over the target, then fsync the folder so that the rename
  itself is durable;
* remove their temporary files on any error, ``KeyboardInterrupt`` (SIGINT) and SIGTERM
  included, while the data is being written: while a write is in progress in the main thread, a
  SIGTERM whose handler is still the default one aborts the write, the clean-up runs, and the
  signal is then delivered again with its default action (the process ends as SIGTERM would
  have ended it);
* hold SIGINT and SIGTERM back during the renames (the *commit*): a signal that arrives then is
  delivered once the last rename is done, so that a signal never leaves a half-replaced group,
  and never rolls back (or deletes) a file that was already replaced. Python runs signal
  handlers in the main thread only, so a write from another thread is not interrupted by them;
  but a SIGTERM left at its default action ends the whole process at once, as SIGKILL would,
  when the write is not in the main thread;
* sweep, before writing, the temporary files that an earlier process killed outright
  (SIGKILL, power loss) left beside the same target: those whose owner pid no longer runs on
  this machine.

A group write never destroys a good earlier group: every old target is first hard-linked to a
backup name beside it (``.<name>.<pid>.<tag>.bak``; a copy where the filesystem has no hard
links), the new files are renamed over the targets one by one, and if a rename fails the
targets already replaced are restored from their backups (or removed, where there was no
earlier file). Whether a target was replaced is read from the disk (its temporary file is gone),
not from a list kept beside the rename. The backups are removed at the end. Only if a rollback
itself fails (a second fault) is a backup kept, and the error names it in a note; a later write
to the same target sweeps it once this process has ended.

Two processes writing a group to the same place take turns for the renames: the commit holds an
exclusive ``fcntl.flock`` on a lock file beside the first target (``.<name>.lock``, removed by
the holder before it unlocks), so the group on disk is always one writer's complete group. Where
the filesystem has no ``flock`` (some network filesystems) the writers are not serialized.

A full disk while the data is written is an ``OSError`` (``ENOSPC``) whose message is one line;
nothing is replaced.

.. note::
   Only a process killed outright (SIGKILL, power loss) *between* two renames of a group (a
   window of microseconds) can leave a mixed group behind; the next group write to the same
   place replaces it whole.

Reading files from someone else is :mod:`mxmixed._files.untrusted`.
"""
import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import zlib

from .signals import signals_held, sigterm_cleans_up

__all__ = ["atomic_write", "atomic_write_group", "check_writable", "sweep_stale",
           "special_file", "NotRegularFileError"]

_HOST = "%04x" % (zlib.crc32(socket.gethostname().encode("utf-8", "replace")) & 0xFFFF)


# ".<stem>.<pid>.<host tag + random>.<tmp|bak>": 29 bytes besides the stem, a pid of 10 digits
_OVERHEAD = len("..") + 10 + len(".") + 12 + len(".tmp")


def _name_max(folder):
    """The longest file name, in bytes, that ``folder``'s filesystem holds (255 if unknown)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _stem(folder, base):
    """What stands for ``base`` in the names of its temporary files, backups and lock.

    ``base`` itself when those names fit in the filesystem's limit; otherwise its start, cut on
    a character, then ``~`` and a hash of the whole name, so that any legal name can be written
    (a 255-byte name would need a 281-byte temporary name).
    """
    raw = os.fsencode(base)
    budget = _name_max(folder) - _OVERHEAD
    if len(raw) <= budget:
        return base
    cut = raw[:max(budget - 9, 0)]
    for end in range(len(cut), max(len(cut) - 4, -1), -1):  # end on a whole UTF-8 character
        try:
            start = cut[:end].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    else:  # not UTF-8 at all: keep the bytes, as the file system does
        start = os.fsdecode(cut)
    return "%s~%s" % (start, hashlib.sha256(raw).hexdigest()[:8])


def _name(target, kind):
    folder, base = os.path.split(os.path.abspath(target))
    return os.path.join(folder, ".%s.%d.%s%s.%s" % (_stem(folder, base), os.getpid(), _HOST,
                                                    secrets.token_hex(4), kind))


@contextlib.contextmanager
def _naming(target):
    """Errors about a hidden temporary file, backup or lock, told as errors about ``target``.

    The user asked for ``target``; the names beside it are this module's business. The error
    keeps its class (``PermissionError``, ...) and errno, and names ``target`` alone.
    """
    try:
        yield
    except NotRegularFileError:
        raise
    except OSError as err:
        if err.errno is None or (err.filename == target and err.filename2 is None):
            raise
        raise OSError(err.errno, err.strerror, target) from None


def _create(target, kind="tmp"):
    """A new empty file beside ``target``, mode 0o666 less the umask; returns its path."""
    while True:
        path = _name(target, kind)
        try:
            with _naming(target):
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
                         % (re.escape(_stem(folder, base)), _HOST))
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


class NotRegularFileError(OSError):
    """A write target exists and is not a regular file (a link, a device, a FIFO, a socket)."""


def _kind(mode):
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "not a regular file"


def special_file(path):
    """What ``path`` is, when it exists and is not a regular file; None otherwise.

    Parameters
    ----------
    path : str

    Returns
    -------
    str or None
        ``'a symbolic link'``, ``'a character device'``, ``'a FIFO (named pipe)'``, ... (a link
        is reported as a link, whatever it points to); None for a regular file or no file.
    """
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def _fill(path, content, target):
    try:
        if callable(content):
            content(path)
        else:
            with open(path, "wb") as fileobj:
                if isinstance(content, str):  # a MiB at a time: no second copy of a long text
                    for start in range(0, len(content), 1 << 20):
                        fileobj.write(content[start:start + (1 << 20)].encode("utf-8"))
                else:
                    fileobj.write(content)
        with open(path, "rb") as fileobj:
            os.fsync(fileobj.fileno())
    except OSError as err:  # a full disk: one line that names the target, not the temporary
        if err.errno is None or isinstance(err, NotRegularFileError):
            raise
        raise OSError(err.errno, err.strerror, target) from None


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


def name_too_long(path):
    """``(bytes, limit)`` when the file name of ``path`` is longer than its filesystem holds.

    Parameters
    ----------
    path : str

    Returns
    -------
    tuple of (int, int) or None
        The name's length in bytes and the limit (``NAME_MAX``); None when the name fits.
    """
    folder, base = os.path.split(os.path.abspath(path))
    size, limit = len(os.fsencode(base)), _name_max(folder if os.path.isdir(folder) else "/")
    return (size, limit) if size > limit else None


def _check_target(target):
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "the folder %s does not exist" % folder, target)
    too_long = name_too_long(target)
    if too_long:
        raise OSError(errno.ENAMETOOLONG, "%s: the name is %d bytes, more than the %d that "
                      "the filesystem holds" % ((os.strerror(errno.ENAMETOOLONG),) + too_long),
                      target)
    kind = special_file(target)
    if kind == "a folder":
        raise IsADirectoryError(21, "it is a folder", target)
    if kind is not None:
        raise NotRegularFileError(errno.EINVAL, "it is %s, not a regular file; mxmixed never "
                                  "writes over one (remove it, or write elsewhere)" % kind, target)


def check_writable(paths):
    """Check, before any expensive work, that :func:`atomic_write_group` could write ``paths``.

    For each path: its folder exists, it is not a folder nor any other kind of file that is not
    a regular file (a link, a device, a FIFO), a file can be created beside it (the temporary
    file is removed at once), and an existing file there can be opened for writing (an
    immutable file cannot, even by root). Nothing is changed.

    Parameters
    ----------
    paths : list of str

    Raises
    ------
    OSError
        The first problem found (FileNotFoundError, IsADirectoryError, NotRegularFileError,
        PermissionError ...), with the path in its ``filename``.
    """
    for path in paths:
        path = os.fspath(path)
        _check_target(path)
        with signals_held():
            _remove_quietly([_create(path)])
        if os.path.lexists(path):
            os.close(os.open(path, os.O_WRONLY | getattr(os, "O_BINARY", 0)
                             | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)))


def _backup(target):
    """A backup of an existing ``target`` beside it (a hard link, else a copy); None if absent."""
    if not os.path.lexists(target):
        return None
    backup = _name(target, "bak")
    try:
        os.link(target, backup)
    except OSError:  # no hard links here, or an immutable file: copy it
        try:
            with _naming(target):
                shutil.copy2(target, backup)
        except BaseException:
            _remove_quietly([backup])
            raise
    return backup


@contextlib.contextmanager
def _group_lock(target):
    """An exclusive ``flock`` on ``.<name>.lock`` beside ``target``, removed before unlocking.

    A writer that opened the lock file before its holder removed it finds, once it holds the
    lock, that the name now points elsewhere (or nowhere), and starts again. Where there is no
    ``fcntl`` (Windows) or the filesystem refuses ``flock``, the block runs unlocked.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder, base = os.path.split(os.path.abspath(target))
    path = os.path.join(folder, ".%s.lock" % _stem(folder, base))
    while True:
        with _naming(target):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # ENOLCK on some network filesystems
            os.close(fd)
            with contextlib.suppress(OSError):
                os.remove(path)
            yield
            return
        try:
            mine, named = os.fstat(fd), os.stat(path)
            same = (mine.st_dev, mine.st_ino) == (named.st_dev, named.st_ino)
        except FileNotFoundError:
            same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)


def _commit(paths, temps):
    """Rename ``temps`` over ``paths``; on failure put back the targets already replaced."""
    for path in paths:  # again, now that no other writer renames: a link may have appeared
        _check_target(path)
    backups = {}
    try:
        if len(paths) > 1:
            for path in paths:
                backups[path] = _backup(path)
        for path, temp in zip(paths, temps):
            with _naming(path):
                os.replace(temp, path)
    except BaseException as err:
        # a target was replaced when its temporary file is gone: read from the disk, so that
        # an error raised just after a rename cannot leave that rename out of the rollback
        replaced = [p for p, t in zip(paths, temps) if not os.path.lexists(t)]
        kept = _restore(replaced, backups)
        if kept and hasattr(err, "add_note"):
            err.add_note("could not put back the earlier %s; its copy is kept at %s"
                         % tuple(", ".join(x) for x in zip(*kept)))
        raise
    finally:
        _remove_quietly(b for b in backups.values() if b is not None)
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        _fsync_folder(folder)


def atomic_write_group(contents):
    """Write several files so that either all of them are replaced, or none is touched.

    Parameters
    ----------
    contents : list of (str, bytes or str or callable)
        Each target path with what goes into it: bytes, text (written as UTF-8), or a function
        that gets the path of an empty temporary file beside the target and fills it (for
        writers that want a file name).

    Raises
    ------
    NotRegularFileError
        (an OSError) When a target exists and is a link, a device, a FIFO or a socket: nothing
        is written.
    OSError
        When a file cannot be written or replaced (``ENOSPC`` for a full disk, with the target
        in ``filename``). Every target is then as it was before the call and no temporary file
        or backup is left.
    """
    contents = [(os.fspath(path), content) for path, content in contents]
    for path, _ in contents:
        _check_target(path)
    paths = [path for path, _ in contents]
    temps = []
    with sigterm_cleans_up():
        try:
            for path in paths:
                sweep_stale(path)
            for path, content in contents:
                with signals_held():  # a signal between the file's creation and this list
                    temps.append(_create(path))  # would leave it behind
                _fill(temps[-1], content, path)
            lock = _group_lock(paths[0]) if len(paths) > 1 else contextlib.nullcontext()
            with lock, signals_held():
                _commit(paths, temps)
        finally:
            _remove_quietly(temps)  # those renamed are gone already


def _restore(replaced, backups):
    """Put back the earlier files of the targets already replaced (rollback of a group).

    Returns the (target, backup) pairs that could not be put back; those backups are kept (they
    are the only copy of the earlier files) and the caller names them.
    """
    kept = []
    for path in reversed(replaced):
        if path not in backups:  # a single file: its rename is the whole write, nothing to undo
            continue
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
