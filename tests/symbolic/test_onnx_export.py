"""``mxmixed convert --format onnx`` and ``symbolic.export_onnx`` / ``validate_onnx``: a float16
ONNX file that onnx.checker accepts, that onnxruntime runs close to MXNet's float32 model, that
keeps the float32 layers of the conversion, with the exit codes and atomic writes of convert."""
import os
import sys
import warnings

import numpy as np
import pytest

import mxnet as mx
import onnx  # the onnx extra, part of `make test` (EXTRAS)
import onnx.numpy_helper
import onnxruntime as ort
from gluoncv.model_zoo import get_model

from mxmixed import cli, symbolic
from mxmixed._files import atomic as _io

SHAPE = (3, 32, 32)


def _export_gluoncv(name, folder, shape=SHAPE):
    """A gluoncv model (pretrained=False, fan-in init) exported to symbol + params."""
    mx.random.seed(0)
    with mx.name.NameManager():  # layer names as in a fresh process, whatever ran before
        net = get_model(name, pretrained=False)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    net.hybridize()
    net(mx.nd.zeros((1,) + shape))
    prefix = os.path.join(str(folder), name)
    net.export(prefix)
    return prefix


@pytest.fixture(scope="module")
def resnet18(tmp_path_factory):
    return _export_gluoncv("resnet18_v1", tmp_path_factory.mktemp("r18"))


@pytest.fixture(scope="module")
def reference32(resnet18, tmp_path_factory):
    """resnet18 in float32 through MXNet's own exporter: the size reference (its path)."""
    sym, args, auxs = mx.model.load_checkpoint(resnet18, 0)
    path = str(tmp_path_factory.mktemp("reference32") / "reference32.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mx.onnx.export_model(sym, [args, auxs], [(1,) + SHAPE], np.float32, path)
    return path


@pytest.fixture(scope="module")
def exported16(resnet18):
    """resnet18 converted with the defaults and exported (the tests only read it)."""
    return symbolic.export_onnx(symbolic.convert(*symbolic.load_checkpoint(resnet18, 0)), SHAPE)


def _run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _mxnet_float32(prefix, X):
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    block = mx.gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"],
                                         prefix + "-0000.params")
    return block(mx.nd.array(X)).asnumpy()


# ------------------------------------------------------------------ acceptance
@pytest.mark.slow
def test_a_gluoncv_model_becomes_a_checked_validated_float16_onnx_file_in_one_command(
        resnet18, reference32, tmp_path, capsys):
    prefix = resnet18
    out = str(tmp_path / "r18")
    code, stdout, err = _run(["convert", prefix, "0", "--out", out, "--format", "onnx",
                              "--input-shape", "3,32,32", "--validate", "4"], capsys)
    assert code == 0, err
    assert "device              onnxruntime" in stdout and "not a speed measure" in stdout
    model = onnx.load(out + ".onnx")
    onnx.checker.check_model(model, full_check=True)
    inits = {i.name for i in model.graph.initializer}
    assert [i.name for i in model.graph.input] == ["data"]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert not inits & {i.name for i in model.graph.input}
    weights = [i for i in model.graph.initializer if i.name.endswith("conv0_weight")]
    assert weights and weights[0].data_type == onnx.TensorProto.FLOAT16
    assert os.path.getsize(out + ".onnx") <= 0.51 * os.path.getsize(reference32)
    # the file itself, run here in onnxruntime, against MXNet's float32 model
    X = np.random.RandomState(3).uniform(size=(4,) + SHAPE).astype(np.float32)
    got = ort.InferenceSession(out + ".onnx", providers=["CPUExecutionProvider"]).run(
        None, {"data": X})[0]
    ref = _mxnet_float32(prefix, X)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() / np.abs(ref).max() < 0.01
    assert np.abs(got - ref).max() > 0  # it did compute in float16


