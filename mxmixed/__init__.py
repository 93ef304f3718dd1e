"""mxmixed: float16 mixed-precision training and inference for Apache MXNet 1.9.1.

It covers both the Gluon and the Symbol APIs: helpers around ``mxnet.contrib.amp``,
a CPU float16 emulation with GPU-faithful numerics, and executable tutorials.
"""
from ._compat import check_mxnet_installed, check_numpy

check_numpy()
check_mxnet_installed()

from ._version import __version__  # noqa: E402
from . import (checkpoint, data, diagnostics, distributed, emulation, fit,  # noqa: E402
               models, optim, scaler, symbolic, text, training)
from .checkpoint import CheckpointError  # noqa: E402
from .data import digits_datasets, digits_loaders  # noqa: E402
from .emulation import emulated, emulation_active  # noqa: E402
from .models import DigitsCNN, digits_cnn  # noqa: E402
from .optim import (MasterParams, grads_to_master, make_master_params,  # noqa: E402
                    master_to_model, master_weights, multi_precision_trainer, sgd_momentum_step)
from .scaler import LossScaleError, LossScaler  # noqa: E402
from .symbolic import (ConversionError, ConversionReport, ConvertedModel,  # noqa: E402
                       SearchResult, ValidationReport, convert, convert_hybrid_block,
                       float16_softmax_symbol, load_float16, multi_precision_optimizer,
                       multi_precision_params, search_fp32_layers, validate)
from .text import BPTTBatches, LSTMLanguageModel, Vocabulary, lstm_lm, stdlib_corpus  # noqa: E402
from .training import (amp_initialized, amp_scope, clip_global_norm, init,  # noqa: E402
                       init_trainer, loss_scaler, scale_loss, step, unscale)

__all__ = [
    "__version__",
    "data",
    "diagnostics",
    "distributed",
    "emulation",
    "fit",
    "models",
    "digits_datasets",
    "digits_loaders",
    "DigitsCNN",
    "digits_cnn",
    "emulated",
    "emulation_active",
    "scaler",
    "training",
    "checkpoint",
    "CheckpointError",
    "optim",
    "MasterParams",
    "make_master_params",
    "grads_to_master",
    "master_to_model",
    "master_weights",
    "multi_precision_trainer",
    "sgd_momentum_step",
    "symbolic",
    "ConversionError",
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
    "text",
    "BPTTBatches",
    "LSTMLanguageModel",
    "Vocabulary",
    "lstm_lm",
    "stdlib_corpus",
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
