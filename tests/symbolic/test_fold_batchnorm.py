"""BatchNorm folded into the Convolution before it (issue 38, item 3): the folded float32 model
equals the unfolded one within float32 rounding; only pairs nothing else can tell apart are
folded; a bfloat16 conversion folds by default and keeps the unfused route's accuracy."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from conftest import run_convert
from mxmixed import symbolic
from mxmixed._core.graph import Graph
from mxmixed._core.devices import bfloat16_support
from mxmixed.symbolic import ConvertOptions
from mxmixed.symbolic._fold import fold_batchnorm


def _randomize_batchnorm(net, seed=0):
    rng = np.random.RandomState(seed)
    for name, param in sorted(net.collect_params().items()):
        if name.endswith(("running_mean", "beta")):
            param.set_data(mx.nd.array(rng.normal(0, 0.2, param.shape)))
        elif name.endswith(("running_var", "gamma")):
            param.set_data(mx.nd.array(rng.uniform(0.5, 2.0, param.shape)))


def _export(net, shape, tmp_path, name):
    net.initialize(mx.init.Xavier(), force_reinit=True)
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, shape))
    net(x)
    _randomize_batchnorm(net)
    net.export(str(tmp_path / name))
    sym, args, auxs = mx.model.load_checkpoint(str(tmp_path / name), 0)
    return sym, args, auxs, x


def _run(sym, args, auxs, x):
    exe = sym.bind(mx.cpu(), dict(args, data=x), aux_states=auxs, grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


def _conv_bn_net(bias_first=False):
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(8, 3, padding=1, use_bias=bias_first), gluon.nn.BatchNorm(),
                gluon.nn.Activation("relu"),
                gluon.nn.Conv2D(8, 3, padding=1, use_bias=True),
                gluon.nn.BatchNorm(scale=False),  # fix_gamma: gamma counts as 1
                gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(4))
    return net


@pytest.mark.parametrize("bias_first", [False, True])
def test_folded_float32_model_equals_the_unfolded_within_float32_rounding(tmp_path, bias_first):
    sym, args, auxs, x = _export(_conv_bn_net(bias_first), (2, 3, 12, 12), tmp_path, "cb")
    graph, args2, auxs2, folded = fold_batchnorm(sym, args, auxs)
    assert [conv for _, conv in folded] == ["net_conv0_fwd", "net_conv1_fwd"]
    assert not any(n["op"] == "BatchNorm" for n in graph.nodes)
    assert auxs2 == {} and not any("batchnorm" in name for name in args2)
    assert "net_conv0_fwd_bias" in args2 or bias_first
    ref, got = _run(sym, args, auxs, x), _run(graph.to_symbol(), args2, auxs2, x)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18_v1", "mobilenet0.25", "vgg11_bn"])
def test_gluoncv_models_fold_every_convolution_batchnorm_pair(tmp_path, model):
    from gluoncv.model_zoo import get_model

    sym, args, auxs, x = _export(get_model(model, pretrained=False), (1, 3, 32, 32), tmp_path,
                                 model)
    nodes = Graph(sym).nodes
    pairs = sum(1 for n in nodes if n["op"] == "BatchNorm"
                and nodes[n["inputs"][0][0]]["op"] == "Convolution")
    graph, args2, auxs2, folded = fold_batchnorm(sym, args, auxs)
    assert len(folded) == pairs > 0
    ref, got = _run(sym, args, auxs, x), _run(graph.to_symbol(), args2, auxs2, x)
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


def _pair_graph():
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), no_bias=True, name="conv")
    return data, conv


def _params(sym, **shapes):
    arg_shapes, _, aux_shapes = sym.infer_shape(**dict({"data": (1, 3, 8, 8)}, **shapes))
    rng = np.random.RandomState(0)
    args = {n: mx.nd.array(rng.uniform(0.5, 1.5, s)) for n, s in
            zip(sym.list_arguments(), arg_shapes) if n != "data"}
    auxs = {n: mx.nd.array(rng.uniform(0.5, 1.5, s)) for n, s in
            zip(sym.list_auxiliary_states(), aux_shapes)}
    return args, auxs


def _bn(x, name, **attrs):
    return mx.sym.BatchNorm(x, name=name, fix_gamma=False, **attrs)


def _unfolded(sym, keep=()):
    args, auxs = _params(sym)
    return fold_batchnorm(sym, args, auxs, keep=keep)[3] == []


def test_a_convolution_read_by_another_node_keeps_its_batchnorm():
    _, conv = _pair_graph()
    assert _unfolded(mx.sym.Group([_bn(conv, "bn"), mx.sym.relu(conv)]))


def test_a_convolution_output_returned_as_a_head_keeps_its_batchnorm():
    _, conv = _pair_graph()
    assert _unfolded(mx.sym.Group([_bn(conv, "bn"), conv]))


def test_a_weight_shared_by_two_convolutions_is_not_folded():
    data = mx.sym.var("data")
    weight = mx.sym.var("w")
    a = mx.sym.Convolution(data, weight=weight, num_filter=4, kernel=(3, 3), no_bias=True)
    b = mx.sym.Convolution(data, weight=weight, num_filter=4, kernel=(3, 3), no_bias=True)
    assert _unfolded(mx.sym.Group([_bn(a, "bn"), b]))


def test_a_batchnorm_that_returns_its_mean_and_var_is_not_folded():
    _, conv = _pair_graph()
    assert _unfolded(_bn(conv, "bn", output_mean_var=True))


def test_a_batchnorm_over_another_axis_is_not_folded():
    _, conv = _pair_graph()
    assert _unfolded(_bn(conv, "bn", axis=3))


def test_a_layer_kept_as_it_is_is_not_folded():
    _, conv = _pair_graph()
    sym = _bn(conv, "bn")
    assert _unfolded(sym, keep={"bn"}) and _unfolded(sym, keep={"conv"})
    assert not _unfolded(sym)


def test_a_new_bias_gets_a_name_no_other_variable_has():
    data = mx.sym.var("data")
    taken = mx.sym.var("conv_bias")
    conv = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), no_bias=True, name="conv")
    sym = mx.sym.Group([_bn(conv, "bn"), taken * 2])
    args, auxs = _params(sym, data=(1, 4, 8, 8), conv_bias=(1, 4, 6, 6))
    graph, args2, _, folded = fold_batchnorm(sym, args, auxs)
    assert folded == [("bn", "conv")]
    assert "conv_bias1" in args2 and "conv_bias" in args2


def test_folding_is_on_for_bfloat16_and_off_for_float16_unless_asked():
    assert ConvertOptions(target_dtype="bfloat16").fold_batchnorm is True
    assert ConvertOptions().fold_batchnorm is False
    assert ConvertOptions(target_dtype="bfloat16", fold_batchnorm=False).fold_batchnorm is False
    assert ConvertOptions(fold_batchnorm=True).fold_batchnorm is True


def test_a_float16_conversion_asked_to_fold_says_so_and_keeps_no_batchnorm(tmp_path):
    sym, args, auxs, x = _export(_conv_bn_net(), (2, 3, 12, 12), tmp_path, "cb")
    plain = symbolic.convert(sym, args, auxs)
    folded = symbolic.convert(sym, args, auxs, options=ConvertOptions(fold_batchnorm=True))
    assert "BatchNorm" in plain.report.ops and "BatchNorm" not in folded.report.ops
    assert any(note.startswith("2 BatchNorm folded into the Convolution before it")
               for note in folded.report.notes)
    assert not any("folded" in note for note in plain.report.notes)


@pytest.mark.slow
@pytest.mark.skipif(not bfloat16_support()[0], reason="bfloat16 cannot run on this CPU")
def test_bfloat16_conversion_folds_by_default_and_keeps_the_unfused_accuracy(tmp_path, capsys):
    from gluoncv.model_zoo import get_model

    sym, args, auxs, x = _export(get_model("resnet18_v1", pretrained=False), (4, 3, 64, 64),
                                 tmp_path, "r18")
    prefix = str(tmp_path / "r18")
    np.save(prefix + "-x.npy", x.asnumpy())
    ref = _run(sym, args, auxs, x)
    errors = {}
    for flag in ("--fold-bn", "--no-fold-bn"):
        out = prefix + flag
        code, stdout, _ = run_convert([prefix, "0", "--out", out, "--dtype", "bfloat16",
                                       flag, "--validate", "4", "--inputs", prefix + "-x.npy"],
                                      capsys)
        assert code == 0, stdout
        assert ("BatchNorm folded" in stdout) == (flag == "--fold-bn")
        block = symbolic.load_bfloat16(out, 0)
        got = block(x).astype("float32").asnumpy()
        errors[flag] = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert errors["--fold-bn"] <= 0.01
    assert errors["--fold-bn"] <= 1.5 * errors["--no-fold-bn"], errors


def _shared_through_two_variable_nodes():
    """conv -> BatchNorm, and a second convolution whose weight is another variable node of
    the same name: MXNet binds both nodes to the one array ``w``."""
    data = mx.sym.var("data")
    a = mx.sym.Convolution(data, weight=mx.sym.var("w"), num_filter=4, kernel=(3, 3),
                           no_bias=True, name="conv_a")
    b = mx.sym.Convolution(data, weight=mx.sym.var("w"), num_filter=4, kernel=(3, 3),
                           no_bias=True, name="conv_b")
    other = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), no_bias=True, name="conv_c")
    return mx.sym.Group([_bn(a, "bn_a") + b, _bn(other, "bn_c")])


def _group_outputs(sym, args, auxs, x):
    """The outputs, run as Gluon runs a graph: its params bound by name (a plain
    ``Symbol.bind`` refuses a graph with two variable nodes of one name)."""
    block = gluon.SymbolBlock(sym, mx.sym.var("data"))
    for name, param in block.collect_params().items():
        param._load_init(args[name] if name in args else auxs[name], mx.cpu())
    return [o.asnumpy() for o in block(x)]


def test_a_weight_shared_through_two_variable_nodes_of_one_name_is_not_folded():
    sym = _shared_through_two_variable_nodes()
    assert sum(n["name"] == "w" for n in Graph(sym).nodes) == 2
    args, auxs = _params(sym)
    graph, args2, auxs2, folded = fold_batchnorm(sym, args, auxs)
    assert folded == [("bn_c", "conv_c")]
    x = mx.nd.array(np.random.RandomState(2).uniform(-1, 1, (2, 3, 8, 8)))
    for ref, got in zip(_group_outputs(sym, args, auxs, x),
                        _group_outputs(graph.to_symbol(), args2, auxs2, x)):
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


def test_validation_compares_with_the_model_given_not_the_folded_one(monkeypatch):
    from mxmixed.symbolic import _conversion

    sym = _shared_through_two_variable_nodes()
    args, auxs = _params(sym)
    x = np.random.RandomState(2).uniform(-1, 1, (4, 3, 8, 8)).astype(np.float32)
    fold = _conversion.fold_batchnorm

    def wrong_fold(*a, **k):  # a fold that changes what the model computes
        graph, args2, auxs2, folded = fold(*a, **k)
        return graph, {n: v * 2 if n.startswith("conv") else v for n, v in args2.items()}, \
            auxs2, folded

    monkeypatch.setattr(_conversion, "fold_batchnorm", wrong_fold)
    model = symbolic.convert(sym, args, auxs, calibration=x,
                             options=ConvertOptions(fold_batchnorm=True))
    given = _group_outputs(sym, args, auxs, mx.nd.array(x))
    for ref, got in zip(given, model.calibration_outputs):
        assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max()
    report = symbolic.validate((sym, args, auxs), model, x, progress=False,
                               reference=model.calibration_outputs)
    assert not report.passes(0.05), report


def test_batchnorm_params_that_disagree_with_the_channels_are_refused_in_one_line():
    _, conv = _pair_graph()
    sym = _bn(conv, "bn")
    args, auxs = _params(sym)
    auxs["bn_moving_var"] = mx.nd.ones((3,))
    with pytest.raises(symbolic.ConversionError,
                       match=r"cannot fold BatchNorm 'bn' into Convolution 'conv': "
                             r"bn_moving_var has the shape \(3,\)"):
        fold_batchnorm(sym, args, auxs)


def test_an_epsilon_written_as_mxnet_writes_floats_is_read_as_mxnet_reads_it():
    _, conv = _pair_graph()
    args, auxs = _params(_bn(conv, "bn"))
    x = mx.nd.array(np.random.RandomState(2).uniform(-1, 1, (2, 3, 8, 8)))
    folded = {}
    for eps in ("0.25f", "0.25"):
        sym = _bn(conv, "bn", eps=eps)
        graph, args2, auxs2, _ = fold_batchnorm(sym, args, auxs)
        folded[eps] = _run(graph.to_symbol(), args2, auxs2, x)
        ref = _run(sym, args, auxs, x)
        assert np.abs(folded[eps] - ref).max() <= 1e-5 * np.abs(ref).max()
