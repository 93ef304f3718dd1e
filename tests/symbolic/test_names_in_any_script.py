"""A Gluon export whose layer names are in any script (``réseau_``, ``网络_``), which MXNet
loads, converts, validates under the emulation and exports to ONNX: every graph the package
rewrites is handed back to MXNet with its names as they are (MXNet's JSON reader knows no
``\\u`` escape)."""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from conftest import run_convert
from mxmixed import cli, symbolic

SHAPE = (3, 8, 8)


@pytest.fixture(scope="module", params=["réseau_", "网络_"])
def export(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("names")
    net = gluon.nn.HybridSequential(prefix=request.param)
    with net.name_scope():
        net.add(gluon.nn.Conv2D(4, 3), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
                gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1,) + SHAPE))
    prefix = str(folder / "net")
    net.export(prefix)
    return prefix, request.param


def _names(prefix):
    with open(prefix + "-symbol.json", encoding="utf-8") as handle:
        return [node["name"] for node in json.load(handle)["nodes"]]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_model_named_in_any_script_converts_and_validates(export, tmp_path, capsys, dtype):
    prefix, script = export
    out = str(tmp_path / "out")
    code, stdout, err = run_convert([prefix, "0", "--out", out, "--dtype", dtype, "--validate",
                                     "4", "--input-shape", ",".join(map(str, SHAPE))], capsys)
    assert code == cli.EXIT_OK, err
    assert "Validation: %s against float32" % dtype in stdout
    assert script + "conv0_fwd" in _names(out)
    with open(out + "-symbol.json", "rb") as handle:
        assert script.encode("utf-8") in handle.read()  # as it is, not escaped


def test_a_model_named_in_any_script_runs_under_the_emulation(export):
    prefix, script = export
    fp32 = symbolic.load_checkpoint(prefix, 0)
    model = symbolic.convert(*fp32)
    X = np.random.RandomState(0).uniform(-1, 1, (4,) + SHAPE).astype(np.float32)
    report = symbolic.validate(fp32, model, X, progress=False)
    assert report.passes(0.01) and "float16 emulated" in report.device, report
    assert script + "conv0_fwd" in model.report.layer_dtypes


@pytest.mark.slow
def test_a_model_named_in_any_script_exports_to_onnx(export, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    prefix, script = export
    out = str(tmp_path / "out")
    code, stdout, err = run_convert([prefix, "0", "--out", out, "--format", "onnx",
                                     "--validate", "4", "--input-shape",
                                     ",".join(map(str, SHAPE))], capsys)
    assert code == cli.EXIT_OK, err
    import onnx
    names = [node.name for node in onnx.load(out + ".onnx").graph.node]
    assert any(name.startswith(script) for name in names)
