"""mxmixed: float16 mixed-precision training and inference for Apache MXNet 1.9.1.

It covers both the Gluon and the Symbol APIs: helpers around ``mxnet.contrib.amp``,
a CPU float16 emulation with GPU-faithful numerics, and executable tutorials. The tutorials'
data, models and loops live in :mod:`mxmixed.tutorial`, which ``import mxmixed`` does not load.

The names below load their module, and MXNet, on first use (PEP 562), so that ``mxmixed
--help`` and argument errors of the command line answer before MXNet is imported.
"""
from ._core.compat import check_mxnet_installed, check_numpy

check_numpy()
check_mxnet_installed()

from ._core import amx as _amx  # noqa: E402

_amx.arm()  # oneDNN's AMX kernels asked for before MXNet's first op (_core/amx.py)

from ._version import __version__  # noqa: E402

_SUBMODULES = ("checkpoint", "diagnostics", "distributed", "emulation", "optim", "scaler",
               "symbolic", "training")
# public name -> the module that defines it
_HOMES = {
    "bfloat16_support": "_core.devices",
    "CheckpointError": "checkpoint",
    "emulated": "emulation", "emulation_active": "emulation",
    "master_weights": "optim", "multi_precision_trainer": "optim",
    "LossScaleError": "scaler", "LossScaler": "scaler",
    "ConversionError": "symbolic", "ConversionReport": "symbolic", "ConvertedModel": "symbolic",
    "ConvertOptions": "symbolic",
    "SearchResult": "symbolic", "ValidationReport": "symbolic", "convert": "symbolic",
    "convert_hybrid_block": "symbolic", "float16_softmax_symbol": "symbolic",
    "load_bfloat16": "symbolic", "load_float16": "symbolic", "multi_precision_optimizer": "symbolic",
    "multi_precision_params": "symbolic", "search_fp32_layers": "symbolic",
    "validate": "symbolic",
    "amp_initialized": "training", "amp_scope": "training", "clip_global_norm": "training",
    "init": "training", "init_trainer": "training", "loss_scaler": "training",
    "scale_loss": "training", "step": "training", "unscale": "training",
}

__all__ = ["__version__"] + list(_SUBMODULES) + list(_HOMES)


def _module(name):  # statements, not names: import-linter sees each edge; `from . import`
    # would ask this module's __getattr__ again
    if name == "checkpoint":
        import mxmixed.checkpoint as module
    elif name == "diagnostics":
        import mxmixed.diagnostics as module
    elif name == "distributed":
        import mxmixed.distributed as module
    elif name == "emulation":
        import mxmixed.emulation as module
    elif name == "optim":
        import mxmixed.optim as module
    elif name == "scaler":
        import mxmixed.scaler as module
    elif name == "symbolic":
        import mxmixed.symbolic as module
    elif name == "training":
        import mxmixed.training as module
    else:
        import mxmixed._core.devices as module
    return module


def __getattr__(name):
    if name in _SUBMODULES:
        return _module(name)
    if name not in _HOMES:
        raise AttributeError("module 'mxmixed' has no attribute %r" % (name,))
    value = getattr(_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
