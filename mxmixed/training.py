"""Gluon mixed-precision helpers: ``init``, ``amp_scope``, ``init_trainer``, ``scale_loss``,
``unscale``, ``clip_global_norm`` and ``step``.

Call them where you would call ``mxnet.contrib.amp``. They add what MXNet 1.9.1's AMP lacks: a
loss scaler you can read and save (:class:`~mxmixed.scaler.LossScaler`), a check of
``update_on_kvstore``, clipping on the true gradients, a scope that undoes AMP's patches, and
CPU float16 emulation where no GPU is present.

.. note::
   ``mxnet.contrib.amp.init`` patches MXNet's operator functions for the whole process and cannot
   be undone. :func:`init` keeps that behaviour (it is what users of ``amp.init`` expect);
   :func:`amp_scope` is the undoable form.
"""
import contextlib
import gc
import logging
import math
import warnings

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp

from . import emulation
from .scaler import LossScaler
from .sysinfo import cpu_has_avx512_bf16

__all__ = ["init", "amp_scope", "init_trainer", "loss_scaler", "scale_loss", "unscale",
           "clip_global_norm", "step", "amp_initialized"]

_LOG = logging.getLogger("mxmixed")
_INIT = {"settings": None, "scoped": 0}
_PATCHED_SUBMODULES = ("op", "_internal", "contrib", "linalg", "sparse", "image", "random")


def amp_initialized():
    """Whether AMP's patches are in place (from :func:`init`, ``amp.init`` or a scope).

    Returns
    -------
    bool
    """
    return bool(amp.amp._amp_initialized)


def _check_target(target_dtype):
    name = np.dtype(target_dtype).name if target_dtype != "bfloat16" else "bfloat16"
    if name not in ("float16", "bfloat16"):
        raise ValueError("target_dtype must be 'float16' or 'bfloat16', got %r" % (target_dtype,))
    if name == "bfloat16" and not cpu_has_avx512_bf16():
        raise RuntimeError("target_dtype='bfloat16' needs a CPU with AVX512-BF16 for MXNet's "
                           "bfloat16 AMP, and this CPU has none (see `mxmixed info`); use "
                           "target_dtype='float16' (emulated on CPU, native on a GPU)")
    if mx.util.is_np_array() or mx.util.is_np_shape():
        raise RuntimeError("NumPy mode (npx.set_np) is on: MXNet 1.9's AMP patches nothing "
                           "there and the net would silently stay float32; call "
                           "mxmixed.init before npx.set_np, or run without NumPy mode")
    return name


def _warn_hybridized_blocks():
    for obj in gc.get_objects():
        if isinstance(obj, gluon.HybridBlock) and getattr(obj, "_cached_op", None) is not None:
            warnings.warn("HybridBlock '%s' was hybridized and run before AMP was initialized: "
                          "its cached graph stays float32. Call its hybridize() again (or build "
                          "it after mxmixed.init)." % obj.name, stacklevel=3)


def _emulation_mode(emulate, target):
    if emulate not in ("auto", True, False):
        raise ValueError("emulate must be 'auto', True or False, got %r" % (emulate,))
    if target != "float16" or emulate is False:
        return None
    return "auto" if emulate == "auto" else "on"


def init(target_dtype="float16", target_precision_ops=None, conditional_fp32_ops=None,
         fp32_ops=None, emulate="auto"):
    """Initialize AMP for the whole process, with CPU float16 emulation where needed.

    A thin wrapper of ``mxnet.contrib.amp.init`` that also switches on the emulation (when no
    GPU is visible, by default), warns about blocks hybridized too early, and refuses settings
    that would silently do nothing.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
        The low precision type.
    target_precision_ops, conditional_fp32_ops, fp32_ops : list, optional
        Op-list overrides, exactly as ``amp.init`` takes them: each list *replaces* AMP's own
        (``fp32_ops=['FullyConnected']`` drops softmax and the rest from the float32 list).
        :func:`mxmixed.diagnostics.keep_in_float32` builds lists that extend AMP's instead.
    emulate : {'auto', True, False}, default 'auto'
        CPU float16 emulation: ``'auto'`` when no GPU is visible, True always (on CPU
        contexts), False never.

    Raises
    ------
    RuntimeError
        For bfloat16 on a CPU without AVX512-BF16, in NumPy mode, or when AMP was already
        initialized with other settings (MXNet cannot redo it).

    .. note::
       Call it before the net is hybridized and run. A second call with the same settings is a
       no-op; with other settings it raises, where MXNet would silently ignore it.
    """
    target = _check_target(target_dtype)
    settings = (target, target_precision_ops, conditional_fp32_ops, fp32_ops)
    mode = _emulation_mode(emulate, target)
    if amp_initialized():
        if _INIT["settings"] == settings:
            _LOG.info("mxmixed.init: AMP is already initialized with these settings")
            if mode:
                emulation.enable(mode)
            return
        raise RuntimeError("AMP is already initialized%s and MXNet 1.9.1 cannot undo or redo "
                           "it; restart the process, or use mxmixed.amp_scope for runs side by "
                           "side" % ("" if _INIT["settings"] is None
                                     else " with other settings %r" % (_INIT["settings"],)))
    _warn_hybridized_blocks()
    if mode:
        emulation.enable(mode)
    amp.init(target_dtype=target, target_precision_ops=target_precision_ops,
             conditional_fp32_ops=conditional_fp32_ops, fp32_ops=fp32_ops)
    _INIT["settings"] = settings


