"""The one link between a Gluon ``Trainer`` and its :class:`~mxmixed.scaler.LossScaler`.

:func:`mxmixed.init_trainer` stores a :class:`TrainerHandle` under the one attribute MXNet 1.9.1
itself reads, ``trainer._amp_loss_scaler``: ``Trainer._update`` calls its ``has_overflow(params)``
before every update and skips the update when it returns True. Nothing else is stamped on the
Trainer or on MXNet's objects.

The scale lives in the LossScaler only. ``Trainer.step`` sets the optimizer's ``rescale_grad`` to
``trainer._scale / batch_size`` and then calls ``has_overflow``; the handle multiplies that by
``clip / scale`` there, at the moment of use, where ``scale`` is the scale the gradients carry
(what :func:`mxmixed.scale_loss` multiplied the loss by, 1 after :func:`mxmixed.unscale`) and
``clip`` the factor :func:`mxmixed.clip_global_norm` chose for this step. ``trainer._scale`` is
never changed.

.. note::
   MXNet's loss-output ops (``SoftmaxOutput`` ...) scale their gradient by AMP's process-global
   scaler, captured when ``amp.init`` ran. :func:`follow_linked_scaler` turns that object into a
   :class:`FollowingScaler`, whose ``loss_scale`` reads the LossScaler linked in
   ``mxmixed._core.state.AMP.loss_output_scaler`` (the first one attached after AMP's init), so it too
   derives the scale on use instead of holding a copy.

.. note::
   Both patches of MXNet made here (``amp.scale_loss`` serving mxmixed Trainers, and that change
   of the global scaler's class) go through ``mxmixed._core.state.AMP.patches``:
   :func:`mxmixed.amp_scope` undoes them when it ends. After a process-wide
   :func:`mxmixed.init` they stay, as ``amp.init``'s own patches do.
"""
import contextlib
import weakref

import mxnet as mx
from mxnet.contrib import amp
from mxnet.contrib.amp.loss_scaler import LossScaler as MXNetLossScaler

from .._core.finite import nonfinite_gradients, param_grads
from .._core.state import AMP
from ..emulation import all_finite
from ..scaler import LossScaleError

__all__ = ["ATTRIBUTE", "TrainerHandle", "handle_of", "attach", "follow_linked_scaler",
           "explain_cpu_float16", "handle_scale_loss"]

#: The one attribute set on a Trainer; MXNet's ``Trainer._update`` reads it.
ATTRIBUTE = "_amp_loss_scaler"

# scaler -> weak reference to the Trainer it is attached to; an entry goes with its scaler
_ATTACHED = weakref.WeakKeyDictionary()

_NO_CPU_FLOAT16 = ("FP16 gemm on cpu not implemented", "only supported by CuDNN")


