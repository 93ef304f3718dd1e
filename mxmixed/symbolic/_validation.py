"""Validation: the float32 and the float16 model side by side on the same inputs.

:func:`validate` and its :class:`ValidationReport`, with the private helpers that run a model
(Block, ConvertedModel or checkpoint tuple) on NumPy batches, emulated on a CPU.
Re-exported by :mod:`mxmixed.symbolic`.
"""
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

import numpy as np

import mxnet as mx
from mxnet import gluon

from .. import emulation
from .._core.convert import ConversionError
from .._core.devices import is_cpu
from .._core.dtypes import FLOAT16, FLOAT32
from .._core.graph import as_graph
from .._core.progress import progress as progress_bars
from ._batch import DEFAULT_AXES, BatchAxes, batch_axes
from ._bfloat16_emulation import emulation_note
from ._detections import OutputCheck, compare_outputs
from ._inference import block_facts, default_ctx, inference_graph, symbol_block

# the name under which the one data input of an array's batches keeps its batch axis
_ONLY = "\0only"

__all__ = ["validate", "ValidationReport", "Runner", "batch_size_of", "batch_types",
           "largest_error", "progress_bar", "run_batches", "slice_batch", "split_batches",
           "join_outputs", "model_batch_axes", "Batches", "batch_first"]

# What validate() and the ONNX check run: a gluon Block, a ConvertedModel or a
# (sym, arg_params, aux_params) tuple (their docstrings say which).
Model = Any


# ------------------------------------------------------------------ running models
def _named_arrays(inputs, model=None):
    """A dict of named inputs as NumPy arrays, checked: numbers only, and the same number of
    samples along each one's batch axis (:func:`._batch.batch_axes` of ``model``'s graph, axis
    0 without one). Returns the arrays and their :class:`BatchAxes`."""
    if not inputs:
        raise ConversionError("inputs is an empty dict: give one array per data input")
    arrays = {}
    for name, value in inputs.items():
        value = value.asnumpy() if isinstance(value, mx.nd.NDArray) else np.asarray(value)
        if value.ndim < 1 or value.size == 0:
            raise ConversionError("input %r must hold at least one sample, got shape %s"
                                  % (name, value.shape))
        if value.dtype.kind not in "fiu":
            raise ConversionError("input %r has dtype %s: give floating or integer arrays"
                                  % (name, value.dtype))
        arrays[str(name)] = value
    axes = model_batch_axes(model, {n: v.shape for n, v in arrays.items()})
    lengths = {name: value.shape[axes.input_axis(name)] for name, value in arrays.items()
               if axes.input_axis(name) is not None}
    if len(set(lengths.values())) > 1:
        raise ConversionError("the named inputs must hold the same number of samples (along "
                              "each one's batch axis: %s), got %s"
                              % (", ".join("%s %s" % (n, axes.input_axis(n)) for n in arrays),
                                 ", ".join("%s %d" % item for item in lengths.items())))
    return arrays, axes


def model_batch_axes(model, shapes):
    """:class:`BatchAxes` of a model (a (sym, args, auxs) tuple, a ConvertedModel, or None and
    a Block: axis 0) for data inputs of ``shapes`` (``{name: shape}``; one unnamed shape under
    the name None for a model with one data input)."""
    if hasattr(model, "symbol") and hasattr(model, "aux_params"):
        model = (model.symbol, model.arg_params, model.aux_params)
    if not (isinstance(model, tuple) and len(model) == 3):
        return DEFAULT_AXES
    sym, arg_params, aux_params = model
    inference = inference_graph(sym)
    params = set(arg_params) | set(aux_params)
    names = [n for n in inference.list_inputs() if n not in params]
    if None in shapes:
        if len(names) != 1:
            return DEFAULT_AXES
        shapes = {names[0]: shapes[None]}
    if sorted(shapes) != sorted(names):
        return DEFAULT_AXES
    return batch_axes(inference, shapes)


