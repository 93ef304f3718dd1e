"""The conversion reads a graph's boolean attributes as MXNet does (``_core/mxbool``): every
spelling MXNet accepts, in any case, and an ``optional<bool>``'s spaces.

Before, ``SoftmaxOutput(multi_output='TRUE')`` lost its per-position softmax in the inference
graph, a ``box_nms`` with ``force_suppress='true'`` was taken for a per-class NMS that ONNX
cannot export, and a softmax with ``use_length=' True'`` kept its length in a bfloat16
conversion.
"""
import mxnet as mx
import numpy as np
import pytest

from mxmixed._core.graph import as_graph
from mxmixed.symbolic._inference import inference_graph
from mxmixed.symbolic._onnx_graph import class_aware_nms
from mxmixed.symbolic._rewrite import mask_softmax


def _forward(sym, **arrays):
    return sym.bind(mx.cpu(), {k: mx.nd.array(v) for k, v in arrays.items()},
                    grad_req="null").forward(is_train=False)[0].asnumpy()


@pytest.mark.parametrize("text", ["1", "true", "True", "TRUE"])
def test_softmax_output_multi_output_in_any_spelling_keeps_its_softmax_per_position(text):
    x = np.random.RandomState(0).normal(0, 2, (2, 3, 4)).astype(np.float32)
    sym = mx.sym.SoftmaxOutput(mx.sym.var("data"), multi_output=text, name="out")
    ops = [n.op for n in as_graph(inference_graph(sym)).nodes]
    assert "reshape_like" not in ops
    want = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)  # over the classes, axis 1
    np.testing.assert_allclose(_forward(inference_graph(sym), data=x), want, rtol=1e-5)


@pytest.mark.parametrize("text, per_class", [("true", False), ("TRUE", False), ("1", False),
                                             ("False", True), ("0", True)])
def test_box_nms_force_suppress_in_any_spelling_is_read_as_mxnet_reads_it(text, per_class):
    sym = mx.sym.contrib.box_nms(mx.sym.var("boxes"), id_index=0, force_suppress=text,
                                 name="nms")
    assert class_aware_nms(as_graph(sym)) == (["nms"] if per_class else [])


@pytest.mark.parametrize("text", [" True", "TRUE", "1 "])
def test_a_masked_softmax_in_any_spelling_mxnet_takes_is_rewritten(text):
    sym = mx.sym.softmax(mx.sym.var("x"), mx.sym.var("length"), axis=-1, use_length=text,
                         name="att")
    assert mask_softmax(sym)[1] == ["att"]
