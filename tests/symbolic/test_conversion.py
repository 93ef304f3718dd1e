"""mxmixed.symbolic: the manual Symbol recipe, conversion and its report, validation, the
float32-layer search, loading, and convert_hybrid_block on a CPU."""
import inspect
import json
import os

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon
from mxnet.contrib import amp
from mxnet.gluon import nn

from mxmixed import emulation, symbolic
from mxmixed.symbolic import ConversionError
from mxmixed.symbolic._validation import Runner
from mxmixed.tutorial import digits_arrays

# Stated accuracy of the emulated float16 resnet18_v1 (random init, seed 0, 2x3x64x64
# uniform inputs) against float32: max|y16 - y32| / max|y32| <= 5e-3. Measured: 7.7e-4.
RESNET18_REL_TOLERANCE = 5e-3


# ------------------------------------------------------------------ shared models
@pytest.fixture(scope="module")
def resnet18(tmp_path_factory):
    """gluoncv resnet18_v1, random init with seed 0, hybridized, run once and exported."""
    from gluoncv.model_zoo import get_model

    mx.random.seed(0)
    with mx.name.NameManager():  # fresh name counters: the params are resnetv10_* in any order
        net = get_model("resnet18_v1", pretrained=False)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    X = np.random.RandomState(0).uniform(size=(2, 3, 64, 64)).astype(np.float32)
    y32 = net(mx.nd.array(X)).asnumpy()
    prefix = str(tmp_path_factory.mktemp("resnet18") / "resnet18")
    net.export(prefix)
    sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, 0)
    return {"prefix": prefix, "X": X, "y32": y32, "sym": sym, "args": arg_params,
            "auxs": aux_params}


@pytest.fixture(scope="module")
def resnet18_fp16(resnet18, tmp_path_factory):
    model = symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"])
    prefix = str(tmp_path_factory.mktemp("resnet18_fp16") / "resnet18_fp16")
    model.save(prefix, 0)
    return model, prefix


