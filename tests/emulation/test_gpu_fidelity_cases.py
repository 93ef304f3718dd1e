"""The GPU fidelity harness: its CPU half writes the cases and the emulated outputs."""
import json
import os
import sys

import numpy as np

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_fidelity  # noqa: E402


def test_cpu_half_writes_cases_with_emulated_float16_outputs(tmp_path):
    path = str(tmp_path / "cases.npz")
    names = gpu_fidelity.cpu_half(path, ["fc_bias", "conv3x3", "batchnorm_train", "relu"])
    cases = dict(np.load(path))
    specs = json.loads(bytes(cases["__specs__"]).decode())
    assert sorted(specs) == sorted(names)
    for name in names:
        out = cases[name + "/emu_out"]
        assert out.dtype == np.float16 and np.isfinite(out.astype(np.float32)).all()
        assert cases[name + "/in0"].dtype == np.float16
    # backward cases carry the head gradient and the emulated input gradients
    assert cases["fc_bias/emu_dy"].dtype == np.float16
    assert {"fc_bias/emu_grad0", "fc_bias/emu_grad1", "fc_bias/emu_grad2"} <= set(cases)
    # the biased FC output is the no-bias GEMM rounded, plus the bias in float16 arithmetic
    x, w, b = (cases["fc_bias/in%d" % k].astype(np.float64) for k in range(3))
    nobias = (x @ w.T).astype(np.float16).astype(np.float32)
    expected = (nobias + b.astype(np.float32)).astype(np.float16)
    assert np.mean(cases["fc_bias/emu_out"] == expected) > 0.99

