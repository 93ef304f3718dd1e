"""Float16 Deconvolution trains under the emulation with oneDNN on, in every API.

MXNet 1.9.1's oneDNN Deconvolution cannot run its backward pass when its weight is computed
(the emulation's cast of the float16 weight is), so the emulation computes a float16
Deconvolution as a Convolution of the zero-stuffed input with the flipped, channel-swapped
weight (``mxmixed/emulation/_deconv.py``). These tests check that formulation against MXNet's
own float32 Deconvolution (forward and both gradients, many attribute sets), and that a float16
Deconvolution then trains through ``simple_bind``, Gluon imperative and hybridized blocks,
keeping the GPU's two roundings of a biased layer.
"""
import itertools

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from mxmixed import emulation
from mxmixed.emulation._deconv import conv_form_applies, deconvolution_as_convolution

F16 = np.float16


def _attr_sets():
    sets = []
    for kernel, stride, pad, adj, dilate, group in itertools.product(
            [(3, 3), (4, 4), (1, 1)], [(1, 1), (2, 2), (3, 2)], [(0, 0), (1, 1), (2, 0)],
            [(0, 0), (1, 1)], [(1, 1), (2, 2)], [1, 3]):
        if any(a >= s for a, s in zip(adj, stride)):
            continue  # MXNet rejects adj >= stride
        sets.append(dict(kernel=kernel, stride=stride, pad=pad, adj=adj, dilate=dilate,
                         num_group=group))
    sets.append(dict(kernel=(3,), stride=(2,), pad=(1,), adj=(1,), dilate=(1,), num_group=1))
    sets.append(dict(kernel=(2, 3, 3), stride=(1, 2, 2), pad=(0, 1, 1), adj=(0, 1, 0),
                     dilate=(1, 1, 1), num_group=1))
    return sets


def _ids(attrs):
    return "-".join("%s%s" % (k[:2], "x".join(map(str, v)) if isinstance(v, tuple) else v)
                    for k, v in attrs.items())


@pytest.mark.parametrize("attrs", _attr_sets(), ids=_ids)
def test_convolution_form_equals_mxnet_deconvolution_in_float32(attrs):
    n = len(attrs["kernel"])
    group = attrs["num_group"]
    filters = 6 if group > 1 else 4
    data_shape = (2, 6, 5, 4, 3)[:2 + n]
    weight_shape = (6, filters // group) + attrs["kernel"]
    attrs = dict(attrs, num_filter=filters)
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.uniform(-1, 1, data_shape))
    w = mx.nd.array(rng.uniform(-1, 1, weight_shape))
    results = []
    for compute in (lambda a, b: mx.nd.Deconvolution(a, b, no_bias=True, **attrs),
                    lambda a, b: deconvolution_as_convolution(mx.nd, a, b, attrs)):
        a, b = x.copy(), w.copy()
        a.attach_grad()
        b.attach_grad()
        with autograd.record():
            y = compute(a, b)
        head = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, y.shape))
        y.backward(head)
        results.append([y.asnumpy(), a.grad.asnumpy(), b.grad.asnumpy()])
    for mine, theirs in zip(results[1], results[0]):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


def test_target_shape_keeps_the_native_op():
    assert conv_form_applies({"kernel": "(3, 3)", "stride": "(2, 2)"})
    assert not conv_form_applies({"kernel": "(3, 3)", "target_shape": "(8, 8)"})


ATTRS = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=4)


def _values(seed=0):
    rng = np.random.RandomState(seed)
    return (rng.uniform(-1, 1, (2, 3, 5, 5)).astype(F16),
            rng.uniform(-0.5, 0.5, (3, 4, 4, 4)).astype(F16),
            rng.uniform(-1, 1, (4,)).astype(F16))


def _float32_reference(x, w, b):
    """Float32 MXNet on the float16 values: output (GPU's two roundings) and gradients."""
    args = [mx.nd.array(v.astype(np.float32)) for v in (x, w, b)]
    for a in args:
        a.attach_grad()
    with autograd.record():
        nobias = mx.nd.Deconvolution(args[0], args[1], no_bias=True, **ATTRS)
        y = nobias + args[2].reshape((-1, 1, 1))
    y.backward(mx.nd.ones_like(y))
    rounded = nobias.asnumpy().astype(F16).astype(np.float32)
    out = (rounded + b.astype(np.float32).reshape((-1, 1, 1))).astype(F16)
    return out, [a.grad.asnumpy() for a in args]


def _check(out, grads, x, w, b):
    want, want_grads = _float32_reference(x, w, b)
    assert out.dtype == F16
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))
    assert len(grads) in (2, 3)
    for got, ref in zip(grads, want_grads):
        assert got.dtype == F16 and np.isfinite(got).all()
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("no_bias", [False, True], ids=["bias", "no_bias"])
def test_symbol_executor_trains_float16_deconvolution(no_bias):
    x, w, b = _values()
    if no_bias:
        b = np.zeros_like(b)
    names = ("data", "up_weight") + (() if no_bias else ("up_bias",))
    sym = mx.sym.Deconvolution(mx.sym.var("data"), name="up", no_bias=no_bias, **ATTRS)
    with emulation.emulated():
        exe = sym.simple_bind(mx.cpu(), type_dict={"data": F16}, data=x.shape)
        for name, value in zip(names, (x, w, b)):
            exe.arg_dict[name][:] = value
        out = exe.forward(is_train=True)[0]
        exe.backward(mx.nd.ones_like(out))
        grads = [exe.grad_dict[n].asnumpy() for n in names]
        out = out.asnumpy()
    _check(out, grads, x, w, b)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_gluon_conv2d_transpose_trains_in_float16(hybridize):
    x, w, b = _values(seed=2)
    net = gluon.nn.Conv2DTranspose(4, 4, strides=2, padding=1, in_channels=3)
    net.initialize()
    net.cast("float16")
    net.weight.set_data(mx.nd.array(w, dtype=F16))
    net.bias.set_data(mx.nd.array(b, dtype=F16))
    if hybridize:
        net.hybridize()
    data = mx.nd.array(x, dtype=F16)
    data.attach_grad()
    with emulation.emulated():
        with autograd.record():
            out = net(data)
        out.backward(mx.nd.ones_like(out))
        grads = [data.grad.asnumpy(), net.weight.grad().asnumpy(), net.bias.grad().asnumpy()]
        out = out.asnumpy()
    _check(out, grads, x, w, b)