class OverflowNet(nn.HybridBlock):
    """Dense layers where exactly one, ``net_big_fwd``, overflows float16 by construction.

    ``big`` has every weight 2e4 and gets 16 positive inputs, so its float32 outputs reach
    about 1.3e5 > 65504. A BatchNorm with moving variance 1e10 divides them by 1e5 before
    ``depth`` ordinary Dense+relu layers, so in float32 nothing else comes near the limit.
    """

    def __init__(self, depth=8, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.first = nn.Dense(16, in_units=8, prefix="first_")
            self.big = nn.Dense(16, in_units=16, prefix="big_")
            self.norm = nn.BatchNorm(in_channels=16, prefix="norm_")
            self.tail = nn.HybridSequential(prefix="tail_")
            with self.tail.name_scope():
                for _ in range(depth):
                    self.tail.add(nn.Dense(16, activation="relu", in_units=16))
            self.out = nn.Dense(4, in_units=16, prefix="out_")

    def hybrid_forward(self, F, x):
        return self.out(self.tail(self.norm(self.big(F.relu(self.first(x))))))


def _overflow_inputs():
    return np.random.RandomState(0).uniform(0.5, 1.0, size=(16, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def overflow_model(tmp_path_factory):
    mx.random.seed(0)
    net = OverflowNet(prefix="net_")
    net.initialize(mx.init.Xavier())
    net.big.weight.set_data(mx.nd.full((16, 16), 2e4))
    net.norm.running_var.set_data(mx.nd.full((16,), 1e10))
    net.hybridize()
    X = _overflow_inputs()
    big = net.big(mx.nd.relu(net.first(mx.nd.array(X)))).abs().max().asscalar()
    assert big > 65504, "the test net must overflow float16 by construction"
    net(mx.nd.array(X))
    prefix = str(tmp_path_factory.mktemp("overflow") / "overflow")
    net.export(prefix)
    return mx.model.load_checkpoint(prefix, 0), X


def _json(sym):
    return json.loads(sym.tojson(remove_amp_cast=False))


def _ops(sym):
    return [node["op"] for node in _json(sym)["nodes"]]


def _digits_body(data):
    net = mx.sym.Convolution(data, num_filter=16, kernel=(3, 3), pad=(1, 1), no_bias=True,
                             name="conv1")
    net = mx.sym.BatchNorm(net, fix_gamma=False, name="bn1")
    net = mx.sym.Activation(net, act_type="relu", name="relu1")
    net = mx.sym.Pooling(net, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    net = mx.sym.FullyConnected(mx.sym.flatten(net), num_hidden=64, name="fc1")
    net = mx.sym.Activation(net, act_type="relu", name="relu2")
    return mx.sym.FullyConnected(net, num_hidden=10, name="fc2")


def _digits_iters(batch_size=64):
    X_train, y_train, X_test, y_test = digits_arrays()
    train = mx.io.NDArrayIter(X_train, y_train.astype(np.float32), batch_size=batch_size,
                              shuffle=True, last_batch_handle="discard",
                              label_name="softmax_label")
    test = mx.io.NDArrayIter(X_test, y_test.astype(np.float32), batch_size=batch_size,
                             label_name="softmax_label")
    return train, test, X_test, y_test


# ------------------------------------------------------------------ the manual recipe
def test_recipe_casts_after_the_input_and_back_to_float32_before_softmax_output():
    sym = symbolic.float16_softmax_symbol(_digits_body, loss_scale=128.0)
    graph = _json(sym)
    nodes = graph["nodes"]
    first_cast = [n for n in nodes if n["op"] == "Cast"][0]
    assert nodes[first_cast["inputs"][0][0]]["name"] == "data"
    assert first_cast["attrs"]["dtype"] == "float16"
    softmax = nodes[graph["heads"][0][0]]
    assert softmax["op"] == "SoftmaxOutput"
    assert float(softmax["attrs"]["grad_scale"]) == 128.0
    before = nodes[softmax["inputs"][0][0]]
    assert before["op"] == "Cast" and before["attrs"]["dtype"] == "float32"
    arg_types, _, _ = sym.infer_type(data="float32")
    types = dict(zip(sym.list_arguments(), arg_types))
    assert types["conv1_weight"] == np.float16 and types["fc2_weight"] == np.float16
    assert types["bn1_gamma"] == np.float32


def test_recipe_float32_variant_has_no_casts():
    sym = symbolic.float16_softmax_symbol(_digits_body, dtype="float32")
    assert "Cast" not in _ops(sym)


def test_module_api_trains_float16_digits_with_master_weights_and_static_loss_scale():
    mx.random.seed(0)
    train, test, _, _ = _digits_iters()
    sym = symbolic.float16_softmax_symbol(_digits_body, loss_scale=128.0)
    with emulation.emulated():
        mod = mx.mod.Module(sym, context=mx.cpu())
        mod.fit(train, num_epoch=4, optimizer="sgd",
                optimizer_params=symbolic.multi_precision_params(64, loss_scale=128.0,
                                                                 learning_rate=0.1,
                                                                 momentum=0.9),
                initializer=mx.init.Xavier(magnitude=2.0))
        accuracy = dict(mod.score(test, "acc"))["accuracy"]
    arg_params, aux_params = mod.get_params()
    assert accuracy > 0.9
    assert arg_params["conv1_weight"].dtype == np.float16
    assert arg_params["fc2_weight"].dtype == np.float16
    assert arg_params["bn1_gamma"].dtype == np.float32
    assert aux_params["bn1_moving_var"].dtype == np.float32
    assert mod._optimizer.multi_precision
    assert mod._optimizer.rescale_grad == pytest.approx(1.0 / (128.0 * 64))


def test_multi_precision_optimizer_keeps_float32_master_weights():
    opt = symbolic.multi_precision_optimizer(32, loss_scale=8.0, learning_rate=0.05,
                                             momentum=0.9)
    assert opt.rescale_grad == pytest.approx(1.0 / 256)
    assert opt.learning_rate == pytest.approx(0.05)
    weight = mx.nd.array([1.0, 2.0], dtype="float16")
    momentum, master = opt.create_state_multi_precision(0, weight)  # SGD: (mom, master)
    assert master.dtype == np.float32 and momentum.dtype == np.float32
    np.testing.assert_array_equal(master.asnumpy(), [1.0, 2.0])


def test_old_tutorial_lr_keyword_raises_type_error_in_mxnet_1_9_1():
    with pytest.raises(TypeError):
        mx.optimizer.create("sgd", multi_precision=True, lr=0.01)


# ------------------------------------------------------------------ conversion: resnet18
def test_resnet18_convolution_and_dense_run_in_float16(resnet18, resnet18_fp16):
    model, _ = resnet18_fp16
    original = _ops(resnet18["sym"])
    report = model.report
    assert report.count("Convolution", "float16") == original.count("Convolution") == 20
    assert report.count("Convolution", "float32") == 0
    assert report.count("FullyConnected", "float16") == original.count("FullyConnected") == 1
    assert report.count("FullyConnected", "float32") == 0
    for name, value in model.arg_params.items():
        if name.endswith("_weight"):
            assert value.dtype == np.float16, name


def test_resnet18_batchnorm_params_stay_float32_in_the_saved_file(resnet18_fp16):
    _, prefix = resnet18_fp16
    saved = mx.nd.load(prefix + "-0000.params")
    batchnorm = {k: v for k, v in saved.items() if "batchnorm" in k}
    assert len(batchnorm) == 20 * 4
    assert {v.dtype for v in batchnorm.values()} == {np.float32}


def test_resnet18_float16_params_file_is_at_most_51_percent(resnet18, resnet18_fp16):
    _, prefix = resnet18_fp16
    ratio = (os.path.getsize(prefix + "-0000.params")
             / os.path.getsize(resnet18["prefix"] + "-0000.params"))
    assert ratio <= 0.51


def test_resnet18_emulated_float16_outputs_agree_with_float32(resnet18, resnet18_fp16):
    _, prefix = resnet18_fp16
    net = symbolic.load_float16(prefix, 0, ctx=mx.cpu())
    y16 = net(mx.nd.array(resnet18["X"]))
    assert y16.dtype == np.float32
    y16, y32 = y16.asnumpy(), resnet18["y32"]
    assert np.isfinite(y16).all()
    assert not np.array_equal(y16, y32), "float16 rounding must show"
    rel = np.abs(y16 - y32).max() / np.abs(y32).max()
    assert rel <= RESNET18_REL_TOLERANCE


def test_convert_keeps_float32_io_types_by_default(resnet18_fp16):
    report = resnet18_fp16[0].report
    assert report.input_dtypes == {"data": "float32"}
    assert set(report.output_dtypes.values()) == {"float32"}


def test_convert_without_io_types_takes_and_returns_float16(resnet18, tmp_path):
    model = symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                             keep_io_types=False)
    assert model.report.input_dtypes == {"data": "float16"}
    assert set(model.report.output_dtypes.values()) == {"float16"}
    assert model.report.casts_inserted == 0
    model.save(str(tmp_path / "io16"), 0)
    net = symbolic.load_float16(str(tmp_path / "io16"), 0, ctx=mx.cpu())
    y16 = net(mx.nd.array(resnet18["X"], dtype="float16"))
    assert y16.dtype == np.float16
    y16 = y16.asnumpy().astype(np.float32)
    rel = np.abs(y16 - resnet18["y32"]).max() / np.abs(resnet18["y32"]).max()
    assert rel <= RESNET18_REL_TOLERANCE


def test_convert_casts_optional_params_unlike_mxnet_default(resnet18):
    sym, args, auxs = resnet18["sym"], resnet18["args"], resnet18["auxs"]
    ours = symbolic.convert(sym, args, auxs)
    mxnet_default = symbolic.convert(sym, args, auxs, cast_optional_params=False)
    assert ours.report.cast_optional_params and not mxnet_default.report.cast_optional_params
    assert ours.arg_params["resnetv10_conv0_weight"].dtype == np.float16
    assert {v.dtype for v in mxnet_default.arg_params.values()} == {np.float32}
    assert mxnet_default.report.bytes_after == mxnet_default.report.bytes_before
    assert mxnet_default.report.count("Convolution", "float16") == 20


def test_convert_leaves_the_callers_params_untouched(resnet18):
    args = dict(resnet18["args"])
    before = {k: (v.dtype, id(v)) for k, v in args.items()}
    symbolic.convert(resnet18["sym"], args, resnet18["auxs"])
    assert {k: (v.dtype, id(v)) for k, v in args.items()} == before


def test_report_param_bytes_match_the_arrays(resnet18, resnet18_fp16):
    report = resnet18_fp16[0].report
    total = sum(v.asnumpy().nbytes for v in list(resnet18["args"].values())
                + list(resnet18["auxs"].values()))
    assert report.param_bytes_before == {"float32": total}
    model = resnet18_fp16[0]
    after = {}
    for v in list(model.arg_params.values()) + list(model.aux_params.values()):
        after[np.dtype(v.dtype).name] = after.get(np.dtype(v.dtype).name, 0) + v.asnumpy().nbytes
    assert report.param_bytes_after == after


def test_report_counts_the_input_and_output_casts(resnet18_fp16):
    assert resnet18_fp16[0].report.casts_inserted == 2  # data -> float16, logits -> float32


def test_report_prints_a_table_of_ops_casts_bytes_and_fp32_layers(resnet18):
    model = symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                             exclude_layers=["resnetv10_dense0_fwd"])
    text = str(model.report)
    lines = text.splitlines()
    conv = [line.split() for line in lines if line.startswith("Convolution")][0]
    assert conv == ["Convolution", "20", "0"]
    dense = [line.split() for line in lines if line.startswith("FullyConnected")][0]
    assert dense == ["FullyConnected", "0", "1"]
    assert any(line.startswith("cast nodes inserted:") for line in lines)
    assert any(line.startswith("total") and "%" in line for line in lines)
    fp32 = [line.split(None, 3) for line in lines if line.startswith("  excluded layer")]
    assert fp32 == [["excluded", "layer", "1", "resnetv10_dense0_fwd"]]
    table = [line.split() for line in lines[lines.index(next(l for l in lines
                                                            if l.startswith("operator"))) + 1:]]
    table = [row for row in table[:table.index([])]]
    low, total = sum(int(r[1]) for r in table), sum(sum(map(int, r[1:])) for r in table)
    # the verdict agrees with its own table (columns: operator, float16, float32)
    assert lines[0].startswith("Float16 conversion report: %d of %d layers compute in float16"
                               % (low, total)) and "1 excluded layer" in lines[0]


def test_report_groups_float32_layers_by_reason_and_names_all_on_request(resnet18):
    model = symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                             exclude_layers=["resnetv10_stage1_conv0_fwd"])
    following = [n for n, _, r in model.report.fp32_layers if r == "float32 input"]
    assert len(following) > 3  # the BatchNorm, relu, ... after the excluded layer
    short = model.report.format()
    row = [l for l in short.splitlines() if l.startswith("  float32 input")][0]
    assert row.split()[2] == str(len(following)) and following[0] in row
    assert following[3] not in short and "(%d more)" % (len(following) - 3) in row
    assert all(name in model.report.format(verbose=True) for name in following)


def test_excluded_layer_runs_float32_and_what_follows_is_explained(resnet18):
    model = symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                             exclude_layers=["resnetv10_stage1_conv0_fwd"])
    reasons = {name: reason for name, _, reason in model.report.fp32_layers}
    assert reasons["resnetv10_stage1_conv0_fwd"] == "excluded layer"
    assert reasons["resnetv10_stage1_batchnorm0_fwd"] == "float32 input"
    assert model.arg_params["resnetv10_stage1_conv0_weight"].dtype == np.float32
    assert model.report.count("Convolution", "float16") == 19


