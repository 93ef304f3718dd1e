"""``_core/amx``: oneDNN's AMX kernels are asked for before MXNet's first op, only where the CPU
has AMX and nobody said otherwise; a request that came too late is found and said once; no
child process ever inherits a variable set for oneDNN, and the user's own values are kept.

This CPU may have no AMX: the flags and Linux's answer are faked where the plan is checked,
and the real pick is checked with an instruction set this CPU has (AVX2), which oneDNN's
verbose line names."""
import json
import sys

import pytest

from conftest import run_python
from mxmixed._core import amx, devices

AMX_FLAGS = {"amx_bf16", "amx_tile", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
PLAIN_FLAGS = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}


@pytest.fixture
def clean_env(monkeypatch):
    for name in amx.ISA_VARIABLES + ("MXMIXED_BFLOAT16_AMX",):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def amx_cpu(clean_env):
    clean_env.setattr(devices, "cpu_flags", lambda: AMX_FLAGS)
    clean_env.setattr(amx, "_ask_linux", lambda: "")
    return clean_env


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(amx, "_STATE", amx._Amx())
    return amx._STATE


def test_no_amx_flags_means_no_request(clean_env):
    clean_env.setattr(devices, "cpu_flags", lambda: PLAIN_FLAGS)
    assert amx._plan() == ("off: this CPU has no AMX-BF16", None)


def test_an_amx_cpu_with_nothing_set_asks_oneDNN_for_amx(amx_cpu):
    assert amx._plan() == ("on", "AVX512_CORE_AMX")


def test_the_switch_and_a_users_isa_are_obeyed(amx_cpu):
    amx_cpu.setenv("MXMIXED_BFLOAT16_AMX", "0")
    assert amx._plan() == ("off: MXMIXED_BFLOAT16_AMX=0", None)
    amx_cpu.delenv("MXMIXED_BFLOAT16_AMX")
    amx_cpu.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert amx._plan() == ("off: DNNL_MAX_CPU_ISA=AVX512_CORE_BF16, set outside mxmixed", None)
    amx_cpu.setenv("DNNL_MAX_CPU_ISA", "avx512_core_amx")
    assert amx._plan() == ("on: DNNL_MAX_CPU_ISA=avx512_core_amx, set outside mxmixed", None)


def test_the_older_spelling_is_handed_to_oneDNN_which_reads_only_the_new_one(amx_cpu):
    amx_cpu.setenv("MKLDNN_MAX_CPU_ISA", "AVX512_CORE")
    assert amx._plan() == ("off: MKLDNN_MAX_CPU_ISA=AVX512_CORE, set outside mxmixed",
                           "AVX512_CORE")
    amx_cpu.setenv("DNNL_MAX_CPU_ISA", "")  # empty: oneDNN reads it as unset
    assert amx._plan()[1] == "AVX512_CORE"
    amx_cpu.setattr(devices, "cpu_flags", lambda: PLAIN_FLAGS)  # on any CPU
    assert amx._plan() == ("off: this CPU has no AMX-BF16", "AVX512_CORE")


