"""A ``load_bfloat16`` block hybridized again (``hybridize(backend='MKLDNN')``, as a user does to
get oneDNN's fusions) stays the block load_bfloat16 built: its graph is not partitioned twice and
its static memory stays, unless the call asks otherwise (issue 56: the re-hybridized ResNet-50
ran 2.4x slower)."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from mxmixed import symbolic
from mxmixed._core.devices import bfloat16_support

RUNS, WHY = bfloat16_support()
pytestmark = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)


@pytest.fixture
def served(tmp_path):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
    net.initialize()
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(2, 8)))
    net(x)
    prefix = str(tmp_path / "m")
    net.export(prefix)
    symbolic.convert(*mx.model.load_checkpoint(prefix, 0), target_dtype="bfloat16").save(
        prefix + "-bf16")
    block = symbolic.load_bfloat16(prefix + "-bf16", 0)
    return block, x, block(x).asnumpy()


def _graph(block):
    return block._cached_graph[1].tojson()


def test_hybridizing_again_with_the_backend_keeps_the_graph_and_static_memory(served):
    block, x, before = served
    graph, flags = _graph(block), dict(block._flags)
    assert flags["static_alloc"] and flags["static_shape"]
    assert any(op.startswith("_sg_mkldnn") for op in graph.split('"op": "')[1:]
               for op in [op.split('"', 1)[0]])
    block.hybridize(backend="MKLDNN")
    after = block(x).asnumpy()
    assert _graph(block) == graph and dict(block._flags) == flags
    np.testing.assert_array_equal(after, before)


def test_a_users_explicit_flags_are_kept(served):
    block, x, before = served
    block.hybridize(backend="MKLDNN", static_alloc=False, static_shape=False)
    np.testing.assert_array_equal(block(x).asnumpy(), before)
    assert dict(block._flags)["static_alloc"] is False
