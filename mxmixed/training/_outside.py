"""float16 AMP switched on from outside a script that has none (``mxmixed run --amp float16``).

With AMP initialized before the script (``amp_scope``), :class:`OutsideAmp` links every
``gluon.Trainer`` the script makes to a :class:`~mxmixed.scaler.LossScaler`
(:func:`mxmixed.init_trainer`, as the script would), and scales the loss at ``backward``: the
head gradient of ``NDArray.backward`` / ``autograd.backward`` is multiplied by the scale, and
the linked Trainers are told that their gradients carry it, so that the update divides it out,
checks for overflow and skips the step. A Trainer whose loss the script scales itself
(``amp.init_trainer`` and ``amp.scale_loss``, which then serve the same scaler) is left to the
script's own calls: its loss is never scaled twice.

The Module API has no loss scaling in MXNet's AMP (``amp.init_trainer`` takes Gluon Trainers
only): a Module trains in float16 without it, which one line says; where MXNet's AMP cannot
bind the Module's graph at all, :meth:`OutsideAmp.refusal` gives the one line that says so.

Every ``backward`` also adds the sum of its heads (the objective it differentiates) to the loss
of the step under way, which :meth:`OutsideAmp.take_loss` hands to the step recorder.
"""
import threading
import weakref

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp

from ._handle import handle_of

__all__ = ["OutsideAmp"]

# MXNet's error when amp.init's casts leave a Module's parameter dtypes unknown at bind
_UNTYPED = "InferType pass cannot decide dtypes"


