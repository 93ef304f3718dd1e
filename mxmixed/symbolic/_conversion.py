"""Symbol conversion to float16: :func:`convert` and the :class:`ConvertedModel` it returns.

A wrapper of ``mxnet.contrib.amp.convert_model`` with checked inputs, exclusions, optional
float16 params and float16 inputs and outputs. Re-exported by :mod:`mxmixed.symbolic`.
"""
import difflib
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import mxnet as mx
from mxnet import gluon

from .._core.amx import request_amx
from .._core.convert import NO_BFLOAT16_CPU_OPS, ConversionError, convert_graph
from .._core.dtypes import BFLOAT16, FLOAT16, FLOAT16_MAX, FLOAT32
from .._core.graph import as_graph, attr_float
from .._core.ops import CAST_OPS, DETECTION_OPS
from ..training import unlisted_ops
from ._checkpoints import check_params, data_inputs, save_checkpoint
from ._fold import fold_batchnorm
from ._inference import (batchnorm_params, consumed_dtypes, default_ctx, io_float16, known_types,
                     symbol_block)
from ._options import ConvertOptions, option_keywords, options_from
from ._probe import layer_peaks, underflow_layers, underflow_note
from ._report import ConversionReport, build_report
from ._rewrite import fold_constants, guard_control_flow, mask_softmax
from ._ties import retie, untie
from ._validation import batch_types, split_batches

__all__ = ["convert", "ConvertedModel"]


# ------------------------------------------------------------------ conversion
@dataclass
class ConvertedModel:
    """A converted float16 model: graph, params and the :class:`ConversionReport`.

    Attributes
    ----------
    symbol : mxnet.symbol.Symbol
    arg_params, aux_params : dict of str to mxnet.nd.NDArray
    report : ConversionReport
    calibration_outputs : list of numpy.ndarray or None
        The float32 model's outputs on the calibration inputs (``calibration=``), which
        :func:`validate` takes as ``reference=`` instead of running the float32 model again.
    """

    symbol: mx.sym.Symbol
    arg_params: Dict[str, mx.nd.NDArray] = field(repr=False)
    aux_params: Dict[str, mx.nd.NDArray] = field(repr=False)
    report: ConversionReport = field(repr=False)
    calibration_outputs: Optional[List[np.ndarray]] = field(default=None, repr=False)

    def save(self, prefix: str, epoch: int = 0) -> Tuple[str, str]:
        """Write ``prefix-symbol.json`` and ``prefix-%04d.params``: both or neither.

        Returns
        -------
        tuple of str
            The two paths.
        """
        return save_checkpoint(prefix, epoch, self.symbol, self.arg_params, self.aux_params)

    def to_block(self, ctx: Optional[mx.Context] = None) -> gluon.SymbolBlock:
        """The model as a ``SymbolBlock`` for inference (float16 emulated on a CPU).

        Parameters
        ----------
        ctx : mxnet.Context, optional
            The first GPU when there is one, else the CPU.

        Returns
        -------
        mxnet.gluon.SymbolBlock
        """
        return symbol_block(self.symbol, self.arg_params, self.aux_params, default_ctx(ctx))

    def __iter__(self):
        return iter((self.symbol, self.arg_params, self.aux_params))


