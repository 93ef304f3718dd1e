"""The float32-layer search: a small set of layers to keep float32 to meet a tolerance.

:func:`search_fp32_layers` ranks layers by the float16 error each one adds (one instrumented
float32 and one float16 run), bisects the ranking and prunes the prefix by group testing;
:class:`SearchResult` holds the outcome. Re-exported by :mod:`mxmixed.symbolic`.
"""
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import mxnet as mx

from .._core.convert import ConversionError
from .._core.dtypes import FLOAT16_MAX
from .._core.graph import as_graph
from .._core.progress import progress as progress_bars
from ._conversion import ConvertedModel, convert_with
from ._detections import DETECTION_RULE, RELATIVE_RULE, is_detection
from ._inference import default_ctx, inference_graph
from ._options import ConvertOptions, option_keywords, options_from
from ._probe import layer_sensitivity, probe_layers, underflow_layers, underflow_note
from ._validation import Runner, batch_types, largest_error, run_batches, split_batches

__all__ = ["search_fp32_layers", "SearchResult"]

# ------------------------------------------------------------------ the fp32-layer search
@dataclass
class SearchResult:
    """The outcome of :func:`search_fp32_layers`.

    Attributes
    ----------
    layers : list of str
        The layers to keep in float32 (empty when full float16 already meets the tolerance).
    tolerance : float
        The tolerance on the relative output error (see :class:`ValidationReport`).
    error : float
        The relative error with ``layers`` kept float32.
    initial_error : float
        The relative error with no layer kept float32 (inf when outputs overflow).
    evaluations : int
        Conversions run and compared; a naive one-layer-at-a-time search needs one per
        candidate.
    ranking : list of (str, float)
        The candidate layers, ``(name, max |float32 activation|)``: the layers found first,
        then the rest, overflowing ones first, then by :attr:`sensitivity`.
    model : ConvertedModel
        The model converted with ``layers`` kept float32 (reported with reason 'search').
    sensitivity : dict of str to float
        The float16 error each candidate adds, from the last instrumented float16 run (with
        :attr:`layers` float32 when the tolerance was met).
    skipped : list of (str, str)
        Candidate sets that could not be converted, ``(layers, reason)``; they count as not
        meeting the tolerance.
    bound : int
        The evaluation bound ``2k + ceil(log2 n) + 4`` for ``n`` candidates and ``k`` layers
        found.
    seconds : float
        Wall time of the search.
    rule : str
        How outputs were compared (see :func:`validate`).
    """

    layers: List[str]
    tolerance: float
    error: float
    initial_error: float
    evaluations: int
    ranking: List[Tuple[str, float]] = field(repr=False)
    model: ConvertedModel = field(repr=False)
    sensitivity: dict = field(default_factory=dict, repr=False)
    skipped: List[Tuple[str, str]] = field(default_factory=list)
    bound: int = 0
    seconds: float = 0.0
    rule: str = "relative"

    def __str__(self):
        lines = ["float32-layer search: tolerance %.3g on max rel error" % self.tolerance,
                 "  error all float16:     %.4g" % self.initial_error,
                 "  error after search:    %.4g" % self.error,
                 "  evaluations:           %d (for %d candidate layers; bound 2k + "
                 "ceil(log2 n) + 4 = %d)" % (self.evaluations, len(self.ranking), self.bound),
                 "  time:                  %.2f s" % self.seconds,
                 "  rule:                  %s" % self.rule,
                 "  layers kept float32:   %s" % (", ".join(self.layers) or "none")]
        for layers, reason in self.skipped:
            lines.append("  skipped (cannot convert): %s: %s" % (layers, reason))
        return "\n".join(lines)


def _rank(names, peaks, scores):
    """Overflowing layers first, then by the error they add, then by activation range."""
    order = sorted(range(len(names)), key=lambda k: (
        -int(peaks[k] > FLOAT16_MAX), -scores[k] if np.isfinite(scores[k]) else -np.inf, -peaks[k], k))
    return [names[k] for k in order]


