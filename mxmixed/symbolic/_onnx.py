"""The float16 model out of MXNet: export to ONNX, and validation in onnxruntime.

:func:`export_onnx` writes a converted model (:func:`convert`, :func:`search_fp32_layers`) as
an ONNX graph with MXNet's own exporter (``mx.onnx``), to which it adds the two converters
MXNet 1.9.1 lacks: ``amp_cast`` and ``amp_multicast`` become ONNX ``Cast`` nodes. Every layer
keeps the dtype the conversion gave it, so the float32 layers of the conversion, the settling
pass and the search stay float32 in the ONNX file, and the inputs and outputs keep their
dtypes (``keep_io_types``). :func:`validate_onnx` runs the file in onnxruntime on the CPU and
compares it with MXNet's float32 model under the rules of :func:`validate`.
Re-exported by :mod:`mxmixed.symbolic`. Needs the ``onnx`` extra (``onnx``, ``onnxruntime``);
the exporter's fixes live in :mod:`._onnx_graph`.
"""
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

import mxnet as mx

from .._core.convert import ConversionError
from .._core.dtypes import FLOAT16, FLOAT32
from .._core.errors import one_line
from .._core.graph import as_graph, var_dtype
from .._files.atomic import atomic_write
from ._checkpoints import Checkpoint
from ._detections import compare_outputs
from ._inference import default_ctx, inference_graph
from ._onnx_graph import check_onnx, class_aware_nms, onnx_output_names, onnx_packages, to_proto
from ._report import ConversionReport, format_bytes
from ._validation import (Model, Runner, ValidationReport, batch_first, batch_size_of,
                          batch_types, join_outputs, progress_bar, run_batches, split_batches)

__all__ = ["export_onnx", "validate_onnx", "OnnxModel", "check_onnx"]


@dataclass
class OnnxModel:
    """A float16 model as an ONNX graph, with the report of its conversion.

    Attributes
    ----------
    proto : onnx.ModelProto
        The checked model (``onnx.checker.check_model(..., full_check=True)``); parameters are
        initializers, not graph inputs.
    report : ConversionReport
        The conversion's report: which layers stay float32, and why.
    input_name : str
    input_dtype : numpy.dtype
        float32, or float16 after ``keep_io_types=False``. For a model with several data
        inputs, those of the first.
    output_names : list of str
        In the order of the MXNet graph's outputs.
    float32_bytes : int or None
        Size of the float32 model exported the same way, when ``float32_model`` was given.
    opset : int
    seconds : float
        Time of the export(s) and the check.
    notes : list of str
        What the ONNX graph does differently from MXNet's (per-class NMS, for one).
    input_dtypes : dict of str to numpy.dtype
        Every data input and its dtype, in the graph's order (int32 token ids stay int32).
    """

    proto: object = field(repr=False)
    report: ConversionReport = field(repr=False)
    input_name: str
    input_dtype: np.dtype
    output_names: List[str]
    float32_bytes: Optional[int] = None
    opset: int = 0
    seconds: float = 0.0
    notes: List[str] = field(default_factory=list)
    input_dtypes: Dict[str, np.dtype] = field(default_factory=dict)

    def serialize(self) -> bytes:
        """The model file's bytes (bytes)."""
        return self.proto.SerializeToString()

    @property
    def nbytes(self) -> int:
        """Size of the ONNX file in bytes (int)."""
        return self.proto.ByteSize()

    @property
    def size_ratio(self) -> Optional[float]:
        """``nbytes / float32_bytes`` (float or None)."""
        return self.nbytes / self.float32_bytes if self.float32_bytes else None

    def save(self, path: str) -> str:
        """Write the ONNX file atomically: the old file stays whole if anything fails.

        Returns
        -------
        str
            ``path``.
        """
        atomic_write(path, self.serialize())
        return path

    def __str__(self):
        ratio = ("" if self.size_ratio is None else ", %.3fx the float32 ONNX export (%s)"
                 % (self.size_ratio, format_bytes(self.float32_bytes)))
        inputs = self.input_dtypes or {self.input_name: self.input_dtype}
        text = ("ONNX: opset %d, input%s %s, outputs %s, %s%s; passes onnx.checker "
                "(full check); parameters are initializers"
                % (self.opset, "s" if len(inputs) > 1 else "",
                   ", ".join("%s %s" % (n, np.dtype(t).name) for n, t in inputs.items()),
                   ", ".join(self.output_names), format_bytes(self.nbytes), ratio))
        return "\n".join([text] + ["note: " + note for note in self.notes])