class OutsideAmp:
    """Loss scaling for the Gluon Trainers of a script that knows nothing of it.

    Parameters
    ----------
    init_trainer : callable
        :func:`mxmixed.init_trainer`, which links each Trainer (``init_trainer(trainer,
        scaler=loss_scale)``; a ValueError or TypeError from it is one line, and the Trainer
        trains without loss scaling).
    loss_scale : 'dynamic' or float, default 'dynamic'
        Each Trainer's scaler: dynamic, or a static scale (1: no scaling).
    say : callable
        Called with one line of text for what the script should know.

    Attributes
    ----------
    trainers : list of dict
        One record per Trainer made: ``linked`` (bool), ``update_on_kvstore`` (sparse weights),
        ``why`` (when it could not be linked), ``script_scales`` (the script scales its loss).
    module : bool
        Whether the script bound a Module (MXNet's AMP scales no Module's loss).
    """

    def __init__(self, init_trainer, loss_scale="dynamic", say=None):
        self._init_trainer = init_trainer
        self.loss_scale = loss_scale
        self.trainers = []
        self.module = False
        self._say = say or (lambda text: None)
        self._linked = weakref.WeakKeyDictionary()  # Trainer -> its record
        self._lock = threading.Lock()
        self._loss = None
        self._refused = None
        self._module_said = False

    # ------------------------------------------------------------------ hooks
    def install(self, patches):
        """Patch ``gluon.Trainer.__init__``, ``NDArray.backward``, ``autograd.backward``,
        ``Module.bind`` and ``amp.init_trainer`` through ``patches`` (undone by
        ``patches.undo()``).

        Parameters
        ----------
        patches : mxmixed._core.patches.Patches
        """
        patches.patch(gluon.Trainer, "__init__", self._wrap_init(gluon.Trainer.__init__))
        patches.patch(mx.nd.NDArray, "backward", self._wrap_backward(mx.nd.NDArray.backward))
        patches.patch(autograd, "backward", self._wrap_autograd_backward(autograd.backward))
        module = mx.module.Module
        patches.patch(module, "bind", self._wrap_module(module.bind))
        init_trainer = self._wrap_amp_init_trainer(amp.amp.init_trainer)
        patches.patch(amp, "init_trainer", init_trainer)
        patches.patch(amp.amp, "init_trainer", init_trainer)
        return self

    def _wrap_amp_init_trainer(self, original):
        """``amp.init_trainer`` that keeps the link of a Trainer linked here: the script's
        ``amp.scale_loss`` then scales its loss with that scaler (and this class no more).
        MXNet's own would link AMP's global scaler, which reads its scale from the first
        mxmixed scaler while its own bookkeeping moves another: stuck, every step skipped."""
        outside = self

        def init_trainer(optimizer_or_trainer, *args, **kwargs):
            record = outside._linked.get(optimizer_or_trainer) \
                if isinstance(optimizer_or_trainer, gluon.Trainer) else None
            if record is None:
                return original(optimizer_or_trainer, *args, **kwargs)
            record["script_scales"] = True
            return None

        init_trainer.__wrapped__ = original
        init_trainer.__doc__ = original.__doc__
        return init_trainer

    def _wrap_init(self, original):
        outside = self

        def __init__(trainer, *args, **kwargs):
            original(trainer, *args, **kwargs)
            outside._link(trainer)

        __init__.__wrapped__ = original
        __init__.__doc__ = original.__doc__
        return __init__

    def _link(self, trainer):
        record = {"trainer": len(self.trainers), "linked": False, "update_on_kvstore": False,
                  "why": None, "script_scales": False}
        self.trainers.append(record)
        try:
            self._init_trainer(trainer, scaler=self.loss_scale)
        except (ValueError, TypeError) as err:
            record["why"] = str(err)
            self._say("--amp float16: Trainer %d trains without loss scaling: %s"
                      % (record["trainer"], err))
            return
        record["linked"] = True
        record["update_on_kvstore"] = trainer._kvstore_params.get("update_on_kvstore") \
            is not False
        self._linked[trainer] = record

    def _wrap_module(self, original):
        outside = self

        def bind(module, *args, **kwargs):
            outside.module = True
            try:
                result = original(module, *args, **kwargs)
            except (mx.base.MXNetError, RuntimeError) as err:  # simple_bind wraps it
                if _UNTYPED in str(err):
                    outside._refused = err
                raise
            if not outside._module_said:
                outside._module_said = True
                outside._say("--amp float16: a Module trains in float16 without loss scaling "
                             "(MXNet's AMP scales the loss of Gluon Trainers only): gradients "
                             "below float16's 6e-8 are lost")
            return result

        bind.__wrapped__ = original
        bind.__doc__ = original.__doc__
        return bind

    def refusal(self, exc):
        """One line for the error ``exc`` that ended the script, when it is MXNet's AMP
        refusing a Module's graph; else None.

        Parameters
        ----------
        exc : BaseException or None

        Returns
        -------
        str or None
        """
        if exc is None or exc is not self._refused:
            return None
        return ("--amp float16 cannot train this Module API script: after amp.init, MXNet "
                "cannot infer the dtypes of the Module's parameters at bind ('InferType pass "
                "cannot decide dtypes'), and MXNet's AMP scales no Module loss; run it without "
                "--amp (its own --dtype float16 runs under the emulation), or train it with "
                "a Gluon Trainer")

    # ------------------------------------------------------------------ the scale
    def _scale(self):
        """The scale for this backward, having told the Trainers; None: leave it alone."""
        handles = []
        for trainer, record in list(self._linked.items()):
            handle = handle_of(trainer)
            if handle is None or handle.scaler is None:  # amp.init_trainer replaced the link
                record["script_scales"] = True
                continue
            if handle.scaled_by == "scale_loss":  # the script scales its loss itself
                record["script_scales"] = True
            if record["script_scales"]:
                continue
            handles.append(handle)
        if not handles:
            return None
        scale = min(h.scaler.loss_scale for h in handles)
        for handle in handles:
            handle.grad_scale = scale
            handle.scaled_by = "runner"
        return scale

    def _note_loss(self, heads):
        with autograd.pause():
            total = None
            for head in heads:
                part = head.astype("float32", copy=False).sum()
                total = part if total is None else total + part
        if total is not None:
            with self._lock:
                self._loss = total if self._loss is None else self._loss + total

    def take_loss(self):
        """The loss of the step under way (the sum of the heads of its backward calls), and
        start the next one; None when no backward was seen.

        Returns
        -------
        float or None
        """
        with self._lock:
            loss, self._loss = self._loss, None
        return None if loss is None else float(loss.asscalar())

    def _wrap_backward(self, original):
        outside = self

        def backward(head, out_grad=None, retain_graph=False, train_mode=True):
            outside._note_loss([head])
            scale = outside._scale()
            if scale is not None and scale != 1:
                out_grad = _scaled(head, out_grad, scale)
            return original(head, out_grad, retain_graph, train_mode)

        backward.__wrapped__ = original
        backward.__doc__ = original.__doc__
        return backward

    def _wrap_autograd_backward(self, original):
        outside = self

        def backward(heads, head_grads=None, retain_graph=False, train_mode=True):
            listed = heads if isinstance(heads, (list, tuple)) else [heads]
            outside._note_loss(listed)
            scale = outside._scale()
            if scale is not None and scale != 1:
                grads = head_grads if isinstance(head_grads, (list, tuple)) \
                    else [head_grads] * len(listed)
                head_grads = [_scaled(h, g, scale) for h, g in zip(listed, grads)]
                if not isinstance(heads, (list, tuple)):
                    head_grads = head_grads[0]
            return original(heads, head_grads, retain_graph, train_mode)

        backward.__wrapped__ = original
        backward.__doc__ = original.__doc__
        return backward

    # ------------------------------------------------------------------ the report
    def summary(self):
        """What was switched on, for the report.

        Returns
        -------
        dict
        """
        return {"loss_scale": self.loss_scale, "trainers": list(self.trainers),
                "module_unscaled": self.module,
                "scaled_by_runner": any(t["linked"] and not t["script_scales"]
                                        for t in self.trainers)}


def _scaled(head, grad, scale):
    """The head gradient ``grad`` (ones when None) times ``scale``."""
    with autograd.pause():
        if grad is None:
            return mx.nd.full(head.shape, scale, ctx=head.context, dtype=head.dtype)
        return grad * scale