@option_keywords
def search_fp32_layers(sym: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray],
                       aux_params: Dict[str, mx.nd.NDArray],
                       inputs: Any, tolerance: float = 1e-2, *, batch_size: int = 8,
                       ctx: Optional[mx.Context] = None, progress: bool = True,
                       rule: str = "auto", options: Optional[ConvertOptions] = None,
                       **fields: Any) -> SearchResult:
    """Find a small set of layers to keep in float32 so the outputs meet a tolerance.

    Like onnxconverter-common's ``auto_convert_mixed_precision``, but faster than trying
    one layer at a time:

    1. one float32 and one float16 run with every candidate layer's output exposed rank the
       layers: those that overflow first, then by the error each one *adds* (its relative
       error against its float32 activation, less the error it receives from its inputs);
    2. a bisection finds the shortest prefix of that ranking that meets the tolerance;
    3. group testing drops the layers of the prefix that are not needed (the rest of the
       prefix as one group, halved while a group cannot go).

    That takes at most about ``2k + ceil(log2 n) + 4`` conversions for ``n`` candidates and
    ``k`` layers found, when the ranking puts the needed layers first. A candidate set that
    cannot be converted is skipped (it counts as failing) and listed in the result.

    Parameters
    ----------
    sym, arg_params, aux_params
        The float32 model.
    inputs : array-like, dict or iterable
        Representative inputs, as in :func:`validate`: a dict of named arrays for a model
        with several data inputs.
    tolerance : float, default 1e-2
        Largest acceptable error under ``rule`` (for most models the relative error
        ``max|y16 - y32| / max|y32|``); outputs must also be finite.
    batch_size : int, default 8
        Batch size when ``inputs`` is one array.
    ctx : mxnet.Context, optional
        The first GPU when there is one, else the CPU (emulated float16).
    progress : bool, default True
        Show tqdm bars.
    rule : {'auto', 'relative', 'detections'}, default 'auto'
        How outputs are compared, as in :func:`validate`.
    options : ConvertOptions, optional
        The conversion options in one object, as in :func:`convert`: the user's exclusions
        are always kept, ``target_dtype`` must be float16 (the search is for float16 only),
        and the layers of ``searched_layers`` (found by an earlier search) are kept float32
        in every evaluation, and in the result with the layers found now. Or else:
    **fields
        Each field of :class:`ConvertOptions` as a keyword; not with ``options``.

    Returns
    -------
    SearchResult

    Raises
    ------
    ConversionError
        When the tolerance cannot be met even with every layer in float32.

    .. note::
       The bisection assumes that keeping more of the ranked layers in float32 never makes
       the error worse, which holds for overflow; the pruning keeps the set small when it
       does not hold exactly. When the calibration activations underflow float16 (all below
       6.1e-5), the result model's report carries a note.

    Examples
    --------
    >>> import tempfile
    >>> import mxnet as mx
    >>> from mxmixed.tutorial import exported_digits_mlp
    >>> from sklearn.datasets import load_digits
    >>> from mxmixed import symbolic
    >>> prefix = exported_digits_mlp(tempfile.mkdtemp())  # a float32 checkpoint
    >>> sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    >>> result = symbolic.search_fp32_layers(sym, args, auxs, load_digits().data[:32] / 16,
    ...                                      tolerance=0.01, progress=False)
    >>> result.layers                          # nothing needs to stay float32 here
    []
    """
    options = options_from(options, **fields)
    if options.target_dtype != "float16":
        raise ConversionError("search_fp32_layers searches float16 layers only, not %s: use "
                              "exclude_layers / exclude_ops" % options.target_dtype)
    if not tolerance > 0:
        raise ConversionError("tolerance must be positive, got %r" % (tolerance,))
    start = time.perf_counter()
    batches = split_batches(inputs, batch_size, (sym, arg_params, aux_params))
    ev = _Evaluator(sym, arg_params, aux_params, batches, default_ctx(ctx),
                    rule, progress, options)
    names, peaks = ev.names, dict(zip(ev.names, ev.stats32.peak))
    try:
        chosen, scores, initial, met = _greedy(ev, tolerance)
        found = len(chosen)
        if not met:
            chosen = _bisect(ev, chosen + [n for n in _rank(names, ev.stats32.peak, scores)
                                           if n not in chosen], len(chosen), tolerance)
        if len(chosen) > 1:
            chosen = _prune(chosen, ev.error_with, tolerance,
                            max(_bound(len(names), found) - len(ev.cache), 0))
    finally:
        ev.close()
    ordered = chosen + [n for n in _rank(names, ev.stats32.peak, scores) if n not in chosen]
    model = ev.convert_with(chosen)
    tiny, heads = underflow_layers(names, ev.stats32.peak, ev.reference)
    if tiny or heads:
        note = underflow_note(tiny, heads, ev.reference)
        for report in {id(ev.base.report): ev.base.report, id(model.report): model.report}.values():
            report.notes.append(note)
    return SearchResult(list(chosen), float(tolerance), ev.cache[tuple(sorted(chosen))], initial,
                        len(ev.cache), [(name, float(peaks[name])) for name in ordered], model,
                        dict(zip(names, map(float, scores))), ev.skipped,
                        _bound(len(names), len(chosen)), time.perf_counter() - start,
                        _rule_text(ev.reference, rule))


