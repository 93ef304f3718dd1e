"""The loss scale lives in the LossScaler only: what the scaler says is what the next step uses,
a restored state takes effect in place, and the one handle is all that is set on the Trainer."""
import json

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon
from mxnet.contrib import amp

import mxmixed
from mxmixed import checkpoint, emulation
from mxmixed.scaler import LossScaler

X = [[1.0, 2.0, 3.0, 4.0]]


def _float16_dense():
    net = gluon.nn.Dense(1, use_bias=False, in_units=4)
    net.initialize(mx.init.Constant(0.5))
    net.cast("float16")
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 1.0, "multi_precision": True})
    return net, trainer


def _one_step(net, trainer, clip=None, unscale=False):
    """One SGD step; returns (loss, scaled loss, gradient as carried, applied, new weight)."""
    x = mx.nd.array(X, dtype="float16")
    with emulation.emulated():
        with autograd.record():
            loss = net(x).astype("float32").sum()
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        grad = net.weight.grad().astype("float32").asnumpy().ravel()
        if unscale:
            mxmixed.unscale(trainer)
        if clip:
            mxmixed.clip_global_norm(trainer, clip)
        applied = mxmixed.step(trainer, 1)
    weight = net.weight.data().astype("float32").asnumpy().ravel()
    return loss.asscalar(), scaled.asscalar(), grad, applied, weight


def test_a_scale_set_through_the_scaler_is_what_the_next_step_uses():
    net, trainer = _float16_dense()
    scaler = mxmixed.init_trainer(trainer, LossScaler(init_scale=256, growth_interval=100))
    scaler.load_state_dict(LossScaler(init_scale=2.0 ** 12, growth_interval=100).state_dict())
    loss, scaled, grad, applied, weight = _one_step(net, trainer)
    assert scaled == loss * 2.0 ** 12
    np.testing.assert_array_equal(grad, np.array(X[0]) * 2.0 ** 12)
    assert applied
    np.testing.assert_allclose(weight, 0.5 - np.array(X[0]), rtol=1e-3)  # divided by 2**12
    # a scale that overflows float16 (4 * 2**14 > 65504): the very next step is skipped
    scaler.load_state_dict(LossScaler(init_scale=2.0 ** 14, growth_interval=100).state_dict())
    _, scaled, _, applied, after = _one_step(net, trainer)
    assert not applied and scaler.loss_scale == 2.0 ** 13
    np.testing.assert_array_equal(after, weight)
    scaler.update(True)  # the policy's own move counts the same way
    loss, scaled, grad, applied, _ = _one_step(net, trainer)
    assert applied and scaled == loss * 2.0 ** 12


@pytest.mark.parametrize("clip, unscale", [(None, True), (1.0, False), (1.0, True)])
def test_unscale_and_clip_divide_by_the_scalers_scale(clip, unscale):
    net, trainer = _float16_dense()
    mxmixed.init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
    _, _, _, applied, weight = _one_step(net, trainer, clip=clip, unscale=unscale)
    grad = np.array(X[0])
    step = grad / np.linalg.norm(grad) if clip else grad
    assert applied
    np.testing.assert_allclose(weight, 0.5 - step, atol=1e-3)


def test_json_round_trip_restores_the_scale_in_place_and_amps_loss_outputs_follow():
    with mxmixed.amp_scope():
        net = gluon.nn.Dense(2, in_units=3)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        scaler = mxmixed.init_trainer(trainer, LossScaler(init_scale=2.0 ** 16))
        saved = LossScaler(init_scale=2.0 ** 9, growth_interval=7)
        saved.update(False)
        saved.update(True)
        scaler.load_state_dict(json.loads(json.dumps(saved.state_dict())))
        assert mxmixed.loss_scaler(trainer) is scaler
        assert scaler.state_dict() == saved.state_dict() and scaler.loss_scale == 2.0 ** 8
        # MXNet's loss-output ops read AMP's global scaler: it derives the restored scale
        assert amp.amp._loss_scaler.loss_scale == 2.0 ** 8
        data = mx.nd.array([[1.0, 2.0]])
        data.attach_grad()
        with autograd.record():
            out = mx.nd.SoftmaxOutput(data, mx.nd.array([0]))
        out.backward()
        probs = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum()
        np.testing.assert_allclose(data.grad.asnumpy()[0], (probs - [1, 0]) * 2.0 ** 8,
                                   rtol=1e-3)
        x = mx.nd.ones((1, 3))
        with autograd.record():
            loss = net(x).astype("float32").sum()
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        assert scaled.asscalar() == pytest.approx(loss.asscalar() * 2.0 ** 8, rel=1e-3)


def test_checkpoint_round_trip_restores_the_scale_the_next_step_uses(tmp_path):
    net, trainer = _float16_dense()
    scaler = mxmixed.init_trainer(trainer, LossScaler(init_scale=2.0 ** 11, growth_interval=50))
    _one_step(net, trainer)
    scaler.update(True)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer)
    net2, trainer2 = _float16_dense()
    scaler2 = mxmixed.init_trainer(trainer2, LossScaler(growth_interval=50))
    checkpoint.load(path, net2, trainer2)
    assert mxmixed.loss_scaler(trainer2) is scaler2 and scaler2.loss_scale == 2.0 ** 10
    loss, scaled, grad, applied, _ = _one_step(net2, trainer2)
    assert applied and scaled == pytest.approx(loss * 2.0 ** 10, rel=1e-3)


def test_only_the_handle_is_set_on_the_trainer_and_mxnets_objects_get_no_attribute():
    with mxmixed.amp_scope():
        glob = amp.amp._loss_scaler
        glob_before = dict(vars(glob))
        net, trainer = _float16_dense()
        plain_net, plain = _float16_dense()
        before = dict(vars(trainer))
        mxmixed.init_trainer(trainer, LossScaler(init_scale=2.0 ** 10))
        for clip, unscale in ((None, False), (1.0, False), (1.0, True), (None, False)):
            _one_step(net, trainer, clip=clip, unscale=unscale)
        x = mx.nd.array(X, dtype="float16")
        with emulation.emulated():
            for _ in range(4):
                with autograd.record():
                    plain_net(x).astype("float32").sum().backward()
                plain.step(1)
        assert set(vars(trainer)) - set(vars(plain)) == {"_amp_loss_scaler"}
        assert set(vars(trainer)) - set(before) == {"_amp_loss_scaler"}
        assert trainer._scale == before["_scale"]  # MXNet's own rescale base is never touched
        assert vars(glob) == glob_before
        assert set(vars(mxmixed.loss_scaler(trainer))) <= set(vars(LossScaler()))


def test_clip_on_a_plain_trainer_sets_only_the_handle_and_clips_in_float32():
    net = gluon.nn.Dense(1, use_bias=False, in_units=4)
    net.initialize(mx.init.Constant(0.5))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0})
    before = set(vars(trainer))
    with autograd.record():
        loss = net(mx.nd.array(X)).sum()
    loss.backward()
    assert mxmixed.clip_global_norm(trainer, 1.0) == pytest.approx(np.sqrt(30))
    assert mxmixed.step(trainer, 1)
    assert set(vars(trainer)) - before == {"_amp_loss_scaler"}
    grad = np.array(X[0])
    np.testing.assert_allclose(net.weight.data().asnumpy().ravel(),
                               0.5 - grad / np.linalg.norm(grad), rtol=1e-5)
    with pytest.raises(ValueError, match="no mxmixed LossScaler"):
        mxmixed.loss_scaler(trainer)