def batch_first(outputs, axes):
    """The outputs with each one's batch axis moved first (what the comparison rules read as
    samples: a classifier's rows, a detector's images)."""
    return [o if axes.output_axis(k) in (None, 0) or o.ndim <= axes.output_axis(k)
            else np.moveaxis(o, axes.output_axis(k), 0) for k, o in enumerate(outputs)]


def _as_batch(batch):
    if isinstance(batch, dict):
        return _named_arrays(batch)[0]
    if isinstance(batch, (list, tuple)):
        batch = batch[0]
    return batch.asnumpy() if isinstance(batch, mx.nd.NDArray) else np.asarray(batch)


class Batches(list):
    """NumPy batches, and the batch axes of the model's inputs and outputs (``axes``, a
    :class:`BatchAxes`), along which they were split and their outputs are joined."""

    axes = DEFAULT_AXES


def _axis_of(axes, name):
    return axes.input_axis(name) if name is not None else axes.input_axis(_ONLY)


def batch_size_of(batch, axes=DEFAULT_AXES):
    """Number of samples in a batch (an array or a dict of named arrays), along the batch
    axis ``axes`` names."""
    if isinstance(batch, dict):
        for name, value in batch.items():
            axis = axes.input_axis(name)
            if axis is not None:
                return value.shape[axis]
        return len(next(iter(batch.values())))
    axis = _axis_of(axes, None)
    return batch.shape[0 if axis is None else axis]


def slice_batch(batch, start, stop, axes=DEFAULT_AXES):
    """Samples ``start:stop`` of a batch (an array or a dict of named arrays), along each
    input's batch axis (an input without one is passed whole)."""
    def cut(value, axis):
        if axis is None:
            return value
        index = [slice(None)] * value.ndim
        index[axis] = slice(start, stop)
        return value[tuple(index)]

    if isinstance(batch, dict):
        return {name: cut(value, axes.input_axis(name)) for name, value in batch.items()}
    return cut(batch, _axis_of(axes, None))


def join_outputs(parts, axes=DEFAULT_AXES):
    """The outputs of several batches (per output, a list of arrays) joined along each
    output's batch axis; an output that does not depend on the batch is the first one."""
    joined = []
    for k, arrays in enumerate(parts):
        axis = axes.output_axis(k)
        joined.append(arrays[0] if axis is None or len(arrays) == 1
                      else np.concatenate(arrays, axis=axis))
    return joined


def split_batches(inputs, batch_size, model=None):
    """Split ``inputs`` into NumPy batches: an array, a dict of named arrays (one per data
    input, as many samples each; batches are dicts), or an iterable of batches / (X, y) pairs.

    With ``model`` (a (sym, args, auxs) tuple or a ConvertedModel), an array or dict is split
    along the batch axis that the model's graph gives each input (a time-major ``(T, N)``
    input along axis 1, recurrent states given as inputs along theirs); without one, along
    axis 0. The returned :class:`Batches` holds those axes, and those of the outputs.
    """
    if isinstance(inputs, mx.nd.NDArray):
        inputs = inputs.asnumpy()
    if isinstance(inputs, dict):
        inputs, axes = _named_arrays(inputs, model)
        count = batch_size_of(inputs, axes)
        return _batches([slice_batch(inputs, i, i + batch_size, axes)
                         for i in range(0, count, batch_size)], axes)
    if isinstance(inputs, np.ndarray):
        if inputs.ndim < 1 or inputs.size == 0:
            raise ConversionError("inputs must hold at least one sample")
        axes = model_batch_axes(model, {None: inputs.shape})
        axes = BatchAxes({_ONLY: next(iter(axes.inputs.values()), 0)}, axes.outputs)
        count = batch_size_of(inputs, axes)
        return _batches([slice_batch(inputs, i, i + batch_size, axes)
                         for i in range(0, count, batch_size)], axes)
    batches = [_as_batch(batch) for batch in inputs]
    if not batches:
        raise ConversionError("inputs yielded no batches")
    first = batches[0]
    shapes = ({n: v.shape for n, v in first.items()} if isinstance(first, dict)
              else {None: first.shape})
    axes = model_batch_axes(model, shapes)
    if not isinstance(first, dict):
        axes = BatchAxes({_ONLY: next(iter(axes.inputs.values()), 0)}, axes.outputs)
    return _batches(batches, axes)


