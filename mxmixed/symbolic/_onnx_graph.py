"""MXNet 1.9.1's ONNX exporter (``mx.onnx``), made to export converted float16 graphs.

What it lacks or gets wrong, and what this module does about it:

* no converters for ``amp_cast`` / ``amp_multicast``: registered here, as ONNX ``Cast``;
* it reads the graph through ``Symbol.tojson()``, which drops ``amp_cast`` nodes by default:
  the graph is handed over as a Symbol whose ``tojson()`` keeps them;
* its converters pass float16 constants to onnx 1.14 as bit patterns, which onnx re-encodes
  (6.0 becomes 17920.0): decoded during the export;
* it writes float16 initializers as ``int32_data`` and lists every parameter as a graph input:
  raw initializers, none of them an input;
* its converter of parameters hands each one to onnx as a Python list (``tolist()``, about 32
  bytes per value): for the length of one export, parameters go to onnx as raw bytes;
* it maps per-class ``box_nms`` to ONNX ``NonMaxSuppression`` across classes: named in a note.

Private to :mod:`mxmixed.symbolic`; :mod:`._onnx` holds the public functions.
"""
import contextlib
import logging
import re
import warnings

import numpy as np

import mxnet as mx

from .._core.convert import ConversionError
from .._core.errors import one_line
from .._core.graph import as_graph
from .._core.mxbool import attr_bool

__all__ = ["check_onnx", "class_aware_nms", "onnx_output_names", "onnx_packages", "to_proto"]

ONNX_INSTALL = "pip install -c constraints.txt -e '.[onnx]' in the mxmixed clone"

def check_onnx() -> None:
    """Check that onnx and onnxruntime can be imported (the ``onnx`` extra).

    Raises
    ------
    ConversionError
        One line that says how to install them.
    """
    onnx_packages()


def onnx_packages():
    """``(onnx, onnxruntime)``, or a one-line ConversionError that says how to install them."""
    try:
        import onnx
        import onnxruntime
    except ImportError as err:
        raise ConversionError("ONNX export needs the onnx and onnxruntime packages (%s): %s"
                              % (one_line(err), ONNX_INSTALL)) from None
    return onnx, onnxruntime


def _exporter():
    """MXNet's ONNX exporter class, with converters for ``amp_cast`` and ``amp_multicast``."""
    onnx_packages()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
        from mxnet.onnx.mx2onnx._op_translations import _op_translations_opset12 as ops
    if "amp_cast" not in MXNetGraph.registry_.get(12, {}):
        MXNetGraph.register("amp_cast")(_convert_amp_cast(ops))
        MXNetGraph.register("amp_multicast")(_convert_amp_multicast(ops))
    return MXNetGraph


def _tensor_type(dtype):
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def _convert_amp_cast(ops):
    def convert(node, **kwargs):
        from onnx import helper

        name, inputs, attrs = ops.get_inputs(node, kwargs)
        dtype = np.dtype(attrs["dtype"])
        return [helper.make_node("Cast", inputs, [name], name=name,
                                 to=_tensor_type(dtype))], (dtype,)
    return convert


def _convert_amp_multicast(ops):
    """``amp_multicast`` casts all its inputs to the widest of their dtypes (the narrowest
    with ``cast_narrow``): one ``Cast`` per output, named as the exporter expects."""
    def convert(node, **kwargs):
        from onnx import helper

        name, inputs, attrs = ops.get_inputs(node, kwargs)
        dtypes = [np.dtype(d) for d in ops.get_input_dtypes(node, kwargs)]
        narrow = attr_bool(attrs, "cast_narrow", False)
        pick = min if narrow else max
        dtype = pick(dtypes, key=lambda d: d.itemsize)
        count = int(attrs.get("num_outputs", len(inputs)))
        return [helper.make_node("Cast", [inputs[i]], [name + str(i)], name="%s_%d" % (name, i),
                                 to=_tensor_type(dtype)) for i in range(count)], (dtype,) * count
    return convert


class _KeepCasts(mx.sym.Symbol):
    """A Symbol whose ``tojson()`` keeps ``amp_cast`` nodes (MXNet's default drops them, and
    the exporter reads the graph through ``tojson()``)."""

    __slots__ = ()

    def tojson(self, remove_amp_cast=False):  # noqa: D102 (the exporter's call)
        return super().tojson(remove_amp_cast=False)


def onnx_output_names(sym):
    """The ONNX output names MXNet's exporter gives ``sym.list_outputs()``, in that order."""
    names = []
    for name in sym.list_outputs():
        if name.endswith("_output"):
            names.append(name[:-len("_output")])
        elif re.search(r"_output[0-9]$", name):
            names.append(name[:-len("_output0")] + name[-1])
        else:
            names.append(name)
    return names