def _bound(n, k):
    """The evaluation bound ``2k + ceil(log2 n) + 4`` for n candidates and k layers found."""
    return 2 * k + math.ceil(math.log2(max(n, 1))) + 4


class _Evaluator:
    """The search's evaluations: conversions with some layers kept float32, run and compared
    with the float32 reference. It owns the cache of errors, the converted models, the sets
    that could not be converted and the progress bar."""

    def __init__(self, sym, arg_params, aux_params, batches, ctx, rule, progress, options):
        self.sym, self.arg_params, self.aux_params = sym, arg_params, aux_params
        self.batches, self.ctx, self.rule, self.options = batches, ctx, rule, options
        self.types = batch_types(batches)
        self.base = convert_with(sym, arg_params, aux_params, options, input_types=self.types)
        self.names = [name for name, dtype in self.base.report.layer_dtypes.items()
                      if dtype == "float16"]
        self.reference, self.stats32, self.acts32 = probe_layers(
            sym, arg_params, aux_params, self.names, batches, ctx, progress,
            "search: float32 run", keep=True, input_types=self.types)
        self.graph32 = as_graph(inference_graph(sym))
        self.cache, self.skipped, self.models = {}, [], {}
        self.bar = None
        if progress:
            self.bar = progress_bars(desc="search: evaluations", leave=False)

    def convert_with(self, layers):
        key = tuple(sorted(layers))
        if key not in self.models:
            self.models[key] = convert_with(
                self.sym, self.arg_params, self.aux_params,
                dataclasses.replace(self.options, searched_layers=self.options.searched_layers
                                    + tuple(layers)),
                input_types=self.types, nothing_is_an_error=False) if layers else self.base
        return self.models[key]

    def _record(self, layers, error):
        self.cache[tuple(sorted(layers))] = error
        if self.bar is not None:
            self.bar.update(1)
        return error

    def _compared(self, layers, got):
        _, err, nonfinite, _ = largest_error(self.reference, got, self.rule)
        return self._record(layers, math.inf if nonfinite else err)

    def error_with(self, layers):
        """The error with ``layers`` kept float32 (inf when that cannot be converted)."""
        key = tuple(sorted(layers))
        if key not in self.cache:
            try:
                got = run_batches(Runner(self.convert_with(layers), self.ctx,
                                         input_types=self.types), self.batches, False, "")
            except ConversionError as err:  # counts as failing
                self.skipped.append((", ".join(layers) if len(layers) < 4
                                     else "%d layers" % len(layers), str(err)))
                self._record(layers, math.inf)
            else:
                self._compared(layers, got)
        return self.cache[key]

    def probe_with(self, layers):
        """An evaluation that also measures every candidate's float16 error."""
        model = self.convert_with(layers)
        got, stats, _ = probe_layers(model.symbol, model.arg_params, model.aux_params, self.names,
                               self.batches, self.ctx, False, "", reference=self.acts32,
                               input_types=self.types)
        return (self._compared(layers, got),
                layer_sensitivity(self.graph32, self.names, self.stats32.peak, stats.diff))

    def close(self):
        if self.bar is not None:
            self.bar.close()
        self.acts32.clear()  # the float32 activations: free them