def test_excluded_op_type_keeps_every_node_of_it_float32(resnet18):
    model = symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                             exclude_ops=["FullyConnected"])
    assert model.report.count("FullyConnected", "float32") == 1
    assert ("resnetv10_dense0_fwd", "FullyConnected", "excluded op") in model.report.fp32_layers


def test_unknown_layer_name_is_a_one_line_error_with_a_suggestion(resnet18):
    with pytest.raises(ConversionError) as err:
        symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                         exclude_layers=["resnetv10_dense_fwd"])
    assert "no layer named 'resnetv10_dense_fwd'" in str(err.value)
    assert "resnetv10_dense0_fwd" in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_op_name_is_an_error(resnet18):
    with pytest.raises(ConversionError, match="unknown operator 'FullyConected'"):
        symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                         exclude_ops=["FullyConected"])


def test_target_other_than_float16_or_bfloat16_is_refused(resnet18):
    with pytest.raises(ConversionError, match="unsupported target dtype 'float64'"):
        symbolic.convert(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                         target_dtype="float64")


def test_converting_a_converted_graph_is_refused(resnet18_fp16):
    model = resnet18_fp16[0]
    with pytest.raises(ConversionError, match="already"):
        symbolic.convert(model.symbol, model.arg_params, model.aux_params)


