"""bfloat16 AMP keeps the ops whose CPU kernels refuse bfloat16 in float32 by itself.

Each op here fails on MXNet 1.9.1's CPU wheel when bfloat16 reaches it ("dot only supports
float32/float64 for CPU", "Unknown type enum 12"), and AMP's own bfloat16 lists let it reach
them: ``batch_dot`` of two bfloat16 FullyConnected outputs (AMP keeps the widest input type),
``Activation`` softsign and ``Pooling`` lp and sum (variants of ops that otherwise run in
bfloat16).
"""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from mxmixed._core.dtypes import BFLOAT16
from mxmixed._core.devices import bfloat16_support
from mxmixed.training._unlisted import unlisted_ops

RUNS, WHY = bfloat16_support()
pytestmark = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)


class _Net(gluon.HybridBlock):
    def __init__(self, tail):
        super().__init__()
        self.tail = tail
        with self.name_scope():
            self.query = gluon.nn.Dense(4, flatten=False, in_units=4)
            self.key = gluon.nn.Dense(4, flatten=False, in_units=4)

    def hybrid_forward(self, F, x):
        scores = F.batch_dot(self.query(x), self.key(x), transpose_b=True)  # both bfloat16
        if self.tail == "softsign":
            return F.Activation(self.query(scores), act_type="softsign")
        return F.Pooling(self.query(scores), kernel=(2,), pool_type=self.tail, p_value=2)


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("tail", ["softsign", "lp", "sum"])
def test_bfloat16_amp_runs_ops_without_a_cpu_bfloat16_kernel_in_float32(hybridize, tail):
    x = mx.nd.random.uniform(shape=(2, 4, 4))
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net = _Net(tail)
        net.initialize(mx.init.Xavier())
        if hybridize:
            net.hybridize()
        x.attach_grad()
        with autograd.record():
            out = net(x)
        out.backward()
        grad = x.grad.asnumpy()
    assert np.dtype(out.dtype) == np.float32  # the last op ran in float32
    assert np.isfinite(out.asnumpy()).all() and np.isfinite(grad).all()


class _Unfold(gluon.HybridBlock):
    """A Convolution (bfloat16 under AMP) feeding im2col: in none of AMP's bfloat16 lists, and
    without a CPU bfloat16 kernel in MXNet 1.9.1 ("Unknown type enum 12")."""

    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.conv = gluon.nn.Conv2D(2, 3, padding=1, in_channels=1)

    def hybrid_forward(self, F, x):
        return F.im2col(self.conv(x), kernel=(2, 2))


@pytest.mark.parametrize("hybridize", [False, True])
def test_bfloat16_amp_keeps_an_unlisted_op_float32_and_names_it_once(hybridize):
    x = mx.nd.random.uniform(shape=(2, 1, 4, 4))
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net = _Unfold()
        net.initialize(mx.init.Xavier())
        if hybridize:
            net.hybridize()
        with pytest.warns(UserWarning) as told:
            outs = [net(x).asnumpy() for _ in range(2)]
    notes = [str(w.message) for w in told if "im2col" in str(w.message)]
    assert len(notes) == 1 and "float32" in notes[0]
    assert outs[0].dtype == np.float32 and np.isfinite(outs[0]).all()


def test_unlisted_ops_leave_out_ops_that_write_into_their_arguments():
    unlisted = set(unlisted_ops())
    assert "im2col" in unlisted
    assert not unlisted & {"reset_arrays", "nag_mom_update", "preloaded_multi_sgd_update",
                           "_multi_adamw_update", "_backward_im2col", "amp_cast"}


def test_an_unlisted_op_writing_into_a_bfloat16_out_array_fills_it():
    x = mx.nd.amp_cast(mx.nd.array([[1, 2, 3]]), dtype=BFLOAT16)
    out = mx.nd.amp_cast(mx.nd.zeros((1, 3)), dtype=BFLOAT16)
    with mxmixed.amp_scope(target_dtype="bfloat16"), pytest.warns(UserWarning, match="cumsum"):
        mx.nd.cumsum(x, axis=1, out=out)
    assert mx.nd.amp_cast(out, dtype="float32").asnumpy().tolist() == [[1, 3, 6]]
