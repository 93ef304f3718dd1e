"""Conversion of gluoncv-zoo shaped graphs with defaults: detection ops stay float32, and
layers kept float32 next to float16 branches of a Concat or an add still give a graph that
converts, type-checks and runs."""
import json

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn

from mxmixed import symbolic


def _fan_in_init(net, x):
    """Scale-preserving random init, as nothing downloads: fan-in Xavier on every weight,
    identity BatchNorm (gamma and variance 1, beta and mean 0) and zero biases, by name,
    since gluoncv's symbol-built blocks otherwise get the default uniform init."""
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


def _export(net, x, tmp_path, name):
    net.hybridize()
    net(x)
    prefix = str(tmp_path / name)
    net.export(prefix)
    return mx.model.load_checkpoint(prefix, 0)


@pytest.fixture(scope="module")
def ssd(tmp_path_factory):
    """gluoncv's smallest SSD at 128x128, fan-in init with calibrated BatchNorm."""
    from gluoncv.model_zoo import get_model

    with mx.name.NameManager():
        net = get_model("ssd_512_mobilenet1.0_voc", pretrained=False, pretrained_base=False)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(1, 3, 128, 128)))
    _fan_in_init(net, x)
    sym, args, auxs = _export(net, x, tmp_path_factory.mktemp("ssd"), "ssd")
    X = np.random.RandomState(1).uniform(size=(2, 3, 128, 128)).astype(np.float32)
    return sym, args, auxs, X


@pytest.mark.slow
def test_ssd_converts_with_defaults_keeping_detection_ops_float32(ssd):
    sym, args, auxs, X = ssd
    model = symbolic.convert(sym, args, auxs)
    reasons = {op: reason for _, op, reason in model.report.fp32_layers}
    assert reasons["_contrib_box_decode"] == "detection op"
    assert reasons["_contrib_box_nms"] == "detection op"
    assert model.report.count("Convolution", "float16") > 0
    assert any("detection ops kept float32" in note for note in model.report.notes)
    assert "note: detection ops kept float32" in str(model.report)
    block = model.to_block(mx.cpu())
    outs = block(mx.nd.array(X[:1]))
    assert [o.shape for o in outs] == [(1, 100, 1), (1, 100, 1), (1, 100, 4)]


def test_ssd_without_the_default_still_converts_by_casting_box_decode_inputs(ssd):
    # MXNet's pass leaves box_decode with float16 predictions and float32 anchors (its graph
    # does not type-check); the settling pass casts them to one dtype instead of failing
    sym, args, auxs, X = ssd
    model = symbolic.convert(sym, args, auxs, keep_detection_float32=False)
    reasons = {op: reason for _, op, reason in model.report.fp32_layers}
    assert reasons["_contrib_box_decode"] == "inputs must share a dtype"
    assert any("does not type-check" in note for note in model.report.notes)
    assert len(model.to_block(mx.cpu())(mx.nd.array(X[:1]))) == 3


def _branch(prefix, kernel, in_channels):
    branch = nn.HybridSequential(prefix=prefix)
    with branch.name_scope():
        branch.add(nn.Conv2D(8, kernel, padding=kernel // 2, in_channels=in_channels,
                             use_bias=False),
                   nn.BatchNorm(in_channels=8), nn.Activation("relu"))
    return branch