def test_float16_params_of_a_partly_cast_model_are_converted_from_float32(resnet18):
    args = {k: v.astype("float16") for k, v in resnet18["args"].items()}
    auxs = {k: v.astype("float16") for k, v in resnet18["auxs"].items()}
    model = symbolic.convert(resnet18["sym"], args, auxs)
    assert model.aux_params["resnetv10_batchnorm0_running_var"].dtype == np.float32
    assert model.arg_params["resnetv10_batchnorm0_gamma"].dtype == np.float32
    assert model.arg_params["resnetv10_conv0_weight"].dtype == np.float16


def test_params_of_another_model_do_not_match(resnet18, overflow_model):
    (_, args, auxs), _ = overflow_model
    with pytest.raises(ConversionError, match="do not match the symbol"):
        symbolic.convert(resnet18["sym"], args, auxs)


# ------------------------------------------------------------------ saving and loading
def test_saved_checkpoint_keeps_the_amp_cast_nodes_that_mxnet_save_drops(resnet18_fp16,
                                                                          tmp_path):
    model, prefix = resnet18_fp16
    with open(prefix + "-symbol.json") as handle:
        ours = [n["op"] for n in json.load(handle)["nodes"]]
    assert ours.count("amp_cast") == 2
    mx.model.save_checkpoint(str(tmp_path / "plain"), 0, model.symbol, model.arg_params,
                             model.aux_params)
    with open(str(tmp_path / "plain-symbol.json")) as handle:
        assert [n["op"] for n in json.load(handle)["nodes"]].count("amp_cast") < 2
    with pytest.raises(ConversionError, match="does not type-check"):
        symbolic.load_float16(str(tmp_path / "plain"), 0, ctx=mx.cpu())


