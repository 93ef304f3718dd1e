"""The one place that says whether AMP and the CPU float16 emulation are on, and how.

Every layer asks here; nothing above this module keeps its own copy of these facts.

.. note::
   MXNet's AMP keeps its own process-global flag (``mxnet.contrib.amp.amp._amp_initialized``)
   that cannot be reset. :func:`amp_initialized` reads that flag, so it is true also after a
   direct ``amp.init()``; :data:`AMP` records what mxmixed itself asked for.
"""
import mxnet as mx

__all__ = ["AMP", "EMULATION", "amp_initialized", "emulation_active", "gpu_visible"]


class _AmpState:
    """What mxmixed asked of AMP: the settings of the last ``init`` and open ``amp_scope`` count."""

    def __init__(self):
        self.settings = None
        self.scoped = 0


class _EmulationState:
    """Whether the emulation is on, in which mode, why, and how to undo its patches."""

    def __init__(self):
        self.active = False
        self.mode = None
        self.reason = ""
        self.announced = False
        self.undo = []


AMP = _AmpState()
EMULATION = _EmulationState()


def amp_initialized():
    """Whether AMP's patches are in place (from ``mxmixed.init``, ``amp.init`` or a scope).

    Returns
    -------
    bool
    """
    from mxnet.contrib import amp
    return bool(amp.amp._amp_initialized)


def emulation_active():
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
