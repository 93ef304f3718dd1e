"""LastArrays keeps what was read of the last arrays while the same NDArray objects come back,
and reads again for any other object; EmulatedCachedOp and the overflow check rely on it."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from mxmixed import emulation
from mxmixed._core.dtypes import LastArrays


def _counting():
    calls = []

    def find(arrays):
        calls.append(len(arrays))
        return tuple(a.dtype for a in arrays)
    return calls, find


def test_the_same_objects_are_read_once():
    calls, find = _counting()
    last = LastArrays()
    arrays = [mx.nd.zeros((2,)), mx.nd.zeros((3,), dtype="float16")]
    assert last.get(arrays, find) == (np.float32, np.float16)
    assert last.get(list(arrays), find) == (np.float32, np.float16)
    assert calls == [2]


def test_another_object_equal_in_value_is_read_again():
    calls, find = _counting()
    last = LastArrays()
    first = [mx.nd.zeros((2,))]
    last.get(first, find)
    assert last.get([first[0].astype("float16")], find) == (np.float16,)
    assert last.get([first[0], first[0]], find) == (np.float32, np.float32)
    assert last.get([], find) == ()
    assert calls == [1, 1, 2, 0]


def test_a_hybridized_net_cast_to_float16_gets_its_emulated_graph():
    # net.cast replaces every parameter array: the CachedOp sees new objects and new dtypes
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=3), gluon.nn.Dense(2, in_units=4))
    net.initialize()
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(0).normal(size=(2, 3)))
    with emulation.emulated():
        float32 = net(x).asnumpy()
        net.cast("float16")
        with autograd.record():
            out = net(x.astype("float16"))
        out.backward()
        assert out.dtype == np.float16
        np.testing.assert_allclose(out.asnumpy().astype(np.float32), float32, rtol=2e-2,
                                   atol=2e-3)
        assert net[0].weight.grad().dtype == np.float16