def test_save_writes_both_files_or_neither(resnet18_fp16, tmp_path, monkeypatch):
    model = resnet18_fp16[0]
    real_replace = os.replace
    calls = []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        model.save(str(tmp_path / "out"), 0)
    assert len(calls) == 2
    assert os.listdir(str(tmp_path)) == []


def test_save_leaves_nothing_when_writing_the_params_fails(resnet18_fp16, tmp_path,
                                                            monkeypatch):
    real_fsync, calls = os.fsync, []

    def interrupted_fsync(fd):
        calls.append(fd)
        if len(calls) == 2:  # the params file is written, not yet on disk
            raise KeyboardInterrupt
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        resnet18_fp16[0].save(str(tmp_path / "out"), 0)
    assert os.listdir(str(tmp_path)) == []


def test_load_float16_runs_on_cpu_without_switching_emulation_on(resnet18_fp16, resnet18):
    assert not emulation.emulation_active()
    net = symbolic.load_float16(resnet18_fp16[1], 0, ctx=mx.cpu())
    out = net(mx.nd.array(resnet18["X"]))
    assert out.shape == (2, 1000) and np.isfinite(out.asnumpy()).all()
    assert not emulation.emulation_active()


def test_load_float16_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(ConversionError, match="does not exist"):
        symbolic.load_float16(str(tmp_path / "nothing"), 0)


