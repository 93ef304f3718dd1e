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

__all__ = ["OP", "round16_op", "build", "load", "status"]

OP = "_mxmixed_round16"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext", "round16.cc")
_LOG = logging.getLogger("mxmixed.emulation")
_STATE = {"tried": False, "op": None, "why": "not built yet"}


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
    return os.environ.get("MXMIXED_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "mxmixed")


def build(target_dir=None, cxx=None):
    """Compile the rounding op into ``target_dir``, unless an identical build is there.

    Parameters
    ----------
    target_dir : str, optional
        Where the library goes; the cache directory by default.
    cxx : str, optional
        The C++ compiler; ``$CXX`` or ``g++`` by default.

    Returns
    -------
    str
        The path of the shared library.

    Raises
    ------
    RuntimeError
        When the compiler is missing or the build fails (the compiler's last lines).
    """
    cxx = cxx or os.environ.get("CXX") or "g++"
    compiler = shutil.which(cxx)
    if compiler is None:
        raise RuntimeError("no C++ compiler %r on PATH" % cxx)
    include = os.path.join(_mxnet_dir(), "include")
    lib_api = os.path.join(_mxnet_dir(), "src", "lib_api.cc")
    key = hashlib.sha256()
    for path in (SOURCE, os.path.join(include, "mxnet", "lib_api.h"), lib_api):
        with open(path, "rb") as handle:
            key.update(handle.read())
    key.update(compiler.encode() + _cpu_flags().encode())
    target_dir = target_dir or _cache_dir()
    path = os.path.join(target_dir, "round16-%s.so" % key.hexdigest()[:16])
    if os.path.exists(path):
        return path
    os.makedirs(target_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target_dir)
    os.close(fd)
    try:
        proc = subprocess.run([compiler, "-shared", "-fPIC", "-std=c++17", "-O3",
                               "-march=native", "-fopenmp", "-I" + include, SOURCE, lib_api, "-o", tmp],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError("%s failed: %s" % (cxx, proc.stderr.strip()[-600:]))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load(path):
    """Register the library's operators with MXNet, leaving the Python op functions alone."""
    mx.base.check_call(mx.base._LIB.MXLoadLib(ctypes.c_char_p(os.path.abspath(path).encode()),
                                              mx.base.mx_uint(0)))


def round16_op():
    """The registered op name, building and loading the library on first call; None if not.

    Returns
    -------
    str or None
    """
    if not _STATE["tried"]:
        _STATE["tried"] = True
        try:
            load(build())
            _STATE["op"], _STATE["why"] = OP, "built and loaded"
        except Exception as err:  # noqa: BLE001 - any failure means the cast-pair fallback
            lines = str(err).strip().splitlines() or [""]
            _STATE["why"] = "%s: %s" % (type(err).__name__, lines[-1])
            _LOG.warning("mxmixed.emulation: the one-pass float16 rounding op is unavailable "
                         "(%s); float16 values between emulated ops are rounded with a cast "
                         "pair instead (the same bits, slower).", _STATE["why"])
    return _STATE["op"]


def status():
    """One line: whether the rounding op is in use, and why not."""
    return _STATE["why"]