def _patched_modules():
    modules = []
    for root in (mx.ndarray, mx.symbol):
        modules.append(root)
        modules += [getattr(root, name) for name in _PATCHED_SUBMODULES if hasattr(root, name)]
    return modules


@contextlib.contextmanager
def amp_scope(enabled=True, target_dtype="float16", target_precision_ops=None,
              conditional_fp32_ops=None, fp32_ops=None, emulate="auto"):
    """Apply AMP inside a ``with`` block and restore MXNet's functions on exit.

    With ``enabled=False`` the same code runs in plain float32. A float32 run and an AMP run
    can then sit side by side in one process, which ``amp.init`` alone does not allow.

    Parameters
    ----------
    enabled : bool, default True
        Whether to apply AMP at all.
    target_dtype, target_precision_ops, conditional_fp32_ops, fp32_ops, emulate
        As in :func:`init`.

    Yields
    ------
    bool
        Whether AMP is active inside the block.

    .. note::
       Build and hybridize the nets of an AMP run inside the scope: a block keeps the graph it
       cached, so a block hybridized inside stays mixed precision afterwards, and one cached
       before stays float32. Scopes cannot be used after a process-wide :func:`init`.
    """
    if not enabled:
        yield False
        return
    target = _check_target(target_dtype)
    if amp_initialized():
        raise RuntimeError("AMP is already initialized for the whole process (mxmixed.init or "
                           "amp.init), so amp_scope cannot apply and undo it; use one or the "
                           "other")
    mode = _emulation_mode(emulate, target)
    with emulation.emulated(mode) if mode else contextlib.nullcontext():
        snapshot = [(m, dict(vars(m))) for m in _patched_modules()]
        saved = (amp.amp._amp_initialized, amp.amp._amp_loss_scale_initialized,
                 amp.amp._loss_scaler, _INIT["settings"])
        try:
            amp.init(target_dtype=target, target_precision_ops=target_precision_ops,
                     conditional_fp32_ops=conditional_fp32_ops, fp32_ops=fp32_ops)
            _INIT["scoped"] += 1
            yield True
        finally:
            for module, before in snapshot:
                now = vars(module)
                for name in [n for n in now if n not in before]:
                    delattr(module, name)
                for name, value in before.items():
                    if now.get(name) is not value:
                        setattr(module, name, value)
            (amp.amp._amp_initialized, amp.amp._amp_loss_scale_initialized,
             amp.amp._loss_scaler, _INIT["settings"]) = saved
            _INIT["scoped"] -= 1


def _ensure_local_updates(trainer):
    config = trainer._kvstore_params
    kvstore = config.get("kvstore")
    name = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")
    if "async" in (name or ""):
        raise ValueError("kvstore '%s' updates on the server, before any overflow check; loss "
                         "scaling needs a synchronous kvstore with update_on_kvstore=False" % name)
    if trainer._kv_initialized:
        if trainer._kvstore is not None and trainer._update_on_kvstore:
            raise ValueError("this Trainer already updates on the kvstore, where an overflowing "
                             "step is applied before the check; create it with "
                             "gluon.Trainer(..., update_on_kvstore=False) before its first step")
        return
    if config.get("update_on_kvstore") is True:
        raise ValueError("the Trainer was created with update_on_kvstore=True: the kvstore would "
                         "apply overflowing steps before the overflow check; create it with "
                         "gluon.Trainer(params, optimizer, ..., update_on_kvstore=False)")
    config["update_on_kvstore"] = False