def test_module_checkpoint_converts_and_loads_without_its_label(tmp_path):
    mx.random.seed(0)
    train, test, X_test, _ = _digits_iters()
    sym = symbolic.float16_softmax_symbol(_digits_body, dtype="float32")
    mod = mx.mod.Module(sym, context=mx.cpu())
    mod.fit(train, num_epoch=1, optimizer="sgd",
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9},
            initializer=mx.init.Xavier(magnitude=2.0))
    probabilities = mod.predict(test).asnumpy()
    arg_params, aux_params = mod.get_params()
    model = symbolic.convert(sym, arg_params, aux_params)
    assert model.report.input_dtypes == {"data": "float32", "softmax_label": "float32"}
    assert ("softmax", "SoftmaxOutput", "float32 op list") in model.report.fp32_layers
    model.save(str(tmp_path / "module16"), 0)
    net = symbolic.load_float16(str(tmp_path / "module16"), 0, ctx=mx.cpu())
    out = net(mx.nd.array(X_test)).asnumpy()
    assert out.shape == probabilities.shape
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    assert np.abs(out - probabilities).max() < 1e-2


# ------------------------------------------------------------------ validation
def test_validate_reports_small_errors_and_top1_for_resnet18(resnet18, resnet18_fp16):
    fp32 = (resnet18["sym"], resnet18["args"], resnet18["auxs"])
    result = symbolic.validate(fp32, resnet18_fp16[0], resnet18["X"], batch_size=1,
                               progress=False)
    assert result.samples == 2
    assert result.nonfinite_share == 0.0
    assert result.top1_agreement == 1.0
    assert 0 < result.max_abs_error
    assert result.max_rel_error <= RESNET18_REL_TOLERANCE
    assert result.passes(RESNET18_REL_TOLERANCE)
    assert "float16 emulated" in result.device
    assert "max rel error" in str(result)


def test_validate_reports_the_share_of_nonfinite_outputs():
    mx.random.seed(0)
    net = nn.HybridSequential()
    net.add(nn.Dense(4, in_units=8), nn.Dense(4, in_units=4))
    net.initialize()
    net[1].weight.set_data(mx.nd.array([[1e5] * 4, [1e5] * 4, [0.1] * 4, [0.1] * 4]))
    net.hybridize()
    X = np.ones((3, 8), dtype=np.float32)
    net[0].weight.set_data(mx.nd.ones((4, 8)))
    fp16 = symbolic.convert_hybrid_block(net, inputs=mx.nd.array(X), ctx=mx.cpu())
    result = symbolic.validate(net, fp16, X, progress=False)
    assert result.nonfinite_share == pytest.approx(0.5)  # outputs 0 and 1 of 4 overflow
    assert result.max_abs_error == np.inf
    assert not result.passes(1.0)


def test_validate_accepts_a_dataloader_of_x_y_pairs(resnet18, resnet18_fp16):
    fp32 = (resnet18["sym"], resnet18["args"], resnet18["auxs"])
    data = gluon.data.ArrayDataset(mx.nd.array(resnet18["X"]), mx.nd.array([0, 1]))
    loader = gluon.data.DataLoader(data, batch_size=1)
    result = symbolic.validate(fp32, resnet18_fp16[0], loader, progress=False)
    assert result.samples == 2 and result.top1_agreement == 1.0