@pytest.mark.slow
def test_onnxruntime_prints_no_warning_per_parameter(resnet18, reference32, exported16, capfd):
    fp32 = symbolic.load_checkpoint(resnet18, 0)
    options = ort.SessionOptions()
    options.log_severity_level = 2  # warnings and errors

    def warnings_on_initializers():
        lines = capfd.readouterr().err.splitlines()
        return [line for line in lines if "[W:" in line and "nitializer" in line]

    capfd.readouterr()
    # MXNet's own export: one warning per parameter
    ort.InferenceSession(reference32, options, providers=["CPUExecutionProvider"])
    assert len(warnings_on_initializers()) >= len(fp32[1])
    ort.InferenceSession(exported16.serialize(), options, providers=["CPUExecutionProvider"])
    assert warnings_on_initializers() == []


# ------------------------------------------------------------------ what the file keeps
@pytest.mark.slow
def test_layers_kept_float32_by_the_conversion_stay_float32_in_onnx(resnet18, tmp_path):
    fp32 = symbolic.load_checkpoint(resnet18, 0)
    model = symbolic.convert(*fp32, exclude_layers=["resnetv10_conv0_fwd"])
    exported = symbolic.export_onnx(model, SHAPE)
    types = {i.name: i.data_type for i in exported.proto.graph.initializer}
    assert types["resnetv10_conv0_weight"] == onnx.TensorProto.FLOAT
    assert types["resnetv10_stage1_conv0_weight"] == onnx.TensorProto.FLOAT16
    conv0 = [n for n in exported.proto.graph.node if "resnetv10_conv0_fwd" in n.output][0]
    assert conv0.input[0] == "data"  # float32 data straight in, no cast before it
    to16 = [n for n in exported.proto.graph.node if n.op_type == "Cast"
            and n.attribute[0].i == onnx.TensorProto.FLOAT16]
    assert to16 and "data" not in {i for n in to16 for i in n.input}
    X = np.random.RandomState(0).uniform(size=(2,) + SHAPE).astype(np.float32)
    check = symbolic.validate_onnx(fp32, exported, X, progress=False)
    assert check.passes(0.01)


@pytest.mark.slow
def test_no_keep_io_types_gives_float16_input_and_output_and_still_validates(resnet18, tmp_path, capsys):
    out = str(tmp_path / "io16")
    code, stdout, err = _run(["convert", resnet18, "0", "--out", out, "--format", "onnx",
                              "--input-shape", "3,32,32", "--no-keep-io-types",
                              "--validate", "2"], capsys)
    assert code == 0, err
    model = onnx.load(out + ".onnx")
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


@pytest.mark.slow
def test_dynamic_batch_axis(exported16):
    session = ort.InferenceSession(exported16.serialize(), providers=["CPUExecutionProvider"])
    for n in (1, 3):
        out = session.run(None, {"data": np.zeros((n,) + SHAPE, np.float32)})[0]
        assert out.shape == (n, 1000)


# ------------------------------------------------------------------ exit codes and writes
@pytest.mark.slow
def test_validation_failure_exits_1_and_writes_nothing(resnet18, tmp_path, capsys):
    out = str(tmp_path / "strict")
    code, _, err = _run(["convert", resnet18, "0", "--out", out, "--format", "onnx",
                         "--input-shape", "3,32,32", "--validate", "2",
                         "--tolerance", "1e-9"], capsys)
    assert code == cli.EXIT_VALIDATION_FAILED == 1
    assert "validation failed" in err and err.count("\n") == 1
    assert not os.path.exists(out + ".onnx")
    code, _, err = _run(["convert", resnet18, "0", "--out", out, "--format", "onnx",
                         "--input-shape", "3,32,32", "--validate", "2", "--tolerance", "1e-9",
                         "--keep-failed"], capsys)
    assert code == 1 and "files kept" in err
    onnx.checker.check_model(onnx.load(out + ".onnx"), full_check=True)


