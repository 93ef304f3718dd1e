"""Gluon mixed-precision helpers: ``init``, ``amp_scope``, ``init_trainer``, ``scale_loss``,
``unscale``, ``clip_global_norm`` and ``step``.

Call them where you would call ``mxnet.contrib.amp``. They add what MXNet 1.9.1's AMP lacks: a
loss scaler you can read and save (:class:`~mxmixed.scaler.LossScaler`), a check of
``update_on_kvstore``, clipping on the true gradients, a scope that undoes AMP's patches, and
CPU float16 emulation where no GPU is present. A Trainer is linked to its scaler by one handle
object (``mxmixed.training._handle``), stored under ``trainer._amp_loss_scaler``.

:func:`init` and :func:`amp_scope` live in ``mxmixed.training._amp`` and are re-exported here.
:func:`bfloat16_speed` gives what bfloat16 AMP measured of each hybridized block's training
step against float32 on this CPU (``mxmixed.training._speedcheck``).
For mxmixed's own commands (``mxmixed run``), not in ``__all__``: ``ClipWatch`` (clipping of
scaled gradients watched from outside a script), ``OutsideAmp`` (float16 loss scaling for a
script that has none), ``resolves`` (whether AMP can wrap an op) and
``missing_kernel`` (the op MXNet's "Unknown type enum 12" is about).
"""
import contextlib
import math
import numbers
import warnings
from typing import Iterator, List, Union

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon

from .. import emulation
from ._amp import EMULATION_HINT, amp_scope, amp_target, init
from ._clipwatch import ClipWatch, register_trainer, watch_helpers
from .._core.finite import param_grads, sums_of_squares
from ._handle import (ATTRIBUTE, TrainerHandle, attach, attached_elsewhere,
                      follow_linked_scaler, handle_of, handle_scale_loss)
from ._outside import OutsideAmp
from ._speedcheck import TrainingSpeed, bfloat16_speed
from ._unlisted import missing_kernel, resolves
from .._core.kvstore import (ensure_local_updates, init_kvstore, ready_kvstore,
                       trainer_is_distributed)
from .._core.state import amp_initialized, gpu_visible
from ._unlisted import unlisted_ops
from ..scaler import LossScaler

# unlisted_ops, imported above, is for symbolic's conversion, not for users
__all__ = ["init", "amp_scope", "init_trainer", "loss_scaler", "scale_loss", "unscale",
           "clip_global_norm", "step", "amp_initialized", "init_kvstore", "bfloat16_speed",
           "TrainingSpeed"]

_Losses = Union[mx.nd.NDArray, List[mx.nd.NDArray]]  # a loss, or the losses of several devices


def _check_trainer(trainer, name):
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError("%s needs a gluon.Trainer, got %s" % (name, type(trainer).__name__))


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _make_scaler(scaler):
    if isinstance(scaler, LossScaler):
        return scaler
    if isinstance(scaler, str):
        if scaler == "auto":
            # bfloat16 has float32's 8 exponent bits: gradients that underflow float16 (below
            # 6e-8) stay representable down to 1e-38, so there is nothing for a scale to rescue
            return LossScaler.static(1.0) if amp_target() == "bfloat16" else LossScaler()
        if scaler != "dynamic":
            raise ValueError("scaler must be 'auto', 'dynamic', a number or a LossScaler, got %r"
                             % scaler)
        return LossScaler()
    if isinstance(scaler, (int, float, np.floating, np.integer)) and not isinstance(scaler, bool):
        return LossScaler.static(scaler)
    raise TypeError("scaler must be 'auto', 'dynamic', a number or a LossScaler, got %r"
                    % (scaler,))