def _make_scaler(scaler):
    if isinstance(scaler, LossScaler):
        if getattr(scaler, "_attached", False):
            raise ValueError("this LossScaler is already attached to another Trainer; give each "
                             "Trainer its own (a GAN's generator and discriminator, say)")
        return scaler
    if isinstance(scaler, str):
        if scaler != "dynamic":
            raise ValueError("scaler must be 'dynamic', a number or a LossScaler, got %r" % scaler)
        return LossScaler()
    if isinstance(scaler, (int, float, np.floating, np.integer)) and not isinstance(scaler, bool):
        return LossScaler.static(scaler)
    raise TypeError("scaler must be 'dynamic', a number or a LossScaler, got %r" % (scaler,))


def init_trainer(trainer, scaler="dynamic"):
    """Attach a loss scaler to a Gluon Trainer and make it safe for mixed precision.

    Works after :func:`init` / :func:`amp_scope` (AMP) and for ``net.cast('float16')`` nets
    without AMP. The Trainer is made to update locally (``update_on_kvstore=False``), which AMP
    needs but MXNet does not check.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
        The trainer; not an Optimizer.
    scaler : {'dynamic'} or float or LossScaler, default 'dynamic'
        Dynamic scaling with MXNet's constants, a static scale (e.g. 128), or your own scaler.

    Returns
    -------
    LossScaler
        The scaler now attached; :func:`loss_scaler` returns it later.

    Raises
    ------
    TypeError
        For an Optimizer or anything else that is not a Gluon Trainer.
    ValueError
        For ``update_on_kvstore=True``, an asynchronous kvstore, a net with nothing to scale
        (all float32 and no AMP), or a bad scale.
    """
    if isinstance(trainer, mx.optimizer.Optimizer):
        raise TypeError("init_trainer needs a gluon.Trainer, got an Optimizer (%s); wrap it: "
                        "gluon.Trainer(net.collect_params(), optimizer, update_on_kvstore=False)"
                        % type(trainer).__name__)
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError("init_trainer needs a gluon.Trainer, got %s" % type(trainer).__name__)
    if not amp_initialized() and not any(np.dtype(p.dtype) == np.float16 for p in trainer._params):
        raise ValueError("nothing to scale: the Trainer's parameters are all float32 and AMP is "
                         "not initialized; call mxmixed.init() (or use amp_scope) before building "
                         "the net, or cast it with net.cast('float16')")
    _ensure_local_updates(trainer)
    scaler = _make_scaler(scaler)
    scaler._attached = True
    trainer._amp_loss_scaler = scaler
    trainer._amp_original_scale = trainer._scale
    global_scaler = amp.amp._loss_scaler
    if amp_initialized() and global_scaler is not None and \
            not getattr(global_scaler, "_mxmixed_linked", False):
        # SoftmaxOutput and MXNet's other loss-output ops scale their gradient by AMP's global
        # scaler; the first trainer's scaler keeps it in step.
        global_scaler._mxmixed_linked = True
        scaler._mirror = global_scaler
        scaler._sync_mirror()
    return scaler


def loss_scaler(trainer):
    """The :class:`LossScaler` attached by :func:`init_trainer`.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    LossScaler
    """
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if not isinstance(scaler, LossScaler):
        raise ValueError("this Trainer has no mxmixed LossScaler; call mxmixed.init_trainer "
                         "(trainer) first")
    return scaler


@contextlib.contextmanager
def scale_loss(loss, trainer):
    """Scale a loss (or a list of losses) for backward, as ``amp.scale_loss`` does.

    Use it inside ``autograd.record()``, so that the scaling is part of the recorded graph.

    Parameters
    ----------
    loss : mxnet.nd.NDArray or list of NDArray
        The loss(es).
    trainer : mxnet.gluon.Trainer
        A trainer prepared by :func:`init_trainer`; its scale is used and ``step`` unscales.

    Yields
    ------
    NDArray or list of NDArray
        The scaled loss(es), to call ``backward`` on.
    """
    scaler = loss_scaler(trainer)
    scale = scaler.loss_scale
    trainer._scale = trainer._amp_original_scale / scale
    if isinstance(loss, (list, tuple)):
        yield [l * scale for l in loss]
    else:
        yield loss * scale


