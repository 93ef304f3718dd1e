"""The one-pass float16 rounding op of the float32 carry, built with the system compiler.

``_mxmixed_round16`` (``_ext/round16.cc``) takes float32 and returns float32 holding the
float16-rounded value: IEEE round-to-nearest-even, overflow to inf, float16 subnormals and
zero, NaN kept; its backward rounds the gradient the same way. It is what a float16 cast pair
(``amp_cast`` to float16 then back to float32) computes, in one pass instead of two and
without the float16 copy.

It is an MXNet extension-library operator (``mxnet/include/mxnet/lib_api.h``), compiled on
first use with ``$CXX`` (default ``g++``) into a cache directory
(``$MXMIXED_CACHE_DIR``, default ``~/.cache/mxmixed``), keyed by the source, MXNet's headers,
the compiler and the CPU, and loaded with ``mx.library.load``. When no compiler is present, or
the build or load fails, :func:`round16_op` returns None once a warning has said why, and the
graph pass keeps the cast pair: the same bits, two passes.

.. note::
   The library is loaded with MXNet's ``MXLoadLib`` C call, not ``mx.library.load``: the
   latter regenerates every ``mx.nd`` / ``mx.sym`` operator function, which silently drops
   ``mxnet.contrib.amp``'s casting wrappers and the emulation's own. The op is only used
   inside graphs (by name in the JSON), so it needs no Python function.
"""
import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile

import mxnet as mx

from .._env import cache_dir, switch

__all__ = ["OP", "round16_op", "build", "load", "keep_layouts",
           "blocked_calls", "status"]

OP = "_mxmixed_round16"
_EXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext")
SOURCE = os.path.join(_EXT, "round16.cc")
LAYOUT_SOURCE = os.path.join(_EXT, "round16_onednn.cc")
KERNEL = os.path.join(_EXT, "round16_kernel.h")
_LOG = logging.getLogger("mxmixed.emulation")
_STATE = {"tried": False, "op": None, "why": "not built yet", "layout_library": None}


def _mxnet_dir():
    return os.path.dirname(os.path.abspath(mx.__file__))


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return line
    except OSError:
        pass
    return ""


def _cache_dir():
    return cache_dir()


