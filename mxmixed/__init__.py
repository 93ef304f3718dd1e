"""mxmixed: float16 mixed-precision training and inference for Apache MXNet 1.9.1.

It covers both the Gluon and the Symbol APIs: helpers around ``mxnet.contrib.amp``,
a CPU float16 emulation with GPU-faithful numerics, and executable tutorials. The tutorials'
data, models and loops live in :mod:`mxmixed.tutorial`, which ``import mxmixed`` does not load.
"""
from ._compat import check_mxnet_installed, check_numpy

check_numpy()
check_mxnet_installed()

from ._version import __version__  # noqa: E402
from . import (checkpoint, diagnostics, distributed, emulation,  # noqa: E402
               optim, scaler, symbolic, training)
from ._state import bfloat16_support  # noqa: E402
from .checkpoint import CheckpointError  # noqa: E402
from .emulation import emulated, emulation_active  # noqa: E402
from .optim import master_weights, multi_precision_trainer  # noqa: E402
from .scaler import LossScaleError, LossScaler  # noqa: E402
from .symbolic import (ConversionError, ConversionReport, ConvertedModel,  # noqa: E402
                       SearchResult, ValidationReport, convert, convert_hybrid_block,
                       float16_softmax_symbol, load_bfloat16, load_float16,
                       multi_precision_optimizer,
                       multi_precision_params, search_fp32_layers, validate)
from .training import (amp_initialized, amp_scope, clip_global_norm, init,  # noqa: E402
                       init_trainer, loss_scaler, scale_loss, step, unscale)

__all__ = [
    "__version__",
    "diagnostics",
    "distributed",
    "emulation",
    "emulated",
    "emulation_active",
    "scaler",
    "training",
    "checkpoint",
    "CheckpointError",
    "optim",
    "master_weights",
    "multi_precision_trainer",
    "symbolic",
    "ConversionError",
    "bfloat16_support",
    "load_bfloat16",
    "ConversionReport",
    "ConvertedModel",
    "SearchResult",
    "ValidationReport",
    "convert",
    "convert_hybrid_block",
    "float16_softmax_symbol",
    "load_float16",
    "multi_precision_optimizer",
    "multi_precision_params",
    "search_fp32_layers",
    "validate",
    "LossScaler",
    "LossScaleError",
    "init",
    "amp_scope",
    "amp_initialized",
    "init_trainer",
    "loss_scaler",
    "scale_loss",
    "unscale",
    "clip_global_norm",
    "step",
]
