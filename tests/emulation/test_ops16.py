"""The rounding library's float32 computes of float16 ops give MXNet's own bits.

The activations the GPU computes with MXNet's ``half_t`` templates (gelu, softrelu, softsign:
``_mxmixed_act16``) are checked on every float16 input, forward and backward, against MXNet's
native float16 kernel, the same template; the bias add (``_mxmixed_bias_add``) against the
``broadcast_add`` it replaces in a biased FullyConnected (the last axis) and in biased
convolutions (the channel axis), gradients included.
"""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd

from mxmixed import emulation
from mxmixed.emulation import _graphpass, _wrappers, emulate_symbol, rewritten_op_types
from mxmixed.emulation._ops import LIBRARY_OP
from mxmixed.emulation._round16 import BIAS_ADD_OP, round16_op

from conftest import run_python

F16 = np.float16
EVERY_FLOAT16 = np.arange(1 << 16, dtype=np.uint16).view(F16)

pytestmark = pytest.mark.skipif(round16_op() is None, reason="no rounding library here")


def _heads():
    rng = np.random.RandomState(0)
    return {"ones": np.ones(1 << 16, F16), "normal": rng.randn(1 << 16).astype(F16),
            "large": (rng.randn(1 << 16) * 3000).astype(F16)}


ACTIVATIONS = {"gelu": "LeakyReLU", "softrelu": "Activation", "softsign": "Activation"}


def _activation_bits(act, x, head, hybridized):
    """Output and data-gradient bits of a float16 activation, imperative or bound."""
    if hybridized:
        sym = getattr(mx.sym, ACTIVATIONS[act])(mx.sym.var("data"), act_type=act)
        exe = sym.simple_bind(mx.cpu(), type_dict={"data": F16}, data=x.shape)
        exe.forward(is_train=True, data=mx.nd.array(x, dtype=F16))
        exe.backward(mx.nd.array(head, dtype=F16))
        out, grad = exe.outputs[0], exe.grad_dict["data"]
    else:
        data = mx.nd.array(x, dtype=F16)
        data.attach_grad()
        with autograd.record():
            out = getattr(mx.nd, ACTIVATIONS[act])(data, act_type=act)
        out.backward(mx.nd.array(head, dtype=F16))
        grad = data.grad
    assert out.dtype == grad.dtype == F16
    return out.asnumpy().view(np.uint16), grad.asnumpy().view(np.uint16)


@pytest.mark.parametrize("hybridized", [False, True])
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_activation_matches_the_native_float16_kernel_on_every_float16_input(act, hybridized):
    for name, head in _heads().items():
        native = _activation_bits(act, EVERY_FLOAT16, head, hybridized)
        with emulation.emulated():
            emulated = _activation_bits(act, EVERY_FLOAT16, head, hybridized)
        for what, a, b in zip(("output", "gradient"), native, emulated):
            differ = np.flatnonzero(a != b)
            assert differ.size == 0, (name, what, EVERY_FLOAT16[differ[:5]])


def test_library_computes_gelu_softrelu_softsign_and_other_leaky_relus_stay_native():
    data = mx.sym.var("data")
    for act, op in ACTIVATIONS.items():
        sym = getattr(mx.sym, op)(data, act_type=act)
        assert LIBRARY_OP in emulate_symbol(sym, {"data": F16}).tojson(), act
        assert rewritten_op_types(emulate_symbol(sym, {"data": F16})) == {op}, act
    relu = mx.sym.Activation(data, act_type="relu")  # cuDNN on the GPU: MXNet's float32 kernel
    assert LIBRARY_OP not in emulate_symbol(relu, {"data": F16}).tojson()
    leaky = mx.sym.LeakyReLU(data, act_type="leaky", slope=0.1)
    assert emulate_symbol(leaky, {"data": F16}) is leaky
    x = mx.nd.array(EVERY_FLOAT16[:64], dtype=F16)
    x.attach_grad()
    with emulation.emulated(), autograd.record():
        out = mx.nd.LeakyReLU(x, act_type="gelu")
    assert LIBRARY_OP in autograd.get_symbol(out).tojson()


