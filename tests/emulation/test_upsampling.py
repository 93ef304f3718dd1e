"""Float16 bilinear UpSampling runs under the emulation as on a GPU.

MXNet 1.9.1's CPU build refuses it ("FP16 gemm on cpu not implemented!"): bilinear UpSampling
is a Deconvolution with a learnable (bilinear-initialised) weight. On a GPU it runs that
deconvolution with float32 accumulation and rounds once to float16, without bias. The emulated
result must equal the float32 op on the same float16 operands, rounded once, imperatively,
hybridized and in a bound Symbol, with float16 gradients.
"""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxmixed import emulation

ARGS = dict(scale=2, num_filter=2, sample_type="bilinear", num_args=1)


def operands():
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.normal(size=(2, 2, 3, 5)), dtype="float16")
    w = mx.nd.array(rng.normal(size=(2, 1, 4, 4)), dtype="float16")
    return x, w


def rounded_once(x, w):
    return mx.nd.UpSampling(x.astype("float32"), w.astype("float32"), **ARGS).asnumpy().astype(
        np.float16)


def test_plain_cpu_refuses_float16_bilinear_upsampling():
    x, w = operands()
    with pytest.raises(mx.base.MXNetError):
        mx.nd.UpSampling(x, w, **ARGS).wait_to_read()


def test_emulated_bilinear_upsampling_rounds_once_with_float16_gradients():
    x, w = operands()
    x.attach_grad()
    w.attach_grad()
    with emulation.emulated():
        with autograd.record():
            out = mx.nd.UpSampling(x, w, **ARGS)
        out.backward(mx.nd.ones_like(out))
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.asnumpy(), rounded_once(x, w))
    assert x.grad.dtype == np.float16 and w.grad.dtype == np.float16
    assert np.isfinite(x.grad.asnumpy()).all() and np.abs(w.grad.asnumpy()).sum() > 0


def test_emulated_bilinear_upsampling_graph_and_hybrid_match_imperative():
    x, w = operands()
    data, weight = mx.sym.var("data"), mx.sym.var("weight")
    sym = mx.sym.UpSampling(data, weight, name="up", **ARGS)
    with emulation.emulated():
        exe = sym.simple_bind(mx.cpu(), data=x.shape, weight=w.shape,
                              type_dict={"data": "float16", "weight": "float16"})
        exe.arg_dict["data"][:] = x
        exe.arg_dict["weight"][:] = w
        bound = exe.forward(is_train=True)[0]
        exe.backward(mx.nd.ones_like(bound))
        block = gluon.SymbolBlock(sym, [data, weight])
        block.hybridize()
        hybrid = block(x, w)
    np.testing.assert_array_equal(bound.asnumpy(), rounded_once(x, w))
    np.testing.assert_array_equal(hybrid.asnumpy(), rounded_once(x, w))
    assert exe.grad_dict["data"].dtype == np.float16