def _check_not_linked(trainer, replace):
    existing = getattr(trainer, ATTRIBUTE, None)
    if replace or existing is None or (isinstance(existing, TrainerHandle)
                                       and existing.scaler is None):
        return
    if isinstance(existing, TrainerHandle):
        raise ValueError("init_trainer was already called on this Trainer (its scaler: %r); a "
                         "second call would drop that scaler and its scale. To change the "
                         "scale, use mxmixed.loss_scaler(trainer).load_state_dict(...); to "
                         "replace the scaler on purpose, pass replace=True" % existing.scaler)
    raise ValueError("this Trainer already has MXNet's own AMP loss scaler (amp.init_trainer); "
                     "pass replace=True to replace it with an mxmixed LossScaler")


def _warn_precision(trainer):
    float16 = [p.name for p in trainer._params if np.dtype(p.dtype) == np.float16]
    if float16 and not getattr(trainer._optimizer, "multi_precision", False):
        warnings.warn("the Trainer updates %d float16 parameters (%s ...) in float16, without "
                      "float32 master weights: an update smaller than half a float16 step "
                      "(about 1/2048 of the weight) is rounded away. Create it with "
                      "optimizer_params={..., 'multi_precision': True}, or with "
                      "mxmixed.multi_precision_trainer(net.collect_params(), ...)"
                      % (len(float16), float16[0]), stacklevel=3)
    if amp_target() == "float16" and not emulation.emulation_active() and not gpu_visible():
        warnings.warn("AMP is on but no GPU is visible and the CPU float16 emulation is off: "
                      "float16 FullyConnected/Convolution fail on MXNet's CPU build ('FP16 gemm "
                      "on cpu not implemented!'). Call %s (mxmixed.init() does it when no GPU "
                      "is visible) before building the net" % EMULATION_HINT, stacklevel=3)


def init_trainer(trainer: gluon.Trainer, scaler: Union[str, float, LossScaler] = "auto",
                 replace: bool = False) -> LossScaler:
    """Attach a loss scaler to a Gluon Trainer and make it safe for mixed precision.

    Works after :func:`init` / :func:`amp_scope` (AMP) and for ``net.cast('float16')`` nets
    without AMP. The Trainer is made to update locally (``update_on_kvstore=False``), which AMP
    needs but MXNet does not check. A Trainer with sparse (``row_sparse``) weights, which MXNet
    makes update on its kvstore, keeps doing so on one machine: the overflow check runs before
    anything is pushed, so an overflowing step changes no weight.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
        The trainer; not an Optimizer.
    scaler : {'auto', 'dynamic'} or float or LossScaler, default 'auto'
        ``'auto'``: dynamic scaling for float16, none (a static scale of 1) for bfloat16,
        whose exponent range is float32's, so small gradients do not underflow.
        ``'dynamic'``: dynamic scaling with MXNet's constants; a number: a static scale
        (e.g. 128); or your own scaler.
    replace : bool, default False
        Replace a scaler attached before (by this function or ``amp.init_trainer``). Without
        it a second call raises, because it would silently reset the scale.

    Returns
    -------
    LossScaler
        The scaler now attached; :func:`loss_scaler` returns it later.

    Raises
    ------
    TypeError
        For an Optimizer or anything else that is not a Gluon Trainer.
    ValueError
        For ``update_on_kvstore=True`` (dense weights), an asynchronous kvstore, sparse weights
        on a distributed kvstore, a net with nothing to scale (all float32 and no AMP), a bad
        scale, a scaler attached to another Trainer, or a second call without
        ``replace=True``.

    Warns
    -----
    UserWarning
        For float16 parameters without ``multi_precision`` (small updates are lost), and for
        AMP on a CPU without the emulation (float16 GEMMs fail).

    Notes
    -----
    MXNet's ``amp.scale_loss`` works with the Trainer too: from the first call on, it scales
    an mxmixed Trainer's loss as :func:`scale_loss` does, and passes other Trainers to MXNet.

    Examples
    --------
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(10)
    ...     net.initialize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     scaler = mxmixed.init_trainer(trainer)             # dynamic loss scaling
    ...     static = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     mxmixed.init_trainer(static, scaler=128).loss_scale   # a static scale
    128.0
    >>> scaler.loss_scale
    65536.0
    >>> mxmixed.loss_scaler(trainer) is scaler
    True
    """
    if isinstance(trainer, mx.optimizer.Optimizer):
        raise TypeError("init_trainer needs a gluon.Trainer, got an Optimizer (%s); wrap it: "
                        "gluon.Trainer(net.collect_params(), optimizer, update_on_kvstore=False)"
                        % type(trainer).__name__)
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError("init_trainer needs a gluon.Trainer, got %s" % type(trainer).__name__)
    _check_not_linked(trainer, replace)
    if not amp_initialized() and not any(np.dtype(p.dtype) == np.float16 for p in trainer._params):
        raise ValueError("nothing to scale: the Trainer's parameters are all float32 and AMP is "
                         "not initialized; call mxmixed.init() (or use amp_scope) before building "
                         "the net, or cast it with net.cast('float16')")
    ensure_local_updates(trainer)
    scaler = _make_scaler(scaler)
    if attached_elsewhere(scaler, trainer):
        raise ValueError("this LossScaler is already attached to another Trainer; give each "
                         "Trainer its own (a GAN's generator and discriminator, say)")
    _warn_precision(trainer)
    if handle_of(trainer) is None and hasattr(trainer, "_amp_original_scale"):
        # replacing amp.init_trainer's scaler: amp.scale_loss left trainer._scale divided
        trainer._scale = trainer._amp_original_scale
    attach(trainer, scaler)
    register_trainer(trainer)
    watch_helpers()
    if amp_initialized():
        # SoftmaxOutput and MXNet's other loss-output ops scale their gradient by AMP's global
        # scaler; it reads the first attached scaler's scale from now on.
        follow_linked_scaler(scaler)
    return scaler


