"""What the modules of :mod:`mxmixed.symbolic` share: the error type, dtype and op constants.

:class:`ConversionError` is public and documented as ``mxmixed.symbolic.ConversionError``;
the rest is private to the package.
"""
from .._convert import ConversionError
from .._graph import BATCHNORM_OPS as _BATCHNORM_OPS
from .._graph import CAST_OPS as _CAST_OPS
from .._graph import BFLOAT16 as _BFLOAT16
from .._graph import FLOAT16 as _FLOAT16
from .._graph import FLOAT32 as _FLOAT32
from .._graph import LOSS_OUTPUT_OPS as _LOSS_OUTPUTS
from .._graph import last_line as _last_line

__all__ = ["ConversionError"]

_PARAM_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var",
                   "_running_mean", "_running_var")
