"""The emulated-op table: consistent data. Its measured claims (each slow op over 2x, every op
without a CPU float16 kernel emulated) are checked by ``benchmarks/op_survey.py`` against the
survey it measures (``make bench``), not here: no test reads benchmark output."""
import mxnet as mx

from mxmixed.emulation._ops import (AMP_OPS, BIAS_TWICE, EMULATED_OPS, GEMM_OPS, NOT_EMULATED,
                                    SLOW_OPS)


def test_no_op_sits_in_two_lists():
    assert not set(GEMM_OPS) & set(SLOW_OPS)
    assert not set(EMULATED_OPS) & set(NOT_EMULATED)


def test_amp_float16_ops_and_dot_are_emulated():
    from mxnet.contrib import amp

    assert set(amp.list_lp16_ops("float16")) | {"dot", "batch_dot"} <= set(GEMM_OPS)


def test_every_emulated_op_exists_in_mxnet():
    for name in EMULATED_OPS:
        if name.startswith("_contrib_"):
            assert hasattr(mx.nd.contrib, name[len("_contrib_"):]), name
        else:
            assert hasattr(mx.nd, name) or hasattr(mx.nd.op, name), name


def test_every_op_left_out_is_marked_slow_same_or_gap():
    for name, reason in NOT_EMULATED.items():
        assert reason.startswith(("slow: ", "same: ", "gap: ")), name


def test_every_entry_says_what_the_gpu_computes():
    for name, spec in EMULATED_OPS.items():
        assert spec.gpu, name
        assert (spec.bias_input is not None) == (spec.gpu == BIAS_TWICE), name


def test_amp_multicast_is_emulated():
    assert "amp_multicast" in AMP_OPS and "amp_multicast" in EMULATED_OPS
