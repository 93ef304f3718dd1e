"""Conversion to bfloat16 for CPU serving: ``convert(target_dtype='bfloat16')``, ``mxmixed
convert --dtype bfloat16``, and ``load_bfloat16``, which runs the pair through oneDNN (no
float16 emulation) with static memory."""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from mxmixed import cli, symbolic
from mxmixed._core.dtypes import BFLOAT16
from mxmixed._core.devices import bfloat16_support

RUNS, WHY = bfloat16_support()
needs_bfloat16 = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)


def _fan_in_init(net, x):
    """Scale-preserving random init (nothing downloads): fan-in normal weights, identity
    BatchNorm, zero biases, so outputs have a trained net's scale."""
    net.initialize()
    net(x)
    rng = np.random.RandomState(0)
    for name, param in net.collect_params().items():
        if name.endswith("weight") and len(param.shape) >= 2:
            fan_in = int(np.prod(param.shape[1:]))
            param.set_data(mx.nd.array(rng.normal(0, np.sqrt(2.0 / fan_in), size=param.shape)))
        elif name.endswith(("gamma", "moving_var", "running_var")):
            param.set_data(mx.nd.ones(param.shape))
        elif name.endswith(("beta", "moving_mean", "running_mean", "bias")):
            param.set_data(mx.nd.zeros(param.shape))


def _export(net, x, folder, name):
    net.hybridize()
    net(x)
    prefix = str(folder / name)
    net.export(prefix)
    return prefix


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    from gluoncv.model_zoo import get_model

    with mx.name.NameManager():
        net = get_model("cifar_resnet20_v1", pretrained=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(4, 3, 32, 32)))
    _fan_in_init(net, x)
    prefix = _export(net, x, tmp_path_factory.mktemp("cifar"), "cifar")
    return prefix, x.asnumpy().astype(np.float32)


@pytest.fixture(scope="module")
def ssd(tmp_path_factory):
    from gluoncv.model_zoo import get_model

    with mx.name.NameManager():
        net = get_model("ssd_512_mobilenet1.0_voc", pretrained=False, pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(1, 3, 128, 128)))
    _fan_in_init(net, x)
    prefix = _export(net, x, tmp_path_factory.mktemp("ssd"), "ssd")
    X = np.random.RandomState(1).uniform(size=(2, 3, 128, 128)).astype(np.float32)
    return prefix, X


def test_bfloat16_conversion_stores_bfloat16_params_and_reports_them(cifar):
    sym, args, auxs = mx.model.load_checkpoint(cifar[0], 0)
    convs = sum(1 for n in json.loads(sym.tojson())["nodes"] if n["op"] == "Convolution")
    model = symbolic.convert(sym, args, auxs, target_dtype="bfloat16")
    report = model.report
    assert report.target_dtype == "bfloat16" and convs >= 19
    assert report.count("Convolution", "bfloat16") == convs
    assert report.count("Convolution", "float32") == 0
    first = str(report).splitlines()[0]
    assert first.startswith("Bfloat16 conversion report: ") and " compute in bfloat16" in first
    weights = [v for k, v in model.arg_params.items() if k.endswith("conv0_weight")]
    assert weights and all(np.dtype(w.dtype) == BFLOAT16 for w in weights)
    assert 0.49 < report.size_ratio < 0.52
    casts = [n["attrs"]["dtype"] for n in json.loads(model.symbol.tojson(remove_amp_cast=False))
             ["nodes"] if n["op"] == "amp_cast"]
    assert set(casts) == {"bfloat16", "float32"}


def test_bfloat16_refuses_float16_inputs_and_outputs(cifar):
    with pytest.raises(symbolic.ConversionError, match="keep_io_types=False is for float16"):
        symbolic.convert(*mx.model.load_checkpoint(cifar[0], 0), target_dtype="bfloat16",
                         keep_io_types=False)


@needs_bfloat16
def test_load_bfloat16_gives_a_static_block_close_to_float32(cifar, tmp_path):
    prefix, X = cifar
    out = str(tmp_path / "bf16")
    symbolic.convert(*mx.model.load_checkpoint(prefix, 0), target_dtype="bfloat16").save(out)
    block = symbolic.load_bfloat16(out, 0)
    assert dict(block._flags)["static_alloc"] and dict(block._flags)["static_shape"]
    y = block(mx.nd.array(X))
    assert y.dtype == np.float32 and y.shape == (4, 10)
    ref = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    y32 = ref(mx.nd.array(X)).asnumpy()
    rel = np.abs(y.asnumpy() - y32).max() / np.abs(y32).max()
    assert 1e-4 < rel < 0.1  # bfloat16 rounding shows (it is not float32), within its bound


