"""AMX for MXNet 1.9.1's bfloat16: the tile kernels its oneDNN leaves off, switched on.

MXNet 1.9.1 ships oneDNN v2.4.4, where AMX is a preview: oneDNN runs bfloat16 GEMMs on AMX
tiles only when ``DNNL_MAX_CPU_ISA=AVX512_CORE_AMX`` is in the environment at the moment it
first picks its instruction set (the process's first oneDNN primitive), and it does not ask
Linux (5.16 and newer) for the tile data state, so its first AMX instruction would kill the
process (SIGILL). Without AMX, oneDNN 2.4 runs a bfloat16 FullyConnected with its AVX512-BF16
GEMM, which on a Sapphire Rapids Xeon is slower than float32 (measured: 0.63x for
1024x512x1536; with AMX 1.7x, on a loaded machine; ``docs/bfloat16.md``).

:func:`request_amx` asks Linux for the tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM)``), sets
the variable, makes oneDNN pick its instruction set with one tiny FullyConnected, and then
puts the environment back, so that a program this process starts (which has no permission)
never sees the variable. The bfloat16 entry points call it (``mxmixed.init`` and
``amp_scope`` with bfloat16, ``symbolic.convert`` to bfloat16, ``load_bfloat16``, the
bfloat16 probe). It works only before the process's first oneDNN op: after it, oneDNN keeps
the instruction set it picked, which nothing outside oneDNN can read.
``MXMIXED_BFLOAT16_AMX=0`` leaves oneDNN as it is; a ``DNNL_MAX_CPU_ISA`` set by the user is
never replaced (the permission is still asked for where it names AMX).
"""
import ctypes
import errno
import os
import platform

import mxnet as mx

from . import devices, env

__all__ = ["request_amx", "amx_status"]

_ISA = "AVX512_CORE_AMX"
_ISA_VARIABLES = ("DNNL_MAX_CPU_ISA", "MKLDNN_MAX_CPU_ISA")
_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_STATUS = []  # the answer of the first request: one process, one instruction set


def _ask_linux():
    """'' when Linux lets this process use the AMX tile data, else why not."""
    if platform.machine() != "x86_64":
        return "not an x86_64 machine"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        code = libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    except (OSError, AttributeError) as err:
        return "arch_prctl could not be called: %s" % err
    if code != 0:
        number = ctypes.get_errno()
        return "Linux refused the AMX tile state (arch_prctl: %s; Linux 5.16 or newer needed)" \
            % errno.errorcode.get(number, number)
    return ""


def _pick_isa():
    """Run one tiny oneDNN op so that oneDNN picks its instruction set now."""
    ones = mx.nd.ones((1, 1), ctx=mx.cpu())
    mx.nd.FullyConnected(ones, ones, no_bias=True, num_hidden=1).wait_to_read()


def request_amx():
    """Let oneDNN run bfloat16 on AMX tiles, where the CPU has them; once per process.

    Returns
    -------
    str
        What happened, in one line: ``'on'`` (asked for before this process's first oneDNN
        op, as far as mxmixed ran it), or why not (no AMX on this CPU, switched off by
        ``MXMIXED_BFLOAT16_AMX=0``, Linux refused, ``DNNL_MAX_CPU_ISA`` set by the user).
    """
    if not _STATUS:
        _STATUS.append(_request())
    return _STATUS[0]


def amx_status():
    """What :func:`request_amx` answered in this process, or None before any request."""
    return _STATUS[0] if _STATUS else None


def _request():
    flags = devices.cpu_flags() or set()
    if not {"amx_bf16", "amx_tile"} <= flags:
        return "off: this CPU has no AMX-BF16"
    if env.switch("MXMIXED_BFLOAT16_AMX") is False:
        return "off: MXMIXED_BFLOAT16_AMX=0"
    given = next((os.environ[v] for v in _ISA_VARIABLES if os.environ.get(v)), None)
    if given is not None and "AMX" not in given.upper():
        return "off: DNNL_MAX_CPU_ISA=%s, set outside mxmixed" % given
    why = _ask_linux()
    if why:
        return "off: " + why
    if given is not None:
        return "on: DNNL_MAX_CPU_ISA=%s, set outside mxmixed" % given
    os.environ["DNNL_MAX_CPU_ISA"] = _ISA
    try:
        _pick_isa()
    finally:
        del os.environ["DNNL_MAX_CPU_ISA"]
    return "on"
