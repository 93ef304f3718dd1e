"""Emulation with ``mxnet.contrib.amp`` works in either order (each in a fresh interpreter)."""
import pytest

from conftest import run_python

SCRIPT = """
import mxnet as mx, numpy as np
from mxnet import autograd, gluon
from mxnet.contrib import amp
from mxmixed import emulation
from mxmixed.tutorial import digits_cnn
if %(emulation_first)r:
    emulation.enable(); amp.init()
else:
    amp.init(); emulation.enable()
for hybridize in (True, False):  # a hybridized net first: a fresh process's first net
    net = digits_cnn(seed=0)
    if hybridize:
        net.hybridize()
    X = mx.nd.random.uniform(shape=(8, 1, 8, 8))
    with autograd.record():
        out = net(X)
    out.backward()
    assert out.dtype == np.float16, (hybridize, out.dtype)
    assert net.hidden.weight.grad().dtype == np.float32, hybridize
    assert np.isfinite(net.hidden.weight.grad().asnumpy()).all(), hybridize
emulation.disable()
# AMP's own wrappers survive disable(): float16 GEMM is AMP's again, and fails on CPU.
try:
    gluon.nn.Dense(4, in_units=8)
    d = gluon.nn.Dense(4, in_units=8); d.initialize(); d(mx.nd.ones((1, 8))).wait_to_read()
    print("AFTER_DISABLE=ran")
except mx.base.MXNetError:
    print("AFTER_DISABLE=amp-still-casts")
print("OK")
"""


@pytest.mark.slow
@pytest.mark.parametrize("emulation_first", [True, False], ids=["emulation-first", "amp-first"])
def test_amp_and_emulation_work_in_either_order(emulation_first):
    """A hybridized and an imperative net in one interpreter per order (amp.init cannot be
    undone, so each order needs its own)."""
    proc = run_python(SCRIPT % {"emulation_first": emulation_first})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stdout
    assert "AFTER_DISABLE=amp-still-casts" in proc.stdout


def test_amp_float32_list_ops_run_in_float32_on_cpu_as_on_a_gpu():
    import mxnet as mx
    import numpy as np

    import mxmixed

    x16 = mx.nd.array([[1.0, 2.0, 3.0]]).astype("float16")
    with mxmixed.amp_scope():
        assert mx.nd.softmax(x16).dtype == np.float32
        assert mx.nd.log_softmax(x16).dtype == np.float32
        loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()(x16, mx.nd.array([2]))
        assert loss.dtype == np.float32
    assert mx.nd.softmax(x16).dtype == np.float16  # outside the scope: MXNet's own behaviour