def export_onnx(model: Model, input_shape: Union[Sequence[int], Mapping[str, Sequence[int]]],
                float32_model: Optional[Checkpoint] = None,
                input_types: Optional[Mapping[str, Any]] = None,
                batch_axes: Optional[Mapping[str, int]] = None) -> OnnxModel:
    """Export a float16 model converted by mxmixed to ONNX, with its float32 layers kept.

    MXNet's exporter (``mx.onnx``) with converters for ``amp_cast`` and ``amp_multicast``
    (ONNX ``Cast``): each layer computes in the dtype the conversion chose, so the layers the
    conversion, the settling pass or :func:`search_fp32_layers` kept in float32 stay float32.
    The batch axis is dynamic.

    Parameters
    ----------
    model : ConvertedModel or SearchResult
        From :func:`convert` or :func:`search_fp32_layers` (its ``model``).
    input_shape : tuple of int, or dict of str to tuple of int
        Shape of one sample, without the batch axis, e.g. ``(3, 224, 224)``; for a model with
        several data inputs, a dict of one such shape per input name (``()`` for a scalar
        per sample, such as a BERT's valid length).
    float32_model : tuple, optional
        The float32 ``(sym, arg_params, aux_params)``: also exported, to report the size ratio
        (:attr:`OnnxModel.size_ratio`); it is not kept.
    input_types : dict of str to dtype, optional
        Dtypes of integer data inputs (token ids: int32); the others are float32, or what the
        converted graph declares (float16 after ``keep_io_types=False``).
    batch_axes : dict of str to int, optional
        Where each input's batch axis goes in its shape (1 for a time-major ``(T, N)`` input
        or recurrent states ``(layers, N, hidden)``); by default first.

    Returns
    -------
    OnnxModel

    Raises
    ------
    ConversionError
        When onnx or onnxruntime is not installed (the line says how to install them), when
        MXNet's exporter has no converter for an op of the graph (the line names the ops), or
        when the result fails ``onnx.checker``.

    Examples
    --------
    >>> import tempfile
    >>> import mxnet as mx
    >>> from mxmixed import symbolic
    >>> from mxmixed.tutorial import exported_digits_mlp
    >>> prefix = exported_digits_mlp(tempfile.mkdtemp(), hidden=512)  # a float32 checkpoint
    >>> fp32 = mx.model.load_checkpoint(prefix, 0)
    >>> onnx_model = symbolic.export_onnx(symbolic.convert(*fp32), (64,), float32_model=fp32)
    >>> round(onnx_model.size_ratio, 2)
    0.5
    >>> onnx_model.save(prefix + "-fp16.onnx")
    '...digits-fp16.onnx'
    """
    start = time.perf_counter()
    model = getattr(model, "model", model)  # a SearchResult
    report = getattr(model, "report", None)
    if report is None or not hasattr(model, "symbol"):
        raise ConversionError("export_onnx takes the ConvertedModel of convert() or "
                              "search_fp32_layers(), got %s" % type(model).__name__)
    params = dict(model.arg_params, **model.aux_params)
    sym = inference_graph(model.symbol)
    graph = as_graph(sym)
    var_nodes = {n.name: n for n in graph.nodes if n.op == "null"}
    data_names = [n for n in sym.list_inputs() if n not in params]
    shapes = _input_shapes(input_shape, data_names)
    axes = [int((batch_axes or {}).get(n) or 0) for n in data_names]
    types = {n: np.dtype(t) for n, t in (input_types or {}).items()}
    unknown = sorted(set(types) - set(data_names))
    if unknown:
        raise ConversionError("input_types names %s, not a data input of the graph (its data "
                              "inputs: %s)" % (", ".join(unknown), ", ".join(data_names)))
    dtypes = [types.get(n, np.dtype(var_dtype(var_nodes[n]))) for n in data_names]
    float32_bytes = None
    if float32_model is not None:  # first: its proto is gone before the one kept is made
        sym32, args32, auxs32 = float32_model
        float32_bytes = to_proto(inference_graph(sym32), dict(args32, **auxs32), data_names,
                                 [types.get(n, FLOAT32) for n in data_names],
                                 shapes, axes)[0].ByteSize()
    proto, opset = to_proto(sym, params, data_names, dtypes, shapes, axes)
    notes = []
    nms = class_aware_nms(graph)
    if nms:
        notes.append("%s suppress(es) boxes per class in MXNet; MXNet's exporter writes ONNX "
                     "NonMaxSuppression across all classes, so the detections differ from "
                     "MXNet's even in float32 (docs/onnx.md)" % ", ".join(nms))
    outputs = onnx_output_names(sym)
    if sorted(outputs) != sorted(o.name for o in proto.graph.output):
        raise ConversionError("the ONNX outputs %s do not match the graph's outputs %s"
                              % ([o.name for o in proto.graph.output], outputs))
    return OnnxModel(proto, report, data_names[0], dtypes[0], outputs, float32_bytes, opset,
                     time.perf_counter() - start, notes, dict(zip(data_names, dtypes)))


def _input_shapes(input_shape, data_names):
    """One sample's shape per data input, in the graph's order, from a shape or a dict."""
    if not isinstance(input_shape, Mapping):
        if len(data_names) != 1:
            raise ConversionError("this model has %d data inputs (%s): give input_shape as a "
                                  "dict of one sample's shape per input name"
                                  % (len(data_names), ", ".join(data_names)))
        input_shape = {data_names[0]: input_shape}
    unknown = [n for n in input_shape if n not in data_names]
    missing = [n for n in data_names if n not in input_shape]
    if unknown or missing:
        raise ConversionError("input_shape names %s; the graph's data inputs are %s"
                              % (", ".join(map(str, input_shape)) or "nothing",
                                 ", ".join(data_names)))
    return [tuple(int(s) for s in input_shape[n]) for n in data_names]


