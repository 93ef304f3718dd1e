"""``_core/amx.request_amx``: oneDNN's AMX kernels are asked for only where the CPU has AMX and
nobody said otherwise, and the environment a child process inherits is left as it was."""
import json

import pytest

from conftest import run_python
from mxmixed._core import amx, devices

AMX_FLAGS = {"amx_bf16", "amx_tile", "avx512f"}


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("DNNL_MAX_CPU_ISA", "MKLDNN_MAX_CPU_ISA", "MXMIXED_BFLOAT16_AMX"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_no_amx_flags_means_no_request(clean_env):
    clean_env.setattr(devices, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert amx._request() == "off: this CPU has no AMX-BF16"


def test_the_switch_and_a_users_isa_are_obeyed(clean_env):
    clean_env.setattr(devices, "cpu_flags", lambda: AMX_FLAGS)
    clean_env.setenv("MXMIXED_BFLOAT16_AMX", "0")
    assert amx._request() == "off: MXMIXED_BFLOAT16_AMX=0"
    clean_env.delenv("MXMIXED_BFLOAT16_AMX")
    clean_env.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert amx._request() == "off: DNNL_MAX_CPU_ISA=AVX512_CORE_BF16, set outside mxmixed"


@pytest.mark.skipif(not {"amx_bf16", "amx_tile"} <= (devices.cpu_flags() or set()),
                    reason="this CPU has no AMX")
def test_on_an_amx_cpu_the_request_leaves_no_variable_for_children(tmp_path):
    code = ("import json, os\nfrom mxmixed._core.amx import request_amx\n"
            "print(json.dumps([request_amx(), os.environ.get('DNNL_MAX_CPU_ISA')]))\n")
    proc = run_python(code, env={"MXMIXED_BFLOAT16_AMX": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, variable = json.loads(proc.stdout.strip().splitlines()[-1])
    assert variable is None
    assert status == "on" or status.startswith("off: Linux refused")