def _greedy(ev, tolerance):
    """Greedy rounds, each one instrumented float16 run.

    Layers whose float32 output exceeds float16's range start in the set. Each round keeps
    float32 every layer that turns finite values into inf or NaN, or the one layer whose
    added error stands out (4x the 8th largest). When the error is spread over many layers
    the rounds stop and the ranking is bisected.

    Returns
    -------
    (list of str, numpy.ndarray, float, bool)
        The layers chosen, the error each candidate adds, the error with none kept float32,
        and whether the tolerance was met.
    """
    names = ev.names
    peaks = dict(zip(names, ev.stats32.peak))
    scores = np.zeros(len(names))
    chosen = [name for name in names if peaks[name] > FLOAT16_MAX]
    initial = ev.error_with([]) if chosen else None
    for _ in range(max(1, math.ceil(math.log2(max(len(names), 1))))):
        try:
            err, scores = ev.probe_with(chosen)
        except ConversionError as exc:  # the set as grown cannot be converted: one fewer
            ev.skipped.append((", ".join(chosen[-3:]), str(exc)))
            ev.cache[tuple(sorted(chosen))] = math.inf
            return chosen[:-1], scores, initial, False
        if initial is None:
            initial = err
        if err <= tolerance:
            return chosen, scores, initial, True
        fresh = [k for k in np.argsort(-scores, kind="stable") if names[k] not in chosen]
        blowups = [names[k] for k in fresh if np.isinf(scores[k])]
        if blowups:
            chosen = chosen + blowups
            continue
        if not fresh or scores[fresh[0]] <= 0 or \
                scores[fresh[0]] < 4 * scores[fresh[min(7, len(fresh) - 1)]]:
            break
        chosen = chosen + [names[fresh[0]]]
    return chosen, scores, initial, False


def _bisect(ev, ordered, low, tolerance):
    """The shortest prefix of ``ordered`` (at least ``low`` long) that meets the tolerance."""
    high = len(ordered)
    while high - low > 1:
        mid = (low + high) // 2
        if ev.error_with(ordered[:mid]) <= tolerance:
            high = mid
        else:
            low = mid
    if ev.error_with(ordered[:high]) > tolerance:
        raise ConversionError("tolerance %.3g cannot be met even with all %d float16 layers "
                              "kept float32 (error %.4g)"
                              % (tolerance, len(ordered), ev.cache[tuple(sorted(ordered))]))
    return ordered[:high]


def _prune(chosen, error_with, tolerance, budget):
    """Drop layers of ``chosen`` that are not needed, in at most ``budget`` evaluations.

    Adaptive group testing from the least sensitive end: the last half of the set is tried
    as one group, and a group that cannot go is halved. The last layer in rank order is
    needed (the set without it did not meet the tolerance) and is not tried. The budget
    keeps the search within ``2k + ceil(log2 n) + 4`` evaluations for the ``k`` layers the
    greedy rounds found; a set found by bisection stays as it is where the budget ends.
    """
    keep = list(chosen)
    rest = keep[:-1]
    groups = [[name] for name in reversed(rest)] if len(rest) <= 4 else [rest[len(rest) // 2:],
                                                                          rest[:len(rest) // 2]]
    used = 0
    while groups and used < budget:
        group = groups.pop(0)
        if not group:
            continue
        trial = [name for name in keep if name not in group]
        used += 1
        if error_with(trial) <= tolerance:
            keep = trial
        elif len(group) > 1:
            half = len(group) // 2
            groups[:0] = [group[half:], group[:half]]
    return keep


def _rule_text(reference, rule):
    if rule == "detections" or (rule == "auto" and is_detection(reference)):
        return DETECTION_RULE
    return RELATIVE_RULE