def _batches(items, axes):
    batches = Batches(items)
    batches.axes = axes
    return batches


def batch_types(batches):
    """Dtypes of the integer inputs of dict batches (token ids, lengths): ``{name: dtype}``."""
    first = batches[0] if batches else None
    if not isinstance(first, dict):
        return {}
    return {name: np.dtype(value.dtype) for name, value in first.items()
            if np.dtype(value.dtype).kind in "iu"}


class Runner:
    """Runs one model (Block, ConvertedModel or (sym, args, auxs)) on NumPy batches: arrays
    for a model with one data input, dicts of named arrays for any model. ``input_types``
    gives the dtypes of integer inputs (:func:`batch_types`), which are passed as they are."""

    def __init__(self, model, ctx, input_dtype=None, input_types=None):
        self.ctx = ctx
        self.input_types = dict(input_types or {})
        if hasattr(model, "symbol") and hasattr(model, "aux_params"):  # a ConvertedModel
            model = (model.symbol, model.arg_params, model.aux_params)
        self.owned = isinstance(model, tuple) and len(model) == 3
        self.casts_to_float16 = self.owned and any(
            n.op == "amp_cast" and n.attrs.get("dtype") == "float16"
            or n.op == "amp_multicast" for n in as_graph(model[0]).nodes)
        if self.owned:
            self.block = symbol_block(*model, ctx, input_types=self.input_types)
        elif isinstance(model, gluon.Block):
            self.block = model
            if is_cpu(ctx) and self._has_float16(model):
                cached = getattr(model, "_cached_op", None)
                if cached is not None and not isinstance(cached, emulation.EmulatedCachedOp):
                    model._clear_cached_op()  # built before emulation: rebuild it emulated
        else:
            raise ConversionError("a model must be a Gluon Block, a ConvertedModel or a "
                                  "(sym, arg_params, aux_params) tuple, got %s"
                                  % type(model).__name__)
        self.types = dict(block_facts(self.block).input_dtypes or {"data": FLOAT32})
        self.input_dtype = (np.dtype(input_dtype or list(self.types.values())[0])
                            if len(self.types) == 1 else None)

    def release(self):
        """Free the MXNet graph and run state of a block this runner built, now: a Gluon block
        lives in reference cycles until the collector runs, and the next model's run would
        find them still there. A later call builds them again."""
        if self.owned:
            self.block._clear_cached_op()

    def compute_dtype(self):
        """The reduced precision this model computes in: 'bfloat16', 'float16', or 'float32'
        for a model with neither (what a validation then compares)."""
        if block_facts(self.block).bfloat16:
            return "bfloat16"
        if self._has_float16(self.block) or self.casts_to_float16:
            return "float16"
        return "float32"

    @staticmethod
    def _has_float16(block):
        return any(np.dtype(p.dtype) == FLOAT16 for p in block.collect_params().values())

    def arrays(self, batch):
        """The batch as the NDArrays this model takes, in its input order."""
        if not isinstance(batch, dict):
            if len(self.types) != 1:
                raise ConversionError("this model has %d data inputs (%s): give the inputs as "
                                      "a dict of named arrays, one per input"
                                      % (len(self.types), ", ".join(self.types)))
            return [mx.nd.array(batch, ctx=self.ctx, dtype=self.input_dtype)]
        unknown = [name for name in batch if name not in self.types]
        missing = [name for name in self.types if name not in batch]
        if unknown or missing:
            raise ConversionError("the inputs %s do not match the model's data inputs: %s%s"
                                  % (", ".join(batch) or "none",
                                     "no input named %s" % ", ".join(map(repr, unknown))
                                     if unknown else "missing %s" % ", ".join(missing),
                                     "; the model takes %s" % ", ".join(self.types)))
        arrays = []
        for name, declared in self.types.items():
            value = batch[name]
            dtype = self.input_types.get(name)
            if dtype is None:
                dtype = (self.input_dtype if self.input_dtype is not None
                         and len(self.types) == 1 else declared)
            arrays.append(mx.nd.array(value, ctx=self.ctx, dtype=dtype))
        return arrays

    def __call__(self, batch):
        inputs = self.arrays(batch)
        emulate = is_cpu(self.ctx) and not block_facts(self.block).bfloat16
        scope = emulation.emulated() if emulate else contextlib.nullcontext()
        with scope:
            out = self.block(*inputs)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            return [o.astype("float32").asnumpy() for o in outs]