@contextlib.contextmanager
def _quiet_exporter():
    """MXNet's converters warn through the root logger (box_nms); :attr:`OnnxModel.notes`
    says it once instead."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _float16_constants_as_values():
    """MXNet 1.9.1's converters pass float16 constants to ``onnx.helper.make_tensor`` as their
    uint16 bit patterns (Python ints), as older onnx wanted; onnx 1.14 encodes the values
    itself, so ReLU6's 6.0 became 17920.0. Bit patterns (ints, never floats for a float16
    tensor) are turned back into values for the duration of an export."""
    from onnx import TensorProto, helper

    make_tensor = helper.make_tensor

    def fixed(name, data_type, dims, vals, raw=False):
        if data_type == TensorProto.FLOAT16 and not raw:
            flat = np.asarray(vals).ravel()
            if flat.size and np.issubdtype(flat.dtype, np.integer):
                vals = flat.astype(np.uint16).view(np.float16)
        return make_tensor(name, data_type, dims, vals, raw)

    helper.make_tensor = fixed
    try:
        yield
    finally:
        helper.make_tensor = make_tensor


@contextlib.contextmanager
def _raw_initializers(exporter):
    """For the length of one export, MXNet's converter of parameters (op ``null``) writes each
    as a raw initializer from its array, as ``numpy_helper.from_array`` does, where MXNet's
    builds a Python list of its values first (8 to 16 times the parameter's bytes). Graph
    inputs go to MXNet's own converter."""
    from onnx import helper, numpy_helper

    registry = exporter.registry_[12]
    mxnet_null = registry["null"]

    def convert(node, **kwargs):
        if kwargs["is_input"] is not False:
            return mxnet_null(node, **kwargs)
        name = str(node["name"])
        value = kwargs["weights"][name]
        kwargs["initializer"].append(numpy_helper.from_array(value, name))
        return [helper.make_tensor_value_info(name, _tensor_type(value.dtype),
                                              np.shape(value))], (value.dtype,)

    registry["null"] = convert
    try:
        yield
    finally:
        registry["null"] = mxnet_null


def class_aware_nms(graph):
    """Names of ``box_nms`` nodes that suppress per class, which MXNet's exporter cannot keep."""
    return [n.name for n in graph.nodes if n.op == "_contrib_box_nms"
            and int(n.attrs.get("id_index", "-1")) != -1
            and not attr_bool(n.attrs, "force_suppress", False)]


def _missing_converters(graph, registry):
    known = set()
    for ops in registry.values():
        known.update(ops)
    return sorted({n.op for n in graph.nodes if n.op != "null"} - known)


# The last opset whose Reduce* ops take ``axes`` as an attribute, as MXNet's converters write it
_OPSET_AXES_ATTRIBUTE = 17


@contextlib.contextmanager
def _graph_check_at(onnx, opset):
    """MXNet's exporter checks its graph against the newest opset whatever it writes: check it
    against ``opset`` instead, for the duration of an export."""
    checker = onnx.checker
    check_graph = checker.check_graph
    ctx = checker.C.CheckerContext()
    ctx.ir_version = onnx.IR_VERSION
    ctx.opset_imports = {"": opset}

    def at_opset(graph, _ctx=None):
        return check_graph(graph, ctx)

    checker.check_graph = at_opset
    try:
        yield
    finally:
        checker.check_graph = check_graph


def _first_line(err):
    """onnx.checker's message, whose first line says what is wrong and the rest where."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(err).__name__


_ELEMENTWISE = ("Mul", "Add", "Sub", "Div")


def _float16_scalars(onnx, model):
    """Cast float32 operands of float16 elementwise ops to float16: MXNet 1.9.1's converters
    of ``interleaved_matmul_selfatt_qk`` (its 1/sqrt(d) scale, computed in the graph) and of
    GELU (its 0.5) write float32 values whatever the dtype of the data, so a float16 BERT
    fails onnx.checker (``Mul: B has inconsistent type``). Each such operand is cast to
    float16 in front of its reader, the one rounding a float16 op gives its scalar."""
    from onnx import TensorProto, helper

    graph = model.graph
    if not any(init.data_type == TensorProto.FLOAT16 for init in graph.initializer):
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except onnx.shape_inference.InferenceError:
        return
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.value_info) + list(inferred.input) + list(inferred.output)}
    types.update({init.name: init.data_type for init in graph.initializer})
    nodes, casts = [], {}
    for node in graph.node:
        kinds = [types.get(name) for name in node.input]
        if node.op_type in _ELEMENTWISE and TensorProto.FLOAT16 in kinds:
            for k, name in enumerate(node.input):
                if kinds[k] != TensorProto.FLOAT:
                    continue
                if name not in casts:
                    casts[name] = name + "_float16"
                    nodes.append(helper.make_node("Cast", [name], [casts[name]],
                                                  name=casts[name], to=TensorProto.FLOAT16))
                node.input[k] = casts[name]
        nodes.append(node)
    if casts:
        del graph.node[:]
        graph.node.extend(nodes)


def _drop_unused_initializers(graph):
    """Initializers no node reads (the LayerNorm converter leaves some): onnxruntime warns of
    each one when it loads the model."""
    used = {name for node in graph.node for name in node.input}
    used |= {o.name for o in graph.output}
    kept = [init for init in graph.initializer if init.name in used]
    if len(kept) < len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def to_proto(sym, params, input_name, input_dtype, input_shape, batch_axes=None):
    """Export one graph with MXNet's exporter; raw initializers, none of them a graph input.

    ``input_name``, ``input_dtype`` and ``input_shape`` (one sample's) describe the one data
    input, or are lists with one entry per data input in the graph's order; ``batch_axes``
    (a list as those, default all 0) says where the dynamic batch axis goes in each shape.
    """
    onnx, _ = onnx_packages()
    exporter = _exporter()
    graph = as_graph(sym)
    missing = _missing_converters(graph, exporter.registry_)
    if missing:
        raise ConversionError("MXNet's ONNX exporter has no converter for %s: this model "
                              "cannot be exported to ONNX (see docs/onnx.md for the families "
                              "that export)" % ", ".join(missing))
    data_names = [n for n in sym.list_inputs() if n not in params]
    if isinstance(input_name, str):
        input_name, input_dtype, input_shape = [input_name], [input_dtype], [input_shape]
    batch_axes = list(batch_axes or [0] * len(input_name))
    if data_names != list(input_name):
        raise ConversionError("the graph's data inputs are %s, the export was given %s"
                              % (", ".join(data_names), ", ".join(input_name)))
    keep = mx.sym.load_json(sym.tojson(remove_amp_cast=False))
    keep.__class__ = _KeepCasts
    newest = onnx.defs.onnx_opset_version()
    opsets = (newest, _OPSET_AXES_ATTRIBUTE) if newest > _OPSET_AXES_ATTRIBUTE else (newest,)
    for opset in opsets:
        # MXNet 1.9.1's converters write some ops in their opset-17 form (LayerNorm's
        # ReduceMean axes as an attribute, Split's sizes, Tile's repeats), which the checker
        # or onnxruntime refuse at a newer opset: such a graph is written at opset 17
        try:
            model = _proto_at(onnx, exporter, keep, params, input_dtype, input_shape,
                              batch_axes, opset)
            if opset != opsets[-1]:
                _loads_in_onnxruntime(model)
            return model, opset
        except ConversionError:
            if opset == opsets[-1]:
                raise
    raise AssertionError("unreachable")


def _loads_in_onnxruntime(model):
    """Raise ConversionError where onnxruntime cannot load ``model``."""
    _, ort = onnx_packages()
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise ConversionError("onnxruntime cannot load the model: %s" % one_line(err)) from None


def _batched(shape, axis, size):
    shape = tuple(shape)
    return shape[:axis] + (size,) + shape[axis:]


def _proto_at(onnx, exporter, keep, params, input_dtype, input_shape, batch_axes, opset):
    """The exported, checked ONNX model at ``opset``; ConversionError where it fails."""
    from onnx import numpy_helper

    try:
        with warnings.catch_warnings(), _quiet_exporter(), _float16_constants_as_values(), \
                _graph_check_at(onnx, opset), _raw_initializers(exporter):
            warnings.simplefilter("ignore", DeprecationWarning)
            graph_proto = exporter().create_onnx_graph_proto(
                keep, params, [_batched(s, a, 1) for s, a in zip(input_shape, batch_axes)],
                [_tensor_type(d) for d in input_dtype], opset_version=opset, dynamic=True,
                dynamic_input_shapes=[_batched(s, a, None)
                                      for s, a in zip(input_shape, batch_axes)])
    except onnx.checker.ValidationError as err:
        raise ConversionError("MXNet's ONNX exporter failed: %s" % _first_line(err)) from None
    except (AttributeError, AssertionError, KeyError, NotImplementedError, TypeError,
            ValueError, IndexError, mx.base.MXNetError) as err:
        raise ConversionError("MXNet's ONNX exporter failed: %s" % one_line(err)) from None
    inits = {init.name for init in graph_proto.initializer}
    # MXNet writes float16 initializers as int32_data (4 bytes or more each): store raw data
    for k, init in enumerate(graph_proto.initializer):
        if not init.HasField("raw_data"):
            graph_proto.initializer[k].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(init), init.name))
    inputs = [v for v in graph_proto.input if v.name not in inits]
    del graph_proto.input[:]
    graph_proto.input.extend(inputs)
    model = onnx.helper.make_model(graph_proto, producer_name="mxmixed",
                                   opset_imports=[onnx.helper.make_opsetid("", opset)])
    _float16_scalars(onnx, model)
    _drop_unused_initializers(model.graph)
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        raise ConversionError("the exported ONNX model fails onnx.checker: %s"
                              % one_line(err)) from None
    return model
