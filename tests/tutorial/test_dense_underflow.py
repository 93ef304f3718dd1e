"""The dense digits task of notebook 06: its data, net, loss, and gradients small enough to
underflow in float16."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd

from mxmixed.tutorial.dense import (DENSE_MODES, DenseDigitsNet, MeanSigmoidBCE, digit_grids,
                                    train_dense)


def test_digit_grids_are_deterministic_masks_of_the_ink():
    X, Y = digit_grids(4, seed=3)
    X2, Y2 = digit_grids(4, seed=3)
    assert X.shape == (4, 1, 64, 64) and Y.shape == (4, 10, 64, 64)
    assert np.array_equal(X, X2) and np.array_equal(Y, Y2)
    assert set(np.unique(Y)) <= {0.0, 1.0}
    # a pixel belongs to at most one class, and only where there is ink
    assert Y.sum(axis=1).max() == 1
    assert np.array_equal(Y.sum(axis=1) > 0, X[:, 0] > 0.3)


def test_net_scores_every_pixel_and_the_loss_gradient_is_below_one_over_n():
    mx.random.seed(0)
    net = DenseDigitsNet()
    net.initialize(mx.init.Xavier())
    X, Y = (mx.nd.array(a) for a in digit_grids(2, seed=0))
    logits = net(X)
    logits.attach_grad()
    with autograd.record():
        loss = MeanSigmoidBCE()(logits, Y)
    loss.backward()
    assert logits.shape == Y.shape and loss.shape == (1,)
    n = Y.size
    assert np.abs(logits.grad.asnumpy()).max() <= 1.0 / n * (1 + 1e-6)


def test_loss_is_the_mean_sigmoid_cross_entropy_and_finite_for_large_logits():
    z = np.array([[-100.0, -30.0, -2.0, 0.0, 0.5, 3.0, 30.0, 100.0]])
    y = np.array([[0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]])
    # -log(sigmoid(z)) = logaddexp(0, -z), -log(1 - sigmoid(z)) = logaddexp(0, z)
    want = np.mean(y * np.logaddexp(0, -z) + (1 - y) * np.logaddexp(0, z))
    got = MeanSigmoidBCE()(mx.nd.array(z), mx.nd.array(y)).asscalar()
    assert np.isclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("mode", DENSE_MODES)
def test_train_dense_runs_each_mode(mode):
    data = digit_grids(8, seed=0) + digit_grids(4, seed=1, split="test")
    run = train_dense(mode, data, steps=2, batch_size=4, measure_at=(1,))
    assert len(run["losses"]) == 2 and np.isfinite(run["losses"]).all()
    assert np.isfinite(run["test_loss"])
    assert (run["scales"] is None) == (mode == "float32")
    stats = run["stats"][1]
    assert stats.tensors and 0.0 <= stats.total.underflow <= 1.0


def test_train_dense_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        train_dense("bfloat16", digit_grids(2) + digit_grids(2, split="test"), steps=1)