def progress_bar(iterable, enabled, desc, total=None):
    """``iterable`` with a bar where someone watches (``enabled``, and ``_core.progress.bars_wanted``)."""
    return progress_bars(iterable, enabled, desc=desc, total=total, leave=False)


def run_batches(runner, batches, progress, desc):
    outputs = None
    for batch in progress_bar(batches, progress, desc, total=len(batches)):
        outs = runner(batch)
        if outputs is None:
            outputs = [[] for _ in outs]
        for store, out in zip(outputs, outs):
            store.append(out)
    runner.release()
    return join_outputs(outputs, getattr(batches, "axes", DEFAULT_AXES))


@dataclass
class ValidationReport:
    """The float16 model against the float32 model on the same inputs.

    Attributes
    ----------
    samples : int
        Number of inputs compared.
    max_abs_error : float
        Largest ``|y16 - y32|`` over all outputs (inf when float16 gave inf or NaN).
    max_rel_error : float
        ``max_abs_error / max|y32|``: the error relative to the output scale. Element-wise
        relative error is meaningless near zero outputs, so it is not used.
    nonfinite_share : float
        Share of float16 output values that are inf or NaN.
    top1_agreement : float or None
        Share of samples whose arg-max class is the same in both, for classifiers (outputs
        of shape ``(N, classes)``); None otherwise.
    device : str
        Where it ran, and whether float16 was emulated.
    seconds : float
        Wall time of both runs.
    checks : list of OutputCheck
        One verdict per output, each with its rule: ``relative`` (``max_rel_error`` of that
        output) or, for detectors whose outputs are gluoncv's (ids, scores, boxes) after
        NMS, ``detections`` (matched by class and IoU; see ``docs/symbolic.md``).
    inconclusive : str or None
        Why the comparison cannot tell a good conversion from a bad one, when it cannot: the
        float32 outputs are the same for every sample, or constant (an untrained detector
        whose every box is an anchor). None when the check means something.
    target_dtype : str
        'float16', or 'bfloat16' when the reduced-precision model computes in bfloat16.
    emulation : str or None
        One line, when the bfloat16 model ran under the bfloat16 emulation (float32
        arithmetic, bfloat16 rounding) because MXNet's bfloat16 cannot run on this CPU;
        None when it ran natively.
    """

    samples: int
    max_abs_error: float
    max_rel_error: float
    nonfinite_share: float
    top1_agreement: Optional[float]
    device: str
    seconds: float
    checks: List[OutputCheck] = field(default_factory=list)
    inconclusive: Optional[str] = None
    target_dtype: str = "float16"
    emulation: Optional[str] = None

    @property
    def error(self) -> float:
        """The largest error over :attr:`checks` (float): what :meth:`passes` compares."""
        if not self.checks:
            return self.max_rel_error
        return max(check.error for check in self.checks)

    @property
    def rule(self) -> str:
        """The rule(s) used, in words (str)."""
        return "; ".join(sorted({check.rule for check in self.checks})) or "relative"

    def passes(self, tolerance: float) -> bool:
        """Whether every output is finite and every check's error is ``<= tolerance`` (bool).

        Float16 inf or NaN counts only where the float32 value is finite.
        """
        return self.nonfinite_share == 0.0 and self.error <= tolerance

    def __str__(self):
        top1 = "n/a" if self.top1_agreement is None else "%.2f%%" % (100 * self.top1_agreement)
        rows = [("samples", "%d" % self.samples),
                ("max abs error", "%.4g" % self.max_abs_error),
                ("max rel error", "%.4g  (max abs error / max |float32 output|)"
                 % self.max_rel_error),
                ("non-finite outputs", "%.2f%%" % (100 * self.nonfinite_share)),
                ("top-1 agreement", top1),
                ("device", self.device),
                ("time", "%.2f s" % self.seconds)]
        for check in self.checks:
            rows.append((check.name, "error %.4g  [%s]%s" % (
                check.error, check.rule, ("  " + check.detail) if check.detail else "")))
        if self.inconclusive:
            rows.insert(0, ("INCONCLUSIVE", self.inconclusive))
        if self.emulation:
            rows.append(("note", self.emulation))
        return ("Validation: %s against float32\n" % self.target_dtype) + "\n".join(
            "  %-19s %s" % row for row in rows)


