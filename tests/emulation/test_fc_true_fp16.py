"""``MXNET_FC_TRUE_FP16=1`` is refused with one warning: the emulation keeps float32 accumulation.

On a GPU the variable switches MXNet's cuBLAS GEMMs to float16 accumulation; the emulation does
not follow it (docs/emulation.md says why), and says so once per process.
"""
import logging

import numpy as np
import pytest

import mxnet as mx

from mxmixed import emulation
from mxmixed._core.state import EMULATION


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if "MXNET_FC_TRUE_FP16" in r.getMessage()]


@pytest.fixture
def unwarned(monkeypatch):
    monkeypatch.setattr(EMULATION, "fc_true_fp16_warned", False)


def test_fc_true_fp16_set_gives_one_warning_and_float32_accumulation(monkeypatch, caplog, unwarned):
    monkeypatch.setenv("MXNET_FC_TRUE_FP16", "1")
    x = mx.nd.ones((1, 4096), dtype="float16")
    w = mx.nd.ones((1, 4096), dtype="float16")
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        emulation.enable()
        emulation.disable()
        with emulation.emulated():
            out = mx.nd.FullyConnected(x, w, no_bias=True, num_hidden=1)
    messages = _warnings(caplog)
    assert len(messages) == 1
    assert "MXNET_FC_TRUE_FP16=1 is not emulated" in messages[0] and "float32" in messages[0]
    # a float16 accumulator stops at 2048 (2048 + 1 rounds back to 2048); float32 reaches 4096
    assert out.asnumpy()[0, 0] == np.float16(4096)


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_fc_true_fp16_unset_or_false_gives_no_warning(monkeypatch, caplog, unwarned, value):
    monkeypatch.setenv("MXNET_FC_TRUE_FP16", value)
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        with emulation.emulated():
            pass
    assert _warnings(caplog) == []