def test_format_onnx_without_an_input_shape_is_a_one_line_usage_error(resnet18, tmp_path,
                                                                        capsys):
    code, _, err = _run(["convert", resnet18, "0", "--out", str(tmp_path / "x"), "--format",
                         "onnx"], capsys)
    assert code == cli.EXIT_USAGE == 2
    assert "--input-shape" in err and err.count("\n") == 1
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.slow
def test_failure_while_writing_exits_3_and_keeps_the_old_file(resnet18, tmp_path, capsys,
                                                              monkeypatch):
    out = str(tmp_path / "model16")
    with open(out + ".onnx", "wb") as handle:
        handle.write(b"the earlier file")
    real_fill = _io._fill

    def full_disk(path, content, target):  # half the bytes reach the temporary file, then ENOSPC
        real_fill(path, content[:len(content) // 2], target)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_io, "_fill", full_disk)
    code, _, err = _run(["convert", resnet18, "0", "--out", out, "--format", "onnx",
                         "--input-shape", "3,32,32"], capsys)
    assert code == cli.EXIT_WRITE_FAILED == 3
    assert "No space left on device" in err and err.count("\n") == 1
    assert sorted(os.listdir(str(tmp_path))) == ["model16.onnx"]
    with open(out + ".onnx", "rb") as handle:
        assert handle.read() == b"the earlier file"


def test_an_op_the_exporter_lacks_is_named_in_one_line(tmp_path, capsys):
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, mx.sym.var("conv_weight"), kernel=(3, 3), num_filter=2,
                              no_bias=True, name="conv")
    anchors = mx.sym.contrib.MultiBoxPrior(conv, sizes=(0.5,), name="anchors")  # SSD's op
    prefix = str(tmp_path / "lacks")
    mx.model.save_checkpoint(prefix, 0, mx.sym.Group([conv, anchors]),
                             {"conv_weight": mx.nd.ones((2, 3, 3, 3))}, {})
    code, _, err = _run(["convert", prefix, "0", "--out", str(tmp_path / "o"), "--format",
                         "onnx", "--input-shape", "3,8,8"], capsys)
    assert code == cli.EXIT_USAGE
    assert "no converter for _contrib_MultiBoxPrior" in err and err.count("\n") == 1
    assert not os.path.exists(str(tmp_path / "o.onnx"))


def test_without_onnx_installed_the_error_says_how_to_install(resnet18, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    code, _, err = _run(["convert", resnet18, "0", "--out", str(tmp_path / "x"), "--format",
                         "onnx", "--input-shape", "3,32,32"], capsys)
    assert code == cli.EXIT_USAGE
    assert "pip install -c constraints.txt -e '.[onnx]'" in err and err.count("\n") == 1
    assert os.listdir(str(tmp_path)) == []


def test_float16_constants_keep_their_values(tmp_path):
    """ReLU6 (clip to [0, 6], as in MobileNetV2) on float16 data: MXNet 1.9.1's exporter hands
    onnx 1.14 the bit pattern of 6.0, which became 17920.0 until mxmixed decoded it."""
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=3), nn.HybridLambda(lambda F, x: F.clip(x, 0, 6)),
            nn.Dense(5))
    net.initialize(mx.init.Xavier(magnitude=6))
    net.hybridize()
    net(mx.nd.zeros((1, 3, 8, 8)))
    prefix = str(tmp_path / "relu6")
    net.export(prefix)
    fp32 = symbolic.load_checkpoint(prefix, 0)
    exported = symbolic.export_onnx(symbolic.convert(*fp32), (3, 8, 8))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in exported.proto.graph.initializer}
    clip = [n for n in exported.proto.graph.node if n.op_type == "Clip"][0]
    assert inits[clip.input[2]].dtype == np.float16 and float(inits[clip.input[2]]) == 6.0
    X = np.random.RandomState(0).uniform(0, 4, (8, 3, 8, 8)).astype(np.float32)
    check = symbolic.validate_onnx(fp32, exported, X, progress=False)
    assert check.passes(0.01), check