def _degenerate(ref):
    """Why float32 outputs ``ref`` cannot tell a good conversion from a bad one, or None."""
    if all(r.size == 0 or np.all(r == r.flat[0]) for r in ref):
        return ("every float32 output value is the same constant: any conversion that keeps "
                "it passes; validate a trained model, or on inputs that change its outputs")
    if all(len(r) > 1 and np.all(r == r[:1]) for r in ref):
        return ("the float32 outputs are the same for all %d samples (an untrained model?): "
                "the check cannot tell a good conversion from a bad one; validate a trained "
                "model" % len(ref[0]))
    return None


def largest_error(ref, got, rule="auto"):
    """``(abs_err, error, nonfinite, top1)``: ``error`` is the largest per-output error."""
    checks, abs_err, _, nonfinite, top1 = compare_outputs(ref, got, rule)
    return abs_err, max((c.error for c in checks), default=0.0), nonfinite, top1


def _device_text(ctx, target="float16", emulated=False):
    if target == "bfloat16" and emulated:
        return "%s (bfloat16 emulated: float32 arithmetic, bfloat16 rounding)" % (ctx,)
    if target == "bfloat16":
        return "%s (bfloat16 through oneDNN)" % (ctx,)
    return "%s (float16 %s)" % (ctx, "emulated" if is_cpu(ctx) else "native")