class InceptionBlock(nn.HybridBlock):
    """Inception-style: a stem, three conv+BN+relu branches (one after a pooling) joined by a
    Concat. Excluding the stem makes MXNet's own pass fail ("Non-uniform data type in
    Concat")."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = _branch("stem_", 3, 3)
            self.b1 = _branch("b1_", 1, 8)
            self.b2 = _branch("b2_", 3, 8)
            self.pool = nn.AvgPool2D(3, 1, 1)
            self.b3 = _branch("b3_", 1, 8)
            self.head = nn.Dense(4, in_units=24 * 64, prefix="head_")

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        return self.head(F.concat(self.b1(x), self.b2(x), self.b3(self.pool(x)), dim=1))


@pytest.fixture(scope="module")
def inception(tmp_path_factory):
    mx.random.seed(0)
    net = InceptionBlock(prefix="inc_")
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(2, 3, 8, 8)))
    with mx.name.NameManager():
        _fan_in_init(net, x)
        sym, args, auxs = _export(net, x, tmp_path_factory.mktemp("inc"), "inc")
    return sym, args, auxs, x.asnumpy().astype(np.float32)


@pytest.mark.parametrize("excluded", [["inc_stem_conv0_fwd"], ["inc_b2_conv0_fwd"],
                                      ["inc_b1_conv0_fwd", "inc_b3_conv0_fwd"]])
def test_a_branch_kept_float32_next_to_float16_branches_converts_and_runs(inception, excluded):
    sym, args, auxs, X = inception
    model = symbolic.convert(sym, args, auxs, exclude_layers=excluded)
    for name in excluded:
        assert model.report.layer_dtypes[name] == "float32"
        weight = name[:-len("_fwd")] + "_weight"
        assert args[weight].dtype == np.float32 and model.arg_params[weight].dtype == np.float32
    assert model.report.count("Convolution", "float16") >= 1
    check = symbolic.validate((sym, args, auxs), model, X, progress=False)
    assert check.passes(1e-2), check


def test_where_mxnets_pass_fails_inputs_are_cast_and_the_graph_saves(inception, tmp_path):
    sym, args, auxs, X = inception
    with pytest.raises(mx.base.MXNetError, match="Concat"):
        from mxnet.contrib import amp

        amp.convert_model(sym, dict(args), dict(auxs), excluded_sym_names=["inc_stem_conv0_fwd"])
    model = symbolic.convert(sym, args, auxs, exclude_layers=["inc_stem_conv0_fwd"])
    assert any("does not type-check" in note for note in model.report.notes)
    model.save(str(tmp_path / "m"), 0)
    net = symbolic.load_float16(str(tmp_path / "m"), 0, ctx=mx.cpu())
    assert net(mx.nd.array(X)).shape == (2, 4)
    assert model.report.count("Convolution", "float16") == 3
    graph = json.loads(model.symbol.tojson(remove_amp_cast=False))
    assert any(n["op"] in ("amp_cast", "amp_multicast") for n in graph["nodes"])


# ------------------------------------------------------------------ detection-aware validation
def test_ssd_validates_with_the_detection_rule(ssd):
    sym, args, auxs, X = ssd
    model = symbolic.convert(sym, args, auxs)
    check = symbolic.validate((sym, args, auxs), model, X, progress=False)
    assert [c.name for c in check.checks] == ["detections"]
    assert "IoU" in check.rule
    assert check.passes(1e-2), check
    assert "detections" in str(check)


def test_a_detector_whose_boxes_move_fails_validation(ssd):
    sym, args, auxs, X = ssd
    model = symbolic.convert(sym, args, auxs)
    moved = dict(model.arg_params)
    for name in moved:
        if "convpredictor" in name and name.endswith("bias"):
            # offsets of 0.2 move every box by a fifth of its anchor
            moved[name] = (moved[name].astype("float32") + 0.2).astype(moved[name].dtype)
    bad = symbolic.ConvertedModel(model.symbol, moved, model.aux_params, model.report)
    check = symbolic.validate((sym, args, auxs), bad, X, progress=False)
    assert not check.passes(1e-2), check
    assert check.error > 1e-2


def test_the_relative_rule_can_be_forced_and_reports_each_output(ssd):
    sym, args, auxs, X = ssd
    model = symbolic.convert(sym, args, auxs)
    check = symbolic.validate((sym, args, auxs), model, X[:1], progress=False,
                              rule="relative")
    assert [c.name for c in check.checks] == ["output 0", "output 1", "output 2"]
    with pytest.raises(symbolic.ConversionError, match="rule"):
        symbolic.validate((sym, args, auxs), model, X[:1], progress=False, rule="iou")


def _dets(boxes, scores, ids, k=6):
    n = len(boxes)
    out_ids = -np.ones((1, k, 1), np.float32)
    out_scores = -np.ones((1, k, 1), np.float32)
    out_boxes = -np.ones((1, k, 4), np.float32)
    out_ids[0, :n, 0], out_scores[0, :n, 0], out_boxes[0, :n] = ids, scores, boxes
    return [out_ids, out_scores, out_boxes]


def test_detections_that_swap_order_or_move_slightly_still_match():
    from mxmixed.symbolic._detections import compare_outputs

    boxes = np.array([[10, 10, 50, 50], [60, 20, 90, 70], [0, 0, 20, 30]], np.float32)
    ref = _dets(boxes, [0.90, 0.800, 0.801], [1, 2, 2])
    got = _dets(boxes[[0, 2, 1]] + 0.01, [0.9001, 0.8012, 0.7998], [1, 2, 2])
    checks, *_ = compare_outputs(ref, got)
    assert checks[0].name == "detections" and checks[0].error < 1e-2, checks
    moved = _dets(boxes + [[8, 0, 8, 0]], [0.90, 0.800, 0.801], [1, 2, 2])
    assert compare_outputs(ref, moved)[0][0].error > 1e-2
    relabelled = _dets(boxes, [0.90, 0.800, 0.801], [1, 2, 3])
    assert compare_outputs(ref, relabelled)[0][0].error == 1.0


def test_degenerate_boxes_of_an_untrained_detector_match_by_their_corners():
    from mxmixed.symbolic._detections import compare_outputs

    flat = np.array([[128, 5, 128, 40], [0, 0, 0, 0]], np.float32)  # clipped to zero area
    checks, *_ = compare_outputs(_dets(flat, [0.5, 0.4], [0, 1]),
                                 _dets(flat + 0.05, [0.5, 0.4], [0, 1]))
    assert checks[0].error < 1e-2, checks
