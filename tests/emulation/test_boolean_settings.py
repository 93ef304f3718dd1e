"""The emulation reads MXNet's boolean settings and attributes as MXNet does (``_core/mxbool``).

A value MXNet refuses (``' 1'``, ``yes``) is a one-line ``ValueError`` where MXNet would fail on a
GPU; before, ``MXNET_FC_TRUE_FP16=' 0'`` passed silently and ``yes`` was read as on, and
``MXNET_ELIMINATE_COMMON_EXPR=yes`` as on, and ``MXNET_MKLDNN_ENABLED=false`` as oneDNN on
(MXNet: off). A softmax with ``use_length='FALSE'`` is emulated
like one with ``False`` (it kept its slow float16 kernel).
"""
import logging

import pytest

import mxnet as mx

from mxmixed import emulation
from mxmixed._core.state import EMULATION
from mxmixed.emulation._ops import EMULATED_OPS, applies
from mxmixed.emulation._wrappers import onednn_active


@pytest.mark.parametrize("value", [" 1", " 0", "yes", "on"])
def test_fc_true_fp16_that_mxnet_refuses_is_one_line(monkeypatch, value):
    monkeypatch.setattr(EMULATION, "fc_true_fp16_warned", False)
    monkeypatch.setenv("MXNET_FC_TRUE_FP16", value)
    with pytest.raises(ValueError, match="^MXNET_FC_TRUE_FP16=%r: MXNet reads it as a boolean"
                                         % value) as refused:
        emulation.enable()
    assert "\n" not in str(refused.value) and not EMULATION.active


def test_fc_true_fp16_in_capitals_is_on(monkeypatch, caplog):
    monkeypatch.setattr(EMULATION, "fc_true_fp16_warned", False)
    monkeypatch.setenv("MXNET_FC_TRUE_FP16", "TRUE")
    with caplog.at_level(logging.WARNING, logger="mxmixed.emulation"):
        with emulation.emulated():
            pass
    assert any("MXNET_FC_TRUE_FP16=TRUE is not emulated" in r.getMessage()
               for r in caplog.records)


def test_eliminate_common_expr_that_mxnet_refuses_is_one_line(monkeypatch):
    """Three float16 copies of one relu, each widened for a float16 convolution: whether
    MXNet merges them depends on the variable."""
    monkeypatch.setenv("MXNET_ELIMINATE_COMMON_EXPR", "yes")
    act = mx.sym.Activation(mx.sym.var("data"), act_type="relu", name="a")
    convs = [mx.sym.Convolution(mx.sym.amp_cast(act, dtype="float16", name=name + "_copy"),
                                kernel=(1, 1), num_filter=4, no_bias=True, name=name)
             for name in ("c1", "c2", "c3")]
    sym = mx.sym.add_n(*convs)
    types = {"data": "float16", "c1_weight": "float16", "c2_weight": "float16",
             "c3_weight": "float16"}
    with pytest.raises(ValueError, match="^MXNET_ELIMINATE_COMMON_EXPR='yes'"):
        emulation.emulate_symbol(sym, types)
    monkeypatch.setenv("MXNET_ELIMINATE_COMMON_EXPR", "FALSE")
    emulation.emulate_symbol(sym, types)


@pytest.mark.parametrize("text, emulated", [(None, True), ("None", True), ("FALSE", True),
                                            (" 0", True), (False, True), ("True", False),
                                            ("maybe", False)])
def test_softmax_use_length_is_read_as_mxnet_reads_it(text, emulated):
    attrs = {} if text is None else {"use_length": text}
    assert applies(EMULATED_OPS["softmax"], attrs) is emulated


@pytest.mark.skipif(not mx.runtime.Features().is_enabled("MKLDNN"), reason="no oneDNN in this MXNet")
@pytest.mark.parametrize("value, active", [("false", False), ("FALSE", False), ("0", False),
                                           ("", True), ("True", True)])
def test_onednn_is_off_where_mxnet_reads_mkldnn_enabled_as_off(monkeypatch, value, active):
    monkeypatch.setenv("MXNET_MKLDNN_ENABLED", value)
    assert onednn_active() is active
