"""The one-pass float16 rounding op of the float32 carry, and the other ops of its library.

``_mxmixed_round16`` (``_ext/round16.cc``) takes float32 and returns float32 holding the
float16-rounded value: IEEE round-to-nearest-even, overflow to inf, float16 subnormals and
zero, NaN kept; its backward rounds the gradient the same way. It is what a float16 cast pair
(``amp_cast`` to float16 then back to float32) computes, in one pass instead of two and
without the float16 copy.

It is an MXNet extension-library operator, built on first use
(:mod:`mxmixed.emulation._round16_build`: the compiler, the cache and what makes a cached
library whole and ours) and loaded here. When no compiler is present, or the build or load
fails, :func:`round16_op` returns None once a warning has said why, and the graph pass keeps
the cast pair: the same bits, two passes.

By default the op then gets a second compute (``_ext/round16_onednn.cc``) that rounds
oneDNN's blocked arrays in their own layout (:func:`keep_layouts`);
``MXMIXED_EMULATION_KEEP_LAYOUTS=0`` keeps the plain compute, which reproduces results
recorded before this became the default.

The same library registers ``_mxmixed_nonfinite`` (:func:`nonfinite_op`): one float32 flag
per float32 or float16 array, 1 where the array holds an inf or a NaN, from a vectorized test
of the exponent bits (MXNet's ``multi_all_finite`` test, without its per-element cost). The
emulation's overflow check uses it once the library is loaded.

The same library also registers ``_mxmixed_round_bf16`` (:func:`round_bf16_op`): float32 in, float32
out holding the bfloat16-rounded value (round-to-nearest-even, overflow to inf, subnormals
kept, NaN kept), in plain C++ with no AVX-512 and no bfloat16 tensor. It is the rounding of the
bfloat16 emulation that validates a bfloat16 model where MXNet's bfloat16 cannot run
(:mod:`mxmixed.symbolic._bfloat16_emulation`).

.. note::
   The library is loaded with MXNet's ``MXLoadLib`` C call, not ``mx.library.load``: the
   latter regenerates every ``mx.nd`` / ``mx.sym`` operator function, which silently drops
   ``mxnet.contrib.amp``'s casting wrappers and the emulation's own. The op is only used
   inside graphs (by name in the JSON), so it needs no Python function.
"""
import ctypes
import logging
import os

import mxnet as mx

from .._core.env import cache_dir, switch
from .._core.errors import one_line
# round16_op builds through this name (a test that replaces the build patches it here)
from ._round16_build import build

__all__ = ["OP", "BF16_OP", "NONFINITE_OP", "BIAS_ADD_OP", "MXNET_RELEASE", "round16_op",
           "round_bf16_op", "nonfinite_op", "library_op", "build", "load", "keep_layouts",
           "blocked_calls", "status"]

OP = "_mxmixed_round16"
#: The bfloat16 rounding op of the same library.
BF16_OP = "_mxmixed_round_bf16"
#: The exact inf/NaN test of the same library: one flag per float32 or float16 array.
NONFINITE_OP = "_mxmixed_nonfinite"
#: A GEMM's bias add in float32 with the bits of ``broadcast_add`` (``_ext/ops16.cc``).
BIAS_ADD_OP = "_mxmixed_bias_add"
#: The MXNet release whose internals ``round16_onednn.cc`` reads (``MKLDNNMemory``).
MXNET_RELEASE = ("1.9.1", 10901)
_LOG = logging.getLogger("mxmixed.emulation")
_STATE = {"tried": False, "op": None, "why": "not built yet", "layout_library": None}


def load(path):
    """Register the library's operators with MXNet, leaving the Python op functions alone."""
    mx.base.check_call(mx.base._LIB.MXLoadLib(ctypes.c_char_p(os.path.abspath(path).encode()),
                                              mx.base.mx_uint(0)))


def _mxnet_version():
    """MXNet's version as its Python package and its loaded ``libmxnet.so`` give it."""
    number = ctypes.c_int()
    mx.base.check_call(mx.base._LIB.MXGetVersion(ctypes.byref(number)))
    return mx.__version__, number.value