def validate(fp32_model: Model, fp16_model: Model, inputs: Any, batch_size: int = 8,
             ctx: Optional[mx.Context] = None, progress: bool = True,
             input_dtype: Optional[str] = None, rule: str = "auto",
             reference: Optional[List[np.ndarray]] = None) -> "ValidationReport":
    """Run the float32 and the float16 model on the same inputs and compare the outputs.

    On a CPU the float16 model runs through the emulation graph pass (float16 numerics,
    not speed); on a GPU, natively. A bfloat16 model runs through oneDNN; where MXNet's
    bfloat16 cannot run (:func:`mxmixed.bfloat16_support`), a converted one (a ConvertedModel
    or a tuple) runs under a bfloat16 emulation: float32 arithmetic, rounded to bfloat16
    wherever the bfloat16 graph holds a bfloat16 tensor (:attr:`ValidationReport.emulation`
    says so).

    Parameters
    ----------
    fp32_model, fp16_model : mxnet.gluon.Block, ConvertedModel or tuple
        Gluon blocks (a :func:`load_float16` block, a hybridized net), converted models, or
        ``(sym, arg_params, aux_params)`` tuples. ``fp32_model`` may be None when
        ``reference`` is given: it does not run then.
    inputs : array-like, dict or iterable
        An array of samples ``(N, ...)`` (split into batches) for a model with one data input;
        a dict of named arrays, one per data input of the graph, all with the same first
        dimension (a BERT's token ids, token types and valid lengths): integer arrays are
        passed as they are (int32), floating ones as float32; or an iterable of batches
        (arrays or such dicts) or ``(X, y)`` pairs such as a DataLoader.
    batch_size : int, default 8
        Batch size when ``inputs`` is one array.
    ctx : mxnet.Context, optional
        The first GPU when there is one, else the CPU.
    progress : bool, default True
        Show a tqdm bar.
    input_dtype : str, optional
        Dtype of the (floating) data given to a float16 model with one data input: by
        default the one it declares
        (float16 after ``keep_io_types=False``), else float32; ``'float16'`` for a Gluon
        block cast with ``cast('float16')``. The float32 model always gets float32.
    rule : {'auto', 'relative', 'detections'}, default 'auto'
        How outputs are compared. ``'auto'`` uses ``'detections'`` for outputs shaped like
        gluoncv's detectors after NMS (ids ``(N, K, 1)``, scores ``(N, K, 1)``, boxes
        ``(N, K, 4)``) and ``'relative'`` otherwise.
    reference : list of numpy.ndarray, optional
        The float32 model's outputs on these inputs, already computed
        (:attr:`ConvertedModel.calibration_outputs`): the float32 model then does not run
        again.

    Returns
    -------
    ValidationReport

    Examples
    --------
    Compare the float16 model with the float32 one on the digits:

    >>> import tempfile
    >>> import mxnet as mx
    >>> from mxmixed.tutorial import exported_digits_mlp
    >>> from sklearn.datasets import load_digits
    >>> from mxmixed import symbolic
    >>> prefix = exported_digits_mlp(tempfile.mkdtemp())  # a float32 checkpoint
    >>> fp32 = mx.model.load_checkpoint(prefix, 0)
    >>> fp16 = symbolic.convert(*fp32)
    >>> report = symbolic.validate(fp32, fp16, load_digits().data[:64] / 16, progress=False)
    >>> report.top1_agreement > 0.9, report.max_rel_error < 0.01
    (True, True)
    """
    if batch_size < 1:
        raise ConversionError("batch_size must be at least 1, got %r" % (batch_size,))
    if rule not in ("auto", "relative", "detections"):
        raise ConversionError("rule must be 'auto', 'relative' or 'detections', got %r"
                              % (rule,))
    ctx = default_ctx(ctx)
    start = time.perf_counter()
    batches = split_batches(inputs, batch_size, fp32_model if fp32_model is not None
                            else fp16_model)
    axes = batches.axes
    types = batch_types(batches)
    count = sum(batch_size_of(b, axes) for b in batches)
    if reference is None:
        ref = run_batches(Runner(fp32_model, ctx, input_types=types), batches, progress,
                          "validate float32")
    else:
        ref = [np.asarray(r) for r in reference]
        held = sorted({r.shape[axes.output_axis(k)] for k, r in enumerate(ref)
                       if axes.output_axis(k) is not None and r.ndim > axes.output_axis(k)})
        if any(n != count for n in held):
            raise ConversionError("reference holds outputs for %s samples, the inputs %d"
                                  % (held, count))
    runner = Runner(fp16_model, ctx, input_dtype, input_types=types)
    target = runner.compute_dtype()
    got = run_batches(runner, batches, progress, "validate %s" % target)
    if len(ref) != len(got) or any(a.shape != b.shape for a, b in zip(ref, got)):
        raise ConversionError("the two models give outputs of different shapes: %s and %s"
                              % ([a.shape for a in ref], [b.shape for b in got]))
    ref, got = batch_first(ref, axes), batch_first(got, axes)
    checks, abs_err, rel, nonfinite, top1 = compare_outputs(ref, got, rule)
    why = block_facts(runner.block).bfloat16_emulated
    return ValidationReport(samples=count, max_abs_error=abs_err,
                            max_rel_error=rel, nonfinite_share=nonfinite, top1_agreement=top1,
                            device=_device_text(ctx, target, why is not None),
                            seconds=time.perf_counter() - start, checks=checks,
                            target_dtype=target, inconclusive=_degenerate(ref),
                            emulation=None if why is None else emulation_note(why))
