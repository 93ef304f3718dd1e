"""The emulated-op table: consistent data, backed by the measured op survey."""
import json
import os

import mxnet as mx

from conftest import ROOT
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
        assert (hasattr(mx.nd, name) or hasattr(mx.nd.op, name)
                or hasattr(mx.nd.contrib, name[len("_contrib_"):])), name


def test_every_slow_op_was_measured_over_2x_in_the_survey():
    survey = []
    for name in ("op_survey.json", "op_survey_zoo.json"):
        with open(os.path.join(ROOT, "benchmarks", name)) as handle:
            survey += json.load(handle)["ops"]
    worst = {}
    for row in survey:
        ratios = [r for r in (row.get("ratio"), row.get("fwd_ratio"), row.get("ratio_scaled"))
                  if r is not None]
        if ratios:
            worst[row["op"]] = max(worst.get(row["op"], 0), max(ratios))
    for name in SLOW_OPS:
        assert worst.get(name, 0) > 2.0, name
    for name, reason in NOT_EMULATED.items():
        assert reason.startswith(("slow: ", "gap: ")), name
        if reason.startswith("slow: "):
            assert name in worst, name


def test_every_entry_says_what_the_gpu_computes():
    for name, spec in EMULATED_OPS.items():
        assert spec.gpu, name
        assert (spec.bias_input is not None) == (spec.gpu == BIAS_TWICE), name


def test_the_zoo_survey_found_no_failing_op_that_is_not_emulated():
    with open(os.path.join(ROOT, "benchmarks", "op_survey_zoo.json")) as handle:
        rows = json.load(handle)["ops"]
    failing = {row["op"] for row in rows if row["cls"] in ("missing", "onednn")}
    assert failing <= set(EMULATED_OPS), failing - set(EMULATED_OPS)
    assert "amp_multicast" in AMP_OPS
