"""bfloat16 conversion goes through the settling of float16: where MXNet's AMP pass itself
stops on a node with inputs of two dtypes (its bfloat16 lists are short: yolo3's Concat,
BERT's interleaved_matmul_selfatt_valatt), that node is kept float32 and the pass runs again.
A gluonnlp BERT, gluoncv's yolo3 and the zoo conversion test's families convert to bfloat16
and, where bfloat16 runs (AVX512-BF16 or AMX), validate."""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet.contrib import amp

from conftest import run_convert
from mxmixed import bfloat16_support, cli, symbolic
from mxmixed.symbolic._inference import symbol_block
from .test_zoo_conversion import InceptionBlock, _export, _fan_in_init

RUNS = bfloat16_support()[0]


def _validate_args(n):
    return ["--validate", str(n)] if RUNS else []


def test_bert_converts_to_bfloat16(tmp_path, capsys):
    pytest.importorskip("gluonnlp")
    from .test_convert_multi_input import SPECS, _bert, _inputs

    prefix = _bert(tmp_path)
    code, out, err = run_convert([prefix, "0", "--out", str(tmp_path / "out"), "--dtype",
                                  "bfloat16"] + _validate_args(4) + SPECS, capsys)
    assert code == cli.EXIT_OK, err
    assert "no bfloat16 kernel" in out or "bfloat16" in out
    fp32 = symbolic.load_checkpoint(prefix, 0)
    model = symbolic.convert(*fp32, target_dtype="bfloat16",
                             input_types={"data0": "int32", "data1": "int32"})
    reasons = {op: reason for _, op, reason in model.report.fp32_layers}
    # the fused attention has float32-only CPU kernels: kept float32, named in the report
    assert reasons["_contrib_interleaved_matmul_selfatt_qk"] == "no bfloat16 kernel"
    assert model.report.count("FullyConnected", "bfloat16") > 0
    notes = " ".join(model.report.notes)
    assert "softmax with use_length rewritten" in notes and "params alone" in notes
    if RUNS:  # the rewritten bfloat16 graph, on oneDNN's subgraph backend, against float32
        inputs = _inputs(4, seed=1)
        arrays = [mx.nd.array(inputs[k], dtype=inputs[k].dtype) for k in sorted(inputs)]
        types = {"data0": "int32", "data1": "int32"}
        wants = symbol_block(*fp32, mx.cpu(), types)(*arrays)
        gots = symbol_block(*model, mx.cpu(), types)(*arrays)
        for want, got in zip(wants, gots):  # the sequence encoding, the pooled output
            want, got = want.asnumpy(), got.astype("float32").asnumpy()
            assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()  # 8 significant bits


@pytest.mark.slow
def test_mxnets_own_pass_refuses_yolo3_and_the_settling_converts_it(yolo3, tmp_path, capsys):
    prefix, X = yolo3
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    with pytest.raises(mx.base.MXNetError, match="concat"):
        amp.convert_model(sym, dict(args), dict(auxs), target_dtype="bfloat16")
    model = symbolic.convert(sym, args, auxs, target_dtype="bfloat16")
    reasons = {name: reason for name, _, reason in model.report.fp32_layers}
    assert reasons["yolov30_concat0"] == "inputs must share a dtype"
    assert any("does not type-check" in note for note in model.report.notes)
    assert model.report.count("Convolution", "bfloat16") > 0
    code, out, err = run_convert([prefix, "0", "--out", str(tmp_path / "out"), "--dtype",
                                  "bfloat16"], capsys)
    assert code == cli.EXIT_OK, err
    assert os.path.exists(str(tmp_path / "out-symbol.json"))
    if RUNS:  # an untrained detector's near-equal scores reorder in bfloat16, so its
        # detections are not compared (see the SSD test); the model runs and is finite
        outs = model.to_block(mx.cpu())(mx.nd.array(X))
        assert [o.shape[-1] for o in outs] == [1, 1, 4]
        assert all(np.isfinite(o.asnumpy()).all() for o in outs)


@pytest.fixture(scope="module")
def yolo3(tmp_path_factory):
    from gluoncv.model_zoo import get_model

    with mx.name.NameManager():
        net = get_model("yolo3_mobilenet1.0_voc", pretrained=False, pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(1, 3, 128, 128)))
    _fan_in_init(net, x)
    tmp = tmp_path_factory.mktemp("yolo3")
    _export(net, x, tmp, "yolo3")
    X = np.random.RandomState(1).uniform(size=(2, 3, 128, 128)).astype(np.float32)
    return str(tmp / "yolo3"), X