def keep_layouts(path):
    """Give the loaded op and its backward the oneDNN-layout compute of the library at ``path``.

    The compute reads MXNet 1.9.1's internal ``MKLDNNMemory`` through a copy of its struct, so
    it is installed only when MXNet is that release (its Python package, its ``libmxnet.so``
    and the headers the library was built with) and the library's probe reads an array whose
    layout MXNet itself set back as expected.

    Raises
    ------
    RuntimeError
        When MXNet was built without oneDNN, is another release, or the library refuses
        (which check or step failed). Nothing is installed then.
    """
    if not mx.runtime.Features().is_enabled("MKLDNN"):
        raise RuntimeError("this MXNet has no oneDNN")
    python, native = _mxnet_version()
    if (python, native) != MXNET_RELEASE:
        raise RuntimeError("the oneDNN-layout compute reads MXNet %s's internals, and this is "
                           "MXNet %s (libmxnet.so %d)" % (MXNET_RELEASE[0], python, native))
    library = ctypes.CDLL(os.path.abspath(path))
    headers = library.mxmixed_round16_headers_version()
    if headers != MXNET_RELEASE[1]:
        raise RuntimeError("%s was built against MXNet headers %d, not %d" % (
            path, headers, MXNET_RELEASE[1]))
    failed = library.mxmixed_round16_probe()
    if failed:
        raise RuntimeError("%s reads oneDNN arrays differently from this libmxnet.so (probe "
                           "check %d failed)" % (path, failed))
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

    Raises
    ------
    ValueError
        When ``MXMIXED_EMULATION_KEEP_LAYOUTS`` or ``MXMIXED_CACHE_DIR`` has a bad value (one
        line), before anything is built.
    """
    if not _STATE["tried"]:
        keep = switch("MXMIXED_EMULATION_KEEP_LAYOUTS")
        cache_dir()  # a bad MXMIXED_CACHE_DIR is one line, not a fallback
        _STATE["tried"] = True
        try:
            load(build())
            _STATE["op"], _STATE["why"] = OP, "built and loaded"
        except Exception as err:  # noqa: BLE001 - any failure means the cast-pair fallback
            _STATE["why"] = _one_line(err)
            _LOG.warning("mxmixed.emulation: the one-pass float16 rounding op is unavailable "
                         "(%s); float16 values between emulated ops are rounded with a cast "
                         "pair instead (slower; the results of "
                         "MXMIXED_EMULATION_KEEP_LAYOUTS=0).", _STATE["why"])
            return None
        if not keep:
            layouts = "plain layouts"
        elif not mx.runtime.Features().is_enabled("MKLDNN"):
            layouts = "plain layouts (this MXNet has no oneDNN)"
        else:
            try:
                keep_layouts(build(layouts=True))
                layouts = "keeps oneDNN layouts"
            except Exception as err:  # noqa: BLE001 - any failure keeps the plain compute
                layouts = "plain layouts (%s)" % _one_line(err)
                _LOG.warning("mxmixed.emulation: the float16 rounding op cannot keep oneDNN "
                             "layouts (%s); it rounds in plain layout instead (slower; the "
                             "results of MXMIXED_EMULATION_KEEP_LAYOUTS=0).", _one_line(err))
        _STATE["why"] = "built and loaded; " + layouts
    return _STATE["op"]


def round_bf16_op():
    """The bfloat16 rounding op's name (the library of :func:`round16_op`, built and loaded on
    first call), or None when that library is unavailable (a warning has said why).

    Returns
    -------
    str or None
    """
    return BF16_OP if round16_op() is not None else None


def nonfinite_op():
    """The exact inf/NaN test's op name when the library is loaded in this process, else None.

    The library is loaded by the emulation's first rounding (:func:`round16_op`); this never
    builds it, so that an overflow check outside the emulation compiles nothing.

    Returns
    -------
    str or None
    """
    return NONFINITE_OP if _STATE["op"] is not None else None


def library_op(name):
    """``name``, an op of the rounding library (``_ext/ops16.cc``), when the library is built
    and loaded (on first call, as by :func:`round16_op`), else None.

    Parameters
    ----------
    name : str

    Returns
    -------
    str or None
    """
    return name if round16_op() is not None else None


def _one_line(err):
    return "%s: %s" % (type(err).__name__, one_line(err))


def status():
    """One line: whether the rounding op is in use, and why not."""
    return _STATE["why"]
