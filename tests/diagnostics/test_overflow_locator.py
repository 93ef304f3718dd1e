"""The overflow locator (Gluon and Symbol) and the cheap gradient check for the loss scaler."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.contrib import amp
from mxnet.gluon import nn

import mxmixed
from mxmixed import diagnostics
from mxmixed.tutorial import digits_cnn, digits_loaders


@pytest.fixture(autouse=True)
def _own_name_counters():
    """Build nets with a NameManager of their own, so that Gluon's global name counters stay
    as other test modules expect them (some name 'resnetv10_conv0_weight')."""
    with mx.name.NameManager():
        yield


X_BAD = mx.nd.ones((4, 8))
Y_BAD = mx.nd.array([0, 1, 2, 3])


def overflowing_net():
    """Dense(16) -> Dense(16) -> relu -> Dense(4), where net[1] overflows float16 by construction.

    Input ones, net[0] weights 0.5 and relu: every hidden value is 8 * 0.5 = 4. net[1] has
    weights 2000: 16 * 4 * 2000 = 128000 > 65504, finite in float32, inf in float16.
    """
    net = nn.HybridSequential(prefix="bad_")
    with net.name_scope():
        net.add(nn.Dense(16, in_units=8, activation="relu"), nn.Dense(16, in_units=16),
                nn.Activation("relu"), nn.Dense(4, in_units=16))
    net.initialize(mx.init.Xavier())
    net[0].weight.set_data(mx.nd.full((16, 8), 0.5))
    net[0].bias.set_data(mx.nd.zeros(16))
    net[1].weight.set_data(mx.nd.full((16, 16), 2000.0))
    return net


@pytest.fixture(scope="module")
def digits_batch():
    train_loader, _ = digits_loaders(batch_size=64, seed=0)
    return next(iter(train_loader))


def _assert_names_net1(report):
    assert report and report.found
    assert (report.phase, report.kind) == ("forward", "overflow")
    assert report.layer == "net[1] (Dense)"
    assert (report.node, report.op) == ("bad_dense1_fwd", "FullyConnected")
    assert report.dtype == np.float16


@pytest.mark.filterwarnings("ignore:Cannot decide type")
def test_names_the_layer_that_overflows_by_construction():
    net = overflowing_net()
    assert np.isfinite(net(X_BAD).asnumpy()).all()  # float32 is fine
    report = diagnostics.find_overflow(net, (X_BAD, Y_BAD))  # AMP applied for the check
    _assert_names_net1(report)
    assert report.precision == "amp"
    assert "keep_in_float32(['FullyConnected'])" in report.suggestions[0]
    assert "excluded_sym_names=['bad_dense1_fwd']" in report.suggestions[0]
    assert "lowering the scale does not help" in report.suggestions[1]
    assert "net[1] (Dense)" in str(report)
    # the suggested fixes, checked by the locator itself
    assert not diagnostics.find_overflow(net, (X_BAD, Y_BAD), fp32_ops=["FullyConnected"])
    net.hybridize()
    net(X_BAD)
    # excluding net[1] alone moves the overflow to where its float32 output is cast for net[3]
    converted = amp.convert_hybrid_block(net, excluded_sym_names=["bad_dense1_fwd"],
                                         ctx=mx.cpu())
    moved = diagnostics.find_overflow(converted, (X_BAD, Y_BAD))
    assert (moved.node, moved.cast_from) == ("bad_dense2_fwd", "'bad_relu0_fwd'")
    converted = amp.convert_hybrid_block(net, excluded_sym_names=["bad_dense1_fwd",
                                                                  "bad_dense2_fwd"], ctx=mx.cpu())
    assert not diagnostics.find_overflow(converted, (X_BAD, Y_BAD))


def test_agrees_with_the_real_amp_run_and_a_cast_net():
    with mxmixed.amp_scope():
        net = overflowing_net()
        net.hybridize()
        out = net(X_BAD)
        assert out.dtype == np.float16 and not np.isfinite(out.asnumpy()).all()
        _assert_names_net1(diagnostics.find_overflow(net, (X_BAD, Y_BAD)))
    cast = overflowing_net()
    cast.cast("float16")
    report = diagnostics.find_overflow(cast, (X_BAD, Y_BAD))
    _assert_names_net1(report)
    assert report.precision == "float16"
    assert "net[1].cast('float32')" in report.suggestions[0]


def test_healthy_net_reports_nothing_and_is_left_alone(digits_batch):
    X, y = digits_batch
    net = digits_cnn(seed=0)
    before = {k: v.data().asnumpy().copy() for k, v in net.collect_params().items()}
    for scale in (1.0, 128.0):
        report = diagnostics.find_overflow(net, (X, y), scale=scale)
        assert not report and report.phase is None
        assert report.checked["forward"] > 20 and report.checked["backward"] > 20
        assert "no inf or NaN" in str(report)
    for k, v in net.collect_params().items():
        np.testing.assert_array_equal(v.data().asnumpy(), before[k])
        if v.grad_req != "null":
            assert not v.grad().asnumpy().any()


def test_too_large_loss_scale_overflows_in_backward_at_the_output_layer(digits_batch):
    X, y = digits_batch
    net = digits_cnn(seed=0)
    report = diagnostics.find_overflow(net, (X, y), scale=2.0 ** 24)
    assert (report.phase, report.kind) == ("backward", "overflow")
    assert report.layer == "net.output (Dense)"
    assert report.gradient_of == "the output of '%soutput_fwd'" % net.prefix
    assert report.suggestions[0].startswith("lower the loss scale")


def test_nan_is_told_apart_from_overflow():
    class Log(nn.HybridBlock):
        def hybrid_forward(self, F, x):
            return F.log(x - 1.0)

    net = nn.HybridSequential(prefix="nan_")
    with net.name_scope():
        net.add(nn.Dense(8, in_units=8), Log(), nn.Dense(4, in_units=8))
    net.initialize(mx.init.Xavier())
    report = diagnostics.find_overflow(net, (X_BAD, Y_BAD))
    assert (report.phase, report.kind) == ("forward", "nan")
    assert report.layer == "net[1] (Log)" and report.op == "log"
    assert "NaN from finite values" in report.suggestions[0]
    poisoned = X_BAD.copy()
    poisoned[0, 0] = np.nan
    report = diagnostics.find_overflow(overflowing_net(), (poisoned, Y_BAD))
    assert (report.phase, report.kind, report.tensor) == ("input", "nan", "the input 'data'")


def _symbol_mlp():
    data = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=16, name="fc1"), "relu",
                          name="relu1")
    h = mx.sym.Activation(mx.sym.FullyConnected(h, num_hidden=16, name="fc2"), "relu",
                          name="relu2")
    return mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, num_hidden=4, name="fc3"),
                                name="softmax")


def _symbol_params(fc2):
    rng = np.random.RandomState(0)
    return {"fc1_weight": mx.nd.full((16, 8), 0.5), "fc1_bias": mx.nd.zeros(16),
            "fc2_weight": fc2, "fc2_bias": mx.nd.zeros(16),
            "fc3_weight": mx.nd.array(rng.randn(4, 16)), "fc3_bias": mx.nd.zeros(4)}


def test_symbol_locator_names_the_node_and_checks_exclusions():
    sym = _symbol_mlp()
    inputs = {"data": X_BAD, "softmax_label": Y_BAD}
    bad = _symbol_params(mx.nd.full((16, 16), 2000.0))
    report = diagnostics.find_overflow_symbol(sym, inputs, bad)
    assert (report.phase, report.kind, report.node, report.layer) == \
        ("forward", "overflow", "fc2", "'fc2'")
    # keeping only fc2 in float32 moves the overflow to where AMP casts its output for fc3
    moved = diagnostics.find_overflow_symbol(sym, inputs, bad, excluded_sym_names=["fc2"])
    assert (moved.node, moved.cast_from) == ("fc3", "'relu2'")
    # with fc2 and fc3 in float32, fc2's weights (2000) blow up the gradient reaching fc1
    moved = diagnostics.find_overflow_symbol(sym, inputs, bad, excluded_sym_names=["fc2", "fc3"])
    assert (moved.phase, moved.node, moved.gradient_of) == ("backward", "fc1", "'fc1_weight'")
    assert "overflows even unscaled" in moved.suggestions[0]
    assert not diagnostics.find_overflow_symbol(sym, inputs, bad,
                                                excluded_sym_names=["fc1", "fc2", "fc3"])
    good = _symbol_params(mx.nd.array(np.random.RandomState(1).randn(16, 16)))
    assert not diagnostics.find_overflow_symbol(sym, inputs, good)
    # the scale reaches SoftmaxOutput through its grad_scale
    report = diagnostics.find_overflow_symbol(sym, inputs, good, scale=2.0 ** 20)
    assert (report.phase, report.kind, report.node) == ("backward", "overflow", "fc3")
    assert report.gradient_of == "the output of 'fc3'"


def test_nonfinite_gradients_points_at_the_first_layer_in_backward_order(digits_batch):
    X, y = digits_batch
    net = digits_cnn(seed=0)
    assert not diagnostics.nonfinite_gradients(net.collect_params())
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    for p in params[-4:]:  # hidden and output layers
        p.grad()[:] = np.inf
    params[-1].grad()[0] = np.nan
    found = diagnostics.nonfinite_gradients(net.collect_params())
    assert len(found) == 4 and found.total == len(params)
    assert found.origin == (net.prefix + "output_bias", "NaN")
    assert found.entries[0] == (net.prefix + "hidden_weight", "inf")
    assert "layer '%soutput'" % net.prefix in found.describe()
    # a real overflowing AMP step: every gradient is hit, the message says where to look
    with mxmixed.amp_scope():
        net = digits_cnn(seed=0)
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(X), y) * 2.0 ** 24
        loss.backward()
        found = diagnostics.nonfinite_gradients(net.collect_params())
    assert len(found) == found.total
    assert "Every gradient is affected" in str(found) and "find_overflow" in str(found)


def test_deferred_initialization_is_finished_on_the_batch():
    net = nn.HybridSequential(prefix="lazy_")
    with net.name_scope():
        net.add(nn.Dense(16, activation="relu"), nn.Dense(4))
    net.initialize(mx.init.Xavier())
    report = diagnostics.find_overflow(net, (X_BAD, Y_BAD))
    assert not report and net[0].weight.shape == (16, 8)
    with pytest.raises(RuntimeError, match="deferred initialization.*run one batch"):
        lazy = nn.HybridSequential()
        lazy.add(nn.Dense(4))
        lazy.initialize()
        diagnostics.collect_gradients(lazy)


def test_clear_errors_for_bad_input(digits_batch):
    X, y = digits_batch
    with pytest.raises(RuntimeError, match="not initialized"):
        diagnostics.find_overflow(mxmixed.tutorial.DigitsCNN(), (X, y))
    frozen = digits_cnn(seed=0)
    frozen.collect_params().setattr("grad_req", "null")
    with pytest.raises(ValueError, match="no gradients"):
        diagnostics.find_overflow(frozen, (X, y))
    with pytest.raises(ValueError, match=r"\(64, 1, 10, 10\).*does not fit.*hidden_fwd"):
        diagnostics.find_overflow(digits_cnn(seed=0), (mx.nd.ones((64, 1, 10, 10)), y))
    with pytest.raises(TypeError, match="HybridBlock"):
        diagnostics.find_overflow(nn.Block(), (X, y))
    with pytest.raises(TypeError, match="find_overflow_symbol"):
        diagnostics.find_overflow(_symbol_mlp(), (X, y))
    with pytest.raises(ValueError, match="scale"):
        diagnostics.find_overflow(digits_cnn(seed=0), (X, y), scale=float("inf"))
    with pytest.raises(ValueError, match="fp32_ops applies only"):
        net = overflowing_net()
        net.cast("float16")
        diagnostics.find_overflow(net, (X_BAD, Y_BAD), fp32_ops=["FullyConnected"])
    with pytest.raises(ValueError, match="no value for.*fc2_weight"):
        params = _symbol_params(mx.nd.ones((16, 16)))
        del params["fc2_weight"]
        diagnostics.find_overflow_symbol(_symbol_mlp(), {"data": X_BAD, "softmax_label": Y_BAD},
                                         params)
    with pytest.raises(ValueError, match="not in any of AMP's op lists"):
        diagnostics.keep_in_float32(["Dense"])
