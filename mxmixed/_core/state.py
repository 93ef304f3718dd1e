"""The one place that says whether AMP and the CPU float16 emulation are on, and how.

Every layer asks here; nothing above this module keeps its own copy of these facts.

.. note::
   MXNet's AMP keeps its own process-global flag (``mxnet.contrib.amp.amp._amp_initialized``)
   that cannot be reset. :func:`amp_initialized` reads that flag, so it is true also after a
   direct ``amp.init()``; :data:`AMP` records what mxmixed itself asked for.
"""
import mxnet as mx

from .patches import Patches

__all__ = ["AMP", "EMULATION", "amp_initialized", "emulation_active", "gpu_visible"]


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
