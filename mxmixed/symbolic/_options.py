"""The options of a conversion, in one object that convert, the search, the report and the CLI share.

A new conversion option is one field of :class:`ConvertOptions` (and its check in
``__post_init__``), its keyword in :func:`convert`, :func:`search_fp32_layers` and
:func:`convert_hybrid_block` (handed to :func:`options_from`), and its flag in
``mxmixed/cli/_convert.py``; ``tests/symbolic/test_convert_options.py`` fails for a field that
a function lacks, or without a flag unless it is listed there as one the CLI does not offer.
"""
import dataclasses
from dataclasses import dataclass
from typing import Optional, Tuple

from .._core.convert import ConversionError

__all__ = ["ConvertOptions", "options_from"]

_NAMES = ("exclude_layers", "exclude_ops", "searched_layers")


@dataclass(frozen=True)
class ConvertOptions:
    """How a float32 Symbol model is converted to mixed precision.

    Passed as ``options=`` to :func:`convert`, :func:`search_fp32_layers` and
    :func:`convert_hybrid_block`, which also take each field as a keyword; kept by the
    :class:`ConversionReport` (``report.options``).

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
        The low-precision type. bfloat16 is for CPUs (oneDNN) and keeps float32 inputs and
        outputs.
    exclude_layers : tuple of str, default ()
        Node names to keep in float32 (``excluded_sym_names``).
    exclude_ops : tuple of str, default ()
        Operator types to keep in float32 (every node of that type is excluded).
    keep_io_types : bool, default True
        Keep data inputs and outputs float32; False (float16 only) makes inputs the graph casts
        to float16 float16 inputs, and returns float16 outputs without the cast back.
    cast_optional_params : bool, default True
        Store params as float16 wherever the graph only uses them in float16 (MXNet's default
        is False).
    searched_layers : tuple of str, default ()
        Layers found by :func:`search_fp32_layers`: kept float32 like ``exclude_layers`` and
        reported with the reason ``'search'``.
    keep_detection_float32 : bool, default True
        Keep box decoding, NMS, anchors, ROI and proposal ops in float32.
    fold_batchnorm : bool, optional
        Fold each BatchNorm into the Convolution before it, in float32 before the cast, so
        that oneDNN fuses no Convolution+BatchNorm pair in low precision (the converted model
        is for inference). By default on for bfloat16 and off for float16.

    Raises
    ------
    ConversionError
        A ``ValueError``, in one line: an unsupported target dtype, a single string where a
        list of names belongs, or ``keep_io_types=False`` with bfloat16.
    """

    target_dtype: str = "float16"
    exclude_layers: Tuple[str, ...] = ()
    exclude_ops: Tuple[str, ...] = ()
    keep_io_types: bool = True
    cast_optional_params: bool = True
    searched_layers: Tuple[str, ...] = ()
    keep_detection_float32: bool = True
    fold_batchnorm: Optional[bool] = None

    def __post_init__(self):
        name = str(self.target_dtype)
        if name not in ("float16", "bfloat16"):
            raise ConversionError("unsupported target dtype %r: float16 or bfloat16" % (name,))
        object.__setattr__(self, "target_dtype", name)
        object.__setattr__(self, "fold_batchnorm", name == "bfloat16" if self.fold_batchnorm
                           is None else bool(self.fold_batchnorm))
        if name == "bfloat16" and not self.keep_io_types:
            raise ConversionError("keep_io_types=False is for float16 only: a bfloat16 model "
                                  "takes and returns float32")
        for what in _NAMES:
            names = getattr(self, what)
            if isinstance(names, str):
                raise ConversionError("%s must be a list of names, not the string %r"
                                      % (what, names))
            object.__setattr__(self, what, tuple(names))


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ConvertOptions)}


def options_from(options=None, **keywords):
    """The one place a function's conversion keywords, or its ``options=``, become options.

    Parameters
    ----------
    options : ConvertOptions, optional
    **keywords
        The function's conversion keywords, as the caller left or gave them.

    Returns
    -------
    ConvertOptions

    Raises
    ------
    TypeError
        ``options`` is not a ConvertOptions, or comes with a keyword set away from its default.
    """
    if options is None:
        return ConvertOptions(**keywords)
    if not isinstance(options, ConvertOptions):
        raise TypeError("options must be a ConvertOptions, got %s" % type(options).__name__)
    given = sorted(k for k, v in keywords.items()
                   if not (v is _DEFAULTS[k] or (type(v) is type(_DEFAULTS[k]) and v == _DEFAULTS[k])
                           or (k in _NAMES and not isinstance(v, str) and len(tuple(v)) == 0)))
    if given:
        raise TypeError("pass the conversion options either as options=ConvertOptions(...) or as "
                        "keywords, not both (got options and %s)" % ", ".join(given))
    return options
