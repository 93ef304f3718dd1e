"""A loss scaler you can see, configure, save and restore.

MXNet 1.9.1's AMP scaler is private (``trainer._amp_loss_scaler``), hard-coded (2**16 to
start, x2 after 2000 clean steps, /2 on overflow), has no floor, counts no skipped steps, has no
state to save, and applies a back-off one step late. :class:`LossScaler` speaks the same
protocol as MXNet's (``loss_scale`` and ``has_overflow(params)``), so a Gluon ``Trainer`` skips
overflowing steps with it exactly as with MXNet's own, and ``mxnet.contrib.amp.scale_loss`` works
with it too.
"""
import math
from collections import deque

import numpy as np

import mxnet as mx
from mxnet import autograd

__all__ = ["LossScaler", "LossScaleError"]


class LossScaleError(FloatingPointError):
    """Raised when gradients overflow while the scale already sits at its floor."""


def _as_float32(value):
    return float(np.float32(value))


def _check_positive(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError("%s must be a number, got %r" % (name, value))
    if not math.isfinite(value) or value <= 0:
        raise ValueError("%s must be positive and finite, got %r" % (name, value))


class LossScaler:
    """Dynamic or static loss scaling for float16 training.

    .. note::
       A back-off takes effect on the very next step, as in PyTorch and apex. MXNet 1.9.1's own
       scaler uses the old scale for one more step. With ``min_scale=None``, ``max_scale=None``
       and ``hysteresis=1`` the sequence of scales and skipped steps equals
       ``torch.amp.GradScaler``'s for the same parameters; the scale is kept in float32, as
       PyTorch keeps it.

    Parameters
    ----------
    init_scale : float, default 2**16
        The first scale.
    growth_factor : float, default 2.0
        Multiplier after ``growth_interval`` clean steps in a row (must be > 1).
    backoff_factor : float, default 0.5
        Multiplier on overflow (must lie in (0, 1)).
    growth_interval : int, default 2000
        Clean steps before growing.
    min_scale : float or None, default 1.0
        Floor of the scale (as in Keras and DeepSpeed). An overflow while the scale is at the
        floor raises :class:`LossScaleError`. None: no floor, as in PyTorch and MXNet.
    max_scale : float or None, default 2**24
        Ceiling of the scale (MXNet's). None: no ceiling, as in PyTorch.
    hysteresis : int, default 1
        Back off only on the ``hysteresis``-th overflow since the last back-off or growth
        (DeepSpeed's hysteresis, without its consecutive option). Every overflowing step is
        skipped either way.
    dynamic : bool, default True
        False keeps ``init_scale`` forever (static scaling, like the talks' 128); overflowing
        steps are still skipped and counted.
    history_size : int, default 10000
        How many steps :attr:`history` keeps.

    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, min_scale=1.0, max_scale=2.0 ** 24, hysteresis=1,
                 dynamic=True, history_size=10000):
        _check_positive("init_scale", init_scale)
        _check_positive("growth_factor", growth_factor)
        _check_positive("backoff_factor", backoff_factor)
        _check_positive("min_scale", min_scale, allow_none=True)
        _check_positive("max_scale", max_scale, allow_none=True)
        if growth_factor <= 1:
            raise ValueError("growth_factor must be > 1, got %r" % (growth_factor,))
        if not backoff_factor < 1:
            raise ValueError("backoff_factor must lie in (0, 1), got %r" % (backoff_factor,))
        for name, value in (("growth_interval", growth_interval), ("hysteresis", hysteresis),
                            ("history_size", history_size)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError("%s must be a positive integer, got %r" % (name, value))
        if min_scale is not None and max_scale is not None and min_scale > max_scale:
            raise ValueError("min_scale %r exceeds max_scale %r" % (min_scale, max_scale))
        if dynamic and min_scale is not None and init_scale < min_scale:
            raise ValueError("init_scale %r is below min_scale %r" % (init_scale, min_scale))
        if dynamic and max_scale is not None and init_scale > max_scale:
            raise ValueError("init_scale %r is above max_scale %r" % (init_scale, max_scale))
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.min_scale = None if min_scale is None else float(min_scale)
        self.max_scale = None if max_scale is None else float(max_scale)
        self.hysteresis = int(hysteresis)
        self.dynamic = bool(dynamic)
        self._scale = _as_float32(init_scale)
        self._growth_tracker = 0
        self._overflows = 0
        self._steps = 0
        self._skipped = 0
        self._last_skipped = False
        self._history = deque(maxlen=int(history_size))
        self._mirror = None

    @classmethod
    def static(cls, scale):
        """A static scaler (never changes its scale).

        Parameters
        ----------
        scale : float
            The scale, e.g. 128.

        Returns
        -------
        LossScaler
        """
        return cls(init_scale=scale, dynamic=False, min_scale=None, max_scale=None)

    # -- what users read
    @property
    def loss_scale(self):
        """float: the scale the next backward pass uses."""
        return self._scale

    @property
    def skipped_steps(self):
        """int: how many steps were skipped because gradients overflowed."""
        return self._skipped

    @property
    def steps(self):
        """int: how many steps were checked (applied plus skipped)."""
        return self._steps

    @property
    def last_step_skipped(self):
        """bool: whether the most recent step was skipped."""
        return self._last_skipped

    @property
    def history(self):
        """list of (step, loss_scale, overflow): the scale each recent step used."""
        return list(self._history)

    def __repr__(self):
        kind = "dynamic" if self.dynamic else "static"
        return ("LossScaler(%s, loss_scale=%g, steps=%d, skipped_steps=%d)"
                % (kind, self._scale, self._steps, self._skipped))

    # -- the protocol MXNet's Trainer calls
    def has_overflow(self, params):
        """Check the gradients of ``params`` for inf/NaN and update the scale.

        Gluon's ``Trainer`` calls this before every update and skips the update when it
        returns True.

        Parameters
        ----------
        params : list of mxnet.gluon.Parameter
            The trainer's parameters.

        Returns
        -------
        bool
            Whether the step must be skipped.
        """
        grads = [g for p in params if p.grad_req != "null" and p._grad is not None
                 for g in p.list_grad()]
        overflow = not _all_finite(grads)
        if overflow and self.dynamic and self.min_scale is not None \
                and self._scale <= self.min_scale:
            raise LossScaleError(_overflow_message(params, self._scale))
        self.update(overflow)
        return overflow

    def update(self, overflow):
        """Record one step's outcome and move the scale as the policy says.

        Parameters
        ----------
        overflow : bool
            Whether the step's gradients held inf or NaN.
        """
        self._history.append((self._steps, self._scale, bool(overflow)))
        self._steps += 1
        self._last_skipped = bool(overflow)
        if overflow:
            self._skipped += 1
        if not self.dynamic:
            return
        if overflow:
            self._growth_tracker = 0
            self._overflows += 1
            if self._overflows >= self.hysteresis:
                self._overflows = 0
                scale = self._scale * self.backoff_factor
                if self.min_scale is not None:
                    scale = max(scale, self.min_scale)
                self._scale = _as_float32(scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._overflows = 0
                scale = self._scale * self.growth_factor
                if self.max_scale is not None:
                    scale = min(scale, self.max_scale)
                self._scale = _as_float32(scale)
        self._sync_mirror()

    def _sync_mirror(self):
        # MXNet's loss-output ops (SoftmaxOutput ...) read AMP's global scaler; keep it equal.
        if self._mirror is not None:
            self._mirror._loss_scale = self._mirror._next_loss_scale = self._scale

    # -- saving and restoring
    def state_dict(self):
        """The scaler's state and configuration, as plain Python values.

        Returns
        -------
        dict
        """
        return {"loss_scale": self._scale, "growth_tracker": self._growth_tracker,
                "overflows": self._overflows, "steps": self._steps, "skipped": self._skipped,
                "last_skipped": self._last_skipped, "history": [list(h) for h in self._history],
                "history_size": self._history.maxlen,
                "config": {"growth_factor": self.growth_factor,
                           "backoff_factor": self.backoff_factor,
                           "growth_interval": self.growth_interval, "min_scale": self.min_scale,
                           "max_scale": self.max_scale, "hysteresis": self.hysteresis,
                           "dynamic": self.dynamic}}

    def load_state_dict(self, state):
        """Restore a state from :meth:`state_dict`.

        Parameters
        ----------
        state : dict
            As returned by :meth:`state_dict`.
        """
        mirror, attached = self._mirror, getattr(self, "_attached", False)
        try:
            config = state["config"]
            self.__init__(init_scale=state["loss_scale"],
                          history_size=state["history_size"], **config)
            self._growth_tracker = int(state["growth_tracker"])
            self._overflows = int(state["overflows"])
            self._steps = int(state["steps"])
            self._skipped = int(state["skipped"])
            self._last_skipped = bool(state["last_skipped"])
            self._history.extend(tuple(h) for h in state["history"])
        except (KeyError, TypeError) as err:
            raise ValueError("not a LossScaler state: missing or bad entry %s" % err) from None
        finally:
            self._mirror, self._attached = mirror, attached
        self._sync_mirror()


def _all_finite(grads):
    if not grads:
        return True
    groups = {}
    for grad in grads:  # multi_all_finite needs one dtype; BatchNorm stays float32 in a float16 net
        groups.setdefault((grad.dtype, grad.context), []).append(grad)
    with autograd.pause():
        flags = []
        for (_, ctx), group in groups.items():
            ok = mx.nd.ones((1,), ctx=ctx)
            for start in range(0, len(group), 200):
                chunk = group[start:start + 200]
                mx.nd.multi_all_finite(*chunk, num_arrays=len(chunk), init_output=False, out=ok)
            flags.append(ok)
        return all(bool(flag.asscalar()) for flag in flags)


def _overflow_message(params, scale):
    # Imported here: mxmixed.diagnostics imports mxmixed.training, which imports this module.
    from .diagnostics import nonfinite_gradients

    found = nonfinite_gradients(params)
    if not found:
        return ("gradients overflow even at the minimum loss scale %g (no parameter gradient "
                "holds inf/NaN any more; the check raced with an update)" % scale)
    return ("gradients overflow even at the minimum loss scale %g: %s. Try keeping that layer "
            "in float32 (mxmixed.diagnostics.keep_in_float32, or an exclusion), lowering the "
            "learning rate, clipping the unscaled gradients, or check the input data for "
            "inf/NaN." % (scale, found.describe()))
