"""Scripts written for MXNet's ``amp.scale_loss`` keep working when the Trainer was prepared by
``mxmixed.init_trainer``, and MXNet's own Trainers still go through MXNet's function."""
import pytest

from conftest import run_python

SCRIPT = """
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.contrib import amp
import mxmixed

mxmixed.init()

def one_step(prepare, scale_loss):
    mx.random.seed(0)
    net = gluon.nn.Dense(4, in_units=8)
    net.initialize(mx.init.Constant(0.5))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            update_on_kvstore=False)
    prepare(trainer)
    X = mx.nd.array(np.linspace(0, 1, 16).reshape(2, 8))
    with autograd.record():
        loss = net(X).astype("float32").sum()
        with scale_loss(loss, trainer) as scaled:
            scaled.backward()
    trainer.step(2)
    return net.weight.data().asnumpy(), trainer

ours, trainer = one_step(lambda t: mxmixed.init_trainer(t, 1024.0), mxmixed.scale_loss)
theirs, trainer2 = one_step(lambda t: mxmixed.init_trainer(t, 1024.0), amp.scale_loss)
assert np.array_equal(ours, theirs), (ours, theirs)
assert mxmixed.loss_scaler(trainer2).loss_scale == 1024.0
plain, _ = one_step(amp.init_trainer, amp.scale_loss)
assert np.allclose(plain, ours, rtol=1e-3), (plain, ours)
print("ok")
"""


@pytest.mark.slow
def test_amp_scale_loss_serves_mxmixed_and_mxnet_trainers():
    proc = run_python(SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