class TrainerHandle:
    """What links one Trainer to its scaler, and this step's facts about its gradients.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    scaler : LossScaler or None
        None for a plain Trainer that :func:`mxmixed.clip_global_norm` clips: no overflow check,
        only the clipping factor.

    Attributes
    ----------
    scaler : LossScaler or None
    grad_scale : float or None
        The scale the current gradients carry: set by ``scale_loss``, 1 after ``unscale``;
        None means the scaler's current scale (1 without a scaler).
    clip : float
        The clipping factor folded into this step's update (1: no clipping).
    reduced : bool
        Whether ``clip_global_norm`` already summed the gradients across devices or workers, so
        that ``step`` must update without summing again.
    scaled_by : str or None
        Who scaled this step's loss (see :meth:`begin_step`).
    decided : bool or None
        This step's overflow verdict, when it was taken before the kvstore's update (a Trainer
        that updates on its kvstore, as sparse weights make it): ``has_overflow`` returns it.
    """

    def __init__(self, trainer, scaler=None):
        self._trainer = weakref.ref(trainer)
        self.scaler = scaler
        self.begin_step()

    def begin_step(self, grad_scale=None, scaled_by=None):
        """Start a new step whose gradients carry ``grad_scale``.

        Parameters
        ----------
        grad_scale : float or None
        scaled_by : str or None
            Who scaled the loss: ``'scale_loss'`` (the script, through ``scale_loss``) or
            ``'runner'`` (``mxmixed run --amp float16``, at ``backward``).
        """
        self.grad_scale = grad_scale
        self.scaled_by = scaled_by
        self.clip = 1.0
        self.reduced = False
        self.decided = None

    def unscale(self):
        """Divide the gradients by the scale they carry, in place; they carry 1 afterwards, so
        the update does not divide again."""
        factor = 1.0 / self.gradient_scale
        trainer = self._trainer()
        if factor != 1.0 and trainer is not None:
            with mx.autograd.pause():
                for grad in param_grads(trainer._params):
                    grad[:] = grad * factor
        self.grad_scale = 1.0

    @property
    def gradient_scale(self):
        """float: the scale the current gradients carry."""
        if self.grad_scale is not None:
            return self.grad_scale
        return 1.0 if self.scaler is None else self.scaler.loss_scale

    @property
    def loss_scale(self):
        """float: the scaler's scale (1 without one); ``amp.scale_loss`` reads this name."""
        return 1.0 if self.scaler is None else self.scaler.loss_scale

    def has_overflow(self, params):
        """MXNet's scaler protocol: check the gradients, move the scale, fix this update's rescale.

        ``Trainer._update`` calls it after ``step``/``update`` set ``rescale_grad`` and before
        the optimizer runs; the update is skipped when it returns True.

        Parameters
        ----------
        params : list of mxnet.gluon.Parameter
            The trainer's parameters.

        Returns
        -------
        bool
            Whether the step must be skipped.

        Raises
        ------
        RuntimeError
            When the scaler's scale is not 1 but the gradients were computed outside
            :func:`mxmixed.scale_loss` (the update would be that many times too small).
        LossScaleError
            When the gradients overflow while the scale sits at its floor.
        RuntimeError
            When the gradients could not be computed because MXNet's CPU build has no float16
            kernel for an op (the message names ``mxmixed.emulation.enable()``).
        """
        if self.decided is not None:
            overflow = self.decided
            self.begin_step()
            return overflow
        overflow = self.decide(params)
        self.begin_step()
        return overflow

    def decide(self, params):
        """Check the gradients, move the scale and fix this update's rescale (what
        :meth:`has_overflow` does), and keep the verdict for this step's ``has_overflow``.

        Parameters
        ----------
        params : list of mxnet.gluon.Parameter

        Returns
        -------
        bool
            Whether the step must be skipped.
        """
        overflow = False
        if self.scaler is not None and self.grad_scale is None and self.scaler.loss_scale != 1:
            raise RuntimeError(_unscaled_message(self.scaler.loss_scale))
        if self.scaler is not None:
            try:
                overflow = not all_finite(param_grads(params))
            except mx.base.MXNetError as err:
                raise explain_cpu_float16(err) from None
            if overflow and self.scaler.at_floor:
                raise LossScaleError(_floor_message(params, self.scaler.loss_scale))
        if not overflow:
            trainer = self._trainer()
            if trainer is not None:
                trainer._optimizer.rescale_grad *= self.clip / self.gradient_scale
        if self.scaler is not None:
            self.scaler.update(overflow)
        self.decided = overflow
        return overflow


def handle_of(trainer):
    """The :class:`TrainerHandle` of a Trainer, or None.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    TrainerHandle or None
    """
    handle = getattr(trainer, ATTRIBUTE, None)
    return handle if isinstance(handle, TrainerHandle) else None


def attached_elsewhere(scaler, trainer):
    """Whether ``scaler`` is attached to a live Trainer other than ``trainer``.

    Parameters
    ----------
    scaler : LossScaler
    trainer : mxnet.gluon.Trainer

    Returns
    -------
    bool
    """
    ref = _ATTACHED.get(scaler)
    other = ref() if ref is not None else None
    return other is not None and other is not trainer and handle_of(other) is not None \
        and handle_of(other).scaler is scaler


def attach(trainer, scaler):
    """Link ``trainer`` to ``scaler`` (or to no scaler) through a new handle.

    Parameters
    ----------
    trainer : mxnet.gluon.Trainer
    scaler : LossScaler or None

    Returns
    -------
    TrainerHandle
    """
    old = handle_of(trainer)
    if old is not None and old.scaler is not None and old.scaler is not scaler:
        _ATTACHED.pop(old.scaler, None)
        if AMP.loss_output_scaler is old.scaler and scaler is not None:
            AMP.loss_output_scaler = scaler  # the replacement leads the loss-output ops now
    handle = TrainerHandle(trainer, scaler)
    setattr(trainer, ATTRIBUTE, handle)
    _serve_mxnet_scale_loss()
    if scaler is not None:
        _ATTACHED[scaler] = weakref.ref(trainer)
    return handle


_MXNET_SCALE_LOSS = amp.scale_loss