def test_validate_runs_a_cast_gluon_block_on_float16_inputs():
    from mxmixed.tutorial import digits_cnn

    net32 = digits_cnn(seed=3)
    net16 = digits_cnn(seed=3)  # the same seed gives the same weights
    net16.cast("float16")
    net16.hybridize()
    X = np.random.RandomState(0).uniform(size=(8, 1, 8, 8)).astype(np.float32)
    result = symbolic.validate(net32, net16, X, input_dtype="float16", progress=False)
    assert result.samples == 8 and result.nonfinite_share == 0.0
    assert 0 < result.max_rel_error < 1e-2


def test_validate_shows_a_progress_bar_where_someone_watches(resnet18, resnet18_fp16, capsys,
                                                             monkeypatch):
    fp32 = (resnet18["sym"], resnet18["args"], resnet18["auxs"])
    monkeypatch.setenv("MXMIXED_PROGRESS", "1")  # captured stderr is no terminal
    symbolic.validate(fp32, resnet18_fp16[0], resnet18["X"], batch_size=1)
    assert "validate float16" in capsys.readouterr().err


# ------------------------------------------------------------------ the float32-layer search
def test_search_finds_exactly_the_overflowing_layer(overflow_model):
    (sym, args, auxs), X = overflow_model
    result = symbolic.search_fp32_layers(sym, args, auxs, X, tolerance=1e-2, progress=False)
    assert result.layers == ["net_big_fwd"]
    assert result.error <= 1e-2 < result.initial_error
    assert result.ranking[0][0] == "net_big_fwd" and result.ranking[0][1] > 65504
    reasons = {name: reason for name, _, reason in result.model.report.fp32_layers}
    assert reasons["net_big_fwd"] == "search"


def test_search_needs_fewer_conversions_than_one_per_layer(overflow_model):
    (sym, args, auxs), X = overflow_model
    result = symbolic.search_fp32_layers(sym, args, auxs, X, tolerance=1e-2, progress=False)
    assert len(result.ranking) == 21  # 11 Dense, 8 relu, 1 BatchNorm, 1 relu
    assert result.evaluations <= 2 + int(np.ceil(np.log2(21)))
    assert result.evaluations < len(result.ranking)


def test_search_model_with_the_found_layer_meets_the_tolerance(overflow_model, tmp_path):
    (sym, args, auxs), X = overflow_model
    result = symbolic.search_fp32_layers(sym, args, auxs, X, tolerance=1e-2, progress=False)
    result.model.save(str(tmp_path / "searched"), 0)
    net = symbolic.load_float16(str(tmp_path / "searched"), 0, ctx=mx.cpu())
    reference = Runner((sym, args, auxs), mx.cpu())(X)[0]
    got = net(mx.nd.array(X)).asnumpy()
    assert np.abs(got - reference).max() / np.abs(reference).max() <= 1e-2
    plain = symbolic.convert(sym, args, auxs).to_block(mx.cpu())(mx.nd.array(X)).asnumpy()
    assert np.abs(plain - reference).max() / np.abs(reference).max() > 1e-2


def test_search_keeps_everything_float16_when_the_tolerance_is_met(resnet18):
    result = symbolic.search_fp32_layers(resnet18["sym"], resnet18["args"], resnet18["auxs"],
                                         resnet18["X"], tolerance=RESNET18_REL_TOLERANCE,
                                         progress=False)
    assert result.layers == [] and result.evaluations == 1


# ------------------------------------------------------------------ convert_hybrid_block
def test_mxnet_convert_hybrid_block_defaults_to_a_gpu():
    assert inspect.signature(amp.convert_hybrid_block).parameters["ctx"].default == mx.gpu(0)


