"""The emulation against a real GPU's outputs for the NLP ops.

``tests/data/gpu_outputs_nlp.npz`` holds float16 inputs and what an NVIDIA H200 computed from
them (``benchmarks/gpu_fidelity.py``'s GPU half, composing MXNet 1.9.1's GPU kernels with
PyTorch; ``tests/data/make_gpu_outputs.py`` kept them). The floors below are what the emulation
measured against that GPU, with room for another CPU's float32 GEMM order. LayerNorm has no
GEMM and is held bit for bit; softmax's float32 sums run in another order than PyTorch's on the
GPU (docs/emulation-reference.md, "Compared with a GPU").
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_fidelity  # noqa: E402

from mxmixed import emulation  # noqa: E402

RECORDED = os.path.join(ROOT, "tests", "data", "gpu_outputs_nlp.npz")
# case:output -> (least share bit-identical, most float16 ulps apart)
FLOORS = {
    "elemwise_mul:out": (1.0, 0), "mul_scalar:out": (1.0, 0), "exp:out": (0.999, 1),
    "erf:out": (0.999, 1), "gelu:out": (0.97, 3), "gelu:grad0": (0.999, 1),
    "softmax_safe_acc:out": (0.999, 1), "softmax_safe_acc:grad0": (0.995, 2),
    "layernorm_safe_acc:out": (1.0, 0), "layernorm_safe_acc:grad0": (1.0, 0),
    "layernorm_safe_acc:grad1": (1.0, 0), "layernorm_safe_acc:grad2": (1.0, 0),
    "selfatt_qk:out": (0.995, 1), "selfatt_qk:grad0": (0.995, 1),
    "selfatt_valatt:out": (0.995, 1), "selfatt_valatt:grad0": (0.995, 1),
    "selfatt_valatt:grad1": (0.995, 1),
}


@pytest.fixture(scope="module")
def recorded():
    data = dict(np.load(RECORDED))
    about = json.loads(bytes(data.pop("__about__")).decode())
    return about, data


@pytest.fixture(scope="module")
def emulated(recorded):
    """Every recorded case recomputed by today's emulation on this CPU."""
    about, data = recorded
    results = {}
    with emulation.emulated():
        for name, spec in about["specs"].items():
            arrays = {k.split("/", 1)[1]: v for k, v in data.items()
                      if k.startswith(name + "/in")}
            with gpu_fidelity._safe_accumulation(name in gpu_fidelity.SAFE_ACCUMULATION):
                results[name] = gpu_fidelity.emulate(name, spec, arrays)
    return results


def test_the_recorded_outputs_come_from_a_gpu(recorded):
    about, data = recorded
    assert "H200" in about["device"] or "H100" in about["device"]
    assert {key.split(":")[0] for key in FLOORS} == set(about["specs"])
    assert all(data[k].dtype == np.float16 for k in data)


def test_the_head_gradients_are_the_ones_the_gpu_was_given(recorded, emulated):
    _, data = recorded
    for name, result in emulated.items():
        if "dy" in result:
            np.testing.assert_array_equal(result["dy"], data[name + "/dy"])


@pytest.mark.parametrize("key", sorted(FLOORS))
def test_the_emulation_matches_the_gpu_on_nlp_ops(key, recorded, emulated):
    _, data = recorded
    name, output = key.split(":")
    share, ulps = FLOORS[key]
    got = gpu_fidelity.compare(emulated[name][output], data["%s/%s" % (name, output)])
    assert got["bit_identical"] >= share and got["max_ulp"] <= ulps, (key, got)