@contextlib.contextmanager
def handle_scale_loss(loss, optimizer_or_trainer):
    """``amp.scale_loss`` that also serves Trainers linked by :func:`mxmixed.init_trainer`.

    MXNet's own writes ``trainer._scale`` from ``trainer._amp_original_scale``, which an mxmixed
    Trainer does not have; for such a Trainer this scales as :func:`mxmixed.scale_loss` does.
    """
    handle = handle_of(optimizer_or_trainer)
    if handle is None or handle.scaler is None:
        with _MXNET_SCALE_LOSS(loss, optimizer_or_trainer) as scaled:
            yield scaled
        return
    scale = handle.scaler.loss_scale
    handle.begin_step(grad_scale=scale, scaled_by="scale_loss")
    yield [l * scale for l in loss] if isinstance(loss, (list, tuple)) else loss * scale


def _serve_mxnet_scale_loss():
    """Let scripts that call ``amp.scale_loss`` use an mxmixed Trainer; any other Trainer goes on
    to MXNet's own. Applied once, through ``AMP.patches``: ``amp_scope`` undoes it on exit, and
    outside a scope it stays for the process, as ``amp.init``'s own patches do. The same for
    the check before a kvstore's update (:func:`_checked_allreduce`)."""
    AMP.patches.patch(amp, "scale_loss", handle_scale_loss)
    AMP.patches.patch(amp.amp, "scale_loss", handle_scale_loss)
    original = mx.gluon.Trainer.__dict__["_allreduce_grads"]
    if getattr(original, "__wrapped__", None) is None:
        AMP.patches.patch(mx.gluon.Trainer, "_allreduce_grads", _checked_allreduce(original))


def _checked_allreduce(original):
    """``Trainer._allreduce_grads`` that, for an mxmixed Trainer whose kvstore updates the
    weights (``update_on_kvstore``: sparse weights force it), takes the step's overflow verdict
    before anything is pushed, and pushes nothing on overflow: the kvstore then applies nothing,
    and ``Trainer._update`` skips the step as for any other Trainer."""
    def _allreduce_grads(trainer):
        handle = handle_of(trainer)
        if handle is not None and handle.scaler is not None and trainer._kvstore \
                and trainer._update_on_kvstore and handle.decided is None:
            if handle.decide(trainer._params):
                return None
        return original(trainer)

    _allreduce_grads.__wrapped__ = original
    _allreduce_grads.__doc__ = original.__doc__
    return _allreduce_grads


class FollowingScaler(MXNetLossScaler):
    """AMP's global scaler, reading its scale from the linked mxmixed LossScaler on each use."""

    @property
    def loss_scale(self):
        """float: the linked LossScaler's scale, or MXNet's own when none is linked."""
        linked = AMP.loss_output_scaler
        return self._loss_scale if linked is None else linked.loss_scale


def follow_linked_scaler(scaler):
    """Make MXNet's loss-output ops follow ``scaler``, unless another scaler already leads.

    Parameters
    ----------
    scaler : LossScaler
    """
    glob = amp.amp._loss_scaler
    if glob is None or AMP.loss_output_scaler is not None:
        return
    if type(glob) is MXNetLossScaler:  # same layout; no attribute is added
        AMP.patches.patch(glob, "__class__", FollowingScaler)
    AMP.loss_output_scaler = scaler


def explain_cpu_float16(err):
    """Turn MXNet's "no float16 kernel on CPU" errors into one that names the fix.

    Parameters
    ----------
    err : mxnet.base.MXNetError

    Returns
    -------
    Exception
        A RuntimeError for those errors, ``err`` itself for any other.
    """
    text = str(err)
    if not any(marker in text for marker in _NO_CPU_FLOAT16):
        return err
    first = next((line for line in text.splitlines() if any(m in line for m in _NO_CPU_FLOAT16)),
                 text.splitlines()[0] if text else "")
    return RuntimeError("MXNet's CPU build has no float16 kernel for an op of this net (%s). "
                        "Call mxmixed.emulation.enable() (or mxmixed.init(), which enables it "
                        "when no GPU is visible) before building the net, so these ops run in "
                        "float32 with float16 inputs and outputs, as on a GPU" % first.strip())


def _unscaled_message(scale):
    return ("this step's gradients did not go through mxmixed.scale_loss, so dividing them by "
            "the loss scale %g would make the update %gx too small: compute them inside "
            "'with mxmixed.scale_loss(loss, trainer) as scaled: scaled.backward()', or give "
            "init_trainer scaler=1 to train without loss scaling" % (scale, scale))


def _floor_message(params, scale):
    found = nonfinite_gradients(params)
    if not found:
        return ("gradients overflow even at the minimum loss scale %g (no parameter gradient "
                "holds inf/NaN any more; the check raced with an update)" % scale)
    return ("gradients overflow even at the minimum loss scale %g: %s. Try keeping that layer "
            "in float32 (mxmixed.diagnostics.keep_in_float32, or an exclusion), lowering the "
            "learning rate, clipping the unscaled gradients, or check the input data for "
            "inf/NaN." % (scale, found.describe()))