def test_convert_hybrid_block_hybridizes_and_runs_an_unrun_block_on_cpu():
    from mxmixed.tutorial import digits_cnn

    net = digits_cnn(seed=0, prefix="hb_")
    X = mx.nd.array(np.random.RandomState(0).uniform(size=(4, 1, 8, 8)))
    y32 = net(X).asnumpy()  # imperative: no graph yet
    converted, report = symbolic.convert_hybrid_block(net, inputs=X, ctx=mx.cpu(),
                                                      return_report=True)
    assert report.count("Convolution", "float16") == 2
    assert report.count("FullyConnected", "float16") == 2
    params = converted.collect_params()
    assert np.dtype(params["hb_features_conv0_weight"].dtype) == np.float16
    assert np.dtype(params["hb_features_batchnorm0_gamma"].dtype) == np.float32
    assert np.dtype(params["hb_features_batchnorm0_running_var"].dtype) == np.float32
    assert params["hb_features_conv0_weight"].list_ctx() == [mx.cpu()]
    y16 = converted(X).asnumpy()
    assert np.abs(y16 - y32).max() / np.abs(y32).max() < 1e-2


def test_convert_hybrid_block_needs_example_inputs_for_an_unrun_block():
    from mxmixed.tutorial import digits_cnn

    with pytest.raises(ConversionError, match="pass example inputs"):
        symbolic.convert_hybrid_block(digits_cnn(seed=0), ctx=mx.cpu())


class SymbolBatchNormNet(nn.HybridBlock):
    """A conv net whose BatchNorm is built from symbols, as in gluoncv's SSD (#17164).

    Its BatchNorm params have names that Gluon's name-based fix in ``SymbolBlock.cast`` does
    not recognise, so ``cast('float16')`` makes all of them float16.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(8, 3, in_channels=1, use_bias=False)
            self.scale = self.params.get("scale", shape=(8,), init=mx.init.Constant(1.5))
            self.shift = self.params.get("shift", shape=(8,), init=mx.init.Constant(0.1))
            self.mu = self.params.get("mu", shape=(8,), init=mx.init.Constant(0.2),
                                      grad_req="null")
            self.sigma2 = self.params.get("sigma2", shape=(8,), init=mx.init.Constant(4.0),
                                          grad_req="null")
            self.dense = nn.Dense(10, in_units=8 * 6 * 6)

    def hybrid_forward(self, F, x, scale, shift, mu, sigma2):
        y = F.BatchNorm(self.conv(x), scale, shift, mu, sigma2, fix_gamma=False,
                        use_global_stats=True)
        return self.dense(F.relu(y))


def test_convert_hybrid_block_keeps_symbol_batchnorm_params_float32_after_cast():
    mx.random.seed(0)
    net = SymbolBatchNormNet(prefix="symbn_")
    net.initialize(mx.init.Xavier())
    X = mx.nd.array(np.random.RandomState(0).uniform(size=(2, 1, 8, 8)))
    y32 = net(X).asnumpy()
    net.cast("float16")  # MXNet #17164: the BatchNorm params become float16 too
    assert np.dtype(net.scale.dtype) == np.float16
    net.hybridize()
    with emulation.emulated(), pytest.raises((TypeError, mx.base.MXNetError)):
        net(X.astype("float16")).wait_to_read()  # so MXNet's "run it once first" cannot work
    converted = symbolic.convert_hybrid_block(net, inputs=X, ctx=mx.cpu())
    params = converted.collect_params()
    for name in ("symbn_scale", "symbn_shift", "symbn_mu", "symbn_sigma2"):
        assert np.dtype(params[name].dtype) == np.float32
        assert params[name].data().dtype == np.float32
    assert np.dtype(params["symbn_conv0_weight"].dtype) == np.float16
    y16 = converted(X).asnumpy()
    assert np.abs(y16 - y32).max() / np.abs(y32).max() < 1e-2
