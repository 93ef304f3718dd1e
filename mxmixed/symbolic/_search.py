"""The float32-layer search: a small set of layers to keep float32 to meet a tolerance.

:func:`search_fp32_layers` ranks layers by their float32 activation range and bisects;
:class:`SearchResult` holds the outcome. Re-exported by :mod:`mxmixed.symbolic`.
"""
import json
import math
from dataclasses import dataclass, field
from typing import List, Tuple

import numpy as np

import mxnet as mx

from ._common import ConversionError
from ._conversion import ConvertedModel, convert
from ._graph import _default_ctx, _graph, _inference_graph
from ._validation import _Runner, _batches, _compare, _progress, _run

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
        The candidate layers, ``(name, max |float32 activation|)``, most at risk first.
    model : ConvertedModel
        The model converted with ``layers`` kept float32 (reported with reason 'search').
    """

    layers: List[str]
    tolerance: float
    error: float
    initial_error: float
    evaluations: int
    ranking: List[Tuple[str, float]] = field(repr=False)
    model: ConvertedModel = field(repr=False)

    def __str__(self):
        lines = ["float32-layer search: tolerance %.3g on max rel error" % self.tolerance,
                 "  error all float16:     %.4g" % self.initial_error,
                 "  error after search:    %.4g" % self.error,
                 "  evaluations:           %d (for %d candidate layers)"
                 % (self.evaluations, len(self.ranking)),
                 "  layers kept float32:   %s" % (", ".join(self.layers) or "none")]
        return "\n".join(lines)


def _activation_ranges(sym, arg_params, aux_params, candidates, batches, ctx, progress):
    """Largest |output| of each candidate layer in float32, plus the float32 outputs."""
    graph = _graph(_inference_graph(sym))
    position = {n["name"]: i for i, n in enumerate(graph["nodes"])}
    probe = {k: v for k, v in graph.items() if k != "node_row_ptr"}
    heads = list(graph["heads"])
    probe["heads"] = heads + [[position[name], 0, 0] for name in candidates]
    probe_sym = mx.sym.load_json(json.dumps(probe))
    runner = _Runner((probe_sym, arg_params, aux_params), ctx)
    outputs = None
    ranges = np.zeros(len(candidates))
    for batch in _progress(batches, progress, "search: float32 ranges", total=len(batches)):
        outs = runner(batch)
        if outputs is None:
            outputs = [[] for _ in heads]
        for store, out in zip(outputs, outs[:len(heads)]):
            store.append(out)
        for k, act in enumerate(outs[len(heads):]):
            finite = np.abs(act[np.isfinite(act)])
            ranges[k] = max(ranges[k], float(finite.max(initial=0.0)))
    return ranges, [np.concatenate(parts) for parts in outputs]


def search_fp32_layers(sym, arg_params, aux_params, inputs, tolerance=1e-2, exclude_layers=(),
                       exclude_ops=(), keep_io_types=True, cast_optional_params=True,
                       batch_size=8, ctx=None, progress=True):
    """Find a small set of layers to keep in float32 so the outputs meet a tolerance.

    Like onnxconverter-common's ``auto_convert_mixed_precision``, but faster than trying
    one layer at a time: the layers that compute in float16 are ranked once by the largest
    magnitude of their float32 output on ``inputs`` (the ones nearest float16's limit of
    65504 first), then a bisection finds the shortest prefix of that ranking that meets the
    tolerance, and a last pass drops any layer of that prefix that is not needed.
    That takes about ``2 + log2(n) + k`` conversions for ``n`` candidates and ``k`` layers
    found.

    Parameters
    ----------
    sym, arg_params, aux_params
        The float32 model.
    inputs : array-like or iterable
        Representative inputs, as in :func:`validate`.
    tolerance : float, default 1e-2
        Largest acceptable relative error, ``max|y16 - y32| / max|y32|``; outputs must also
        be finite.
    exclude_layers, exclude_ops, keep_io_types, cast_optional_params
        As in :func:`convert`; the user's exclusions are always kept.
    batch_size : int, default 8
        Batch size when ``inputs`` is one array.
    ctx : mxnet.Context, optional
        The first GPU when there is one, else the CPU (emulated float16).
    progress : bool, default True
        Show tqdm bars.

    Returns
    -------
    SearchResult

    Raises
    ------
    ConversionError
        When the tolerance cannot be met even with every layer in float32.

    .. note::
       The bisection assumes that keeping more of the ranked layers in float32 never makes
       the error worse, which holds for overflow; the final pruning pass keeps the set small
       when it does not hold exactly.
    """
    if not tolerance > 0:
        raise ConversionError("tolerance must be positive, got %r" % (tolerance,))
    ctx = _default_ctx(ctx)
    batches = _batches(inputs, batch_size)
    settings = dict(exclude_layers=list(exclude_layers), exclude_ops=list(exclude_ops),
                    keep_io_types=keep_io_types, cast_optional_params=cast_optional_params)
    base = convert(sym, arg_params, aux_params, **settings)
    candidates = [name for name, dtype in base.report.layer_dtypes.items() if dtype == "float16"]
    ranges, reference = _activation_ranges(sym, arg_params, aux_params, candidates, batches,
                                           ctx, progress)
    order = sorted(range(len(candidates)), key=lambda k: (-ranges[k], k))
    ranking = [(candidates[k], float(ranges[k])) for k in order]
    names = [name for name, _ in ranking]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=2 + max(1, math.ceil(math.log2(max(len(names), 1)))),
                   desc="search: bisect", leave=False)
    cache = {}

    def error_with(layers):
        key = tuple(sorted(layers))
        if key not in cache:
            model = convert(sym, arg_params, aux_params, searched_layers=list(layers),
                            **settings) if layers else base
            got = _run(_Runner(model, ctx), batches, False, "")
            _, rel, nonfinite, _ = _compare(reference, got)
            cache[key] = math.inf if nonfinite else rel
            if bar is not None:
                bar.update(1)
        return cache[key]

    try:
        initial = error_with([])
        if initial <= tolerance:
            return SearchResult([], float(tolerance), initial, initial, len(cache), ranking, base)
        full = error_with(names)
        if full > tolerance:
            raise ConversionError("tolerance %.3g cannot be met even with all %d float16 "
                                  "layers kept float32 (error %.4g)"
                                  % (tolerance, len(names), full))
        low, high = 0, len(names)  # error(top low) > tolerance >= error(top high)
        while high - low > 1:
            mid = (low + high) // 2
            if error_with(names[:mid]) <= tolerance:
                high = mid
            else:
                low = mid
        chosen = names[:high]
        if bar is not None:
            bar.total = len(cache) + len(chosen) - 1
            bar.refresh()
        for name in reversed(list(chosen)):
            if len(chosen) == 1:
                break
            trial = [n for n in chosen if n != name]
            if error_with(trial) <= tolerance:
                chosen = trial
    finally:
        if bar is not None:
            bar.close()
    model = convert(sym, arg_params, aux_params, searched_layers=list(chosen), **settings)
    return SearchResult(list(chosen), float(tolerance), cache[tuple(sorted(chosen))], initial,
                        len(cache), ranking, model)
