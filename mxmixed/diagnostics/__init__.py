"""Float16 diagnostics: see a network the way the GTC mixed-precision talks draw it.

* :func:`collect_gradients`, :func:`gradient_stats`, :func:`plot_gradient_range`: where each
  gradient lands in float16's range (rounds to zero, subnormal, normal, overflow) at a loss
  scale, per tensor, with the talks' histogram.
* :func:`recommend_loss_scale`: the largest power-of-two static scale that does not overflow,
  with headroom, and the underflow it saves.
* :func:`find_overflow` / :func:`find_overflow_symbol`: the first layer, in execution order,
  whose output or gradient has inf or NaN in a float16 pass, forward or backward, and what to
  try. :func:`nonfinite_gradients` is the cheap version, from the gradients alone.
* :func:`tensor_core_audit`: GEMM-like layers whose dimensions are not multiples of 8.
* :func:`memory_report`: bytes of parameters, gradients, optimizer state, master weights and
  activations, for float32, AMP and ``cast('float16')``, with the arithmetic.

All of them take a Gluon ``HybridBlock``; the audits and the overflow locator take a Symbol as
well. They never change the net: passes run in executors of their own on copies of the
parameters. On a CPU, float16 runs under :mod:`mxmixed.emulation`. See ``docs/diagnostics.md``.
"""
from . import float16, gradients, memory, nonfinite, overflow, plots, tensorcore
from .float16 import (FLOAT16_MAX, FLOAT16_MIN_NORMAL, FLOAT16_MIN_SUBNORMAL,
                      FLOAT16_OVERFLOW, FLOAT16_ROUND_TO_ZERO, RangeShares, float16_shares, log2_histogram)
from .gradients import (GradientStats, LossScaleAdvice, collect_gradients, gradient_stats,
                        recommend_loss_scale)
from .memory import MemoryReport, memory_report
from .nonfinite import NonfiniteGradients, nonfinite_gradients
from .overflow import OverflowReport, find_overflow, find_overflow_symbol, keep_in_float32
from .plots import plot_gradient_range
from .tensorcore import Finding, TensorCoreAudit, tensor_core_audit

__all__ = [
    "FLOAT16_MAX", "FLOAT16_MIN_NORMAL", "FLOAT16_MIN_SUBNORMAL", "FLOAT16_OVERFLOW",
    "FLOAT16_ROUND_TO_ZERO",
    "RangeShares", "float16_shares", "log2_histogram",
    "collect_gradients", "gradient_stats", "GradientStats",
    "recommend_loss_scale", "LossScaleAdvice",
    "plot_gradient_range",
    "find_overflow", "find_overflow_symbol", "OverflowReport", "keep_in_float32",
    "nonfinite_gradients", "NonfiniteGradients",
    "tensor_core_audit", "TensorCoreAudit", "Finding",
    "memory_report", "MemoryReport",
]
