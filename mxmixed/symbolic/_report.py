"""The report of a float16 conversion: ops per dtype, casts, parameter bytes, float32 layers.

:class:`ConversionReport` and the private builder that reads it off a converted graph.
Re-exported by :mod:`mxmixed.symbolic`.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from .._core.dtypes import FLOAT32, dtype_name
from .._core.graph import var_dtype
from .._core.ops import CAST_OPS
from ._inference import compute_dtype, consumed_dtypes, is_fp32_listed, known_types
from ._options import ConvertOptions

__all__ = ["ConversionReport", "build_report", "format_bytes"]


# ------------------------------------------------------------------ the report
def format_bytes(n):
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return "%.2f %s" % (n / size, unit)
    return "%d B" % n


def _bytes_by_dtype(*dicts):
    out = {}
    for params in dicts:
        for value in params.values():
            dtype = np.dtype(value.dtype)
            name = dtype_name(dtype)
            out[name] = out.get(name, 0) + int(np.prod(value.shape)) * dtype.itemsize
    return out


@dataclass
class ConversionReport:
    """What a float16 conversion changed.

    Attributes
    ----------
    target_dtype : str
        The low precision type.
    ops : dict of str to dict of str to int
        For every operator type, how many nodes compute in each dtype
        (``{'Convolution': {'float16': 20, 'float32': 0}}``). Casts are counted apart.
    casts_inserted : int
        ``amp_cast`` / ``amp_multicast`` nodes added by the conversion.
    param_bytes_before, param_bytes_after : dict of str to int
        Parameter bytes per dtype name, before and after.
    fp32_layers : list of (str, str, str)
        ``(layer name, op, reason)`` for every computing node kept in float32; the reason is
        ``'search'``, ``'excluded layer'``, ``'excluded op'``, ``'float32 op list'`` (MXNet's
        AMP lists) or ``'float32 input'`` (it follows a float32 layer or input).
    input_dtypes, output_dtypes : dict of str to str
        Dtype of each data input and each output of the converted graph.
    keep_io_types, cast_optional_params : bool
        The settings used.
    options : ConvertOptions
        Every option of the conversion (None for a report built by hand).
    seconds : float
        Time the conversion and this report took.
    calibration_seconds : float
        Time of the float32 calibration run (``calibration=``), 0 without one.
    layer_dtypes : dict of str to str
        Compute dtype of every computing node, by name (not printed).
    notes : list of str
        What the conversion did beyond MXNet's pass and what to watch for: detection ops kept
        float32, casts around layers with mixed input dtypes, float16 underflow warnings.
    """

    target_dtype: str
    ops: Dict[str, Dict[str, int]]
    casts_inserted: int
    param_bytes_before: Dict[str, int]
    param_bytes_after: Dict[str, int]
    fp32_layers: List[Tuple[str, str, str]]
    input_dtypes: Dict[str, str]
    output_dtypes: Dict[str, str]
    keep_io_types: bool
    cast_optional_params: bool
    seconds: float = 0.0
    calibration_seconds: float = 0.0
    layer_dtypes: Dict[str, str] = field(default_factory=dict, repr=False)
    notes: List[str] = field(default_factory=list)
    options: Optional[ConvertOptions] = field(default=None, repr=False)

    @property
    def bytes_before(self) -> int:
        """Total parameter bytes before the conversion (int)."""
        return sum(self.param_bytes_before.values())

    @property
    def bytes_after(self) -> int:
        """Total parameter bytes after the conversion (int)."""
        return sum(self.param_bytes_after.values())

    @property
    def size_ratio(self) -> float:
        """Parameter bytes after / before (float)."""
        return self.bytes_after / self.bytes_before if self.bytes_before else 1.0

    def count(self, op: str, dtype: str) -> int:
        """Number of ``op`` nodes computing in ``dtype`` (int)."""
        name = dtype if dtype == "bfloat16" else dtype_name(dtype)
        return self.ops.get(op, {}).get(name, 0)

    def __str__(self):
        return self.format()

    def verdict(self) -> str:
        """The report's first line: what computes in the target dtype, the size, what stayed
        float32."""
        computing = sum(sum(c.values()) for c in self.ops.values())
        low = sum(c.get(self.target_dtype, 0) for c in self.ops.values())
        kept = self._kept_by_reason()
        why = ", ".join("%d %s" % (len(names), reason) for reason, names in kept.items())
        timing = "%.2f s" % self.seconds
        if self.calibration_seconds:
            timing += ", calibration %.2f s" % self.calibration_seconds
        return ("%s conversion report: %d of %d layers compute in %s; params %s -> %s "
                "(%.1f%%); %d kept float32%s (%s)"
                % (self.target_dtype.capitalize(), low, computing, self.target_dtype,
                   format_bytes(self.bytes_before), format_bytes(self.bytes_after), 100.0 * self.size_ratio,
                   len(self.fp32_layers), ": " + why if why else "", timing))

    def converts_nothing(self) -> Optional[str]:
        """Why no layer computes in the target dtype and no param is stored in it, in one line;
        None when one does, or one is.

        Such a conversion would write a float32 model under a float16 or bfloat16 name, which
        ``load_bfloat16`` refuses and which saves nothing.
        """
        if (any(d == self.target_dtype for d in self.layer_dtypes.values())
                or self.param_bytes_after.get(self.target_dtype)):
            return None
        by_op = {}
        for _, op, reason in self.fp32_layers:
            by_op.setdefault((op, reason), 0)
            by_op[(op, reason)] += 1
        why = ", ".join("%s%s: %s" % (op, " x%d" % count if count > 1 else "", reason)
                        for (op, reason), count in sorted(by_op.items()))
        fix = ("serve the float32 model as it is, or convert to float16"
               if self.target_dtype == "bfloat16" else
               "serve the float32 model as it is, or exclude fewer layers")
        return ("nothing converts to %s: all %d layers stay float32 (%s), so the converted "
                "model is the float32 model under a %s name; %s"
                % (self.target_dtype, len(self.layer_dtypes), why or "no computing layer",
                   self.target_dtype, fix))

    def _kept_by_reason(self):
        kept = {}
        for name, _, reason in self.fp32_layers:
            kept.setdefault(reason, []).append(name)
        return dict(sorted(kept.items(), key=lambda item: (-len(item[1]), item[0])))

    def format(self, verbose: bool = False) -> str:
        """The report as text: the verdict first, then the details.

        Parameters
        ----------
        verbose : bool, default False
            Name every layer kept in float32 (by default, the first three of each reason).

        Returns
        -------
        str
        """
        dtypes = sorted({d for counts in self.ops.values() for d in counts},
                        key=lambda d: (d not in (self.target_dtype, "float32"), d))
        for d in ("float32", self.target_dtype):
            if d not in dtypes:
                dtypes.insert(0, d)
        width = max([len("operator")] + [len(op) for op in self.ops])
        lines = [self.verdict(),
                 "inputs: %s" % ", ".join("%s=%s" % kv for kv in self.input_dtypes.items()),
                 "outputs: %s" % ", ".join("%s=%s" % kv for kv in self.output_dtypes.items()),
                 "keep_io_types=%s  cast_optional_params=%s"
                 % (self.keep_io_types, self.cast_optional_params), ""]
        lines.append("%-*s %s" % (width, "operator", " ".join("%8s" % d for d in dtypes)))
        for op in sorted(self.ops):
            lines.append("%-*s %s" % (width, op, " ".join("%8d" % self.ops[op].get(d, 0)
                                                          for d in dtypes)))
        lines += ["", "cast nodes inserted: %d" % self.casts_inserted, ""]
        names = sorted(set(self.param_bytes_before) | set(self.param_bytes_after),
                       key=lambda d: (d != "float32", d))
        lines.append("%-10s %12s %12s" % ("params", "before", "after"))
        for name in names:
            lines.append("%-10s %12s %12s" % (name,
                                             format_bytes(self.param_bytes_before.get(name, 0)),
                                             format_bytes(self.param_bytes_after.get(name, 0))))
        lines.append("%-10s %12s %12s  (%.1f%%)" % ("total", format_bytes(self.bytes_before),
                                                    format_bytes(self.bytes_after),
                                                    100.0 * self.size_ratio))
        lines.append("")
        lines += self._kept_lines(verbose)
        for note in self.notes:
            lines.append("note: %s" % note)
        return "\n".join(lines)

    def _kept_lines(self, verbose):
        if not self.fp32_layers:
            return ["layers kept in float32: none"]
        lines = ["layers kept in float32: %d, by reason" % len(self.fp32_layers)]
        hidden = 0
        for reason, names in self._kept_by_reason().items():
            shown = names if verbose else names[:3]
            hidden += len(names) - len(shown)
            more = "" if len(shown) == len(names) else ", ... (%d more)" % (len(names) - len(shown))
            lines.append("  %-16s %4d  %s%s" % (reason, len(names), ", ".join(shown), more))
        if hidden:
            lines.append("  (every name: report.format(verbose=True), or --verbose)")
        return lines


def build_report(before_graph, graph, arg_before, aux_before, arg_after, aux_after, data_names,
                 reasons, options, input_types=None):
    """The report of a conversion from Graph ``before_graph`` to Graph ``graph``."""
    target = options.target_dtype
    nodes = graph.nodes
    var_nodes = {n.name: n for n in nodes if n.op == "null"}
    data_types = {n: var_dtype(var_nodes[n]) for n in data_names if n in var_nodes}
    data_types.update({n: t for n, t in (input_types or {}).items() if n in data_types})
    dtypes = consumed_dtypes(graph, known_types(arg_after, aux_after, data_types))
    ops, layer_dtypes, fp32_layers = {}, {}, []
    for node in nodes:
        if node.op == "null" or node.op in CAST_OPS:
            continue
        dtype = compute_dtype(node, dtypes)
        name = dtype_name(dtype) if dtype is not None else "other"
        counts = ops.setdefault(node.op, {target: 0, "float32": 0})
        counts[name] = counts.get(name, 0) + 1
        layer_dtypes[node.name] = name
        if dtype == FLOAT32:
            reason = reasons.get(node.name)
            if reason is None:
                reason = "float32 op list" if is_fp32_listed(node, target) else "float32 input"
            fp32_layers.append((node.name, node.op, reason))
    casts_before = sum(1 for n in before_graph.nodes if n.op in CAST_OPS)
    casts_after = sum(1 for n in nodes if n.op in CAST_OPS)
    outputs = {}
    for name, (src, out, _) in zip(graph.to_symbol().list_outputs(), graph.heads):
        dtype = dtypes.get((src, out))
        outputs[name] = dtype_name(dtype) if dtype is not None else "unknown"
    return ConversionReport(
        target_dtype=target, ops=ops, casts_inserted=casts_after - casts_before,
        param_bytes_before=_bytes_by_dtype(arg_before, aux_before),
        param_bytes_after=_bytes_by_dtype(arg_after, aux_after), fp32_layers=fp32_layers,
        input_dtypes={n: dtype_name(t) for n, t in data_types.items()}, output_dtypes=outputs,
        keep_io_types=bool(options.keep_io_types),
        cast_optional_params=bool(options.cast_optional_params), layer_dtypes=layer_dtypes,
        options=options)
