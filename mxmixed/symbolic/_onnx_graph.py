"""MXNet 1.9.1's ONNX exporter (``mx.onnx``), made to export converted float16 graphs.

What it lacks or gets wrong, and what this module does about it:

* no converters for ``amp_cast`` / ``amp_multicast``: registered here, as ONNX ``Cast``;
* it reads the graph through ``Symbol.tojson()``, which drops ``amp_cast`` nodes by default:
  the graph is handed over as a Symbol whose ``tojson()`` keeps them;
* its converters pass float16 constants to onnx 1.14 as bit patterns, which onnx re-encodes
  (6.0 becomes 17920.0): decoded during the export;
* it writes float16 initializers as ``int32_data`` and lists every parameter as a graph input:
  raw initializers, none of them an input;
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
from .._core.graph import Graph

__all__ = ["check_onnx", "class_aware_nms", "onnx_output_names", "onnx_packages", "to_proto"]

ONNX_INSTALL = "pip install -c constraints.txt 'mxmixed[onnx]'"

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
        narrow = attrs.get("cast_narrow", "False") in ("True", "true", "1")
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


def class_aware_nms(graph):
    """Names of ``box_nms`` nodes that suppress per class, which MXNet's exporter cannot keep."""
    return [n["name"] for n in graph.nodes if n["op"] == "_contrib_box_nms"
            and int(n.get("attrs", {}).get("id_index", "-1")) != -1
            and n.get("attrs", {}).get("force_suppress", "False") not in ("True", "1")]


def _missing_converters(graph, registry):
    known = set()
    for ops in registry.values():
        known.update(ops)
    return sorted({n["op"] for n in graph.nodes if n["op"] != "null"} - known)


def to_proto(sym, params, input_name, input_dtype, input_shape):
    """Export one graph with MXNet's exporter; raw initializers, none of them a graph input."""
    onnx, _ = onnx_packages()
    from onnx import numpy_helper

    exporter = _exporter()
    graph = Graph(sym)
    missing = _missing_converters(graph, exporter.registry_)
    if missing:
        raise ConversionError("MXNet's ONNX exporter has no converter for %s: this model "
                              "cannot be exported to ONNX (see docs/onnx.md for the families "
                              "that export)" % ", ".join(missing))
    data_names = [n for n in sym.list_inputs() if n not in params]
    if data_names != [input_name]:
        raise ConversionError("ONNX export supports models with one data input; this one has "
                              "%s" % data_names)
    keep = mx.sym.load_json(sym.tojson(remove_amp_cast=False))
    keep.__class__ = _KeepCasts
    opset = onnx.defs.onnx_opset_version()
    shape = (1,) + tuple(input_shape)
    try:
        with warnings.catch_warnings(), _quiet_exporter(), _float16_constants_as_values():
            warnings.simplefilter("ignore", DeprecationWarning)
            graph_proto = exporter().create_onnx_graph_proto(
                keep, params, [shape], [_tensor_type(input_dtype)], opset_version=opset,
                dynamic=True, dynamic_input_shapes=[(None,) + tuple(input_shape)])
    except (AttributeError, AssertionError, KeyError, NotImplementedError, TypeError,
            ValueError, IndexError, mx.base.MXNetError, onnx.checker.ValidationError) as err:
        raise ConversionError("MXNet's ONNX exporter failed: %s" % one_line(err)) from None
    inits = {init.name for init in graph_proto.initializer}
    # MXNet writes float16 initializers as int32_data (4 bytes or more each): store raw data
    for k, init in enumerate(graph_proto.initializer):
        graph_proto.initializer[k].CopyFrom(
            numpy_helper.from_array(numpy_helper.to_array(init), init.name))
    inputs = [v for v in graph_proto.input if v.name not in inits]
    del graph_proto.input[:]
    graph_proto.input.extend(inputs)
    model = onnx.helper.make_model(graph_proto, producer_name="mxmixed")
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        raise ConversionError("the exported ONNX model fails onnx.checker: %s"
                              % one_line(err)) from None
    return model, opset