def test_a_cap_naming_amx_is_never_handed_on_without_the_tile_permission(amx_cpu):
    amx_cpu.setenv("MKLDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    amx_cpu.setattr(amx, "_ask_linux", lambda: "Linux refused the AMX tile state")
    assert amx._plan() == ("off: Linux refused the AMX tile state", None)
    amx_cpu.setenv("MXMIXED_BFLOAT16_AMX", "0")
    assert amx._plan() == ("off: MXMIXED_BFLOAT16_AMX=0", None)


def test_a_request_after_mxnet_was_imported_is_not_called_on_until_measured(amx_cpu, fresh_state):
    picked = []
    amx_cpu.setattr(amx, "_pick", picked.append)
    amx.arm()  # MXNet is imported in this process
    assert picked == ["AVX512_CORE_AMX"]
    assert not amx.amx_status().startswith("on")


@pytest.mark.parametrize("ratio", [0.63, 3.0])
def test_a_late_request_is_measured_once_and_a_slow_one_warned_once(amx_cpu, fresh_state,
                                                                     recwarn, ratio):
    amx_cpu.setattr(amx, "_pick", lambda isa: None)
    measured = []
    amx_cpu.setattr(amx, "_gemm_ratio", lambda: measured.append(1) or ratio)
    amx.arm()
    first, second = amx.request_amx(), amx.request_amx()
    assert first == second == amx.amx_status() and measured == [1]
    warned = [str(w.message) for w in recwarn.list if "AMX" in str(w.message)]
    if ratio < 1:
        assert first.startswith("off: requested after MXNet had run oneDNN ops")
        assert "0.63x float32" in first
        assert len(warned) == 1 and "import mxmixed before running any MXNet op" in warned[0]
        assert "\n" not in warned[0] and "0.63x" in warned[0]
    else:
        assert first == "on (a bfloat16 GEMM ran 3.00x float32 here)" and warned == []


def test_a_failed_pick_is_the_status_not_an_exception(amx_cpu, fresh_state):
    def fails(isa):
        raise RuntimeError("no engine")
    amx_cpu.setattr(amx, "_pick", fails)
    amx._decide(to_confirm=False)
    assert amx.amx_status() == "off: oneDNN's instruction set could not be picked (no engine)"


def test_the_gemm_probe_measures_a_ratio_here():
    if not devices.bfloat16_support()[0]:
        pytest.skip("bfloat16 cannot run here")
    assert amx._gemm_ratio(repeats=1) > 0


def _child(code, env=None):
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_the_request_runs_right_after_import_mxnet_before_any_op():
    """``import mxmixed`` before MXNet: the pick runs inside ``import mxnet``, with MXNet loaded
    and nothing run (the faked AMX CPU; the pick recorded, not made)."""
    code = """
import json, sys
import mxmixed
from mxmixed._core import amx, devices
assert "mxnet" not in sys.modules
devices.cpu_flags = lambda: {"amx_bf16", "amx_tile", "avx512f"}
amx._ask_linux = lambda: ""
amx._STATE = amx._Amx()
seen = []
amx._pick = lambda isa: seen.append([isa, "mxnet.ndarray" in sys.modules])
amx.arm()
assert seen == [] and amx._STATE.hook in sys.meta_path
import mxnet
print(json.dumps([seen, amx.amx_status(), amx._STATE.hook in sys.meta_path]))
"""
    out = json.loads(_child(code, env={"MXMIXED_BFLOAT16_AMX": "",
                                       "DNNL_MAX_CPU_ISA": ""}).stdout.splitlines()[-1])
    assert out == [[["AVX512_CORE_AMX", True]], "on", False]


PICK = """
import json, os
import mxmixed, mxnet as mx
from mxmixed._core import amx
amx._pick("AVX2")
env = {k: os.environ.get(k) for k in amx.ISA_VARIABLES}
a = mx.nd.ones((2, 4)); mx.nd.FullyConnected(a, a, no_bias=True, num_hidden=2).wait_to_read()
print("RESULT " + json.dumps(env), flush=True)
"""


@pytest.mark.parametrize("given", [None, ""])
def test_the_pick_hands_its_isa_to_onednn_and_puts_the_users_value_back(given):
    env = {"DNNL_VERBOSE": "1", "MKLDNN_MAX_CPU_ISA": "", "MXMIXED_BFLOAT16_AMX": "0"}
    if given is not None:
        env["DNNL_MAX_CPU_ISA"] = given
    code = PICK if given is not None else "import os\nos.environ.pop('DNNL_MAX_CPU_ISA', None)\n" + PICK
    lines = _child(code, env=env).stdout.splitlines()
    isa = [line for line in lines if line.startswith("dnnl_verbose,info,cpu,isa:")]
    assert isa == ["dnnl_verbose,info,cpu,isa:Intel AVX2"]
    result = json.loads([line for line in lines if line.startswith("RESULT ")][0][7:])
    assert result == {"DNNL_MAX_CPU_ISA": given, "MKLDNN_MAX_CPU_ISA": ""}


def test_no_other_thread_runs_python_while_the_variable_is_set():
    """While the pick has ``DNNL_MAX_CPU_ISA`` set, no other thread runs Python, so none can
    start a child process from Python code with it: a thread that reads the environment
    without pause never sees the variable. (A thread already inside a C call that forks
    without the interpreter, os.system or subprocess's fork, is not held: docs/bfloat16.md.)"""
    code = """
import os, threading
import mxmixed, mxnet as mx
from mxmixed._core import amx
os.environ.pop("DNNL_MAX_CPU_ISA", None)
seen, reads, done = set(), [0], threading.Event()
def watch():
    while not done.is_set():
        seen.add(os.environ.get("DNNL_MAX_CPU_ISA"))
        reads[0] += 1
worker = threading.Thread(target=watch)
worker.start()
while reads[0] < 1000:
    pass
for _ in range(5):
    amx._pick("AVX2")
before = reads[0]
while reads[0] < before + 1000:
    pass
done.set(); worker.join()
print(sorted(map(str, seen)), reads[0] > 2000)
"""
    out = _child(code).stdout.splitlines()[-1]
    assert out == "['None'] True", out


@pytest.mark.skipif(not devices.has_amx_bf16(), reason="this CPU has no AMX")
def test_on_an_amx_cpu_import_mxmixed_first_turns_amx_on_and_leaves_no_variable():
    code = ("import json, os, mxmixed, mxnet\nfrom mxmixed._core.amx import amx_status\n"
            "print(json.dumps([amx_status(), os.environ.get('DNNL_MAX_CPU_ISA')]))\n")
    status, variable = json.loads(_child(code, env={"MXMIXED_BFLOAT16_AMX": "1"})
                                  .stdout.strip().splitlines()[-1])
    assert variable is None
    assert status == "on" or status.startswith("off: Linux refused")


def test_import_mxmixed_does_not_load_mxnet_for_the_request():
    assert "mxnet" in sys.modules  # this process: MXNet came first, so arm ran at once
    code = "import sys, mxmixed\nprint('mxnet' in sys.modules)\n"
    assert _child(code).stdout.strip().splitlines()[-1] == "False"
