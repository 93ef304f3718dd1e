"""The rounding library's cache folder cannot be used to make an emulated run wait.

A cache folder left mode 777 by an earlier version let another user plant ``.round16.lock``
and hold ``flock`` on it, or plant the library's ``.sha256`` record as a FIFO: every emulated
run then waited forever, since the owner checks came after the lock and the read. Now the lock
and the record are opened without blocking and checked first; a lock that is not ours, or held
too long, sends the build to a private folder with one warning, and a record that is not a
plain file of ours is rebuilt. Each build runs in a thread waited for with conftest's
``wait_for`` (``HANG_S``): a build that waits fails its test naming what it waited on; nothing
is timed.
"""
import contextlib
import logging
import os
import subprocess
import sys
import threading

import pytest

from conftest import HANG_S, communicate, wait_for
from mxmixed.emulation import _round16_build

from .test_round16_library import OTHER_UID, build_here, fake_build

# Holds flock on the file named by argv[1] until its stdin is closed.
_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def held(path):
    """``path`` locked (``flock``) by another process while the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield
    finally:
        communicate(proc)  # closes its stdin: the lock is released


def bounded_build(folder, what):
    """``build_here(folder)`` in a thread, waited for at most ``HANG_S``: a build that blocks
    (on a lock, or opening a FIFO) fails the test naming ``what``."""
    result = {}

    def build():
        try:
            result["path"] = build_here(folder)
        except BaseException as err:  # re-raised in the test's thread
            result["error"] = err

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    wait_for(lambda: not thread.is_alive(), "the rounding library's build (%s)" % what)
    if "error" in result:
        raise result["error"]
    return result["path"]


def _private(path, folder):
    return os.path.dirname(path) != str(folder)


def test_a_lock_planted_and_held_by_another_user_is_never_waited_for(monkeypatch, caplog,
                                                                      tmp_path):
    fake_build(monkeypatch, [])
    # a wait on the lock would outlast the bound: refusing it must come before any wait
    monkeypatch.setattr(_round16_build, "_LOCK_WAIT_S", 2 * HANG_S)
    lock = tmp_path / ".round16.lock"
    lock.write_bytes(b"")
    lock.chmod(0o666)
    os.chown(str(lock), OTHER_UID, OTHER_UID)
    with held(lock), caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = bounded_build(tmp_path, "a lock held by uid %d" % OTHER_UID)
    assert _private(path, tmp_path) and _round16_build._damage(path) is None
    assert len(caplog.records) == 1 and "belongs to uid %d" % OTHER_UID in caplog.text, \
        caplog.text


def test_a_lock_held_longer_than_the_wait_sends_the_build_to_a_private_folder(
        monkeypatch, caplog, tmp_path):
    fake_build(monkeypatch, [])
    monkeypatch.setattr(_round16_build, "_LOCK_WAIT_S", 0.3)
    lock = tmp_path / ".round16.lock"
    lock.write_bytes(b"")
    lock.chmod(0o600)
    with held(lock), caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = bounded_build(tmp_path, "a lock held past the wait")
    assert _private(path, tmp_path)
    assert len(caplog.records) == 1 and "held by another process" in caplog.text, caplog.text


def test_a_lock_released_within_the_wait_is_taken(monkeypatch, caplog, tmp_path):
    fake_build(monkeypatch, [])
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = bounded_build(tmp_path, "a free lock")
    assert not _private(path, tmp_path) and caplog.records == []


def _plant(kind, lock):
    if kind == "a FIFO":
        os.mkfifo(str(lock), 0o666)
    elif kind == "a link":
        target = lock.parent / "elsewhere"
        target.write_bytes(b"")
        os.symlink(str(target), str(lock))
    elif kind == "writable by others":
        lock.write_bytes(b"")
        lock.chmod(0o622)


@pytest.mark.parametrize("kind", ["a FIFO", "a link", "writable by others"])
def test_a_lock_that_is_not_a_plain_file_of_ours_is_not_used(monkeypatch, caplog, tmp_path,
                                                             kind):
    fake_build(monkeypatch, [])
    _plant(kind, tmp_path / ".round16.lock")
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        path = bounded_build(tmp_path, "a lock file that is %s" % kind)
    assert _private(path, tmp_path) and _round16_build._damage(path) is None
    assert len(caplog.records) == 1 and ".round16.lock" in caplog.text, caplog.text


# opening a FIFO for reading blocks until someone writes to it
@pytest.mark.parametrize("which", ["record", "library"])
def test_a_fifo_planted_as_the_record_or_the_library_is_rebuilt_not_read(
        monkeypatch, caplog, tmp_path, which):
    calls = []
    fake_build(monkeypatch, calls)
    path = build_here(tmp_path)
    planted = _round16_build._record_of(path) if which == "record" else path
    os.remove(planted)
    os.mkfifo(planted, 0o666)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        assert bounded_build(tmp_path, "the %s planted as a FIFO" % which) == path
    assert len(calls) == 2 and _round16_build._damage(path) is None
    assert len(caplog.records) == 1 and "rebuilt" in caplog.text, caplog.text
