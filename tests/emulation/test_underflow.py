"""Gradient underflow happens under emulation exactly where float16 puts it, and loss scaling cures it.

A gradient of 1e-8 is non-zero in float32 but below half of float16's smallest subnormal
(2**-25, about 3e-8), so float16 rounds it to zero; with a loss scale of 1024 it survives.
"""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from mxmixed import emulation

TINY = 1e-8


def _weight_grad(dtype, loss_scale, emulate=True):
    net = gluon.nn.Dense(1, use_bias=False, in_units=4)
    net.initialize(mx.init.One())
    net.cast(dtype)
    x = mx.nd.ones((1, 4), dtype=dtype)
    with emulation.emulated() if emulate else _nothing():
        with autograd.record():
            # As under AMP, the loss is float32; the tiny gradient meets float16 at the cast.
            loss = (net(x).astype("float32") * TINY).sum() * loss_scale
        loss.backward()
        grad = net.weight.grad().astype("float32").asnumpy() / loss_scale
    return grad


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_float32_keeps_a_1e_minus_8_gradient():
    grad = _weight_grad("float32", 1.0, emulate=False)
    np.testing.assert_allclose(grad, TINY, rtol=1e-6)


def test_emulated_float16_flushes_a_1e_minus_8_gradient_to_zero():
    assert TINY < 2.0 ** -25
    grad = _weight_grad("float16", 1.0)
    assert np.all(grad == 0.0)


def test_loss_scale_1024_rescues_the_1e_minus_8_gradient():
    grad = _weight_grad("float16", 1024.0)
    assert np.all(grad > 0)
    # float16 keeps 1024e-8 to within its subnormal spacing 2**-24.
    np.testing.assert_allclose(grad, TINY, atol=2.0 ** -24 / 1024)


def test_values_between_2_pow_minus_25_and_2_pow_minus_24_round_up_through_emulated_ops():
    values = np.array([2.0 ** -25 * 1.01, 2.0 ** -24 * 0.9, 2.0 ** -25], dtype=np.float32)
    w = mx.nd.ones((1, 1), dtype="float16")
    with emulation.emulated():
        out = mx.nd.FullyConnected(mx.nd.array(values[:, None]).astype("float32"),
                                   w.astype("float32"), no_bias=True, num_hidden=1)
        rounded = mx.nd.amp_cast(out, dtype="float16").asnumpy().ravel()
    assert rounded[0] == np.float16(2.0 ** -24)
    assert rounded[1] == np.float16(2.0 ** -24)
    assert rounded[2] == 0.0  # exactly half the smallest subnormal: ties to even, i.e. zero
