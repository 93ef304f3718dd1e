"""What the modules of :mod:`mxmixed.symbolic` share: the error type, dtype and op constants.

:class:`ConversionError` is public and documented as ``mxmixed.symbolic.ConversionError``;
the rest is private to the package.
"""
import numpy as np

__all__ = ["ConversionError"]

_FLOAT16 = np.dtype(np.float16)
_FLOAT32 = np.dtype(np.float32)
_CAST_OPS = ("amp_cast", "amp_multicast")
# Loss-output ops of the Module API: their label input is unused at inference, where each
# one is its plain activation.
_LOSS_OUTPUTS = ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
                 "MAERegressionOutput", "SVMOutput")
# Ops whose inputs 1..4 are gamma, beta, moving mean and moving variance: float32 always
# (cuDNN and MXNet's type inference require it for float16 data; MXNet issue #17164).
_BATCHNORM_OPS = ("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm")
_PARAM_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var",
                   "_running_mean", "_running_var")


class ConversionError(ValueError):
    """A bad input to a conversion (files, graph, params or options), as one readable line."""


def _last_line(err):
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else type(err).__name__
    for marker in ("Check failed: ", "MXNetError: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text
