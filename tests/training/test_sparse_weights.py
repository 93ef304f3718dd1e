"""``mxmixed.init_trainer`` on a Trainer with sparse (``row_sparse``) weights, which MXNet makes
update on its kvstore: the overflow check runs before anything is pushed, so an overflowing
step changes no weight (before, ``init_trainer`` raised MXNet's "Cannot set
update_on_kvstore=False when sparse weights are present", and MXNet's own AMP applied the step
inside the kvstore: NaN weights). A distributed kvstore is refused in one line."""
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import mxmixed

ROWS = 6


class SparseOut(gluon.Block):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = gluon.nn.Dense(4, in_units=3)
            self.weight = self.params.get("weight", shape=(ROWS, 4), stype="row_sparse",
                                          grad_stype="row_sparse")

    def forward(self, x):
        weight = self.weight.row_sparse_data(mx.nd.arange(ROWS)).tostype("default")
        return mx.nd.dot(self.dense(x), weight, transpose_b=True)


def _weights(net):
    return [net.dense.weight.data().asnumpy(),
            net.weight.row_sparse_data(mx.nd.arange(ROWS)).asnumpy()]


def _step(net, trainer, x):
    with autograd.record():
        loss = net(x).sum()
        with mxmixed.scale_loss(loss, trainer) as scaled:
            scaled.backward()
    return mxmixed.step(trainer, x.shape[0])


def test_an_overflowing_step_changes_no_sparse_or_dense_weight():
    with mxmixed.amp_scope():
        net = SparseOut()
        net.initialize(mx.init.Xavier())
        trainer = gluon.Trainer(net.collect_params(), "adagrad", {"learning_rate": 0.1})
        scaler = mxmixed.init_trainer(trainer, scaler=1024)
        x = mx.nd.ones((2, 3))
        assert _step(net, trainer, x)
        assert trainer._update_on_kvstore  # MXNet's choice for sparse weights stands
        before = _weights(net)
        bad = x.copy()
        bad[0, 0] = float("inf")
        assert not _step(net, trainer, bad)
        for was, now in zip(before, _weights(net)):
            np.testing.assert_array_equal(was, now)
        assert scaler.skipped_steps == 1
        assert _step(net, trainer, x)
        after = _weights(net)
        assert all(np.isfinite(w).all() for w in after)
        assert not np.array_equal(before[0], after[0])


def test_the_update_on_the_kvstore_divides_by_the_scale():
    """The same two steps with scale 1 and with scale 1024 give the same weights."""
    results = []
    for scale in (1, 1024):
        with mxmixed.amp_scope():
            mx.random.seed(3)
            net = SparseOut()
            net.initialize(mx.init.Xavier())
            trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
            mxmixed.init_trainer(trainer, scaler=scale)
            for _ in range(2):
                assert _step(net, trainer, mx.nd.ones((2, 3)))
            results.append(_weights(net))
    for one, scaled in zip(*results):
        np.testing.assert_allclose(one, scaled, rtol=1e-3, atol=1e-5)
        assert math.isfinite(float(np.abs(scaled).sum()))


def test_sparse_weights_on_a_distributed_kvstore_are_refused_in_one_line():
    with mxmixed.amp_scope():
        net = SparseOut()
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", kvstore="dist_sync")
        with pytest.raises(ValueError) as info:
            mxmixed.init_trainer(trainer)
    assert str(info.value).startswith("sparse weights make the Trainer update on its kvstore "
                                      "'dist_sync'")
    assert "\n" not in str(info.value)
