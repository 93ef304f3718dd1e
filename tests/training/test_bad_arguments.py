"""The Gluon helpers refuse a wrong argument type with a one-line error that names the helper,
instead of an AttributeError or ZeroDivisionError from inside MXNet's Trainer."""
import numpy as np
import pytest
from mxnet import autograd, gluon, nd

import mxmixed
from mxmixed import emulation


def _trainer():
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    net.cast("float16")
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.1, "multi_precision": True})
    mxmixed.init_trainer(trainer, 8)
    return net, trainer


@pytest.mark.parametrize("bad", [None, gluon.nn.Dense(2)], ids=["None", "a Block"])
@pytest.mark.parametrize("call", [
    lambda t: mxmixed.step(t, 2),
    lambda t: mxmixed.clip_global_norm(t, 1.0),
    lambda t: mxmixed.unscale(t),
    lambda t: mxmixed.loss_scaler(t),
    lambda t: mxmixed.scale_loss(nd.ones(1), t).__enter__(),
], ids=["step", "clip_global_norm", "unscale", "loss_scaler", "scale_loss"])
def test_a_non_trainer_is_a_type_error_naming_the_helper(call, bad):
    with pytest.raises(TypeError, match=r"^\w+ needs a gluon.Trainer, got (NoneType|Dense)$"):
        call(bad)


@pytest.mark.parametrize("batch_size", ["2", None, 0, -1, True, float("nan"), float("inf")])
def test_step_refuses_a_batch_size_that_is_not_a_positive_finite_number(batch_size):
    _, trainer = _trainer()
    with pytest.raises(ValueError, match="batch_size must be a positive finite number"):
        mxmixed.step(trainer, batch_size)


def test_numpy_numbers_are_numbers():
    emulation.enable()  # the conftest fixture switches it off again
    net, trainer = _trainer()
    x = nd.ones((4, 3), dtype="float16")
    with autograd.record():
        loss = net(x).astype("float32").sum()
        with mxmixed.scale_loss(loss, trainer) as scaled:
            scaled.backward()
    norm = mxmixed.clip_global_norm(trainer, np.float32(5.0))
    assert np.isfinite(norm)
    assert mxmixed.step(trainer, np.int64(4)) is True


@pytest.mark.parametrize("loss, error, words", [
    ([], ValueError, "scale_loss needs at least one loss, got an empty list"),
    (3.0, TypeError, "scale_loss needs the loss as an NDArray"),
    ((nd.ones(1), "x"), TypeError, r"scale_loss: loss\[1\] must be an NDArray, got str"),
])
def test_scale_loss_refuses_what_is_not_a_loss_in_one_line(loss, error, words):
    emulation.enable()
    _, trainer = _trainer()
    with pytest.raises(error, match=words):
        with mxmixed.scale_loss(loss, trainer):
            pass


@pytest.mark.parametrize("change, words", [
    (lambda s: s.pop("skipped"), "no skipped"),
    (lambda s: s.update(skipped=-1), "skipped must be a non-negative integer"),
    (lambda s: s.update(loss_scale=0.0), "loss_scale must be"),
    (lambda s: s.update(loss_scale=2.0 ** 30), "loss_scale .* is above max_scale"),
    (lambda s: s["config"].update(extra=1), "'config' must hold exactly"),
    (lambda s: s.update(history="x"), "'history' must be a list"),
])
def test_a_bad_scaler_state_is_refused_naming_its_public_entry(change, words):
    from mxmixed.scaler import LossScaler

    state = LossScaler(init_scale=256.0).state_dict()
    change(state)
    scaler = LossScaler(init_scale=8.0)
    with pytest.raises(ValueError, match=words) as caught:
        scaler.load_state_dict(state)
    assert "_skipped" not in str(caught.value) and "init_scale" not in str(caught.value)
    assert scaler.loss_scale == 8.0
