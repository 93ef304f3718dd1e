"""The rounding library's build: compiled with the system compiler into a cache it trusts.

The library of :mod:`mxmixed.emulation._round16` (``_ext/round16.cc``, ``ops16.cc``,
``norm16.cc`` and MXNet's ``lib_api.cc``; the oneDNN-layout compute ``round16_onednn.cc`` is a
library of its own) is an MXNet extension library (``mxnet/include/mxnet/lib_api.h``), compiled
on first use with ``$CXX`` (default ``g++``) into a cache directory (``$MXMIXED_CACHE_DIR``,
default ``~/.cache/mxmixed``), keyed by the source, MXNet's headers, the compiler and the CPU.

Each library exports only what its loader needs (MXNet's ``MXLIB_*_STR`` entry points of
``lib_api.h``; the ``mxmixed_round16_*`` functions of the oneDNN-layout compute) and binds
everything else inside itself, so that a ``libmxnet.so`` in the global namespace (Horovod's
``RTLD_GLOBAL``) cannot lend it its own build of the extension API.

A library is loaded only when it is whole and ours. The cache folder must belong to this
user and be writable by nobody else (else the library is built in a private temporary folder,
with a warning; the default folder of this user only loses its group and other write bits).
Each build records the library's size and sha256 beside it (``<name>.so.sha256``, written
after the library is complete; the library itself is compiled under a temporary name and
renamed); before loading, the file must be a regular file of this user, writable by nobody
else, and match its record. A library that does not (truncated, replaced, unrecorded) is
rebuilt, with a warning when it was damaged; if it cannot be, the emulation falls back with
one warning. The folder's build lock (``.round16.lock``) and the record are opened without
following a link and without blocking, and checked the same way before ``flock`` or a read: a
FIFO or a file of someone else put in their place cannot make a run wait. A lock that is not
ours, or that another process holds for more than two minutes, sends the build to a private
temporary folder (one warning).
"""
import atexit
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time

import mxnet as mx

from .._core.devices import cpu_flags
from .._core.env import CACHE_DIR, cache_dir

__all__ = ["SOURCE", "OPS_SOURCE", "NORM_SOURCE", "LAYOUT_SOURCE", "KERNEL", "FLOAT32_TYPES",
           "build"]

_EXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext")
SOURCE = os.path.join(_EXT, "round16.cc")
#: The float32 computes of float16 ops (gelu, the bias add), built into the same library.
OPS_SOURCE = os.path.join(_EXT, "ops16.cc")
#: softmax and LayerNorm with the GPU's float16 arithmetic, built into the same library.
NORM_SOURCE = os.path.join(_EXT, "norm16.cc")
LAYOUT_SOURCE = os.path.join(_EXT, "round16_onednn.cc")
KERNEL = os.path.join(_EXT, "round16_kernel.h")
#: The float32 computes' type inference, shared by ``ops16.cc`` and ``norm16.cc``.
FLOAT32_TYPES = os.path.join(_EXT, "float32_types.h")
_LOG = logging.getLogger("mxmixed.emulation")
# folders refused this process -> the private folder built into instead
_PRIVATE = {}
# the size of a library's record; anything larger is not one
_RECORD_LIMIT = 4096
# how long a build waits for the cache folder's lock (another process's build) before it
# builds in a private folder instead
_LOCK_WAIT_S = 120.0


def _mxnet_dir():
    return os.path.dirname(os.path.abspath(mx.__file__))


def _cache_dir():
    return cache_dir()


def _not_ours(info, what):
    """Why a file or folder of this ``os.stat`` result is not safe to trust, or None."""
    if info.st_uid != os.geteuid():
        return "%s belongs to uid %d, not to this user (uid %d)" % (what, info.st_uid,
                                                                    os.geteuid())
    if info.st_mode & 0o022:
        return "%s is writable by %s (mode %03o)" % (
            what, "group and others" if info.st_mode & 0o022 == 0o022 else
            "its group" if info.st_mode & 0o020 else "others", info.st_mode & 0o777)
    return None


def _folder_problem(folder, tighten=False):
    """Create ``folder`` (mode 700) if missing; say why it is not safe to build in, or None.

    With ``tighten`` (the default folder, which earlier versions made with the umask's mode), a
    folder of this user that its group or others can write loses those bits instead: files
    others may have put there are refused one by one, as not this user's.
    """
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
        if tighten and info.st_uid == os.geteuid() and info.st_mode & 0o022:
            os.chmod(folder, stat.S_IMODE(info.st_mode) & ~0o022)
            info = os.stat(folder)
    except OSError as err:
        return "the cache folder %s cannot be used (%s)" % (folder, err.strerror or err)
    if not stat.S_ISDIR(info.st_mode):
        return "the cache folder %s is not a folder" % folder
    return _not_ours(info, "the cache folder %s" % folder)


