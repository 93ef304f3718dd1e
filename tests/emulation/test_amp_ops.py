"""AMP's own cast ops on float16 CPU inputs under emulation, with the GPU's cast semantics.

MXNet 1.9.1's oneDNN ``amp_multicast`` has no float16 guard ("unknown type for MKLDNN :2").
gluoncv calls ``F.amp_multicast`` directly and AMP inserts it into hybridized graphs, so under
emulation it must work imperatively, in hybridized blocks and in bound Symbols, and give what
a GPU gives: each output is its input cast to the common dtype (exact, or one rounding).
"""
import itertools

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxmixed import emulation

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
PAIRS = list(itertools.product([F16, F32], repeat=2))


@pytest.fixture
def emu():
    with emulation.emulated():
        yield


def values(dtype, seed):
    # values that float16 cannot all hold: the narrowing cast must round (and overflow)
    rng = np.random.RandomState(seed)
    x = rng.uniform(-7e4, 7e4, size=(3, 5)) * 10.0 ** rng.randint(-9, 1, size=(3, 5))
    return x.astype(dtype)


def gpu_multicast(arrays, cast_narrow):
    """What the GPU computes: every float input cast to the widest (or narrowest) dtype."""
    dtypes = {a.dtype for a in arrays}
    target = (F16 if F16 in dtypes else F32) if cast_narrow else (F32 if F32 in dtypes else F16)
    return [a.astype(target) for a in arrays]


def same_bits(a, b):
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("cast_narrow", [False, True])
@pytest.mark.parametrize("dtypes", PAIRS, ids=lambda d: "%s-%s" % (d[0].name, d[1].name))
def test_ndarray_amp_multicast_casts_as_the_gpu(dtypes, cast_narrow, emu):
    arrays = [values(d, k) for k, d in enumerate(dtypes)]
    outs = mx.nd.amp_multicast(*[mx.nd.array(a, dtype=a.dtype) for a in arrays],
                               num_outputs=2, cast_narrow=cast_narrow)
    for out, ref in zip(outs, gpu_multicast(arrays, cast_narrow)):
        assert same_bits(out.asnumpy(), ref)


class Decoder(gluon.HybridBlock):
    """The pattern of gluoncv's NormalizedBoxCenterDecoder: multicast, then arithmetic."""

    def __init__(self, cast_narrow=False, **kwargs):
        super().__init__(**kwargs)
        self.cast_narrow = cast_narrow

    def hybrid_forward(self, F, x, anchors):
        a, b = F.amp_multicast(x, anchors, num_outputs=2, cast_narrow=self.cast_narrow)
        return F.broadcast_mul(a, b)


@pytest.mark.parametrize("cast_narrow", [False, True])
def test_hybridized_amp_multicast_runs_and_trains(cast_narrow, emu):
    x = mx.nd.array(values(F16, 0) / 1e3, dtype=F16)
    anchors = mx.nd.array(values(F32, 1) / 1e3, dtype=F32)
    net = Decoder(cast_narrow)
    net.hybridize()
    x.attach_grad()
    anchors.attach_grad()
    with autograd.record():
        out = net(x, anchors)
    out.backward()
    a, b = gpu_multicast([x.asnumpy(), anchors.asnumpy()], cast_narrow)
    expected = (a * b) if a.dtype == F32 else (a.astype(F32) * b.astype(F32)).astype(F16)
    assert same_bits(out.asnumpy(), expected)
    assert x.grad.dtype == F16 and anchors.grad.dtype == F32
    assert np.isfinite(x.grad.asnumpy().astype(F32)).all()


def test_bound_symbol_with_amp_multicast_runs(emu):
    x, y = mx.sym.var("x"), mx.sym.var("y")
    sym = mx.sym.amp_multicast(x, y, num_outputs=2)
    sym = mx.sym.Group([sym[0] + 0, sym[1] + 0])
    args = {"x": mx.nd.array(values(F16, 2), dtype=F16), "y": mx.nd.array(values(F16, 3), dtype=F16)}
    outs = sym.bind(mx.cpu(), args).forward()
    for out, name in zip(outs, "xy"):
        assert same_bits(out.asnumpy(), args[name].asnumpy())
    exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict={"x": F16, "y": F32},
                          x=(3, 5), y=(3, 5))
    exe.arg_dict["x"][:] = args["x"]
    exe.arg_dict["y"][:] = values(F32, 4)
    outs = exe.forward()
    assert outs[0].dtype == F32
    assert same_bits(outs[0].asnumpy(), args["x"].asnumpy().astype(F32))


@pytest.mark.parametrize("source, target", [(s, t) for s, t in itertools.product(
    ["float16", "float32", "uint8", "int8", "int32"], ["float16", "float32"])])
def test_amp_cast_handles_every_pair_amp_inserts(source, target, emu):
    # the oneDNN amp_cast kernel fails only on float64 / int64, which AMP never feeds it;
    # like on a GPU, amp_cast casts floating inputs only and passes integers through
    x = np.arange(-3, 9).astype(source)
    out = mx.nd.amp_cast(mx.nd.array(x, dtype=source), dtype=target).asnumpy()
    assert same_bits(out, x.astype(target) if source.startswith("float") else x)


def test_emulation_off_leaves_amp_multicast_alone():
    emulation.disable()
    x = mx.nd.ones((2,), dtype=F32)
    outs = mx.nd.amp_multicast(x, x, num_outputs=2)
    assert all(o.dtype == F32 for o in outs)
