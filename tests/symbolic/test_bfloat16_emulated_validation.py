"""Validation of a bfloat16 model on a CPU that cannot run MXNet's bfloat16 (issue 38, item 2).

There the converted graph runs under a bfloat16 emulation: float32 arithmetic, rounded to
bfloat16 (``_mxmixed_round_bf16``, round to nearest even) wherever the bfloat16 graph holds a
bfloat16 tensor. A CPU without AVX-512 is simulated by hiding the flags that
``bfloat16_support`` reads (``devices.cpu_flags``) and, in a subprocess, by capping oneDNN at
AVX2 with ``DNNL_MAX_CPU_ISA`` (MXNet 1.9.1's oneDNN honours it: a bfloat16 FullyConnected then
fails with "could not create a primitive descriptor iterator"; ``MKLDNN_MAX_CPU_ISA`` is
ignored). On this CPU, where bfloat16 runs natively, the emulated outputs are compared with
oneDNN's.
"""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from conftest import run_python
from mxmixed import cli, symbolic
from mxmixed._core import devices
from mxmixed._core.dtypes import BFLOAT16, FLOAT32
from mxmixed._core.graph import Graph, dtype_code
from mxmixed.emulation import _round16
from mxmixed.symbolic._bfloat16_emulation import bfloat16_entries, emulate_bfloat16
from mxmixed.symbolic._inference import block_facts, inference_graph, symbol_block

RUNS, WHY = devices.bfloat16_support()
needs_bfloat16 = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
# emulated and native outputs, max|y_emulated - y_native| / max|y_native|, measured on an
# AVX512-BF16 CPU: 0 on the MLP, 0.0066 on resnet18_v1 (folded) at 32 px, 0.0030 at 64 px, where
# each is 0.006-0.009 from float32 (oneDNN fuses a Convolution with its ReLU or residual add and
# rounds once; the emulation rounds after each op). The bfloat16 tolerance is 0.1.
EMULATED_VS_NATIVE = 0.02


@pytest.fixture
def no_avx512(monkeypatch):
    """This CPU as one without AVX-512, as bfloat16_support() sees it."""
    flags = devices.cpu_flags() or set()
    monkeypatch.setattr(devices, "cpu_flags",
                        lambda: flags - {"avx512f", "avx512bw", "avx512vl", "avx512dq"})
    assert not devices.bfloat16_support()[0]


def _fan_in_init(net, x):
    net.initialize()
    net(x)
    rng = np.random.RandomState(0)
    for name, param in net.collect_params().items():
        if name.endswith("weight") and len(param.shape) >= 2:
            fan_in = int(np.prod(param.shape[1:]))
            param.set_data(mx.nd.array(rng.normal(0, np.sqrt(2.0 / fan_in), size=param.shape)))
        elif name.endswith(("gamma", "moving_var", "running_var")):
            param.set_data(mx.nd.array(rng.uniform(0.5, 1.5, size=param.shape)))
        elif name.endswith(("beta", "moving_mean", "running_mean", "bias")):
            param.set_data(mx.nd.array(rng.uniform(-0.1, 0.1, size=param.shape)))


def _export(net, x, folder, name):
    _fan_in_init(net, x)
    net.hybridize()
    net(x)
    prefix = str(folder / name)
    net.export(prefix)
    return mx.model.load_checkpoint(prefix, 0), prefix


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    with mx.name.NameManager():
        net = gluon.nn.HybridSequential(prefix="mlp_")
        with net.name_scope():
            net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(32, activation="tanh"),
                    gluon.nn.Dense(10))
    x = np.random.RandomState(1).uniform(-1, 1, size=(16, 20)).astype(np.float32)
    fp32, prefix = _export(net, mx.nd.array(x), tmp_path_factory.mktemp("mlp"), "mlp")
    return fp32, prefix, x


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    from gluoncv.model_zoo import get_model

    with mx.name.NameManager():
        net = get_model("resnet18_v1", pretrained=False, classes=10)
    x = np.random.RandomState(2).uniform(size=(8, 3, 64, 64)).astype(np.float32)
    fp32, prefix = _export(net, mx.nd.array(x), tmp_path_factory.mktemp("r18"), "r18")
    return fp32, prefix, x