def loss_scaler(trainer: gluon.Trainer) -> LossScaler:
    """The :class:`LossScaler` attached by :func:`init_trainer`.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    LossScaler

    Examples
    --------
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(10)
    ...     net.initialize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     scaler = mxmixed.init_trainer(trainer, scaler=128)
    >>> mxmixed.loss_scaler(trainer) is scaler
    True
    >>> mxmixed.loss_scaler(gluon.Trainer(net.collect_params(), "sgd"))
    Traceback (most recent call last):
        ...
    ValueError: this Trainer has no mxmixed LossScaler; ...
    """
    _check_trainer(trainer, "loss_scaler")
    handle = handle_of(trainer)
    if handle is None or handle.scaler is None:
        raise ValueError("this Trainer has no mxmixed LossScaler; call mxmixed.init_trainer "
                         "(trainer) first")
    return handle.scaler


@contextlib.contextmanager
def scale_loss(loss: _Losses, trainer: gluon.Trainer) -> Iterator[_Losses]:
    """Scale a loss (or a list of losses) for backward, as ``amp.scale_loss`` does.

    Use it inside ``autograd.record()``, so that the scaling is part of the recorded graph. The
    scale is read from the Trainer's :class:`LossScaler` now; the next update divides by it.

    Parameters
    ----------
    loss : mxnet.nd.NDArray or list of NDArray
        The loss(es).
    trainer : mxnet.gluon.Trainer
        A trainer prepared by :func:`init_trainer`.

    Yields
    ------
    NDArray or list of NDArray
        The scaled loss(es), to call ``backward`` on.

    Examples
    --------
    One training step with AMP on a batch of the digits that ship with scikit-learn:

    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> from sklearn.datasets import load_digits
    >>> import mxmixed
    >>> digits = load_digits()
    >>> X, y = mx.nd.array(digits.data[:32] / 16), mx.nd.array(digits.target[:32])
    >>> loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(10)
    ...     net.initialize()
    ...     net.hybridize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     scaler = mxmixed.init_trainer(trainer, scaler=128)
    ...     with autograd.record():
    ...         loss = loss_fn(net(X), y)
    ...         with mxmixed.scale_loss(loss, trainer) as scaled:   # loss * 128
    ...             scaled.backward()
    ...     applied = mxmixed.step(trainer, X.shape[0])            # grads / 128, then update
    >>> applied
    True
    """
    _check_trainer(trainer, "scale_loss")
    loss_scaler(trainer)  # a clear error for a Trainer without a scaler
    _check_loss(loss)
    with handle_scale_loss(loss, trainer) as scaled:
        yield scaled


