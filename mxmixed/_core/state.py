"""The one place that says whether AMP and the CPU float16 emulation are on, and how.

Every layer asks here; nothing above this module keeps its own copy of these facts.

.. note::
   MXNet's AMP keeps its own process-global flag (``mxnet.contrib.amp.amp._amp_initialized``)
   that cannot be reset. :func:`amp_initialized` reads that flag, so it is true also after a
   direct ``amp.init()``; :data:`AMP` records what mxmixed itself asked for.
"""
from typing import Tuple

import mxnet as mx

from . import devices
from .patches import Patches

__all__ = ["AMP", "EMULATION", "amp_initialized", "emulation_active", "gpu_visible",
           "bfloat16_support", "bfloat16_native", "BFLOAT16_EMULATED"]

#: The one line every bfloat16 entry point shows where oneDNN emulates bfloat16.
BFLOAT16_EMULATED = ("bfloat16 runs emulated by oneDNN on this CPU (AVX-512 without AVX512-BF16 "
                     "or AMX): slower than float32; `mxmixed info --probe` measures it")

# what MXNet 1.9.1's bfloat16 ops need: oneDNN's avx512_core level (measured: with oneDNN capped
# at AVX2 they fail with "could not create a primitive descriptor iterator"; capped at
# avx512_core, without AVX512-BF16, they run, with bfloat16 arithmetic emulated by oneDNN)
_AVX512_CORE = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


class _AmpState:
    """What mxmixed asked of AMP.

    Attributes
    ----------
    settings : tuple or None
        ``(target, target_precision_ops, conditional_fp32_ops, fp32_ops)`` of the last
        ``mxmixed.init`` (or of an ``amp.init`` it accepted).
    scoped : int
        How many ``amp_scope`` blocks are open.
    loss_output_scaler : LossScaler or None
        The scaler whose scale MXNet's loss-output ops (``SoftmaxOutput`` ...) use: the first
        one attached to a Trainer after AMP's init.
    patches : mxmixed._core.patches.Patches
        The patches mxmixed's AMP helpers make (``amp.scale_loss`` serving mxmixed Trainers,
        AMP's global scaler following the linked LossScaler); ``amp_scope`` undoes those
        applied inside it. Not ``amp.init``'s own: ``amp_scope`` restores those itself.
    """

    def __init__(self):
        self.settings = None
        self.scoped = 0
        self.loss_output_scaler = None
        self.patches = Patches("mxmixed AMP helpers")


class _EmulationState:
    """Whether the emulation is on, in which mode, why, and how to undo its patches."""

    def __init__(self):
        self.active = False
        self.mode = None
        self.reason = ""
        self.announced = False
        self.fc_true_fp16_warned = False
        self.patches = Patches("mxmixed.emulation")


AMP = _AmpState()
EMULATION = _EmulationState()


def amp_initialized() -> bool:
    """Whether AMP's patches are in place (from ``mxmixed.init``, ``amp.init`` or a scope).

    Returns
    -------
    bool

    Examples
    --------
    >>> import mxmixed
    >>> with mxmixed.amp_scope():
    ...     inside = mxmixed.amp_initialized()
    >>> inside, mxmixed.amp_initialized()
    (True, False)
    """
    from mxnet.contrib import amp
    return bool(amp.amp._amp_initialized)


def emulation_active() -> bool:
    """Whether the CPU float16 emulation is on.

    Returns
    -------
    bool
    """
    return EMULATION.active


def gpu_visible():
    """Whether MXNet sees at least one GPU.

    Returns
    -------
    bool
        False also when the CUDA runtime cannot be queried.
    """
    try:
        return mx.context.num_gpus() > 0
    except mx.base.MXNetError:
        return False


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
    flags = devices.cpu_flags() or set()
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
    if not mx.runtime.Features().is_enabled("MKLDNN"):
        return False, "this MXNet build has no oneDNN (feature MKLDNN), which bfloat16 ops need"
    flags = devices.cpu_flags()
    missing = [f for f in _AVX512_CORE if flags is not None and f not in flags]
    if missing:
        return False, ("MXNet's bfloat16 ops (oneDNN) need a CPU with AVX-512 F/BW/VL/DQ, and "
                       "this one lacks %s" % ", ".join(missing))
    return True, ""
