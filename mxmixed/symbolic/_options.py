"""The options of a conversion, in one object that convert, the search, the report and the CLI share.

A new conversion option touches three files of the package: its field here (with its
description and, where other fields rule a value out, its place in
:meth:`ConvertOptions.conflict`), its row in ``mxmixed/cli/_convert.py``'s ``OPTION_FLAGS`` (the
flag, from which the CLI's argument and its value of the field are both derived), and the module
that acts on it. :func:`convert`, :func:`search_fp32_layers` and :func:`convert_hybrid_block`
take every field as a keyword through :func:`option_keywords`; ``tests/symbolic/
test_convert_options.py`` fails for a field that a function or the CLI lacks, unless it is listed
there as one the CLI does not offer.
"""
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from .._core.convert import ConversionError

__all__ = ["ConvertOptions", "options_from", "option_keywords"]

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
        The low-precision type. bfloat16 is for CPUs: MXNet runs it through oneDNN, fast with
        AVX512-BF16 or AMX (see :func:`mxmixed.bfloat16_support`), and it keeps float32 inputs
        and outputs; load the result with :func:`load_bfloat16`.
    exclude_layers : tuple of str, default ()
        Node names to keep in float32 (``excluded_sym_names``).
    exclude_ops : tuple of str, default ()
        Operator types to keep in float32 (every node of that type is excluded).
    keep_io_types : bool, default True
        Keep data inputs and outputs float32. With False (float16 only), inputs the graph
        casts to float16 become float16 inputs, and float16 outputs are returned without the
        cast back.
    cast_optional_params : bool, default True
        Store params as float16 wherever the graph only uses them in float16, so the file is
        about half the size. **MXNet's default is False** (params stay float32 and are cast
        on every run); pass False for that behaviour.
    searched_layers : tuple of str, default ()
        Layers found by :func:`search_fp32_layers`: kept float32 like ``exclude_layers`` and
        reported with the reason ``'search'``.
    keep_detection_float32 : bool, default True
        Keep box decoding, NMS, anchors, ROI and proposal ops (``_contrib_box_decode``,
        ``_contrib_box_nms``, ``_contrib_MultiBoxPrior``, ``ROIPooling``, ...) in float32,
        with their inputs cast to float32; reported with the reason ``'detection op'``.
    fold_batchnorm : bool, optional
        Fold each BatchNorm into the Convolution before it, in float32 before the cast, so
        that oneDNN fuses no Convolution+BatchNorm pair in low precision (the converted model
        is for inference). By default on for bfloat16 and off for float16.

    Raises
    ------
    ConversionError
        A ``ValueError``, in one line: an unsupported target dtype, a single string where a
        list of names belongs, or a value that the other fields rule out
        (:meth:`conflict`: ``keep_io_types=False`` with bfloat16).
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
        ruled_out = self.conflict(target_dtype=name, keep_io_types=self.keep_io_types)
        if ruled_out is not None:
            field, value, why = ruled_out
            raise ConversionError("%s=%r %s" % (field, value, why))
        for what in _NAMES:
            names = getattr(self, what)
            if isinstance(names, str):
                raise ConversionError("%s must be a list of names, not the string %r"
                                      % (what, names))
            object.__setattr__(self, what, tuple(names))

    @staticmethod
    def conflict(**fields: object) -> Optional[Tuple[str, object, str]]:
        """The field whose value the other fields rule out, that value, and why.

        The one check of the options that go together: :class:`ConvertOptions` raises it with
        the field spelled as a keyword (``keep_io_types=False ...``), ``mxmixed convert`` as
        its flag (``--no-keep-io-types ...``), before any work.

        Parameters
        ----------
        **fields
            Fields of a ConvertOptions, as given; a field left out takes its default.

        Returns
        -------
        (str, object, str) or None
            The field, its value and the rest of the sentence; None when they go together.
        """
        given = dict(_DEFAULTS, **fields)
        if str(given["target_dtype"]) == "bfloat16" and not given["keep_io_types"]:
            return ("keep_io_types", given["keep_io_types"],
                    "is for float16 only: a bfloat16 model takes and returns float32")
        return None


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ConvertOptions)}


def option_keywords(function):
    """Show ConvertOptions' fields in a function's signature, as the keywords it takes.

    ``function`` takes them as ``**fields`` and hands them to :func:`options_from`; this puts
    them in its signature (what ``help``, the API docs and ``inspect`` show) as keyword-only
    parameters, in the order and with the defaults of the fields, so that a new field needs
    no change of the functions that take the options.

    Parameters
    ----------
    function : callable
        A function whose last parameter is ``**fields``.

    Returns
    -------
    callable
        The same function, with its ``__signature__`` set.
    """
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    if parameters[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError("%s takes no **fields for the conversion options" % function.__name__)
    fields = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                annotation=Sequence[str] if f.name in _NAMES else f.type)
              for f in dataclasses.fields(ConvertOptions)]
    function.__signature__ = signature.replace(parameters=parameters[:-1] + fields)
    return function


def options_from(options=None, **keywords):
    """The one place a function's conversion keywords, or its ``options=``, become options.

    Parameters
    ----------
    options : ConvertOptions, optional
    **keywords
        The conversion keywords the caller gave (a function's ``**fields``).

    Returns
    -------
    ConvertOptions

    Raises
    ------
    TypeError
        A keyword that is no field; ``options`` is not a ConvertOptions, or comes with a
        keyword set away from its default.
    """
    unknown = sorted(set(keywords) - set(_DEFAULTS))
    if unknown:
        raise TypeError("unexpected keyword argument %r: the conversion options are %s"
                        % (unknown[0], ", ".join(_DEFAULTS)))
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
