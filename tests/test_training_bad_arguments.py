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
