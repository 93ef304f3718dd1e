"""A checkpoint restores optimizer states by parameter, not by position: a Trainer orders its
parameters by their MXNet names, whose process-wide counters can sort the same net differently
in another process or later in the same one."""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from mxmixed import checkpoint


def _net(first_prefix, second_prefix):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=4, prefix=first_prefix),
            gluon.nn.Dense(3, in_units=8, prefix=second_prefix))
    net.initialize(mx.init.Xavier())
    return net


def _trainer(net):
    return gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                         update_on_kvstore=False)


def _step(net, trainer, X, y):
    with autograd.record():
        loss = gluon.loss.L2Loss()(net(X), y)
    loss.backward()
    trainer.step(X.shape[0])


def _weights(net):
    return {k: v.data().asnumpy() for k, v in net._collect_params_with_prefix().items()}


def test_states_follow_their_parameters_when_the_trainer_orders_them_differently(tmp_path):
    X = mx.nd.array(np.linspace(-1, 1, 32).reshape(8, 4))
    y = mx.nd.array(np.linspace(0, 1, 24).reshape(8, 3))
    net, path = _net("zz_", "aa_"), str(tmp_path / "ckpt.mxc")
    trainer = _trainer(net)
    for _ in range(3):
        _step(net, trainer, X, y)
    checkpoint.save(path, net, trainer)

    other = _net("aa_", "zz_")  # the same net; its Trainer lists the layers the other way round
    other_trainer = _trainer(other)
    assert [p.shape for p in other_trainer._params] != [p.shape for p in trainer._params]
    checkpoint.load(path, other, other_trainer)

    _step(net, trainer, X, y)
    _step(other, other_trainer, X, y)
    mine, theirs = _weights(net), _weights(other)
    for name in mine:  # identical only if every momentum went back to its own parameter
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