def _check_loss(loss):
    if isinstance(loss, (list, tuple)):
        if not loss:
            raise ValueError("scale_loss needs at least one loss, got an empty %s"
                             % type(loss).__name__)
        for k, item in enumerate(loss):
            if not isinstance(item, mx.nd.NDArray):
                raise TypeError("scale_loss: loss[%d] must be an NDArray, got %s"
                                % (k, type(item).__name__))
    elif not isinstance(loss, mx.nd.NDArray):
        raise TypeError("scale_loss needs the loss as an NDArray (or a list of them), recorded "
                        "inside autograd.record(); got %s" % type(loss).__name__)


def _reduces(trainer):
    """Whether gradients are summed across devices or workers before the update."""
    return len(trainer._contexts) > 1 or trainer_is_distributed(trainer)


def unscale(trainer: gluon.Trainer) -> None:
    """Divide the gradients by the loss scale in place, so they can be inspected.

    .. note::
       Dividing float16 gradients in place can underflow small values (they are float16 after
       ``net.cast('float16')``). For clipping, use :func:`clip_global_norm`, which leaves the
       gradients alone.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    None

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> from sklearn.datasets import load_digits
    >>> import mxmixed
    >>> digits = load_digits()
    >>> X, y = mx.nd.array(digits.data[:32] / 16), mx.nd.array(digits.target[:32])
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(10)
    ...     net.initialize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     _ = mxmixed.init_trainer(trainer, scaler=128)
    ...     with autograd.record():
    ...         loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(X), y)
    ...         with mxmixed.scale_loss(loss, trainer) as scaled:
    ...             scaled.backward()
    ...     scaled_grad = net.weight.grad().copy()
    ...     mxmixed.unscale(trainer)                  # now the true gradients
    >>> bool(mx.nd.abs(scaled_grad / 128 - net.weight.grad()).max() < 1e-6)
    True
    """
    _check_trainer(trainer, "unscale")
    loss_scaler(trainer)
    handle_of(trainer).unscale()


def _sum_of_squares(grads):
    """The sum of the squares of all elements, in float32: one multi_sum_sq per device, one sync."""
    by_ctx = {}
    for grad in grads:
        by_ctx.setdefault(grad.context, []).append(grad)
    parts = []
    with autograd.pause():
        for group in by_ctx.values():
            # float16 squares overflow above 256; multi_sum_sq needs one dtype anyway
            group = [g.astype("float32", copy=False) for g in group]
            parts += [sums.sum().as_in_context(mx.cpu()) for sums in sums_of_squares(group)]
        if not parts:
            return 0.0
        return float(mx.nd.add_n(*parts).asscalar())