def _names(names, shown=3):
    """The first ``shown`` names, and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (", ... (%d more)" % more if more > 0 else "")


def _closest(name, choices):
    close = difflib.get_close_matches(name, choices, n=1)
    return " (did you mean %r?)" % close[0] if close else ""


def _convert_settled(sym, arg32, aux32, target, reasons, cast_optional, data_names, notes,
                     input_types=None):
    """The one AMP conversion (:func:`mxmixed._core.convert.convert_graph`), its settling noted."""
    result = convert_graph(sym, data_names, set(reasons), target, arg32, aux32, cast_optional,
                           data_types=input_types)
    if result.settled is not None:
        for name in result.widened:
            reasons.setdefault(name, "inputs must share a dtype")
        kept = ("; kept float32, because their inputs come in %s and float32 and the op "
                "computes in one dtype: %s" % (target, _names(result.widened))
                if result.widened else "")
        notes.append("MXNet's AMP pass gave a graph that does not type-check (%s); inputs were "
                     "cast around %d float32 layer(s) and %d op(s) with mixed input dtypes%s"
                     % (result.settled, len(reasons) - len(result.widened),
                        len(result.widened), kept))
    return result.symbol, result.arg_params, result.aux_params


@option_keywords
def convert(sym: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray],
            aux_params: Dict[str, mx.nd.NDArray], *, calibration: Any = None,
            batch_size: int = 8, ctx: Optional[mx.Context] = None, progress: bool = False,
            input_types: Optional[Dict[str, Any]] = None,
            options: Optional[ConvertOptions] = None, **fields: Any) -> ConvertedModel:
    """Convert a float32 Symbol model to float16 mixed precision, with a report.

    A wrapper of ``mxnet.contrib.amp.convert_model`` that leaves the caller's dicts alone
    (MXNet's modifies them in place) and never runs the model.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The float32 graph.
    arg_params, aux_params : dict of str to mxnet.nd.NDArray
        Its params; float16 ones (a partly cast model) are taken back to float32 first.
    calibration : array-like, dict or iterable, optional
        Representative inputs, as in :func:`validate` (a dict of named arrays for a model
        with several data inputs). When given, the float32 model runs on
        them once, and the report warns (in ``notes``) when the outputs or whole layers that
        will compute in float16 stay below float16's smallest normal (6.1e-5), where float16
        loses its precision or flushes to 0, and names :func:`search_fp32_layers`.
    batch_size : int, default 8
        Batch size of the calibration run.
    ctx : mxnet.Context, optional
        Where the calibration runs; the first GPU when there is one, else the CPU.
    progress : bool, default False
        A tqdm bar over the calibration batches.
    input_types : dict of str to dtype, optional
        The dtypes of integer data inputs (a BERT's token ids and token types: int32), which
        the conversion keeps as they are: never cast to float16, never made float16 inputs
        by ``keep_io_types=False``. By default those of a ``calibration`` dict; data inputs
        not named are float32.
    options : ConvertOptions, optional
        The conversion options in one object (the target dtype, the layers and ops kept
        float32, the io types, ...), or else:
    **fields
        Each field of :class:`ConvertOptions` as a keyword (``target_dtype='bfloat16'``,
        ``exclude_layers=[...]``, ...); not with ``options``.

    Returns
    -------
    ConvertedModel
        Graph, params and :class:`ConversionReport`; unpacks as ``sym, args, auxs``.

    Raises
    ------
    ConversionError
        For an unsupported target dtype, params that do not match the graph, an already
        converted graph, unknown layer or op names, or a bfloat16 conversion of which no layer
        would compute in bfloat16 (the message says why each stays float32; a float16 one that
        converts nothing says so in the report's notes).

    .. note::
       BatchNorm gamma, beta and moving statistics always stay float32 (MXNet issue #17164).

    .. note::
       Where MXNet's AMP pass leaves ops with float16 and float32 inputs side by side (an
       excluded branch of a ``Concat`` or an add, an op in none of its lists), the inputs are
       cast to one dtype: float32 for most ops (reason ``'inputs must share a dtype'``),
       float16 for Convolution-like ops. The report's notes say when this happened.

    Examples
    --------
    Convert a float32 checkpoint (here exported from a small Gluon net):

    >>> import tempfile
    >>> import mxnet as mx
    >>> from mxmixed import symbolic
    >>> from mxmixed.tutorial import exported_digits_mlp
    >>> prefix = exported_digits_mlp(tempfile.mkdtemp())  # a float32 checkpoint
    >>> sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    >>> model = symbolic.convert(sym, args, auxs)
    >>> sorted({str(v.dtype.__name__) for v in model.arg_params.values()})
    ['float16']
    >>> round(model.report.size_ratio, 2)
    0.5
    >>> model.save(prefix + "-fp16", 0)      # writes both files or neither
    ('...digits-fp16-symbol.json', '...digits-fp16-0000.params')
    """
    start = time.perf_counter()
    options = options_from(options, **fields)
    return convert_with(sym, arg_params, aux_params, options, calibration, batch_size, ctx,
                        progress, start, input_types)


def convert_with(sym, arg_params, aux_params, options, calibration=None, batch_size=8, ctx=None,
                 progress=False, start=None, input_types=None, nothing_is_an_error=True):
    """:func:`convert` with its options in one :class:`ConvertOptions` (what travels inside).

    ``input_types`` names the integer data inputs (token ids) and their dtypes; by default
    those of a ``calibration`` dict. They are typed as such, never cast to float16 or made
    float16 inputs by ``keep_io_types=False``. With ``nothing_is_an_error`` (the default), a
    bfloat16 conversion in which nothing is in bfloat16 raises ConversionError, a float16 one
    says so in a note; the search's candidates, which may keep every layer float32, pass
    False.
    """
    start = time.perf_counter() if start is None else start
    target = options.target_dtype
    before_graph = _check_convert_arguments(sym, arg_params, aux_params)
    nodes = before_graph.nodes
    reasons = _float32_reasons(nodes, options.exclude_layers, options.exclude_ops,
                               options.searched_layers, options.keep_detection_float32, target)
    low = (FLOAT16, BFLOAT16)
    arg32 = {k: (v.astype("float32") if np.dtype(v.dtype) in low else v)
             for k, v in arg_params.items()}
    aux32 = {k: (v.astype("float32") if np.dtype(v.dtype) in low else v)
             for k, v in aux_params.items()}
    data_names = data_inputs(sym, arg_params, aux_params)
    if input_types is None and isinstance(calibration, dict):
        input_types = batch_types(split_batches(calibration, batch_size,
                                                (sym, arg_params, aux_params)))
    input_types = {n: np.dtype(t) for n, t in (input_types or {}).items() if n in data_names}
    notes = []
    # calibration and validation compare with the model given, never with the folded one
    given = (sym, arg32, aux32)
    sym, arg32, aux32, folded = _rewrite_float32(before_graph, arg32, aux32, options, reasons,
                                                 data_names, input_types, notes)
    new_sym, new_args, new_auxs = _convert_tied(sym, arg32, aux32, target, reasons,
                                                bool(options.cast_optional_params), data_names,
                                                notes, input_types)
    graph = as_graph(new_sym)
    _check_batchnorm_float32(graph, new_args, new_auxs)
    if not options.keep_io_types:
        data_types = dict({n: FLOAT32 for n in data_names}, **input_types)
        dtypes = consumed_dtypes(graph, known_types(new_args, new_auxs, data_types))
        graph = io_float16(graph, set(data_names) - set(input_types), dtypes)
        new_sym = graph.to_symbol()
    report = build_report(before_graph, graph, arg_params, aux_params, new_args, new_auxs,
                           data_names, reasons, options, input_types)
    if nothing_is_an_error:
        _check_converts_something(report, notes)
    detection = sorted({op for name, op in ((n.name, n.op) for n in nodes)
                        if reasons.get(name) == "detection op"})
    if detection:
        notes.insert(0, "detection ops kept float32 by default (keep_detection_float32=True): "
                     + ", ".join(detection))
    report.seconds = time.perf_counter() - start
    outputs = None
    if calibration is not None and target == "bfloat16":
        notes.append("no underflow check for bfloat16: it has float32's exponent range, so "
                     "values that are tiny in float32 stay normal in bfloat16")
    elif calibration is not None:
        start = time.perf_counter()
        outputs = _calibrate(given, {conv: bn for bn, conv in folded}, report, calibration,
                             batch_size, ctx, progress, notes, input_types)
        report.calibration_seconds = time.perf_counter() - start
    report.notes = notes + report.notes
    return ConvertedModel(new_sym, new_args, new_auxs, report, outputs)


def _rewrite_float32(before_graph, arg32, aux32, options, reasons, data_names, input_types,
                     notes):
    """The float32 rewrites before MXNet's pass, each noted: BatchNorm folded (an option),
    the rewrites for oneDNN (bfloat16) or values of params alone folded (float16), constants
    beyond float16 named, control flow kept float32. Returns the graph (a Symbol), its params
    and the folded ``(BatchNorm, Convolution)`` pairs."""
    sym, folded = before_graph.to_symbol(), []
    if options.fold_batchnorm:
        folded_graph, arg32, aux32, folded = fold_batchnorm(before_graph, arg32, aux32,
                                                            keep=reasons)
        if folded:
            sym = folded_graph.to_symbol()
            notes.append("%d BatchNorm folded into the Convolution before it, in float32 "
                         "before the cast (fold_batchnorm; for inference): %s"
                         % (len(folded), _names([bn for bn, _ in folded])))
    if options.target_dtype == "bfloat16":
        request_amx()
        sym, arg32, aux32 = _rewrite_for_onednn(sym, arg32, aux32, notes)
    else:  # a concat of weights (a fused query/key/value, an RNN's flat params) stored as one
        sym, arg32, aux32 = _fold_param_values(sym, arg32, aux32, notes)
    constants = _constants_note(before_graph.nodes, reasons)
    if constants:
        notes.append(constants)
    sym = _guard_control_flow(sym, arg32, aux32, data_names, input_types, reasons, notes)
    return sym, arg32, aux32, folded


def _convert_tied(sym, arg32, aux32, target, reasons, cast_optional, data_names, notes,
                  input_types):
    """:func:`_convert_settled`, with each param read by several layers typed per reader for
    MXNet's pass and made one again after it (:mod:`._ties`), noted where it is now stored in
    the target dtype."""
    untied, arg32, ties = untie(sym, arg32)
    sym = untied.to_symbol() if ties else sym
    new_sym, new_args, new_auxs = _convert_settled(sym, arg32, aux32, target, reasons,
                                                   cast_optional, data_names, notes, input_types)
    if ties:
        retied, new_args, stored = retie(new_sym, new_args, ties, target)
        new_sym = retied.to_symbol()
        if stored:
            notes.append("%d param(s) read by several layers (tied weights) stored once in %s "
                         "and cast once to float32 for the layers that compute in float32: %s"
                         % (len(stored), target, _names(stored)))
    return new_sym, new_args, new_auxs


def _check_converts_something(report, notes):
    """Refuse a bfloat16 conversion in which nothing is bfloat16 (``load_bfloat16`` would
    refuse its file); note it for float16 (``load_float16`` loads a float32 file)."""
    nothing = report.converts_nothing()
    if nothing and report.target_dtype == "bfloat16":
        raise ConversionError(nothing)
    if nothing:
        notes.append("warning: " + nothing)


def _fold_param_values(sym, arg32, aux32, notes):
    """Values of params alone computed once and stored (:func:`._rewrite.fold_constants`): the
    conversion can then store them in float16, where a float32 ``Concat`` of the weights in
    front of a float16 layer kept every one float32 (GluonNLP's fused query/key/value, an
    RNN's flat parameter vector)."""
    graph, arg32, aux32, folded = fold_constants(sym, arg32, aux32)
    if not folded:
        return sym, arg32, aux32
    notes.append("%d value(s) computed from params alone were computed once, in float32, "
                 "and stored as params: %s" % (len(folded), _names(folded)))
    return graph.to_symbol(), arg32, aux32


def _rewrite_for_onednn(sym, arg32, aux32, notes):
    """The float32 rewrites of a bfloat16 conversion (:mod:`._rewrite`), noted in the report."""
    graph, arg32, aux32, folded = fold_constants(sym, arg32, aux32)
    graph, masked = mask_softmax(graph)
    if folded:
        notes.append("%d value(s) computed from params alone were computed once, in float32, "
                     "and stored as params: %s" % (len(folded), _names(folded)))
    if masked:
        notes.append("%d softmax with use_length rewritten as a mask (-1e30 past each row's "
                     "length; one shared by self-attention layers with the same lengths) and a "
                     "plain softmax, which oneDNN runs: %s" % (len(masked), _names(masked)))
    return (graph.to_symbol() if folded or masked else sym), arg32, aux32


def _guard_control_flow(sym, arg32, aux32, data_names, input_types, reasons, notes):
    """Control-flow ops kept float32, with the casts in front of them (:mod:`._rewrite`),
    given their reason and a note."""
    known = {n: np.dtype(v.dtype) for n, v in list(arg32.items()) + list(aux32.items())}
    known.update({n: FLOAT32 for n in data_names})
    known.update(input_types or {})
    graph, loops, casts = guard_control_flow(sym, known)
    if not loops:
        return sym
    for name in loops + casts:
        reasons.setdefault(name, "control flow")
    notes.append("%d control-flow op(s) kept float32, their floating inputs cast to float32 in "
                 "front of them: MXNet's AMP pass cannot convert inside their subgraphs "
                 "(--exclude-op does not reach there): %s" % (len(loops), _names(loops)))
    return graph.to_symbol()


def _check_convert_arguments(sym, arg_params, aux_params):
    if not isinstance(sym, mx.sym.Symbol):
        raise ConversionError("sym must be an mxnet Symbol, got %s" % type(sym).__name__)
    if not isinstance(arg_params, dict) or not isinstance(aux_params, dict):
        raise ConversionError("arg_params and aux_params must be dicts of name to NDArray")
    check_params(sym, arg_params, aux_params)
    graph = as_graph(sym)
    if any(n.op in CAST_OPS for n in graph.nodes):
        raise ConversionError("the graph already holds amp_cast nodes: it is mixed precision "
                              "already (load it with load_float16)")
    return graph


def _float32_reasons(nodes, exclude_layers, exclude_ops, searched_layers,
                     keep_detection_float32, target="float16"):
    """Why each layer asked to stay float32 stays so: ``{layer name: reason}``."""
    layer_names = [n.name for n in nodes if n.op != "null"]
    registered = set(mx.operator.get_all_registered_operators())
    reasons = {}
    for op in exclude_ops:
        if op not in registered:
            raise ConversionError("unknown operator %r in exclude_ops%s"
                                  % (op, _closest(op, sorted(registered))))
        for node in nodes:
            if node.op == op:
                reasons.setdefault(node.name, "excluded op")
    for names, reason in ((exclude_layers, "excluded layer"), (searched_layers, "search")):
        for name in names:
            if name not in layer_names:
                raise ConversionError("no layer named %r in the graph%s"
                                      % (name, _closest(name, layer_names)))
            reasons[name] = reason
    if keep_detection_float32:
        for node in nodes:
            if node.op in DETECTION_OPS:
                reasons.setdefault(node.name, "detection op")
    if target == "float16":
        for node, value in _constants_beyond_float16(nodes):
            reasons.setdefault(node.name, "constant beyond float16")
    if target == "bfloat16":
        unlisted = set(unlisted_ops())
        for node in nodes:
            if node.op in NO_BFLOAT16_CPU_OPS:
                reasons.setdefault(node.name, "no bfloat16 kernel")
            elif node.op in unlisted:
                reasons.setdefault(node.name, "no bfloat16 kernel known")
    return reasons


def _constants_beyond_float16(nodes):
    """``(node, value)`` for each op whose scalar (``scalar``, ``value``) float16 cannot hold:
    in float16 it becomes inf (GluonNLP's attention mask ``-1e18 * ones_like(score)``, whose
    fully padded rows then turn NaN in the softmax)."""
    found = []
    for node in nodes:
        if node.is_variable:
            continue
        for key in ("scalar", "value"):
            try:
                value = attr_float(node.attrs.get(key), 0.0)
            except ValueError:
                continue
            if np.isfinite(value) and abs(value) > FLOAT16_MAX:
                found.append((node, value))
                break
    return found


def _constants_note(nodes, reasons):
    """The note that names the layers kept float32 for their constant, or None."""
    kept = [(node, value) for node, value in _constants_beyond_float16(nodes)
            if reasons.get(node.name) == "constant beyond float16"]
    if not kept:
        return None
    shown = ", ".join("%s (%s %g)" % (node.name, node.op, value) for node, value in kept[:3])
    return ("%d layer(s) kept float32 because their constant is beyond float16's range "
            "(+-%g), where it would be inf (an attention mask such as GluonNLP's -1e18: rows "
            "with every position masked would turn NaN): %s%s"
            % (len(kept), FLOAT16_MAX, shown,
               ", ... (%d in all)" % len(kept) if len(kept) > 3 else ""))


def _check_batchnorm_float32(graph, arg_params, aux_params):
    converted = dict(arg_params, **aux_params)
    bad = sorted(name for name in batchnorm_params(graph)
                 if name in converted and np.dtype(converted[name].dtype) != FLOAT32)
    if bad:  # cannot happen with MXNet 1.9.1's op lists; guards against other lists
        raise ConversionError("the conversion made BatchNorm params %s float16; BatchNorm "
                              "needs them float32 (MXNet issue #17164)" % bad)


def _calibrate(model, folded, report, calibration, batch_size, ctx, progress, notes,
               input_types=None):
    """Run the float32 model given (``(sym, args, auxs)``, not folded) once on the calibration
    inputs; note float16 underflow. ``folded`` maps each Convolution that a BatchNorm was
    folded into to that BatchNorm, whose output the folded convolution computes.

    Returns the float32 outputs, which :func:`validate` can reuse as its reference.
    """
    given = {node.name for node in as_graph(model[0]).nodes}
    # the layers of the model given (not the casts a rewrite added in front of control flow)
    names = [n for n, d in report.layer_dtypes.items()
             if d == "float16" and folded.get(n, n) in given]
    # one sample at a time: the memory of a run grows with its batch
    outputs, peaks = layer_peaks(*model, [folded.get(n, n) for n in names],
                                 split_batches(calibration, 1, model), default_ctx(ctx), progress,
                                 "calibrate: float32 run", input_types=input_types)
    tiny, heads = underflow_layers(names, peaks, outputs)
    if tiny or heads:
        notes.append(underflow_note(tiny, heads, outputs))
    return outputs