def _read_own(path, limit=None):
    """The bytes of ``path``, a regular file of this user that nobody else can write (no link).

    It is opened without blocking (a FIFO put in its place would wait for a writer forever)
    and checked before a byte is read.

    Raises
    ------
    OSError
        When it is missing or cannot be read.
    ValueError
        When it is not such a file, or larger than ``limit`` (one line).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("%s is not a regular file" % path)
        problem = _not_ours(info, path)
        if problem:
            raise ValueError(problem)
        if limit is not None and info.st_size > limit:
            raise ValueError("%s is %d bytes, more than a record" % (path, info.st_size))
        return handle.read()


class _LockRefused(Exception):
    """The cache folder's lock cannot be taken: not ours, not a plain file, or held too long."""


def _take_lock(folder):
    """The descriptor of ``folder``'s build lock, held (``flock``) by this process.

    The lock file is opened without following a link and without blocking, and checked (a
    regular file of this user that nobody else can write) before ``flock``; ``flock`` does not
    block either, and is tried again until :data:`_LOCK_WAIT_S` seconds have passed, so that a
    lock file planted and held by someone else cannot make a run wait.

    Raises
    ------
    _LockRefused
        Why the lock cannot be used (one line).
    """
    path = os.path.join(folder, ".round16.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600)
    except OSError as err:  # ELOOP: a link
        raise _LockRefused("the lock file %s cannot be opened (%s)"
                           % (path, err.strerror or err)) from None
    try:
        info = os.fstat(fd)
        problem = (_not_ours(info, "the lock file %s" % path) if stat.S_ISREG(info.st_mode)
                   else "the lock file %s is not a regular file" % path)
        if problem:
            raise _LockRefused(problem)
        deadline, pause = time.monotonic() + _LOCK_WAIT_S, 0.05
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _LockRefused("the lock file %s has been held by another process for "
                                       "more than %g s" % (path, _LOCK_WAIT_S)) from None
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
    except BaseException:
        os.close(fd)
        raise


def _record_of(path):
    return path + ".sha256"


def _damage(path):
    """Why the library at ``path`` must not be loaded: None when whole and ours, "" when it or its
    record is simply missing (never built here), else what is wrong in one phrase."""
    if not os.path.lexists(path) or not os.path.lexists(_record_of(path)):
        return ""
    try:
        record = json.loads(_read_own(_record_of(path), _RECORD_LIMIT).decode())
        size, digest = int(record["size"]), str(record["sha256"])
        data = _read_own(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        return str(err)
    if len(data) != size:
        return "%s is %d bytes, and its build recorded %d" % (path, len(data), size)
    if hashlib.sha256(data).hexdigest() != digest:
        return "%s does not match the sha256 its build recorded" % path
    return None


def _write_own(path, data, mode):
    """Write ``data`` to ``path`` whole: a temporary file in the same folder, then a rename."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _private_folder(refused, why):
    """A folder of this process only, for a library that ``refused`` may not hold (one warning)."""
    if refused not in _PRIVATE:
        folder = tempfile.mkdtemp(prefix="mxmixed-round16-")
        atexit.register(shutil.rmtree, folder, True)
        _PRIVATE[refused] = folder
        _LOG.warning("mxmixed.emulation: %s; the float16 rounding library is built in a "
                     "private temporary folder instead (%s), each time a process needs it.",
                     why, folder)
    return _PRIVATE[refused]


def _version_script(exports):
    """A linker version script that exports the symbols (or glob patterns) ``exports`` only."""
    return "{\n  global:\n%s  local: *;\n};\n" % "".join("    %s;\n" % name for name in exports)


def _loader_entry_points(lib_api_h):
    """The C functions MXNet's library loader looks up, as ``lib_api.h`` names them.

    Raises
    ------
    RuntimeError
        When the header names none (not MXNet's extension API as this module knows it).
    """
    with open(lib_api_h) as handle:
        names = re.findall(r'^#define MXLIB_\w+_STR "(\w+)"', handle.read(), re.MULTILINE)
    if not names:
        raise RuntimeError("%s names no entry points of the library loader (MXLIB_*_STR)"
                           % lib_api_h)
    return sorted(set(names))


def _compile(prefix, sources, keyed, flags, target_dir, cxx, key_text="", exports=()):
    """The path of a library built from ``sources``, whole and ours, in ``target_dir``.

    Only the symbols ``exports`` (names or glob patterns) are exported, through a linker
    version script; everything else the library defines is bound inside it. Without that,
    a ``libmxnet.so`` already in the global namespace (Horovod loads its MXNet library with
    ``RTLD_GLOBAL``) exports its own build of MXNet's extension API, the dynamic linker binds
    the library's references to those, and the library's static initialiser crashes.

    The file's name holds a hash of the sources, the ``keyed`` files, ``key_text``, the
    exports, the flags, the compiler and the CPU's flags. A library already there is used when it matches the
    size and sha256 recorded at its build; else it is built again (a warning says when one was
    there but damaged). A folder of another user, or one that others can write, is not built
    in: a private temporary folder is (one warning).
    """
    cxx = cxx or os.environ.get("CXX") or "g++"
    compiler = shutil.which(cxx)
    if compiler is None:
        raise RuntimeError("no C++ compiler %r on PATH" % cxx)
    key = hashlib.sha256()
    for path in list(sources) + list(keyed):
        with open(path, "rb") as handle:
            key.update(handle.read())
    for text in (compiler, " ".join(sorted(cpu_flags() or ())), " ".join(flags), key_text,
                 _version_script(exports) if exports else ""):
        key.update(text.encode())
    default = target_dir is None and not os.environ.get(CACHE_DIR)
    target_dir = os.path.abspath(target_dir or _cache_dir())
    problem = _folder_problem(target_dir, tighten=default)
    if problem:
        target_dir = _private_folder(target_dir, problem)
    name = "%s-%s.so" % (prefix, key.hexdigest()[:16])
    try:  # one build at a time; none sees another half-done
        lock = _take_lock(target_dir)
    except _LockRefused as err:
        target_dir = _private_folder(target_dir, str(err))
        lock = _take_lock(target_dir)
    path = os.path.join(target_dir, name)
    try:
        damage = _damage(path)
        if damage is None:
            return path
        _sweep_leftovers(target_dir)
        try:
            _build_into(path, compiler, cxx, sources, flags, exports=exports, lock=lock)
        except RuntimeError as err:
            if damage:
                raise RuntimeError("the cached library is damaged or not ours (%s), and "
                                   "rebuilding it failed: %s" % (damage, err)) from None
            raise
        if damage:
            _LOG.warning("mxmixed.emulation: the cached float16 rounding library was damaged "
                         "or not ours (%s); it was rebuilt.", damage)
    finally:
        os.close(lock)
    return path


# the temporary files of a build (mkstemp's 8 characters): the library, its version script,
# its objects, and a record or a script before its rename
_LEFTOVER = re.compile(r"\.tmp-[a-z0-9_]{8}(\.so|\.map|-[0-9]+\.o)?")


def _sweep_leftovers(folder):
    """Remove the temporary files of a build that was killed half-way in ``folder`` (regular
    files of this user with the names a build gives them). Called under the folder's lock,
    when no build of another process writes there: a build's compilers inherit its lock, so
    that the compilers of a killed build, which finish and write their objects after it died,
    hold the lock until they are done."""
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if _LEFTOVER.fullmatch(name):
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                os.remove(path)


# the flags that only the link step takes: libraries, their folders and linker options
_LINK_ONLY = ("-L", "-l", "-Wl,")
_BASE_FLAGS = ["-fPIC", "-std=c++17", "-O3", "-march=native", "-fopenmp"]


def _compile_objects(compiler, cxx, sources, flags, objects, lock=None):
    """Compile each of ``sources`` into the matching ``objects``, as many at once as this
    process has CPUs (a single ``g++`` call compiles one source after the other: MXNet's
    ``lib_api.cc`` alone is half of the plain library's build). The compilers inherit the
    descriptor ``lock`` (the folder's build lock): it stays held while one of them runs, even
    after this process died."""
    compile_flags = [f for f in flags if not f.startswith(_LINK_ONLY)]
    pending = list(zip(sources, objects))
    running = []
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        while pending or running:
            while pending and len(running) < max(1, cpus or 1):
                source, obj = pending.pop(0)
                running.append(subprocess.Popen(
                    [compiler, "-c"] + _BASE_FLAGS + [source] + compile_flags + ["-o", obj],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                    pass_fds=_fds(lock)))
            proc = running.pop(0)
            err = proc.communicate()[1]
            if proc.returncode != 0:
                raise RuntimeError("%s failed: %s" % (cxx, err.strip()[-600:]))
    finally:
        for proc in running:
            proc.kill()
            proc.communicate()


def _fds(lock):
    return () if lock is None else (lock,)


def _build_into(path, compiler, cxx, sources, flags, exports=(), lock=None):
    """Compile under a temporary name, record size and sha256, then rename into ``path``.

    The sources are compiled side by side, then linked. With ``exports``, a version script
    beside it (removed after) exports only those symbols. The compiler and the linker inherit
    the descriptor ``lock``, the folder's build lock (see :func:`_sweep_leftovers`).
    """
    fd, tmp = tempfile.mkstemp(suffix=".so", prefix=".tmp-", dir=os.path.dirname(path))
    os.close(fd)
    script = tmp[:-len(".so")] + ".map"
    objects = ["%s-%d.o" % (tmp[:-len(".so")], i) for i in range(len(sources))]
    try:
        _compile_objects(compiler, cxx, sources, flags, objects, lock)
        if exports:
            _write_own(script, _version_script(exports).encode(), 0o600)
            flags = list(flags) + ["-Wl,--version-script=" + script]
        proc = subprocess.run([compiler, "-shared"] + _BASE_FLAGS + objects
                              + [f for f in flags if f.startswith(_LINK_ONLY)] + ["-o", tmp],
                              capture_output=True, text=True, pass_fds=_fds(lock))
        if proc.returncode != 0:
            raise RuntimeError("%s failed: %s" % (cxx, proc.stderr.strip()[-600:]))
        os.chmod(tmp, 0o755)
        with open(tmp, "rb") as handle:
            data = handle.read()
        record = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        _write_own(_record_of(path), (json.dumps(record) + "\n").encode(), 0o644)
        os.replace(tmp, path)
    finally:
        for leftover in [tmp, script] + objects:
            if os.path.exists(leftover):
                os.remove(leftover)


def build(target_dir=None, cxx=None, layouts=False):
    """Compile the rounding op into ``target_dir``, unless an identical build is there.

    Parameters
    ----------
    target_dir : str, optional
        Where the library goes; the cache directory by default.
    cxx : str, optional
        The C++ compiler; ``$CXX`` or ``g++`` by default.
    layouts : bool
        Build the op's oneDNN-layout compute (``_ext/round16_onednn.cc``) instead: against
        the wheel's C++ headers with the settings the wheel was built with (oneDNN on, CUDA
        off, the pre-C++11 ``std::string``), linked to its ``libmxnet.so``; a different
        ``libmxnet.so`` (size or time) makes a new build.

    Returns
    -------
    str
        The path of the shared library, checked whole and ours (see the module's notes); in a
        private temporary folder when ``target_dir`` is not safe to build in.

    Raises
    ------
    RuntimeError
        When the compiler is missing or the build fails (the compiler's last lines).
    ValueError
        When ``MXMIXED_CACHE_DIR`` is not an absolute path.
    """
    include = os.path.join(_mxnet_dir(), "include")
    if not layouts:
        lib_api = os.path.join(_mxnet_dir(), "src", "lib_api.cc")
        header = os.path.join(include, "mxnet", "lib_api.h")
        return _compile("round16", [SOURCE, OPS_SOURCE, NORM_SOURCE, lib_api],
                        [KERNEL, FLOAT32_TYPES, header],
                        ["-I" + include], target_dir, cxx, exports=_loader_entry_points(header))
    libmxnet = os.stat(os.path.join(_mxnet_dir(), "libmxnet.so"))
    flags = ["-D_GLIBCXX_USE_CXX11_ABI=0", "-DMXNET_USE_MKLDNN=1", "-DMXNET_USE_CUDA=0",
             "-DMSHADOW_USE_CUDA=0", "-DMSHADOW_USE_MKL=0", "-DMSHADOW_USE_CBLAS=0",
             "-DDMLC_USE_CXX11=1", "-I" + include, "-I" + os.path.join(include, "mkldnn"),
             "-L" + _mxnet_dir(), "-l:libmxnet.so", "-Wl,-rpath," + _mxnet_dir(),
             "-Wno-deprecated-declarations", "-Wno-attributes"]
    return _compile("round16-onednn", [LAYOUT_SOURCE], [KERNEL], flags, target_dir, cxx,
                    key_text="libmxnet.so %d %d" % (libmxnet.st_size, libmxnet.st_mtime_ns),
                    exports=["mxmixed_round16_*"])
