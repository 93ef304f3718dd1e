"""The trap of a forgotten ``scale_loss``: with a loss scale other than 1, gradients computed
outside it would be divided by the scale anyway, so every update would be that many times too
small. ``step`` refuses such a step with one line that names the fix; nothing is updated."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from mxmixed import emulation


def _setup(scaler):
    """A float16 Dense with weights 1 (the conftest fixture turns the emulation off again)."""
    emulation.enable()
    net = gluon.nn.Dense(2, in_units=3, use_bias=False)
    net.initialize(mx.init.One())
    net.cast("float16")
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 1.0, "multi_precision": True},
                            update_on_kvstore=False)
    mxmixed.init_trainer(trainer, scaler)
    return net, trainer


def _grads(net, trainer, scaled):
    X = mx.nd.ones((1, 3), dtype="float16")
    with autograd.record():
        loss = net(X).astype("float32").sum()
        if scaled:
            with mxmixed.scale_loss(loss, trainer) as s:
                s.backward()
    if not scaled:
        loss.backward()


@pytest.mark.parametrize("scaler", [128.0, "dynamic"], ids=["static-128", "dynamic"])
def test_step_refuses_gradients_that_skipped_scale_loss(scaler):
    net, trainer = _setup(scaler)
    before = net.weight.data().asnumpy().copy()
    scale = mxmixed.loss_scaler(trainer).loss_scale
    _grads(net, trainer, scaled=False)
    with pytest.raises(RuntimeError) as caught:
        mxmixed.step(trainer, 1)
    message = str(caught.value)
    assert "scale_loss" in message and "%gx too small" % scale in message
    assert "\n" not in message
    np.testing.assert_array_equal(net.weight.data().asnumpy(), before)


def test_the_same_step_through_scale_loss_updates_by_the_true_gradient():
    net, trainer = _setup(128.0)
    _grads(net, trainer, scaled=True)
    assert mxmixed.step(trainer, 1)
    # d(sum(W x))/dW = 1 for x = ones: one SGD step at lr 1 takes 1 off each weight of 1;
    # the 128x scaled gradient (128, exact in float16) is divided by 128 in the update
    np.testing.assert_allclose(net.weight.data().asnumpy().astype(np.float32), np.zeros((2, 3)), atol=1e-6)


def test_a_scale_of_one_needs_no_scale_loss():
    net, trainer = _setup(1.0)
    _grads(net, trainer, scaled=False)
    assert mxmixed.step(trainer, 1)
    np.testing.assert_allclose(net.weight.data().asnumpy().astype(np.float32), np.zeros((2, 3)), atol=1e-6)


def test_unscale_after_scale_loss_is_still_accepted():
    net, trainer = _setup(128.0)
    _grads(net, trainer, scaled=True)
    mxmixed.unscale(trainer)
    assert mxmixed.step(trainer, 1)
    np.testing.assert_allclose(net.weight.data().asnumpy().astype(np.float32), np.zeros((2, 3)), atol=1e-6)
