"""The overflow locator's report: what was found, and what to try.

:class:`OverflowReport` is what :func:`mxmixed.diagnostics.find_overflow` returns; the
suggestions depend only on the report and on how the graph was made (Gluon, Symbol, a cast
net).
"""
import numpy as np

__all__ = ["OverflowReport", "input_suggestions", "suggestions"]


class OverflowReport:
    """Where inf or NaN first appeared (or that it did not).

    Attributes
    ----------
    found : bool
        Whether any tensor held inf or NaN (also the report's truth value).
    phase : {'input', 'forward', 'backward'} or None
        'input': the batch or a parameter held it before any arithmetic.
    kind : {'overflow', 'nan'} or None
        'overflow' when the first non-finite tensor holds inf (NaN may follow from it),
        'nan' when NaN appeared from finite values.
    layer : str or None
        The Gluon block (``'features.3 (Conv2D)'``) or, for a Symbol, the node name.
    node : str or None
        The graph node (emulation suffixes removed), e.g. ``'digitscnn0_output_fwd'``.
    op : str or None
        Its operator, e.g. ``'FullyConnected'``.
    tensor : str or None
        The tensor as the executor's monitor names it.
    gradient_of : str or None
        In the backward phase, what the non-finite tensor is the gradient of.
    cast_from : str or None
        In the forward phase, when the value overflowed where AMP casts a float32 result to
        float16 for ``layer``: the layer that computed it.
    float16 : bool
        Whether the op ran in float16 (False: it ran in float32, and keeping it there is no fix).
    dtype, shape
        Of that tensor.
    scale : float
        The loss scale of the backward pass.
    precision : str
        How the graph ran: 'amp', 'float16' (a cast net) or 'float32'.
    checked : dict
        Tensors checked per phase.
    suggestions : list of str
        What to try.
    """

    def __init__(self, scale, precision, checked, phase=None, kind=None, layer=None, node=None,
                 op=None, tensor=None, gradient_of=None, dtype=None, shape=None,
                 suggestions=(), cast_from=None, float16=True):
        self.found = phase is not None
        self.cast_from, self.float16 = cast_from, float16
        self.phase, self.kind, self.layer, self.node, self.op = phase, kind, layer, node, op
        self.tensor, self.gradient_of, self.shape = tensor, gradient_of, shape
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.scale, self.precision, self.checked = scale, precision, dict(checked)
        self.suggestions = list(suggestions)

    def __bool__(self):
        return self.found

    def __str__(self):
        if not self.found:
            return ("no inf or NaN: %d forward and %d backward tensors checked (%s, loss scale %g)"
                    % (self.checked.get("forward", 0), self.checked.get("backward", 0),
                       self.precision, self.scale))
        what = "inf (float16 overflow)" if self.kind == "overflow" else "NaN"
        if self.phase == "input":
            head = "%s in %s before any computation" % (what, self.tensor)
        else:
            head = "%s first appears in the %s pass at %s" % (what, self.phase, self.layer)
            if self.op:
                head += ", node '%s' (%s)" % (self.node, self.op)
            if self.gradient_of:
                head += ", in the gradient of %s" % self.gradient_of
            if self.cast_from:
                head += ", where AMP casts the float32 output of %s to float16" % self.cast_from
            head += "; tensor '%s' %s%s" % (self.tensor, np.dtype(self.dtype).name,
                                             tuple(self.shape or ()))
        lines = [head + " (%s, loss scale %g)" % (self.precision, self.scale), "try:"]
        lines += ["  - " + s for s in self.suggestions]
        return "\n".join(lines)

    def __repr__(self):
        if not self.found:
            return "OverflowReport(found=False)"
        return "OverflowReport(phase=%r, kind=%r, layer=%r, node=%r)" % (
            self.phase, self.kind, self.layer, self.node)


def input_suggestions(is_data):
    """What to try when the batch (``is_data``) or a parameter holds inf/NaN already."""
    if is_data:
        return ["the batch itself holds inf/NaN: check the data pipeline (division by a zero "
                "standard deviation, a corrupt sample, a float16 cast of values above 65504)"]
    return ["a parameter holds inf/NaN already: an overflowing update was applied (a Trainer "
            "without a loss scaler, or update_on_kvstore=True), or the checkpoint is broken; "
            "reload good weights and train with mxmixed.init_trainer"]


def _fp32_hint(report, hints):
    op, node = report.op, report.node
    if hints.get("cast_net"):
        path = (report.layer or "").split(" (")[0]
        return ("keep that block in float32: %s.cast('float32'), casting its input up and "
                "its output down in the parent's hybrid_forward (one op cannot mix dtypes)"
                % path)
    text = ("keep it in float32: mxmixed.amp_scope(**mxmixed.diagnostics.keep_in_float32(['%s'])) "
            "(or mxmixed.init with the same lists) keeps every %s in float32" % (op, op))
    if node:
        text += ("; for this node only, mx.contrib.amp.convert_hybrid_block(net, "
                 "excluded_sym_names=['%s'], ctx=...) (Symbols: amp.convert_symbol(sym, "
                 "excluded_sym_names=['%s']))" % (node, node))
    if hints.get("symbol"):
        text += "; find_overflow_symbol(..., excluded_sym_names=['%s']) checks the fix" % node
    else:
        text += "; find_overflow(..., fp32_ops=['%s']) checks the fix" % op
    return text


def suggestions(report, hints):
    """What to try for a report; ``hints`` says how the graph was made (symbol, cast_net)."""
    tips = []
    if report.phase == "forward" and report.kind == "overflow":
        if report.float16:
            tips.append(_fp32_hint(report, hints))
        if report.cast_from:
            tips.append("%s computes in float32 a value above 65504, which float16 cannot hold: "
                        "keep %s in float32 too, or bring the values down (normalization, "
                        "smaller weights)" % (report.cast_from, report.layer))
        else:
            tips.append("the forward output of %s exceeds 65504 before any loss scaling is "
                        "involved, so lowering the scale does not help: normalize the input, "
                        "check the initialization and the weights feeding it, or add a "
                        "normalization layer before it" % report.layer)
    elif report.phase == "backward" and report.kind == "overflow":
        if report.scale <= 1:
            tips.append("it overflows even unscaled, so " + _fp32_hint(report, hints))
            tips.append("or train with a loss scale below 1 (a static LossScaler accepts one): "
                        "mxmixed.diagnostics.recommend_loss_scale(net, batch) measures how far")
        else:
            tips.append("lower the loss scale: at %g this gradient exceeds 65504. "
                        "mxmixed.diagnostics.recommend_loss_scale(net, batch) picks a static "
                        "scale with headroom; a dynamic LossScaler backs off by itself"
                        % report.scale)
    else:
        tips.append("NaN from finite values: an invalid operation in %s (0/0, inf-inf, log or "
                    "sqrt of a negative number, or a float16 reduction such as softmax or a "
                    "norm; MXNET_SAFE_ACCUMULATION=1 makes those accumulate in float32); check "
                    "its inputs" % report.layer)
        if report.float16:
            tips.append(_fp32_hint(report, hints))
        else:
            tips.append("it ran in float32, so float16 is not the cause: the op's inputs are "
                        "outside its domain")
    return tips