# A biased float16 op for each axis a bias is added on: (maker of F, data, weight, bias;
# argument shapes).
BIASED = {
    "dense": (lambda F, d, w, b: F.FullyConnected(d, w, b, num_hidden=70, flatten=False),
              {"data": (3, 40, 24), "weight": (70, 24), "bias": (70,)}),
    "conv2d": (lambda F, d, w, b: F.Convolution(d, w, b, kernel=(3, 3), pad=(1, 1), num_filter=6),
               {"data": (3, 5, 9, 7), "weight": (6, 5, 3, 3), "bias": (6,)}),
    "conv1d": (lambda F, d, w, b: F.Convolution(d, w, b, kernel=(3,), pad=(1,), num_filter=6),
               {"data": (4, 5, 11), "weight": (6, 5, 3), "bias": (6,)}),
    "deconv2d": (lambda F, d, w, b: F.Deconvolution(d, w, b, kernel=(2, 2), stride=(2, 2),
                                                    num_filter=6, no_bias=False),
                 {"data": (3, 5, 4, 4), "weight": (5, 6, 2, 2), "bias": (6,)}),
}


def _head(rng, shape):
    """An output gradient of mixed magnitudes, with -0s, and large terms next to small ones."""
    head = (rng.randn(*shape) * 10.0 ** rng.randint(-7, 5, size=shape)).astype(F16)
    head.flat[::7] = -0.0
    head.flat[::50] = 60000
    return head


def _biased_bits(kind, hybrid):
    """Whether the emulated op adds its bias with the library op, and the bits of its output
    and gradients, in a bound graph (``hybrid``) or imperatively."""
    make, shapes = BIASED[kind]
    rng = np.random.RandomState(2)
    values = {n: mx.nd.array(rng.randn(*shape), dtype=F16) for n, shape in shapes.items()}
    with emulation.emulated():
        if hybrid:
            sym = make(mx.sym, *[mx.sym.var(n) for n in shapes])
            routed = BIAS_ADD_OP in emulate_symbol(sym, {n: F16 for n in shapes}).tojson()
            exe = sym.simple_bind(mx.cpu(), type_dict={n: F16 for n in shapes}, **shapes)
            for name in shapes:
                exe.arg_dict[name][:] = values[name]
            out = exe.forward(is_train=True)[0]
            exe.backward(mx.nd.array(_head(rng, out.shape), dtype=F16))
            grads = [exe.grad_dict[n] for n in shapes]
        else:
            for array in values.values():
                array.attach_grad()
            with autograd.record():
                out = make(mx.nd, *[values[n] for n in shapes])
            routed = BIAS_ADD_OP in autograd.get_symbol(out).tojson()
            out.backward(mx.nd.array(_head(rng, out.shape), dtype=F16))
            grads = [values[n].grad for n in shapes]
        return routed, [a.asnumpy().view(np.uint16) for a in [out] + grads]


@pytest.mark.parametrize("hybrid", [True, False], ids=["graph", "imperative"])
@pytest.mark.parametrize("kind", sorted(BIASED))
def test_bias_add_op_gives_broadcast_adds_bits(monkeypatch, kind, hybrid):
    routed, with_op = _biased_bits(kind, hybrid)
    assert routed
    monkeypatch.setattr(_graphpass, "library_op", lambda name: None if name == BIAS_ADD_OP
                        else name)
    monkeypatch.setattr(_wrappers, "library_op", lambda name: None if name == BIAS_ADD_OP
                        else name)
    routed, with_broadcast_add = _biased_bits(kind, hybrid)
    assert not routed
    for what, a, b in zip(("output", "data", "weight", "bias"), with_op, with_broadcast_add):
        np.testing.assert_array_equal(a, b, err_msg="%s %s" % (kind, what))


@pytest.mark.slow
@pytest.mark.parametrize("act_type", ["gelu", "softrelu"])
def test_building_the_tables_leaves_the_callers_errno_alone(act_type):
    """The tables are built in the caller's thread with expf/erff, which set ERANGE where they
    overflow; MXNet's parameter parser then refused the next "inf" it read (GluonNLP's
    ``x != inf`` in clip_grad_global_norm failed with "Out of range value for scalar")."""
    op = "LeakyReLU" if act_type == "gelu" else "Activation"
    proc = run_python(
        "import mxnet as mx, numpy as np\n"
        "from mxmixed import emulation\n"
        "a = mx.nd.array([1.0])\n"
        "with emulation.emulated():\n"
        "    y = mx.nd.%s(mx.nd.array([-100.0, 30.0], dtype='float16'), act_type='%s')\n"
        "    finite = a != np.inf\n"
        "print('FINITE', finite.asnumpy()[0], y.dtype)\n" % (op, act_type))
    assert "FINITE 1.0 <class 'numpy.float16'>" in proc.stdout, proc.stderr[-2000:]
