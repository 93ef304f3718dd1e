"""The one home of what mxmixed reads about the CPU: its flags, which MXNet contexts are its memory,
and what the flags mean for bfloat16 (whether MXNet's oneDNN can run it, natively or emulated).

MXNet runs an op on ``cpu_pinned`` (page-locked for GPU copies) and ``cpu_shared`` (shared with
DataLoader workers) arrays with its CPU kernels, so those contexts are the CPU's as much as
``cpu`` is: a float16 GEMM fails on them as it does on ``cpu``, and the emulation serves them.
"""
from typing import Tuple

__all__ = ["CPU_DEVICE_TYPES", "is_cpu", "cpu_flags", "has_amx_bf16", "bfloat16_native",
           "bfloat16_support", "BFLOAT16_EMULATED"]

CPU_DEVICE_TYPES = frozenset(("cpu", "cpu_pinned", "cpu_shared"))
"""frozenset of str: the ``device_type`` of every MXNet context in the CPU's memory."""


def is_cpu(ctx):
    """Whether MXNet runs ``ctx``'s ops with its CPU kernels.

    Parameters
    ----------
    ctx : mxnet.Context or None
        None (no context given) and an object without a ``device_type`` count as the CPU,
        MXNet's default.

    Returns
    -------
    bool
    """
    return ctx is None or getattr(ctx, "device_type", "cpu") in CPU_DEVICE_TYPES


def cpu_flags():
    """The CPU's feature flags, as ``/proc/cpuinfo`` lists them (``'avx512f'``, ...).

    Returns
    -------
    set of str or None
        None where they cannot be read (no ``/proc/cpuinfo``, or no ``flags`` line).
    """
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


# --- the bfloat16 rules of MXNet 1.9.1's oneDNN, read from the flags -----------------------

#: The one line every bfloat16 entry point shows where oneDNN emulates bfloat16.
BFLOAT16_EMULATED = ("bfloat16 runs emulated by oneDNN on this CPU (AVX-512 without AVX512-BF16 "
                     "or AMX): slower than float32; `mxmixed info --probe` measures it")

# what MXNet 1.9.1's bfloat16 ops need: oneDNN's avx512_core level (measured: with oneDNN capped
# at AVX2 they fail with "could not create a primitive descriptor iterator"; capped at
# avx512_core, without AVX512-BF16, they run, with bfloat16 arithmetic emulated by oneDNN)
_AVX512_CORE = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
# what oneDNN's AMX bfloat16 kernels need: the tile registers and their bfloat16 products
_AMX_BF16 = frozenset(("amx_bf16", "amx_tile"))


def has_amx_bf16():
    """Whether this CPU has AMX tiles with bfloat16 products (Sapphire Rapids and newer).

    Returns
    -------
    bool
        False also when the CPU flags cannot be read.
    """
    return _AMX_BF16 <= (cpu_flags() or set())


def bfloat16_native():
    """The CPU instructions that run bfloat16 arithmetic natively here, or None.

    Returns
    -------
    str or None
        ``'AMX-BF16'`` (Sapphire Rapids and newer), ``'AVX512-BF16'`` (Cooper Lake, Zen 4 and
        newer), or None: then oneDNN emulates bfloat16 with AVX-512 (slower than float32), or
        it cannot run at all (see :func:`bfloat16_support`). None also when the CPU flags
        cannot be read.
    """
    flags = cpu_flags() or set()
    if "amx_bf16" in flags:
        return "AMX-BF16"
    if "avx512_bf16" in flags:
        return "AVX512-BF16"
    return None


def bfloat16_support() -> Tuple[bool, str]:
    """Whether MXNet's bfloat16 AMP can run here, and why not.

    MXNet 1.9.1 runs bfloat16 ops through oneDNN on the CPU. They need a build with oneDNN
    (feature ``MKLDNN``) and a CPU with AVX-512 F, BW, VL and DQ (oneDNN's ``avx512_core``).
    AVX512-BF16 is not needed: without it oneDNN emulates the bfloat16 arithmetic (slower).

    Returns
    -------
    (bool, str)
        Whether it can run, and a reason to show when it cannot ('' when it can; when the
        CPU flags cannot be read, it is assumed to run).
    """
    import mxnet as mx  # here: the rest of this module is read before MXNet loads
    if not mx.runtime.Features().is_enabled("MKLDNN"):
        return False, "this MXNet build has no oneDNN (feature MKLDNN), which bfloat16 ops need"
    flags = cpu_flags()
    missing = [f for f in _AVX512_CORE if flags is not None and f not in flags]
    if missing:
        return False, ("MXNet's bfloat16 ops (oneDNN) need a CPU with AVX-512 F/BW/VL/DQ, and "
                       "this one lacks %s" % ", ".join(missing))
    return True, ""
