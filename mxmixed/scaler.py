"""A loss scaler you can see, configure, save and restore.

:class:`LossScaler` is pure bookkeeping: it holds the scale and moves it by the outcome of each
step (:meth:`LossScaler.update`). It knows nothing of Gluon trainers; :func:`mxmixed.init_trainer`
links one to a ``Trainer`` through a handle (``mxmixed.training._handle``) that checks the gradients and
calls :meth:`~LossScaler.update`.

MXNet 1.9.1's own AMP scaler is private (``trainer._amp_loss_scaler``), hard-coded (2**16 to
start, x2 after 2000 clean steps, /2 on overflow), has no floor, counts no skipped steps, has no
state to save, and applies a back-off one step late.
"""
import math
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._core.dtypes import FLOAT32_MAX, FLOAT32_MIN_NORMAL

__all__ = ["LossScaler", "LossScaleError", "SCALE_RANGE"]

#: The scales a :class:`LossScaler` can hold: the positive normal float32 numbers.
SCALE_RANGE = (FLOAT32_MIN_NORMAL, FLOAT32_MAX)


class LossScaleError(FloatingPointError):
    """Raised when gradients overflow while the scale already sits at its floor."""


def _as_float32(value):
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(value))


def _check_number(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError("%s must be a number, got %r" % (name, value))
    if not math.isfinite(value) or value <= 0:
        raise ValueError("%s must be positive and finite, got %r" % (name, value))


def _check_scale(name, value):
    _check_number(name, value)
    low, high = SCALE_RANGE
    if not low <= _as_float32(value) <= high:
        raise ValueError("%s must be a normal float32 number, in [%g, %g], got %r"
                         % (name, low, high, value))


def _check_count(name, value, low=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError("%s must be a %s integer, got %r"
                         % (name, "positive" if low == 1 else "non-negative", value))
    return int(value)


def _check_config(init_scale, growth_factor, backoff_factor, growth_interval, min_scale,
                  max_scale, hysteresis, dynamic, history_size, scale_name="init_scale"):
    """Validate a configuration; return it normalized (floats, ints, bool). ``scale_name``
    names the scale in messages ('loss_scale' for a saved state)."""
    _check_scale(scale_name, init_scale)
    _check_number("growth_factor", growth_factor)
    _check_number("backoff_factor", backoff_factor)
    _check_number("min_scale", min_scale, allow_none=True)
    _check_number("max_scale", max_scale, allow_none=True)
    if growth_factor <= 1:
        raise ValueError("growth_factor must be > 1, got %r" % (growth_factor,))
    if not backoff_factor < 1:
        raise ValueError("backoff_factor must lie in (0, 1), got %r" % (backoff_factor,))
    counts = [_check_count(name, value) for name, value in (
        ("growth_interval", growth_interval), ("hysteresis", hysteresis),
        ("history_size", history_size))]
    if min_scale is not None and max_scale is not None and min_scale > max_scale:
        raise ValueError("min_scale %r exceeds max_scale %r" % (min_scale, max_scale))
    # compared as float32, as the scale is kept: a scale backed off to min_scale=1000.3 is
    # float32(1000.3), a little below 1000.3, and must still load
    if dynamic and min_scale is not None and _as_float32(init_scale) < _as_float32(min_scale):
        raise ValueError("%s %r is below min_scale %r" % (scale_name, init_scale, min_scale))
    if dynamic and max_scale is not None and _as_float32(init_scale) > _as_float32(max_scale):
        raise ValueError("%s %r is above max_scale %r" % (scale_name, init_scale, max_scale))
    return {"growth_factor": float(growth_factor), "backoff_factor": float(backoff_factor),
            "growth_interval": counts[0], "hysteresis": counts[1], "history_size": counts[2],
            "min_scale": None if min_scale is None else float(min_scale),
            "max_scale": None if max_scale is None else float(max_scale),
            "dynamic": bool(dynamic)}


_STATE_KEYS = ("loss_scale", "growth_tracker", "overflows", "steps", "skipped", "last_skipped",
               "history", "history_size", "config")
_CONFIG_KEYS = ("growth_factor", "backoff_factor", "growth_interval", "min_scale", "max_scale",
                "hysteresis", "dynamic")


def _checked_state(state):
    """A :meth:`LossScaler.state_dict` checked entry by entry, every error naming its key."""
    if not isinstance(state, dict):
        raise ValueError("not a LossScaler state: expected the dict of state_dict(), got %s"
                         % type(state).__name__)
    missing = [key for key in _STATE_KEYS if key not in state]
    if missing:
        raise ValueError("not a LossScaler state: no %s" % ", ".join(missing))
    config = state["config"]
    if not isinstance(config, dict) or sorted(config) != sorted(_CONFIG_KEYS):
        raise ValueError("not a LossScaler state: 'config' must hold exactly %s"
                         % ", ".join(_CONFIG_KEYS))
    config = _check_config(state["loss_scale"], history_size=state["history_size"],
                           scale_name="loss_scale", **config)
    counters = {key: _check_count(key, state[key], low=0)
                for key in ("growth_tracker", "overflows", "steps", "skipped")}
    try:
        history = [(int(step), float(scale), bool(overflow))
                   for step, scale, overflow in state["history"]]
    except (TypeError, ValueError):
        raise ValueError("LossScaler state: 'history' must be a list of [step, scale, "
                         "overflowed] entries") from None
    if not isinstance(state["last_skipped"], bool):
        raise ValueError("LossScaler state: 'last_skipped' must be true or false, got %r"
                         % (state["last_skipped"],))
    return config, counters, history, state["last_skipped"]


class LossScaler:
    """Dynamic or static loss scaling for float16 training.

    The scale is kept in float32, as PyTorch keeps it, and always stays a positive normal
    float32 number (:data:`SCALE_RANGE`, about 1.2e-38 to 3.4e38): it never becomes 0, a
    subnormal or inf, so ``1 / scale`` is finite too.

    .. note::
       With ``min_scale=None``, ``max_scale=None`` and ``hysteresis=1`` the scales and skipped
       steps equal ``torch.amp.GradScaler``'s for the same parameters, including at the top:
       like GradScaler (``_amp_update_scale_cpu_``), a growth whose float32 result would be inf
       is not applied (the scale stays, the clean-step count restarts). At the bottom mxmixed
       stops where GradScaler does not: GradScaler multiplies by ``backoff_factor`` down through
       the subnormals to 0 (after about 150 back-offs in a row at 0.5), and a scale of 0 never
       recovers (0 times ``growth_factor`` is 0) and turns the unscaled gradients into NaN. Here
       a back-off whose float32 result would fall below the smallest normal float32 (2**-126)
       is not applied, the mirror of GradScaler's rule at the top. A back-off is otherwise
       applied on the very next step, as in PyTorch and apex; MXNet 1.9.1's own scaler uses the
       old scale for one more step.

    Parameters
    ----------
    init_scale : float, default 2**16
        The first scale (a normal float32 number).
    growth_factor : float, default 2.0
        Multiplier after ``growth_interval`` clean steps in a row (must be > 1).
    backoff_factor : float, default 0.5
        Multiplier on overflow (must lie in (0, 1)).
    growth_interval : int, default 2000
        Clean steps before growing.
    min_scale : float or None, default 1.0
        Floor of the scale (as in Keras and DeepSpeed). An overflow while the scale is at the
        floor raises :class:`LossScaleError` (from the Trainer's overflow check). None: no floor
        beyond the float32 range, as in PyTorch and MXNet.
    max_scale : float or None, default 2**24
        Ceiling of the scale (MXNet's). None: no ceiling beyond the float32 range, as in
        PyTorch.
    hysteresis : int, default 1
        Back off only on the ``hysteresis``-th overflow since the last back-off or growth
        (DeepSpeed's hysteresis, without its consecutive option). Every overflowing step is
        skipped either way.
    dynamic : bool, default True
        False keeps ``init_scale`` forever (static scaling, like the talks' 128); overflowing
        steps are still skipped and counted.
    history_size : int, default 10000
        How many steps :attr:`history` keeps.


    Examples
    --------
    >>> from mxmixed import LossScaler
    >>> scaler = LossScaler(init_scale=1024, growth_interval=2)
    >>> scaler.update(overflow=True)          # a skipped step: the scale halves
    >>> scaler.loss_scale, scaler.skipped_steps
    (512.0, 1)
    >>> scaler.update(overflow=False)
    >>> scaler.update(overflow=False)         # 2 clean steps: it doubles again
    >>> scaler.loss_scale
    1024.0
    >>> restored = LossScaler()
    >>> restored.load_state_dict(scaler.state_dict())
    >>> restored.loss_scale, restored.skipped_steps
    (1024.0, 1)
    >>> LossScaler.static(128).loss_scale
    128.0
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 min_scale: Optional[float] = 1.0, max_scale: Optional[float] = 2.0 ** 24,
                 hysteresis: int = 1, dynamic: bool = True, history_size: int = 10000) -> None:
        config = _check_config(init_scale, growth_factor, backoff_factor, growth_interval,
                               min_scale, max_scale, hysteresis, dynamic, history_size)
        self._scale = _as_float32(init_scale)
        self._history = deque(maxlen=config["history_size"])
        self._configure(config)
        self._growth_tracker = 0
        self._overflows = 0
        self._steps = 0
        self._skipped = 0
        self._last_skipped = False

    @classmethod
    def static(cls, scale: float) -> "LossScaler":
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

    def _configure(self, config):
        """Take a configuration checked by ``_check_config``."""
        self.growth_factor = config["growth_factor"]
        self.backoff_factor = config["backoff_factor"]
        self.growth_interval = config["growth_interval"]
        self.hysteresis = config["hysteresis"]
        self.min_scale = config["min_scale"]
        self.max_scale = config["max_scale"]
        self.dynamic = config["dynamic"]

    # -- what users read
    @property
    def loss_scale(self) -> float:
        """float: the scale the next backward pass uses."""
        return self._scale

    @property
    def skipped_steps(self) -> int:
        """int: how many steps were skipped because gradients overflowed."""
        return self._skipped

    @property
    def steps(self) -> int:
        """int: how many steps were checked (applied plus skipped)."""
        return self._steps

    @property
    def last_step_skipped(self) -> bool:
        """bool: whether the most recent step was skipped."""
        return self._last_skipped

    @property
    def at_floor(self) -> bool:
        """bool: whether an overflow now can back off no further, by ``min_scale``.

        The Trainer's overflow check raises :class:`LossScaleError` on an overflow in this state.
        """
        return self.dynamic and self.min_scale is not None and self._scale <= self.min_scale

    @property
    def history(self) -> List[Tuple[int, float, bool]]:
        """list of (step, loss_scale, overflow): the scale each recent step used."""
        return list(self._history)

    def __repr__(self):
        kind = "dynamic" if self.dynamic else "static"
        return ("LossScaler(%s, loss_scale=%g, steps=%d, skipped_steps=%d)"
                % (kind, self._scale, self._steps, self._skipped))

    # -- the policy
    def update(self, overflow: bool) -> None:
        """Record one step's outcome and move the scale as the policy says.

        Parameters
        ----------
        overflow : bool
            Whether the step's gradients held inf or NaN (the step is skipped).
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
                self._move_to(scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._overflows = 0
                scale = self._scale * self.growth_factor
                if self.max_scale is not None:
                    scale = min(scale, self.max_scale)
                self._move_to(scale)

    def _move_to(self, scale):
        # GradScaler's rule at the top, mirrored at the bottom: a move that leaves the normal
        # float32 numbers is not applied.
        scale = _as_float32(scale)
        if SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
            self._scale = scale

    # -- saving and restoring
    def state_dict(self) -> Dict[str, Any]:
        """The scaler's state and configuration, as plain Python values (JSON-safe).

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

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`, in place.

        The scaler stays the same object, so a Trainer it is attached to uses the restored scale
        from its next step on. Nothing changes when the state is refused.

        Parameters
        ----------
        state : dict
            As returned by :meth:`state_dict` (also after a JSON round trip).

        Raises
        ------
        ValueError
            For a dict that is not a LossScaler state, or one with invalid values.
        """
        config, counters, history, last_skipped = _checked_state(state)
        self._history = deque(history, maxlen=config["history_size"])
        self._configure(config)
        self._growth_tracker = counters["growth_tracker"]
        self._overflows = counters["overflows"]
        self._steps = counters["steps"]
        self._skipped = counters["skipped"]
        self._scale = _as_float32(state["loss_scale"])
        self._last_skipped = last_skipped
