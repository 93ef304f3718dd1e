"""bfloat16 AMP keeps float32 the ops whose CPU bfloat16 kernel is slower than float32.

AMP's bfloat16 lists leave ``clip`` (MobileNet v2's ReLU6), ``relu``, elementwise arithmetic and
the comparisons to their inputs' dtype; on MXNet 1.9.1's CPU they then run its generic bfloat16
kernels, measured 2-28x slower than float32 (``benchmarks/bfloat16_ops.py``). mxmixed's bfloat16
AMP adds them (``SLOW_BFLOAT16_CPU_OPS``, under every name) to the float32 list, AMP's or the
caller's, unless the caller names them in ``target_precision_ops``. What is checked here is where
each op computes (the dtypes of the graph a hybridized block caches), never a time.
"""
import json
import re

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon
from mxnet.contrib.amp.lists import symbol_bf16

import mxmixed
from mxmixed._core.convert import NO_BFLOAT16_CPU_OPS, SLOW_BFLOAT16_CPU_OPS, op_names
from mxmixed._core.devices import bfloat16_support
from mxmixed._core.dtypes import BFLOAT16

RUNS, WHY = bfloat16_support()
needs_bfloat16 = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)


class _Relu6Block(gluon.HybridBlock):
    """Two convolutions, a ReLU6 (``F.clip``, as gluoncv's MobileNet v2) after the first and a
    difference of both (``a - b``: the op's alias ``_Minus``)."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.conv1 = gluon.nn.Conv2D(4, 3, padding=1, in_channels=2)
            self.conv2 = gluon.nn.Conv2D(4, 3, padding=1, in_channels=4)

    def hybrid_forward(self, F, x):
        a = F.clip(self.conv1(x), 0, 6)
        return self.conv2(a) - a


def _computed_dtypes(**scope):
    """{op: set of output dtypes} of the graph the block cached under bfloat16 AMP."""
    x = mx.nd.random.uniform(shape=(2, 2, 6, 6))
    with mxmixed.amp_scope(target_dtype="bfloat16", **scope):
        net = _Relu6Block()
        net.initialize(mx.init.Xavier())
        net.hybridize()
        out = net(x)
        out.wait_to_read()
    inputs, graph = net._cached_graph
    internals = graph.get_internals()
    _, types, _ = internals.infer_type(**{v.name: "float32" for v in inputs})
    ops = {node["name"]: node["op"] for node in json.loads(internals.tojson())["nodes"]}
    found = {}
    for name, dtype in zip(internals.list_outputs(), types):
        op = ops.get(re.sub(r"_output\d*$", "", name))
        found.setdefault(op, set()).add(np.dtype(dtype))
    return found, out


@needs_bfloat16
def test_bfloat16_amp_runs_clip_and_a_subtraction_in_float32_between_bfloat16_convolutions():
    found, out = _computed_dtypes()
    assert found["Convolution"] == {BFLOAT16}
    assert found["clip"] == {np.dtype(np.float32)}
    assert found["elemwise_sub"] == {np.dtype(np.float32)}
    assert np.dtype(out.dtype) == np.float32 and np.isfinite(out.asnumpy()).all()


@needs_bfloat16
def test_bfloat16_amp_adds_the_slow_ops_to_a_float32_list_the_caller_gives():
    found, _ = _computed_dtypes(fp32_ops=["softmax"])
    assert found["Convolution"] == {BFLOAT16}
    assert found["clip"] == {np.dtype(np.float32)}


@needs_bfloat16
def test_bfloat16_amp_leaves_clip_in_bfloat16_when_the_caller_names_it_a_bfloat16_op():
    found, _ = _computed_dtypes(target_precision_ops=list(symbol_bf16.BF16_FUNCS) + ["clip"])
    assert found["clip"] == {BFLOAT16}
    assert found["elemwise_sub"] == {np.dtype(np.float32)}


def test_slow_ops_are_registered_and_in_no_other_float32_list():
    assert len(set(SLOW_BFLOAT16_CPU_OPS)) == len(SLOW_BFLOAT16_CPU_OPS)
    assert set(op_names(SLOW_BFLOAT16_CPU_OPS)) >= set(SLOW_BFLOAT16_CPU_OPS)
    assert not set(SLOW_BFLOAT16_CPU_OPS) & set(NO_BFLOAT16_CPU_OPS)
    assert not set(SLOW_BFLOAT16_CPU_OPS) & set(symbol_bf16.FP32_FUNCS)
    assert not set(SLOW_BFLOAT16_CPU_OPS) & set(symbol_bf16.BF16_FUNCS)


def test_op_names_finds_the_aliases_amp_wraps_one_by_one():
    names = op_names(("elemwise_sub", "clip"))
    assert names[:2] == ("elemwise_sub", "clip")
    assert {"_Minus", "_minus", "_sub"} <= set(names)
    assert "elemwise_add" not in names
