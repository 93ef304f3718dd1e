"""The float32 carry drops the rounding after a relu that reads a rounding, and keeps the bits.

Between two emulated ops the carry rounds every float16 value once. A relu of a float16 value
is float16 already, and going back the rounding before it rounds its gradient
(round(mask * g) = mask * round(g)), so the rounding after it is dropped where each rounding has
the relu as its one neighbour. Every graph here is run carried and on the cast pairs
(``MXMIXED_EMULATION_CARRY=0``), and every output and gradient must have the same bytes;
the cases where a neighbour would add an unrounded gradient must keep their rounding.
"""
import json

import mxnet as mx
import numpy as np
import pytest

from mxmixed import emulation

F16 = np.float16
BN = ("gamma", "beta", "moving_mean", "moving_var")


def conv(x, name, kernel=3):
    return mx.sym.Convolution(x, kernel=(kernel, kernel), pad=(kernel // 2, kernel // 2),
                              num_filter=4, name=name)


def conv_bn(x, name):
    return mx.sym.BatchNorm(conv(x, name), fix_gamma=False, name=name + "_bn")


def graphs():
    data = mx.sym.var("data")
    relu = lambda x, name="relu": mx.sym.Activation(x, act_type="relu", name=name)  # noqa: E731
    bn = conv_bn(data, "c1")
    shared = relu(bn)
    return {
        # conv -> bn -> relu -> conv: the relu's rounding goes
        "chain": (conv(relu(bn), "c2"), True),
        # the relu's output read by two convolutions: its rounding goes, their widenings stay
        "relu read twice": (mx.sym.elemwise_add(conv(shared, "c2"), conv(shared, "c3", 1),
                                                name="add"), True),
        # the bn output is read by the relu and by an add: the relu's rounding stays
        "bn read twice": (mx.sym.elemwise_add(conv(relu(bn), "c2"), bn, name="add"), False),
        # tanh is not exact on float16 values: its rounding stays
        "tanh": (conv(mx.sym.Activation(bn, act_type="tanh", name="relu"), "c2"), False),
        # a relu of a relu: both roundings go (the gradient meets the bn's rounding after
        # two masks)
        "relu of relu": (conv(relu(relu(bn, "relu0")), "c2"), True),
        # a ResNet block: relu(bn + skip), the skip a rounding read by the add only
        "residual": (conv(relu(mx.sym.elemwise_add(conv_bn(relu(bn, "relu0"), "c2"), bn,
                                                   name="add")), "c3"), True),
    }


def types_of(sym):
    types = {}
    for name in sym.list_inputs():
        types[name] = np.float32 if name.endswith(BN) else F16
    return types


def run(sym):
    types = types_of(sym)
    emulated = emulation.emulate_symbol(sym, types)
    exe = emulated.simple_bind(mx.cpu(), data=(2, 3, 8, 8), type_dict=types)
    rng = np.random.RandomState(5)
    for name, array in exe.arg_dict.items():
        if name.endswith("moving_var"):
            array[:] = 1
        else:
            array[:] = (rng.standard_normal(array.shape) * 2).astype(array.dtype)
    out = exe.forward(is_train=True)[0]
    exe.backward([mx.nd.array(rng.standard_normal(out.shape) * 100, dtype=out.dtype)])
    grads = [exe.grad_dict[name].asnumpy() for name in sorted(exe.grad_dict)]
    return emulated, [out.asnumpy()] + grads


def rounding_after_relu(sym, op):
    nodes = json.loads(sym.tojson(remove_amp_cast=False))["nodes"]
    relu = [i for i, n in enumerate(nodes) if n["name"] == "relu"][0]
    return any(n["op"] == op and n["inputs"][0][0] == relu for n in nodes)


@pytest.mark.parametrize("case", sorted(graphs()))
def test_the_relu_rounding_goes_only_where_the_bits_stay(op, monkeypatch, case):
    sym, dropped = graphs()[case]
    carried, carried_values = run(sym)
    assert rounding_after_relu(carried, op) is not dropped
    monkeypatch.setenv("MXMIXED_EMULATION_CARRY", "0")
    pairs, pair_values = run(sym)
    assert op not in json.dumps(json.loads(pairs.tojson())["nodes"])
    assert len(carried_values) == len(pair_values) > 2
    for a, b in zip(carried_values, pair_values):
        assert a.dtype == b.dtype
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