@pytest.mark.slow
def test_ssd_converts_to_bfloat16(tmp_path, capsys):
    from gluoncv.model_zoo import get_model

    with mx.name.NameManager():
        net = get_model("ssd_512_mobilenet1.0_voc", pretrained=False, pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(1, 3, 128, 128)))
    _fan_in_init(net, x)
    _export(net, x, tmp_path, "ssd")
    # no --validate: with random weights the scores of many boxes are nearly equal, and
    # bfloat16's 8-bit significand reorders them, so NMS keeps other boxes (error 1)
    code, _, err = run_convert([str(tmp_path / "ssd"), "0", "--out", str(tmp_path / "out"),
                                "--dtype", "bfloat16"], capsys)
    assert code == cli.EXIT_OK, err


def test_the_inception_family_converts_to_bfloat16(tmp_path, capsys):
    excluded = []
    mx.random.seed(0)
    net = InceptionBlock(prefix="inc_")
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(2, 3, 8, 8)))
    with mx.name.NameManager():
        _fan_in_init(net, x)
        _export(net, x, tmp_path, "inc")
    exclude = ["--exclude"] + excluded if excluded else []
    code, _, err = run_convert([str(tmp_path / "inc"), "0", "--out", str(tmp_path / "out"),
                                "--dtype", "bfloat16", "--input-shape", "3,8,8"] + exclude
                               + _validate_args(4), capsys)
    assert code == cli.EXIT_OK, err


def test_an_op_in_no_bfloat16_list_stays_float32_and_the_model_validates(tmp_path, capsys):
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, num_filter=2, kernel=(3, 3), pad=(1, 1), name="conv")
    sym = mx.sym.im2col(conv, kernel=(2, 2), name="unfold")  # no CPU bfloat16 kernel
    rng = np.random.RandomState(0)
    args = {"conv_weight": mx.nd.array(rng.uniform(-1, 1, (2, 1, 3, 3))),
            "conv_bias": mx.nd.array(rng.uniform(-1, 1, (2,)))}
    mx.model.save_checkpoint(str(tmp_path / "unfold"), 0, sym, args, {})
    code, out, err = run_convert([str(tmp_path / "unfold"), "0", "--out", str(tmp_path / "out"),
                                  "--dtype", "bfloat16", "--input-shape", "1,4,4"]
                                 + _validate_args(2), capsys)
    assert code == cli.EXIT_OK, err
    assert "no bfloat16 kernel known" in out and "unfold" in out


def test_a_node_no_cast_can_settle_is_one_line_naming_it():
    from mxmixed._core.convert import ConversionError, _refused_node

    err = mx.base.MXNetError("Error in operator yolov30_concat0: in_type->at(i) == dtype")
    assert _refused_node(err, {"yolov30_concat0"}) == "yolov30_concat0"
    assert _refused_node(err, {"other"}) is None
    assert issubclass(ConversionError, ValueError)


def _many_refused(n):
    """n Concats, each of a FullyConnected (bfloat16) and an exp (float32, on bfloat16's
    float32 list): MXNet's pass stops on each Concat, one per run."""
    x = mx.sym.var("data")
    for i in range(n):
        both = mx.sym.concat(mx.sym.FullyConnected(x, num_hidden=4, name="fc%d" % i),
                             mx.sym.exp(x, name="exp%d" % i), dim=1, name="cat%d" % i)
        x = mx.sym.slice_axis(both, axis=1, begin=0, end=4, name="slice%d" % i)
    return x


def test_a_graph_of_many_refused_nodes_settles_in_one_run_of_mxnets_pass(monkeypatch):
    from mxmixed._core import convert as core

    n = 40
    sym = _many_refused(n)
    arg_shapes, _, _ = sym.infer_shape(data=(2, 4))
    rng = np.random.RandomState(0)
    args = {name: mx.nd.array(rng.uniform(-1, 1, shape))
            for name, shape in zip(sym.list_arguments(), arg_shapes) if name != "data"}
    runs = []
    amp_pass = core._amp_pass
    monkeypatch.setattr(core, "_amp_pass", lambda *a, **k: runs.append(a[2]) or amp_pass(*a, **k))
    model = symbolic.convert(sym, args, {}, target_dtype="bfloat16")
    assert len(runs) == 2  # the fast path, then one run with every Concat kept float32
    assert sorted(runs[1]) == sorted("cat%d" % i for i in range(n))
    reasons = {name: reason for name, _, reason in model.report.fp32_layers}
    assert all(reasons["cat%d" % i] == "inputs must share a dtype" for i in range(n))
    assert model.report.count("FullyConnected", "bfloat16") == n
    (note,) = [note for note in model.report.notes if "does not type-check" in note]
    assert "kept float32" in note and "cat0, cat1, cat2, ... (%d more)" % (n - 3) in note
    X = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    report = symbolic.validate((sym, args, {}), model, X, progress=False)
    assert report.samples == 3 and report.passes(0.05), report
