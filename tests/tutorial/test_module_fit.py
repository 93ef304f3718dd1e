"""Module API helpers of notebook 04: fit a Module, read its optimizer states publicly."""
import numpy as np

import mxnet as mx

import mxmixed
from mxmixed import emulation
from mxmixed.tutorial import digits_arrays
from mxmixed.tutorial.module_fit import fit_module, module_accuracy, module_optimizer_states


def _body(data):
    x = mx.sym.FullyConnected(mx.sym.flatten(data), num_hidden=16, name="hidden")
    x = mx.sym.Activation(x, act_type="relu")
    return mx.sym.FullyConnected(x, num_hidden=10, name="output")


def test_fit_module_records_a_loss_per_batch_and_learns():
    X, y, X_test, y_test = digits_arrays(seed=0)
    sym = mxmixed.float16_softmax_symbol(_body, dtype="float32")
    opt = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, rescale_grad=1 / 64)
    mod, losses = fit_module(sym, opt, X, y, epochs=2)
    assert len(losses) == 2 * (len(y) // 64)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert module_accuracy(mod, X_test, y_test) > 0.5


def test_optimizer_states_hold_float32_master_weights_for_float16_weights():
    X, y, _, _ = digits_arrays(seed=0)
    sym = mxmixed.float16_softmax_symbol(_body, loss_scale=128.0)
    params = mxmixed.multi_precision_params(64, loss_scale=128.0, learning_rate=0.05,
                                            momentum=0.9)
    with emulation.emulated():
        mod, _ = fit_module(sym, mx.optimizer.create("sgd", **params), X, y, epochs=1)
    states = module_optimizer_states(mod)
    weights = mod.get_params()[0]
    assert set(states) == set(weights)
    for name, state in states.items():
        assert weights[name].dtype == np.float16
        momentum, master = state
        assert master.dtype == np.float32
        assert (master.astype("float16") == weights[name]).asnumpy().all()
