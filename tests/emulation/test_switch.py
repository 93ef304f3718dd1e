"""The emulation switch: explicit, scoped, auto mode, and restoring MXNet's functions."""
import logging

import mxnet as mx
import numpy as np
import pytest

from mxmixed import emulation
from mxmixed._core.state import EMULATION


def test_disable_restores_mxnet_functions():
    originals = (mx.nd.FullyConnected, mx.nd.op.FullyConnected, mx.ndarray.CachedOp,
                 mx.sym.Symbol.simple_bind, mx.sym.Symbol.bind)
    emulation.enable()
    assert mx.nd.FullyConnected is not originals[0]
    emulation.disable()
    assert (mx.nd.FullyConnected, mx.nd.op.FullyConnected, mx.ndarray.CachedOp,
            mx.sym.Symbol.simple_bind, mx.sym.Symbol.bind) == originals


def test_context_manager_restores_previous_state():
    assert not emulation.emulation_active()
    with emulation.emulated() as active:
        assert active and emulation.emulation_active()
    assert not emulation.emulation_active()
    emulation.enable()
    with emulation.emulated():
        pass
    assert emulation.emulation_active()


def test_float16_fully_connected_fails_without_emulation_and_runs_with_it():
    x = mx.nd.ones((2, 8), dtype="float16")
    w = mx.nd.ones((4, 8), dtype="float16")
    with pytest.raises(mx.base.MXNetError):
        mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=4).wait_to_read()
    with emulation.emulated():
        out = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=4)
    assert out.dtype == np.float16 and np.all(out.asnumpy() == 8)


def test_auto_mode_emulates_on_a_cpu_only_machine_and_says_so_once(caplog):
    if mx.context.num_gpus():
        pytest.skip("a GPU is visible: auto mode uses the real kernels")
    EMULATION.announced = False
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        assert emulation.enable("auto")
        emulation.disable()
        emulation.enable("auto")
    messages = [r.getMessage() for r in caplog.records if "emulates float16" in r.getMessage()]
    assert len(messages) == 1 and "not speed" in messages[0]
    assert emulation.describe().startswith("active (no GPU visible)")


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="'on' or 'auto'"):
        emulation.enable("always")


def test_float32_calls_are_bit_identical_under_emulation():
    rng = np.random.RandomState(0)
    x = mx.nd.array(rng.randn(4, 16))
    w = mx.nd.array(rng.randn(8, 16))
    plain = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=8).asnumpy()
    with emulation.emulated():
        emulated = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=8)
    assert emulated.dtype == np.float32
    np.testing.assert_array_equal(emulated.asnumpy(), plain)


def test_block_hybridized_before_enable_works_after_rehybridize():
    net = mx.gluon.nn.Dense(4, in_units=8)
    net.initialize()
    net.cast("float16")
    net.hybridize()
    x = mx.nd.ones((2, 8), dtype="float16")
    with emulation.emulated():
        net.hybridize()
        assert net(x).dtype == np.float16