def validate_onnx(fp32_model: Model, onnx_model: Union[OnnxModel, bytes, str], inputs: Any,
                  batch_size: int = 8, progress: bool = True, rule: str = "auto",
                  ctx: Optional[mx.Context] = None) -> ValidationReport:
    """Run the ONNX model in onnxruntime on the CPU and compare it with MXNet's float32 model.

    The same comparison as :func:`validate` (``relative``, or ``detections`` for detectors).
    MXNet runs the float32 model on ``ctx``; onnxruntime runs the ONNX model with its
    ``CPUExecutionProvider``. The time in the report is a wall time of both runs, not a speed
    measure: onnxruntime's CPU kernels for float16 are few, and it runs the rest in float32
    between casts it inserts, so float16 is no faster than float32 there, and often slower.

    Parameters
    ----------
    fp32_model : tuple or mxnet.gluon.Block
        The float32 ``(sym, arg_params, aux_params)`` (or a Block).
    onnx_model : OnnxModel or bytes or str
        From :func:`export_onnx`, or a model file's bytes or path.
    inputs : array-like, dict or iterable
        As in :func:`validate`: float32 samples, or a dict of named arrays for a model with
        several data inputs (integer arrays, such as token ids, are fed as int32).
    batch_size : int, default 8
    progress : bool, default True
    rule : {'auto', 'relative', 'detections'}, default 'auto'
    ctx : mxnet.Context, optional
        Where MXNet runs the float32 model; the first GPU when there is one, else the CPU.

    Returns
    -------
    ValidationReport
        Its ``device`` names onnxruntime and its provider.
    """
    onnx, ort = onnx_packages()
    if batch_size < 1:
        raise ConversionError("batch_size must be at least 1, got %r" % (batch_size,))
    if rule not in ("auto", "relative", "detections"):
        raise ConversionError("rule must be 'auto', 'relative' or 'detections', got %r"
                              % (rule,))
    if isinstance(onnx_model, OnnxModel):
        payload, outputs = onnx_model.serialize(), onnx_model.output_names
    else:
        payload, outputs = onnx_model, None
    start = time.perf_counter()
    try:
        session = ort.InferenceSession(payload, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise ConversionError("onnxruntime cannot load the model: %s" % one_line(err)) from None
    feed = session.get_inputs()
    outputs = outputs or [o.name for o in session.get_outputs()]
    ctx = default_ctx(ctx)
    batches = split_batches(inputs, batch_size, fp32_model)
    ref = run_batches(Runner(fp32_model, ctx, input_types=batch_types(batches)), batches,
                      progress, "validate float32 (MXNet)")
    got = None
    for batch in progress_bar(batches, progress, "validate float16 (onnxruntime)", len(batches)):
        try:
            outs = session.run(outputs, _onnx_feed(feed, batch))
        except Exception as err:  # onnxruntime's own error types
            raise ConversionError("onnxruntime failed to run the model: %s"
                                  % one_line(err)) from None
        if got is None:
            got = [[] for _ in outs]
        for store, out in zip(got, outs):
            store.append(np.asarray(out, dtype=np.float32))
    got = join_outputs(got, batches.axes)
    if len(ref) != len(got) or any(a.shape != b.shape for a, b in zip(ref, got)):
        raise ConversionError("MXNet and onnxruntime give outputs of different shapes: %s and "
                              "%s" % ([a.shape for a in ref], [b.shape for b in got]))
    ref, got = batch_first(ref, batches.axes), batch_first(got, batches.axes)
    checks, abs_err, rel, nonfinite, top1 = compare_outputs(ref, got, rule)
    device = ("onnxruntime %s %s (float16 on a CPU: no faster than float32, often slower; "
              "not a speed measure); float32 reference: MXNet on %s"
              % (ort.__version__, session.get_providers()[0], ctx))
    return ValidationReport(samples=sum(batch_size_of(b, batches.axes) for b in batches),
                            max_abs_error=abs_err,
                            max_rel_error=rel, nonfinite_share=nonfinite, top1_agreement=top1,
                            device=device, seconds=time.perf_counter() - start, checks=checks)


_ORT_TYPES = {"tensor(float16)": FLOAT16, "tensor(float)": FLOAT32,
              "tensor(int32)": np.dtype(np.int32), "tensor(int64)": np.dtype(np.int64)}


def _onnx_feed(feed, batch):
    """onnxruntime's input dict for one batch (an array, or a dict of named arrays)."""
    names = [i.name for i in feed]
    if not isinstance(batch, dict):
        if len(feed) != 1:
            raise ConversionError("this model has %d inputs (%s): give the inputs as a dict of "
                                  "named arrays" % (len(feed), ", ".join(names)))
        batch = {names[0]: batch}
    if sorted(batch) != sorted(names):
        raise ConversionError("the inputs %s do not match the ONNX model's inputs %s"
                              % (", ".join(batch), ", ".join(names)))
    return {i.name: np.asarray(batch[i.name]).astype(_ORT_TYPES.get(i.type, FLOAT32))
            for i in feed}
