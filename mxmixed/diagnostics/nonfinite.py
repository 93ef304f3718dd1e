"""The cheap overflow check: which parameter gradients hold inf or NaN, from the gradients alone.

Two reductions per parameter and one synchronization, so a loss scaler can call it when it
raises. :func:`~mxmixed.diagnostics.find_overflow` names the exact op, at the cost of a pass.

The implementation lives in the training layer's ``mxmixed._core.finite`` (the Trainer's overflow
check names the parameter with it, below the diagnostics); this module is its public face.
"""
from .._core.finite import NonfiniteGradients, nonfinite_gradients

__all__ = ["nonfinite_gradients", "NonfiniteGradients"]
