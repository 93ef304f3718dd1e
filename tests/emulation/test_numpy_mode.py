"""NumPy mode (``npx.set_np()``): emulated ops take and give ``mx.np.ndarray``.

A hybridized NumPy-mode block's outputs stay NumPy arrays when the emulation rewrites its graph,
and the ``npx`` functions that call an emulated operator (``npx.batch_dot`` is ``batch_dot``
under another name) are emulated as the ``mx.nd`` ones are. Inputs are multiples of 1/8 with
short sums, so every result is exact in float16 and the float64 NumPy reference is the answer.
"""
import numpy as onp
import pytest

import mxnet as mx
from mxnet import autograd, gluon, npx

from mxmixed import emulation
from mxmixed.emulation._wrappers import numpy_aliases

F16 = onp.float16


@pytest.fixture
def numpy_mode():
    with mx.util.np_shape(True), mx.util.np_array(True), emulation.emulated():
        yield


def _eighths(rng, *shape):
    return (rng.randint(-8, 9, size=shape) / 8.0).astype(F16)


class _BatchDot(gluon.HybridBlock):
    def hybrid_forward(self, F, a, b):
        return F.npx.batch_dot(a, b, transpose_b=True)


def test_hybridized_numpy_block_with_an_emulated_op_returns_numpy_arrays(numpy_mode):
    rng = onp.random.RandomState(0)
    a, b = _eighths(rng, 2, 3, 4), _eighths(rng, 2, 5, 4)
    net = _BatchDot()
    net.hybridize()
    out = net(mx.np.array(a, dtype=F16), mx.np.array(b, dtype=F16))
    assert type(out) is mx.np.ndarray and out.dtype == F16
    expected = onp.matmul(a.astype(onp.float64), b.astype(onp.float64).transpose(0, 2, 1))
    onp.testing.assert_array_equal(out.asnumpy(), expected.astype(F16))


# npx function name, its arguments' shapes, keyword arguments, float64 reference
CASES = {
    "batch_dot": ("batch_dot", [(2, 3, 4), (2, 4, 5)], {},
                  lambda a, b: onp.matmul(a, b)),
    "fully_connected": ("fully_connected", [(3, 4), (2, 4), (2,)], {"num_hidden": 2},
                        lambda x, w, bias: x @ w.T + bias),
    "convolution": ("convolution", [(1, 2, 3, 3), (1, 2, 3, 3)],
                    {"kernel": (3, 3), "num_filter": 1, "no_bias": True},
                    lambda x, w: (x * w).sum(axis=(1, 2, 3)).reshape(1, 1, 1, 1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_npx_function_of_an_emulated_op_runs_in_float16_with_numpy_arrays(numpy_mode, name):
    function, shapes, kwargs, reference = CASES[name]
    rng = onp.random.RandomState(1)
    values = [_eighths(rng, *shape) for shape in shapes]
    arrays = [mx.np.array(v, dtype=F16) for v in values]
    for array in arrays:
        array.attach_grad()
    with autograd.record():
        out = getattr(npx, function)(*arrays, **kwargs)  # looked up as a user calls it
    out.backward()
    assert type(out) is mx.np.ndarray and out.dtype == F16
    assert all(type(a.grad) is mx.np.ndarray and a.grad.dtype == F16 for a in arrays)
    expected = reference(*[v.astype(onp.float64) for v in values]).astype(F16)
    onp.testing.assert_array_equal(out.asnumpy(), expected)


def test_numpy_aliases_are_read_from_mxnet_operator_registry():
    aliases = numpy_aliases()
    assert "_npx_batch_dot" in aliases["batch_dot"]
    assert "_npx_fully_connected" in aliases["FullyConnected"]
    assert "_npx_convolution" in aliases["Convolution"]
    assert "_npi_clip" in aliases["clip"]
    assert "dot" not in aliases  # np.dot is an operator of its own, _np_dot


def test_non_hybridized_numpy_dense_in_float16_gives_numpy_output(numpy_mode):
    dense = gluon.nn.Dense(2, in_units=4)
    dense.initialize(mx.init.Constant(0.25))
    dense.cast("float16")
    x = mx.np.array(onp.full((3, 4), 0.5), dtype=F16)
    out = dense(x)
    assert type(out) is mx.np.ndarray and out.dtype == F16
    onp.testing.assert_array_equal(out.asnumpy(), onp.full((3, 2), 0.5, dtype=F16))  # bias: zeros


@pytest.mark.parametrize("call", ["gelu", "softrelu"])
def test_numpy_mode_activation_from_the_rounding_library_returns_numpy_arrays(call):
    """gelu and softrelu run as the rounding library's table op: its result keeps the type and
    the native float16 kernel's bits."""
    values = onp.array([-3.0, -0.5, 0.0, 0.375, 2.0, 7.5], dtype=F16)

    def run(x):
        if call == "gelu":
            return mx.npx.leaky_relu(x, act_type="gelu")
        return mx.npx.activation(x, act_type="softrelu")

    with mx.util.np_shape(True), mx.util.np_array(True):
        native = run(mx.np.array(values, dtype=F16)).asnumpy()
        with emulation.emulated():
            x = mx.np.array(values, dtype=F16)
            x.attach_grad()
            with autograd.record():
                y = run(x)
            y.backward()
            assert isinstance(y, mx.np.ndarray) and isinstance(x.grad, mx.np.ndarray)
            got = y.asnumpy()
    assert got.dtype == F16 and (got.view(onp.uint16) == native.view(onp.uint16)).all()
