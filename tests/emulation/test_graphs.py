"""Loaded and freshly built Symbol graphs run in float16 on CPU through the graph pass."""
import json
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from mxmixed import emulation
from mxmixed.emulation import count_emulated, emulate_symbol
from mxmixed.tutorial import digits_cnn


def _float16_digits_net():
    net = digits_cnn(seed=1)
    net.cast("float16")
    return net


@pytest.fixture
def exported(tmp_path):
    x = mx.nd.random.uniform(shape=(6, 1, 8, 8)).astype("float16")
    net = _float16_digits_net()
    with emulation.emulated():
        imperative = net(x).asnumpy()
        net.hybridize()
        net(x)
    prefix = os.path.join(str(tmp_path), "digits16")
    net.export(prefix, epoch=0)
    return prefix, x, imperative


def test_loaded_float16_graph_equals_imperative_emulation(exported):
    prefix, x, imperative = exported
    sym = mx.sym.load(prefix + "-symbol.json")
    params = mx.nd.load(prefix + "-0000.params")
    args = {k[4:]: v for k, v in params.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in params.items() if k.startswith("aux:")}
    hidden = [v for k, v in args.items() if k.endswith("hidden_weight")]
    assert len(hidden) == 1 and hidden[0].dtype == np.float16
    types = {name: value.dtype for name, value in list(args.items()) + list(aux.items())}
    types["data"] = np.float16
    rewritten = emulate_symbol(sym, types)
    assert count_emulated(rewritten)["to_float16"] >= 4
    args["data"] = x
    exe = rewritten.bind(mx.cpu(), args, aux_states=aux, grad_req="null")
    out = exe.forward(is_train=False)[0]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.asnumpy(), imperative)


def test_symbol_block_imports_run_through_emulation(exported):
    prefix, x, imperative = exported
    block = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    with emulation.emulated():
        out = block(x)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.asnumpy(), imperative)


def test_float32_graph_is_returned_unchanged():
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(data, num_hidden=8, name="fc")
    assert emulate_symbol(sym, {"data": np.float32}) is sym


def test_rewritten_graph_keeps_inputs_and_outputs():
    data = mx.sym.var("data", dtype="float16")
    fc = mx.sym.FullyConnected(data, num_hidden=8, name="fc")
    bn = mx.sym.BatchNorm(mx.sym.Reshape(fc, shape=(0, 8, 1, 1)), name="bn")
    sym = mx.sym.Group([bn, fc])
    new = emulate_symbol(sym, {"bn_gamma": np.float32, "bn_beta": np.float32,
                               "bn_moving_mean": np.float32, "bn_moving_var": np.float32})
    assert new.list_inputs() == sym.list_inputs()
    assert new.list_auxiliary_states() == sym.list_auxiliary_states()
    assert len(new.list_outputs()) == 2
    _, out_types, _ = new.infer_type(fc_weight=np.float16, fc_bias=np.float16)
    assert out_types == [np.float16, np.float16]
    nodes = json.loads(new.tojson(remove_amp_cast=False))["nodes"]
    bn_node = [n for n in nodes if n["op"] == "BatchNorm"][0]
    aux_inputs = [nodes[src]["name"] for src, _, _ in bn_node["inputs"][3:]]
    assert aux_inputs == ["bn_moving_mean", "bn_moving_var"]


def test_symbol_built_after_enable_trains_with_simple_bind():
    data = mx.sym.var("data")
    label = mx.sym.var("softmax_label")
    net = mx.sym.Cast(data, dtype="float16")
    net = mx.sym.FullyConnected(net, num_hidden=16, name="fc1")
    net = mx.sym.Activation(net, act_type="relu")
    net = mx.sym.FullyConnected(net, num_hidden=10, name="fc2")
    net = mx.sym.SoftmaxOutput(mx.sym.Cast(net, dtype="float32"), label, name="softmax")
    with emulation.emulated():
        exe = net.simple_bind(mx.cpu(), data=(4, 8), softmax_label=(4,),
                              type_dict={"data": "float32", "fc1_weight": "float16", "fc1_bias": "float16",
                                         "fc2_weight": "float16", "fc2_bias": "float16"})
        for name, arr in exe.arg_dict.items():
            if name != "softmax_label":
                arr[:] = mx.nd.random.uniform(-0.5, 0.5, shape=arr.shape).astype(arr.dtype)
        exe.arg_dict["softmax_label"][:] = mx.nd.array([0, 1, 2, 3])
        out = exe.forward(is_train=True)[0]
        exe.backward()
        grad = exe.grad_dict["fc1_weight"]
        assert out.dtype == np.float32 and grad.dtype == np.float16
        assert np.isfinite(grad.asnumpy()).all() and np.abs(grad.asnumpy()).sum() > 0


def test_simple_bind_passes_over_keywords_that_are_not_shapes_as_mxnets_own_does():
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(mx.sym.Cast(data, dtype="float16"), num_hidden=3, name="fc")
    types = {"data": "float32", "fc_weight": "float16", "fc_bias": "float16"}
    plain = net.simple_bind(mx.cpu(), data=(2, 4), type_dict=types, force_rebind=True,
                            stype_dict=None, shared_exec=None)
    with emulation.emulated():
        exe = net.simple_bind(mx.cpu(), data=(2, 4), type_dict=types, force_rebind=True,
                              stype_dict=None, shared_exec=None)
        for arr in exe.arg_dict.values():
            arr[:] = mx.nd.ones(arr.shape, dtype=arr.dtype)
        out = exe.forward()[0].asnumpy()
    assert plain.arg_dict["fc_bias"].shape == (3,)
    np.testing.assert_array_equal(out, np.full((2, 3), 5, dtype=np.float16))


def test_module_api_fits_a_float16_symbol_on_cpu():
    from mxmixed.tutorial import digits_arrays

    X, y, _, _ = digits_arrays()
    data = mx.sym.Cast(mx.sym.var("data"), dtype="float16")
    net = mx.sym.Convolution(data, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv")
    net = mx.sym.Activation(net, act_type="relu")
    net = mx.sym.FullyConnected(net, num_hidden=10, name="fc")
    net = mx.sym.SoftmaxOutput(mx.sym.Cast(net, dtype="float32"), name="softmax")
    it = mx.io.NDArrayIter(X[:512], y[:512].astype(np.float32), batch_size=64)
    with emulation.emulated():
        mod = mx.mod.Module(net, context=mx.cpu())
        mod.bind(it.provide_data, it.provide_label)
        mod.init_params(mx.init.Xavier())
        # The old tutorial's create('sgd', lr=...) raises TypeError in 1.9.1: the keyword is
        # learning_rate. An optimizer made outside Module needs rescale_grad=1/batch itself.
        mod.init_optimizer(optimizer=mx.optimizer.create(
            "sgd", learning_rate=0.1, momentum=0.9, rescale_grad=1.0 / 64, multi_precision=True))
        mod.fit(it, num_epoch=3)
        score = dict(mod.score(it, "acc"))["accuracy"]
    assert score > 0.8
