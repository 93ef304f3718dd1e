"""Biased FullyConnected / Convolution / Deconvolution round twice, as MXNet's GPU kernels do.

On a GPU, MXNet 1.9.1 rounds the float16 GEMM or convolution result (float32 accumulation) to
float16 and then adds the bias in float16 arithmetic (``add_bias_kernel``, ``cudnnAddTensor``).
The emulation must give round16(float32(no-bias output) + float32(bias)) bit for bit, in the
NDArray wrappers, in hybridized blocks and in bound Symbols; the bias gradient stays the
reduction of the float16 output gradient.
"""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxmixed import emulation
from mxmixed.emulation import emulate_symbol

F16 = np.float16

# name: (op, attrs, data shape, weight shape, bias axis of the output)
CASES = {
    "fc": ("FullyConnected", dict(num_hidden=6), (4, 10), (6, 10), 1),
    "fc-3d": ("FullyConnected", dict(num_hidden=6, flatten=False), (2, 3, 10), (6, 10), 2),
    "conv2d": ("Convolution", dict(num_filter=5, kernel=(3, 3), pad=(1, 1)), (2, 3, 6, 6),
               (5, 3, 3, 3), 1),
    "conv1d": ("Convolution", dict(num_filter=5, kernel=(3,)), (2, 3, 9), (5, 3, 3), 1),
    "deconv2d": ("Deconvolution", dict(num_filter=4, kernel=(3, 3), stride=(2, 2), no_bias=False),
                 (2, 3, 4, 4), (3, 4, 3, 3), 1),
}


@pytest.fixture
def emu():
    with emulation.emulated():
        yield


def inputs(case, seed=0):
    _, _, xshape, wshape, _ = CASES[case]
    rng = np.random.RandomState(seed)
    x = rng.uniform(-2, 2, size=xshape).astype(F16)
    w = rng.uniform(-1, 1, size=wshape).astype(F16)
    b = rng.uniform(-3, 3, size=(wshape[0] if CASES[case][0] != "Deconvolution"
                                 else wshape[1],)).astype(F16)
    return x, w, b


def expected(case, x, w, b):
    """round16(float32(emulated no-bias output) + float32(bias))."""
    op, attrs, _, _, axis = CASES[case]
    nobias = getattr(mx.nd, op)(mx.nd.array(x, dtype=F16), mx.nd.array(w, dtype=F16), None,
                                **dict(attrs, no_bias=True)).asnumpy()
    assert nobias.dtype == F16
    shape = [1] * nobias.ndim
    shape[axis] = -1
    return (nobias.astype(np.float32) + b.astype(np.float32).reshape(shape)).astype(F16)


def same_bits(a, b):
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint16), b.view(np.uint16))


def biased_symbol(case):
    op, attrs, _, _, _ = CASES[case]
    return getattr(mx.sym, op)(mx.sym.var("data"), mx.sym.var("weight"), mx.sym.var("bias"),
                               name="layer", **attrs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ndarray_call_adds_the_bias_after_rounding(case, emu):
    op, attrs, _, _, _ = CASES[case]
    x, w, b = inputs(case)
    out = getattr(mx.nd, op)(mx.nd.array(x, dtype=F16), mx.nd.array(w, dtype=F16),
                             mx.nd.array(b, dtype=F16), **attrs).asnumpy()
    assert same_bits(out, expected(case, x, w, b))


@pytest.mark.parametrize("case", sorted(CASES))
def test_bound_symbol_adds_the_bias_after_rounding(case, emu):
    x, w, b = inputs(case, seed=1)
    sym = biased_symbol(case)
    args = {"data": mx.nd.array(x, dtype=F16), "weight": mx.nd.array(w, dtype=F16),
            "bias": mx.nd.array(b, dtype=F16)}
    exe = sym.bind(mx.cpu(), args)
    assert same_bits(exe.forward()[0].asnumpy(), expected(case, x, w, b))
    exe = sym.simple_bind(mx.cpu(), grad_req="null",
                          type_dict={k: F16 for k in args}, **{k: v.shape for k, v in args.items()})
    for name, value in args.items():
        exe.arg_dict[name][:] = value
    assert same_bits(exe.forward()[0].asnumpy(), expected(case, x, w, b))


def test_graph_pass_rounds_before_the_bias_add():
    sym = emulate_symbol(biased_symbol("conv2d"), {"data": F16, "weight": F16, "bias": F16})
    ops = [(n["op"], n["name"]) for n in __import__("json").loads(sym.tojson(remove_amp_cast=False))["nodes"]]
    names = [name for _, name in ops]
    assert names.index("layer") < names.index("layer_emu_round0") \
        < names.index("layer_emu_biasadd0") < names.index("layer_emu_out0")
    assert sym.list_inputs() == ["data", "weight", "bias"]


def _block(case):
    op, attrs, xshape, wshape, _ = CASES[case]
    if op == "FullyConnected":
        return gluon.nn.Dense(attrs["num_hidden"], flatten=attrs.get("flatten", True),
                              in_units=wshape[1])
    if op == "Convolution":
        conv = gluon.nn.Conv1D if len(attrs["kernel"]) == 1 else gluon.nn.Conv2D
        return conv(attrs["num_filter"], attrs["kernel"], padding=attrs.get("pad", 0),
                    in_channels=wshape[1])
    return gluon.nn.Conv2DTranspose(attrs["num_filter"], attrs["kernel"],
                                    strides=attrs["stride"], in_channels=wshape[0])


@pytest.mark.parametrize("case", ["fc", "fc-3d", "conv2d", "conv1d"])
def test_hybridized_block_adds_the_bias_after_rounding_and_trains(case, emu):
    x, w, b = inputs(case, seed=2)
    net = _block(case)
    net.initialize()
    net.cast("float16")
    net.weight.set_data(mx.nd.array(w, dtype=F16))
    net.bias.set_data(mx.nd.array(b, dtype=F16))
    net.hybridize()
    xs = mx.nd.array(x, dtype=F16)
    with autograd.record():
        out = net(xs)
    out.backward(mx.nd.ones(out.shape, dtype=F16))
    assert same_bits(out.asnumpy(), expected(case, x, w, b))
    axis = CASES[case][4]
    summed = np.ones(out.shape, np.float32).sum(axis=tuple(a for a in range(out.ndim) if a != axis))
    assert net.bias.grad().dtype == F16
    assert same_bits(net.bias.grad().asnumpy(), summed.astype(F16))


def test_hybridized_deconvolution_adds_the_bias_after_rounding(emu):
    x, w, b = inputs("deconv2d", seed=3)
    net = _block("deconv2d")
    net.initialize()
    net.cast("float16")
    net.weight.set_data(mx.nd.array(w, dtype=F16))
    net.bias.set_data(mx.nd.array(b, dtype=F16))
    net.hybridize()
    out = net(mx.nd.array(x, dtype=F16))
    assert same_bits(out.asnumpy(), expected("deconv2d", x, w, b))


def test_float32_layers_keep_one_rounding(emu):
    x, w, b = inputs("fc")
    out = mx.nd.FullyConnected(mx.nd.array(x), mx.nd.array(w), mx.nd.array(b), num_hidden=6)
    ref = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.asnumpy(), ref, rtol=1e-6, atol=1e-6)