def _grads(trainer, first_copy_only=False):
    return [g for p in trainer._params if p.grad_req != "null" and p._grad is not None
            for g in (p.list_grad()[:1] if first_copy_only else p.list_grad())]


def _is_dist(trainer):
    kvstore = trainer._kvstore_params.get("kvstore")
    name = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "") or ""
    return "dist" in name


def _reduces(trainer):
    """Whether gradients are summed across devices or workers before the update."""
    return len(trainer._contexts) > 1 or _is_dist(trainer)


def _ready_kvstore(trainer):
    # Gluon would broadcast rank 0's weights inside the first step, racing the first gradient
    # push (see mxmixed.distributed.init_kvstore); do the broadcast first.
    if _is_dist(trainer) and (not trainer._kv_initialized or trainer._params_to_init):
        from .distributed import init_kvstore

        init_kvstore(trainer)


def unscale(trainer):
    """Divide the gradients by the loss scale in place, so they can be inspected.

    .. note::
       Dividing float16 gradients in place can underflow small values (they are float16 after
       ``net.cast('float16')``). For clipping, use :func:`clip_global_norm`, which leaves the
       gradients alone.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    """
    scaler = loss_scaler(trainer)
    factor = trainer._scale / trainer._amp_original_scale
    if factor == 1.0:
        return
    with autograd.pause():
        for grad in _grads(trainer):
            grad[:] = grad * factor
    trainer._scale = trainer._amp_original_scale
    del scaler


def clip_global_norm(trainer, max_norm):
    """Clip the global norm of the true (unscaled) gradients to ``max_norm``.

    The norm is computed in float32 from the gradients as they stand (scaled or not) and the
    clipping factor is folded into the Trainer's rescaling, so float16 gradients are not
    rewritten. When the gradients hold inf or NaN, the step will be skipped and nothing is
    clipped. With several devices or workers, the gradients are summed first
    (``trainer.allreduce_grads()``), so every worker clips by the same global norm; then
    :func:`step` applies the update without reducing again.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
        Prepared by :func:`init_trainer`, or a plain float32 Trainer (nothing to unscale).
    max_norm : float
        The largest allowed global L2 norm, measured like ``gluon.utils.clip_global_norm``
        (before the Trainer's division by the batch size).

    Returns
    -------
    float
        The true global norm before clipping (inf or nan on an overflowing step).
    """
    if not (isinstance(max_norm, (int, float)) and math.isfinite(max_norm) and max_norm > 0):
        raise ValueError("max_norm must be positive and finite, got %r" % (max_norm,))
    reduced = _reduces(trainer)
    if reduced and not getattr(trainer, "_mxmixed_reduced", False):
        _ready_kvstore(trainer)
        trainer.allreduce_grads()
        trainer._mxmixed_reduced = True
    original = getattr(trainer, "_amp_original_scale", None)
    if original is None:
        # A plain Trainer: no scale_loss resets its rescaling each step, so clip from the base.
        trainer._scale = trainer.__dict__.setdefault("_mxmixed_plain_scale", trainer._scale)
        factor = 1.0
    else:
        factor = trainer._scale / original
    with autograd.pause():
        total = 0.0
        for grad in _grads(trainer, first_copy_only=reduced):
            total += float(mx.nd.square(grad.astype("float32")).sum().asscalar())
    norm = math.sqrt(total) * factor
    if math.isfinite(norm) and norm > max_norm:
        trainer._scale *= max_norm / norm
    return norm


def step(trainer, batch_size, ignore_stale_grad=False):
    """``trainer.step`` that says whether the update was applied or skipped.

    Advance a learning-rate schedule only on applied steps. Under a distributed kvstore it
    first broadcasts rank 0's initial weights, which Gluon would otherwise race with the first
    gradient push (:func:`mxmixed.distributed.init_kvstore`); after :func:`clip_global_norm`
    has summed the gradients, it updates without summing them again.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    batch_size : int
        As for ``Trainer.step``.
    ignore_stale_grad : bool, default False
        As for ``Trainer.step``.

    Returns
    -------
    bool
        True when the parameters were updated, False when the step was skipped on overflow.
    """
    if getattr(trainer, "_mxmixed_reduced", False):
        trainer._mxmixed_reduced = False
        trainer.update(batch_size, ignore_stale_grad=ignore_stale_grad)
    else:
        _ready_kvstore(trainer)
        trainer.step(batch_size, ignore_stale_grad=ignore_stale_grad)
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    return not (isinstance(scaler, LossScaler) and scaler.last_step_skipped)