def _compile(prefix, sources, keyed, flags, target_dir, cxx, key_text=""):
    """Compile ``sources`` into ``target_dir`` unless a build of the same inputs is there.

    The file's name holds a hash of the sources, the ``keyed`` files, ``key_text``, the flags,
    the compiler and the CPU's flags.
    """
    cxx = cxx or os.environ.get("CXX") or "g++"
    compiler = shutil.which(cxx)
    if compiler is None:
        raise RuntimeError("no C++ compiler %r on PATH" % cxx)
    key = hashlib.sha256()
    for path in list(sources) + list(keyed):
        with open(path, "rb") as handle:
            key.update(handle.read())
    for text in (compiler, _cpu_flags(), " ".join(flags), key_text):
        key.update(text.encode())
    target_dir = target_dir or _cache_dir()
    path = os.path.join(target_dir, "%s-%s.so" % (prefix, key.hexdigest()[:16]))
    if os.path.exists(path):
        return path
    os.makedirs(target_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target_dir)
    os.close(fd)
    try:
        proc = subprocess.run([compiler, "-shared", "-fPIC", "-std=c++17", "-O3",
                               "-march=native", "-fopenmp"] + list(sources) + flags + ["-o", tmp],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError("%s failed: %s" % (cxx, proc.stderr.strip()[-600:]))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


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
        The path of the shared library.

    Raises
    ------
    RuntimeError
        When the compiler is missing or the build fails (the compiler's last lines).
    """
    include = os.path.join(_mxnet_dir(), "include")
    if not layouts:
        lib_api = os.path.join(_mxnet_dir(), "src", "lib_api.cc")
        return _compile("round16", [SOURCE, lib_api],
                        [KERNEL, os.path.join(include, "mxnet", "lib_api.h")],
                        ["-I" + include], target_dir, cxx)
    stat = os.stat(os.path.join(_mxnet_dir(), "libmxnet.so"))
    flags = ["-D_GLIBCXX_USE_CXX11_ABI=0", "-DMXNET_USE_MKLDNN=1", "-DMXNET_USE_CUDA=0",
             "-DMSHADOW_USE_CUDA=0", "-DMSHADOW_USE_MKL=0", "-DMSHADOW_USE_CBLAS=0",
             "-DDMLC_USE_CXX11=1", "-I" + include, "-I" + os.path.join(include, "mkldnn"),
             "-L" + _mxnet_dir(), "-l:libmxnet.so", "-Wl,-rpath," + _mxnet_dir(),
             "-Wno-deprecated-declarations", "-Wno-attributes"]
    return _compile("round16-onednn", [LAYOUT_SOURCE], [KERNEL], flags, target_dir, cxx,
                    key_text="libmxnet.so %d %d" % (stat.st_size, stat.st_mtime_ns))


def load(path):
    """Register the library's operators with MXNet, leaving the Python op functions alone."""
    mx.base.check_call(mx.base._LIB.MXLoadLib(ctypes.c_char_p(os.path.abspath(path).encode()),
                                              mx.base.mx_uint(0)))


def keep_layouts(path):
    """Give the loaded op and its backward the oneDNN-layout compute of the library at ``path``.

    Raises
    ------
    RuntimeError
        When MXNet was built without oneDNN, or the library refuses (which step failed).
    """
    if not mx.runtime.Features().is_enabled("MKLDNN"):
        raise RuntimeError("this MXNet has no oneDNN")
    library = ctypes.CDLL(os.path.abspath(path))
    for name in (OP, "_backward_" + OP):
        failed = library.mxmixed_round16_keep_layouts(name.encode())
        if failed:
            raise RuntimeError("%s refused %s at step %d (1: unknown calling convention, "
                               "2: no such op, 3-5: attribute not set)" % (path, name, failed))
    library.mxmixed_round16_blocked_calls.restype = ctypes.c_int64
    _STATE["layout_library"] = library


def blocked_calls():
    """How many rounding calls so far rounded a blocked oneDNN array in its own layout.

    Returns
    -------
    int or None
        None when the oneDNN-layout compute is not in use in this process.
    """
    library = _STATE["layout_library"]
    return None if library is None else int(library.mxmixed_round16_blocked_calls())


def round16_op():
    """The registered op name, building and loading the library on first call; None if not.

    Returns
    -------
    str or None
    """
    if not _STATE["tried"]:
        keep = "1" if switch("MXMIXED_EMULATION_KEEP_LAYOUTS") else "0"
        _STATE["tried"] = True
        try:
            load(build())
            _STATE["op"], _STATE["why"] = OP, "built and loaded"
        except Exception as err:  # noqa: BLE001 - any failure means the cast-pair fallback
            _STATE["why"] = _one_line(err)
            _LOG.warning("mxmixed.emulation: the one-pass float16 rounding op is unavailable "
                         "(%s); float16 values between emulated ops are rounded with a cast "
                         "pair instead (the same bits, slower).", _STATE["why"])
            return None
        if keep == "0":
            layouts = "plain layouts"
        else:
            try:
                keep_layouts(build(layouts=True))
                layouts = "keeps oneDNN layouts"
            except Exception as err:  # noqa: BLE001 - any failure keeps the plain compute
                layouts = "plain layouts (%s)" % _one_line(err)
                _LOG.warning("mxmixed.emulation: MXMIXED_EMULATION_KEEP_LAYOUTS=1, but the "
                             "rounding op cannot keep oneDNN layouts (%s); it keeps plain "
                             "layouts instead (the default emulation, slower).", _one_line(err))
        _STATE["why"] = "built and loaded; " + layouts
    return _STATE["op"]


def _one_line(err):
    lines = str(err).strip().splitlines() or [""]
    return "%s: %s" % (type(err).__name__, lines[-1])


def status():
    """One line: whether the rounding op is in use, and why not."""
    return _STATE["why"]