def _rne_reference(bits):
    wide = bits.astype(np.uint64)
    return ((wide + 0x7FFF + ((wide >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)


def test_the_rounding_is_round_to_nearest_even_bit_for_bit():
    op = _round16.round_bf16_op()
    assert op == "_mxmixed_round_bf16", _round16.status()
    rng = np.random.RandomState(0)
    special = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF,
               0x7F7F8000, 0x00000001, 0x807FFFFF, 0x007FFFFF, 0x00008000, 0x00018000,
               0x00017FFF, 0x3F808000, 0x3F818000, 0x3F807FFF, 0xBF818000, 0x3F80C000,
               0x7FC00000, 0x7F800001, 0xFFC00001, 0x7FFFFFFF]
    ties = (rng.randint(0, 1 << 16, size=4096).astype(np.uint32) << 16) | 0x8000
    bits = np.concatenate([rng.randint(0, 1 << 32, size=1 << 18, dtype=np.uint64)
                           .astype(np.uint32), ties, np.array(special, np.uint32)])
    x = bits.view(np.float32)
    data = mx.sym.var("data", dtype="float32")
    graph = Graph(mx.sym.identity(data, name="r"))
    graph = graph.with_nodes({1: dict(graph.nodes[1], op=op)})
    got = graph.to_symbol().bind(mx.cpu(), {"data": mx.nd.array(x)}).forward()[0].asnumpy()
    nan = np.isnan(x)
    assert nan.sum() > 100 and np.isnan(got[nan]).all()  # NaN kept, never carried into inf
    mismatch = got.view(np.uint32)[~nan] != _rne_reference(bits)[~nan]
    assert not mismatch.any(), [hex(b) for b in bits[~nan][mismatch][:5]]
    assert got[-23 + 4] == np.inf and got[-23 + 5] == -np.inf  # max rounds up to inf


def _emulated(model):
    sym = inference_graph(model.symbol)
    return emulate_bfloat16(sym, model.arg_params, model.aux_params, {"data": FLOAT32})


def test_the_emulated_graph_holds_no_bfloat16_op_or_entry(mlp):
    model = symbolic.convert(*mlp[0], target_dtype="bfloat16")
    assert bfloat16_entries(Graph(model.symbol), {"data": FLOAT32, **{
        n: np.dtype(v.dtype) for n, v in model.arg_params.items()}})
    sym, args, auxs = _emulated(model)
    graph = Graph(sym)
    types = {n: np.dtype(v.dtype) for n, v in list(args.items()) + list(auxs.items())}
    assert set(types.values()) == {FLOAT32}
    assert bfloat16_entries(graph, dict(types, data=FLOAT32)) == []
    ops = [n["op"] for n in graph.nodes if n["op"] != "null"]
    assert "amp_cast" not in ops and "amp_multicast" not in ops
    assert ops.count("_mxmixed_round_bf16") >= 4  # the input cast and each layer's output
    attrs = [dict(n.attrs) for n in graph.nodes]
    assert "bfloat16" not in json.dumps(attrs)  # names may say bfloat16; no dtype does
    assert all(a.get("__dtype__") != dtype_code(BFLOAT16) for a in attrs)
    for name, value in model.arg_params.items():  # params: the same values, in float32
        bits = value.asnumpy().view(np.uint16).astype(np.uint32) << 16
        assert np.array_equal(args[name].asnumpy(), bits.view(np.float32))


def _distance(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def _native_and_emulated(fp32, x, monkeypatch):
    model = symbolic.convert(*fp32, target_dtype="bfloat16")  # BatchNorm folded by default
    native_block = symbol_block(model.symbol, model.arg_params, model.aux_params, mx.cpu())
    assert block_facts(native_block).bfloat16_emulated is None
    native = native_block(mx.nd.array(x)).asnumpy()
    monkeypatch.setattr(devices, "bfloat16_support", lambda: (False, "simulated"))
    block = symbol_block(model.symbol, model.arg_params, model.aux_params, mx.cpu())
    assert block_facts(block).bfloat16_emulated == "simulated"
    emulated = block(mx.nd.array(x)).asnumpy()
    reference = symbol_block(*fp32, mx.cpu())(mx.nd.array(x)).asnumpy()
    return native, emulated, reference


@needs_bfloat16
def test_emulated_outputs_match_native_bfloat16_on_an_mlp(mlp, monkeypatch):
    native, emulated, reference = _native_and_emulated(mlp[0], mlp[2], monkeypatch)
    assert _distance(emulated, native) <= EMULATED_VS_NATIVE
    assert 1e-4 < _distance(emulated, reference) < 0.05  # bfloat16 rounding shows
    assert 1e-4 < _distance(native, reference) < 0.05


@pytest.mark.slow
@needs_bfloat16
def test_emulated_outputs_match_native_bfloat16_on_resnet18(resnet, monkeypatch):
    native, emulated, reference = _native_and_emulated(resnet[0], resnet[2], monkeypatch)
    assert _distance(emulated, native) <= EMULATED_VS_NATIVE, _distance(emulated, native)
    assert _distance(emulated, reference) < 0.05 and _distance(native, reference) < 0.05


def test_validate_runs_emulated_where_bfloat16_cannot_run(mlp, no_avx512):
    model = symbolic.convert(*mlp[0], target_dtype="bfloat16")
    report = symbolic.validate(mlp[0], model, mlp[2], progress=False)
    assert report.target_dtype == "bfloat16" and report.passes(0.1)
    assert report.emulation.startswith("validated under a bfloat16 emulation (float32 "
                                       "arithmetic, bfloat16 rounding): this CPU cannot run")
    assert "avx512f" in report.emulation and "\n" not in report.emulation
    assert report.emulation in str(report) and "bfloat16 emulated" in report.device


@needs_bfloat16
def test_validate_stays_native_where_bfloat16_runs(mlp):
    model = symbolic.convert(*mlp[0], target_dtype="bfloat16")
    report = symbolic.validate(mlp[0], model, mlp[2], progress=False)
    assert report.emulation is None and "bfloat16 through oneDNN" in report.device
    assert "emulation" not in str(report)


def test_cli_convert_validate_runs_emulated_on_a_cpu_without_avx512(mlp, tmp_path, capsys,
                                                                    no_avx512):
    np.save(str(tmp_path / "x.npy"), mlp[2])
    out = str(tmp_path / "bf16")
    code = cli.main(["convert", mlp[1], "0", "--out", out, "--dtype", "bfloat16",
                     "--validate", "8", "--inputs", str(tmp_path / "x.npy")])
    captured = capsys.readouterr()
    assert code == 0, captured
    notes = [line for line in captured.err.splitlines() if "bfloat16 emulation" in line]
    assert len(notes) == 1 and notes[0].startswith(
        "mxmixed convert: note: validated under a bfloat16 emulation (float32 arithmetic, "
        "bfloat16 rounding): this CPU cannot run MXNet's bfloat16 (")
    assert "Validation: bfloat16 against float32" in captured.out
    _, args, _ = symbolic.load_checkpoint(out, 0)
    assert any(np.dtype(v.dtype) == BFLOAT16 for v in args.values())


def test_cli_convert_validate_fails_by_the_verdict_under_the_emulation(mlp, tmp_path, capsys,
                                                                      no_avx512):
    code = cli.main(["convert", mlp[1], "0", "--out", str(tmp_path / "o"), "--dtype",
                     "bfloat16", "--validate", "4", "--input-shape", "20", "--tolerance",
                     "1e-6"])
    err = capsys.readouterr().err
    assert code == 1 and "validation failed" in err and "bfloat16 emulation" in err
    assert not (tmp_path / "o-symbol.json").exists()


@pytest.mark.slow
def test_validate_under_the_emulation_with_onednn_capped_at_avx2(mlp):
    """oneDNN capped at AVX2 (DNNL_MAX_CPU_ISA): bfloat16 ops fail, the emulation runs."""
    code = """
import numpy as np, mxnet as mx
from mxmixed import symbolic
from mxmixed._core import devices
from mxmixed._core.dtypes import BFLOAT16
flags = devices.cpu_flags() or set()
devices.cpu_flags = lambda: flags - {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
w = mx.nd.amp_cast(mx.nd.ones((4, 8)), dtype=BFLOAT16)
try:
    mx.nd.FullyConnected(w, w, no_bias=True, num_hidden=4).wait_to_read()
    print("NATIVE-RAN")
except mx.base.MXNetError:
    print("NATIVE-FAILED")
fp32 = mx.model.load_checkpoint(%r, 0)
model = symbolic.convert(*fp32, target_dtype="bfloat16")
report = symbolic.validate(fp32, model, np.load(%r), progress=False)
print("ERROR", report.error, bool(report.emulation))
""" % (mlp[1], mlp[1] + "-x.npy")
    np.save(mlp[1] + "-x.npy", mlp[2])
    proc = run_python(code, env={"DNNL_MAX_CPU_ISA": "AVX2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "NATIVE-FAILED" in proc.stdout, proc.stdout
    error = [line.split() for line in proc.stdout.splitlines() if line.startswith("ERROR")][0]
    assert float(error[1]) < 0.05 and error[2] == "True"