@needs_bfloat16
def test_load_bfloat16_runs_the_graph_without_the_float16_emulation(cifar, tmp_path):
    out = str(tmp_path / "bf16")
    model = symbolic.convert(*mx.model.load_checkpoint(cifar[0], 0), target_dtype="bfloat16")
    model.save(out)
    block = symbolic.load_bfloat16(out, 0)
    saved = json.loads(model.symbol.tojson(remove_amp_cast=False))["nodes"]
    loaded = json.loads(block._cached_graph[1].tojson(remove_amp_cast=False))["nodes"]
    assert sorted(n["op"] for n in loaded) == sorted(n["op"] for n in saved)


@pytest.mark.slow
def test_load_bfloat16_refuses_a_float16_pair(cifar, tmp_path):
    if not RUNS:
        pytest.skip("bfloat16 cannot run here: %s" % WHY)
    out = str(tmp_path / "fp16")
    symbolic.convert(*mx.model.load_checkpoint(cifar[0], 0)).save(out)
    with pytest.raises(symbolic.ConversionError, match="is a float16 model, not a bfloat16 one"):
        symbolic.load_bfloat16(out, 0)


def test_load_bfloat16_says_in_one_line_why_it_cannot_run(cifar, tmp_path, monkeypatch):
    from mxmixed.symbolic import _blocks

    monkeypatch.setattr(_blocks, "bfloat16_support", lambda: (False, "this CPU lacks avx512bw"))
    with pytest.raises(symbolic.ConversionError) as err:
        symbolic.load_bfloat16(cifar[0], 0)
    assert str(err.value) == "cannot run a bfloat16 model here: this CPU lacks avx512bw"


@needs_bfloat16
def test_cli_converts_and_validates_a_classifier_to_bfloat16(cifar, tmp_path, capsys):
    prefix, X = cifar
    np.save(str(tmp_path / "x.npy"), X)
    out = str(tmp_path / "c-bf16")
    code = cli.main(["convert", prefix, "0", "--out", out, "--dtype", "bfloat16",
                     "--validate", "4", "--inputs", str(tmp_path / "x.npy")])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert "Validation: bfloat16 against float32" in stdout
    assert "bfloat16 through oneDNN" in stdout
    _, args, _ = symbolic.load_checkpoint(out, 0)
    assert any(np.dtype(v.dtype) == BFLOAT16 for v in args.values())


@pytest.mark.slow
@needs_bfloat16
def test_cli_converts_and_validates_a_detector_to_bfloat16(ssd, tmp_path, capsys):
    prefix, X = ssd
    np.save(str(tmp_path / "x.npy"), X)
    out = str(tmp_path / "ssd-bf16")
    code = cli.main(["convert", prefix, "0", "--out", out, "--dtype", "bfloat16",
                     "--validate", "2", "--inputs", str(tmp_path / "x.npy"), "--batch-size",
                     "1"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    assert "detection ops kept float32" in stdout and "[detections:" in stdout
    ids, scores, boxes = symbolic.load_bfloat16(out, 0)(mx.nd.array(X[:1]))
    assert boxes.shape == (1, 100, 4) and boxes.dtype == np.float32


def test_cli_bfloat16_validation_failure_points_at_exclude_not_the_search(cifar, tmp_path,
                                                                        capsys):
    if not RUNS:
        pytest.skip("bfloat16 cannot run here: %s" % WHY)
    prefix, X = cifar
    np.save(str(tmp_path / "x.npy"), X)
    code = cli.main(["convert", prefix, "0", "--out", str(tmp_path / "o"), "--dtype",
                     "bfloat16", "--validate", "4", "--inputs", str(tmp_path / "x.npy"),
                     "--tolerance", "1e-6"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "next: --exclude layers to keep in float32" in err
    assert not (tmp_path / "o-symbol.json").exists()


def test_cli_bfloat16_validate_is_emulated_where_it_cannot_run(cifar, tmp_path, capsys,
                                                               monkeypatch):
    from mxmixed._core import devices

    monkeypatch.setattr(devices, "bfloat16_support", lambda: (False, "this CPU lacks avx512bw"))
    code = cli.main(["convert", cifar[0], "0", "--out", str(tmp_path / "o"), "--dtype",
                     "bfloat16", "--validate", "2", "--input-shape", "3,32,32"])
    err = capsys.readouterr().err
    assert code == 0 and err.count("\n") == 1 and "this CPU lacks avx512bw" in err
    assert "validated under a bfloat16 emulation" in err


def test_help_states_the_bfloat16_default_tolerance(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["convert", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0.1 for bfloat16" in text
    assert cli.DEFAULT_TOLERANCE == {"float16": 0.01, "bfloat16": 0.1}