def clip_global_norm(trainer: gluon.Trainer, max_norm: float) -> float:
    """Clip the global L2 norm of the true (unscaled) gradients to ``max_norm``.

    The norm is that of the gradient of the loss as passed to ``backward``. For a per-sample
    loss vector (Gluon's losses) that is the gradient *summed* over the batch, which
    ``Trainer.step(batch_size)`` divides by ``batch_size`` only afterwards: its norm grows with
    the batch size, so pick ``max_norm`` for the summed gradient (or pass ``loss.mean()`` and
    ``step(trainer, 1)`` to clip the mean gradient). This is what
    ``gluon.utils.clip_global_norm`` on the gradients measures too.

    The norm is computed in float32, in one ``multi_sum_sq`` call per device, from the
    gradients as they stand (scaled or not), and the clipping factor is folded into this step's
    update, so float16 gradients are not rewritten. When the gradients hold inf or NaN, the
    step will be skipped and nothing is clipped. With several devices or workers the gradients
    are summed first (``trainer.allreduce_grads()``), so every worker clips by the same global
    norm; then :func:`step` applies the update without reducing again.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
        Prepared by :func:`init_trainer`, or a plain float32 Trainer (nothing to unscale).
    max_norm : float
        The largest allowed global L2 norm of the batch-summed gradient.

    Returns
    -------
    float
        The true global norm before clipping (inf or nan on an overflowing step).

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> from sklearn.datasets import load_digits
    >>> import mxmixed
    >>> digits = load_digits()
    >>> X, y = mx.nd.array(digits.data[:32] / 16), mx.nd.array(digits.target[:32])
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(10)
    ...     net.initialize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     _ = mxmixed.init_trainer(trainer, scaler=1024)
    ...     with autograd.record():
    ...         loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(X), y)
    ...         with mxmixed.scale_loss(loss, trainer) as scaled:
    ...             scaled.backward()
    ...     norm = mxmixed.clip_global_norm(trainer, max_norm=0.1)   # the unscaled norm
    ...     applied = mxmixed.step(trainer, X.shape[0])
    >>> 0.1 < norm < 1000, applied
    (True, True)
    """
    _check_trainer(trainer, "clip_global_norm")
    if not (_is_real(max_norm) and math.isfinite(max_norm) and max_norm > 0):
        raise ValueError("max_norm must be positive and finite, got %r" % (max_norm,))
    handle = handle_of(trainer) or attach(trainer, None)
    reduced = _reduces(trainer)
    if reduced and not handle.reduced:
        ready_kvstore(trainer)
        trainer.allreduce_grads()
        handle.reduced = True
    total = _sum_of_squares(param_grads(trainer._params, first_copy_only=reduced))
    norm = math.sqrt(total) / handle.gradient_scale
    handle.clip = max_norm / norm if math.isfinite(norm) and norm > max_norm else 1.0
    return norm


def step(trainer: gluon.Trainer, batch_size: int, ignore_stale_grad: bool = False) -> bool:
    """``trainer.step`` that says whether the update was applied or skipped.

    Advance a learning-rate schedule only on applied steps. Under a distributed kvstore it
    first broadcasts rank 0's initial weights, which Gluon would otherwise race with the first
    gradient push (:func:`init_kvstore`); after :func:`clip_global_norm` has summed the
    gradients, it updates without summing them again.

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

    Raises
    ------
    RuntimeError
        When the loss scale is not 1 and this step's gradients did not go through
        :func:`scale_loss` (the update would be that many times too small).

    Examples
    --------
    A step whose gradients overflow is skipped, and the dynamic scale backs off:

    >>> import mxnet as mx
    >>> from mxnet import autograd, gluon
    >>> import mxmixed
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(2)
    ...     net.initialize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     scaler = mxmixed.init_trainer(trainer)
    ...     X = mx.nd.array([[1.0, float("inf")]])       # an inf in the data
    ...     with autograd.record():
    ...         with mxmixed.scale_loss(net(X).sum(), trainer) as scaled:
    ...             scaled.backward()
    ...     applied = mxmixed.step(trainer, 1)
    >>> applied, scaler.skipped_steps
    (False, 1)
    """
    _check_trainer(trainer, "step")
    if not (_is_real(batch_size) and math.isfinite(batch_size) and batch_size > 0):
        raise ValueError("batch_size must be a positive finite number, got %r" % (batch_size,))
    handle = handle_of(trainer)
    if handle is not None and handle.reduced:
        handle.reduced = False
        trainer.update(batch_size, ignore_stale_grad=ignore_stale_grad)
    else:
        ready_kvstore(trainer)
        trainer.step(batch_size, ignore_stale_grad=ignore_stale_grad)
    return not (handle is not None and handle.scaler is not None
                and handle.scaler.last_step_skipped)
