"""A ``-symbol.json`` is the model MXNet 1.9.1 makes of it, however its nodes spell their attributes.

MXNet reads a node's attributes under ``attrs``, ``attr`` (the later of the two replacing the
earlier) and ``param`` (merged, never replacing), and upgrades a graph saved by an older version
as it loads it. ``mxmixed convert`` once read only ``attrs``: a BatchNorm spelled ``param`` was
folded with the defaults (``fix_gamma=True``, ``eps=1e-3``) and the model written, validated
and exit 0, was 0.14 off the model given. The reference here is always MXNet's own reading.
"""
import json

import mxnet as mx
import numpy as np
import pytest

from conftest import run_convert
from mxmixed import bfloat16_support, symbolic
from mxmixed._core.graph import as_graph


def _nodes_as_mxnet_reads(path):
    with open(path) as handle:
        return json.loads(mx.sym.load_json(handle.read()).tojson())["nodes"]


def _nodes_as_mxmixed_reads(prefix):
    sym = symbolic.load_checkpoint(prefix, 0)[0]
    return json.loads(as_graph(sym).text())["nodes"]


def _model(prefix):
    """conv (no bias) -> BatchNorm (fix_gamma False, eps 0.5) -> relu -> FC -> softmax, float32."""
    out = mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), num_filter=4, pad=(1, 1),
                             no_bias=True, name="conv")
    out = mx.sym.BatchNorm(out, fix_gamma=False, eps=0.5, name="bn")
    out = mx.sym.softmax(mx.sym.FullyConnected(mx.sym.relu(out), num_hidden=3, name="fc"))
    rng = np.random.RandomState(0)
    args = {"conv_weight": rng.randn(4, 3, 3, 3), "bn_gamma": rng.rand(4) + 0.5,
            "bn_beta": rng.randn(4), "fc_weight": rng.randn(3, 256) * 0.1, "fc_bias": rng.randn(3)}
    aux = {"bn_moving_mean": rng.randn(4), "bn_moving_var": rng.rand(4) + 0.5}
    mx.model.save_checkpoint(prefix, 0, out, {k: mx.nd.array(v) for k, v in args.items()},
                             {k: mx.nd.array(v) for k, v in aux.items()})


def _respell(path, spellings):
    """Move each op's ``attrs`` to the key ``spellings`` gives for it."""
    with open(path) as handle:
        graph = json.load(handle)
    for node in graph["nodes"]:
        if node["op"] in spellings and "attrs" in node:
            node[spellings[node["op"]]] = node.pop("attrs")
    with open(path, "w") as handle:
        json.dump(graph, handle)


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("legacy") / "legacy")
    _model(prefix)
    _respell(prefix + "-symbol.json", {"BatchNorm": "param", "FullyConnected": "attr"})
    return prefix


def _mxnet_output(prefix, x):
    """MXNet's own run of the float32 checkpoint as MXNet reads it."""
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    args["data"] = mx.nd.array(x)
    return sym.bind(mx.cpu(), args, aux_states=aux, grad_req="null").forward()[0].asnumpy()


@pytest.mark.parametrize("dtype, extra, load, tolerance", [
    ("float16", [], symbolic.load_float16, 5e-3),
    ("float16", ["--fold-bn"], symbolic.load_float16, 5e-3),
    ("bfloat16", [], symbolic.load_bfloat16, 3e-2),  # folds the BatchNorm by default
])
def test_a_model_in_the_older_spellings_converts_to_the_model_mxnet_runs(
        legacy, tmp_path, capsys, dtype, extra, load, tolerance):
    if dtype == "bfloat16" and not bfloat16_support()[0]:
        pytest.skip(bfloat16_support()[1])
    out = str(tmp_path / "out")
    code, _, err = run_convert([legacy, "0", "--out", out, "--dtype", dtype, "--validate", "2",
                                "--input-shape", "3,8,8"] + extra, capsys)
    assert code == 0, err
    x = np.random.RandomState(1).randn(2, 3, 8, 8).astype(np.float32)
    want = _mxnet_output(legacy, x)
    got = load(out)(mx.nd.array(x)).astype("float32").asnumpy()
    assert np.abs(got - want).max() / np.abs(want).max() < tolerance


@pytest.mark.parametrize("keys", [
    {"attr": {"eps": "0.1"}},
    {"param": {"eps": "0.1"}},
    {"attrs": {"eps": "0.1", "fix_gamma": "False"}, "attr": {"eps": "0.2"}},
    {"attr": {"eps": "0.2"}, "attrs": {"eps": "0.1", "fix_gamma": "False"}},
    {"attrs": {"eps": "0.1"}, "param": {"eps": "0.2", "fix_gamma": "False"}},
    {"param": {"momentum": "0.5"}, "attr": {"eps": "0.2"}, "attrs": {"fix_gamma": "False"}},
], ids=["attr", "param", "attrs-then-attr", "attr-then-attrs", "attrs-and-param", "all-three"])
def test_the_attributes_are_those_mxnet_reads_in_any_spelling(tmp_path, keys):
    prefix = str(tmp_path / "bn")
    _model(prefix)
    with open(prefix + "-symbol.json") as handle:
        graph = json.load(handle)
    bn = next(node for node in graph["nodes"] if node["op"] == "BatchNorm")
    del bn["attrs"]
    bn.update(keys)
    with open(prefix + "-symbol.json", "w") as handle:
        json.dump(graph, handle)
    assert _nodes_as_mxmixed_reads(prefix) == _nodes_as_mxnet_reads(prefix + "-symbol.json")


def test_a_graph_of_an_older_version_is_upgraded_as_mxnet_upgrades_it(tmp_path):
    """No ``mxnet_version``: MXNet reads it as 0.8's, drops argmax's ``axis=-1`` (the argmax of
    the whole array) and moves a hidden ``lr_mult`` to ``__lr_mult__``."""
    prefix = str(tmp_path / "old")
    out = mx.sym.argmax(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc"),
                        axis=-1, name="am")
    mx.model.save_checkpoint(prefix, 0, out, {"fc_weight": mx.nd.ones((3, 4)),
                                              "fc_bias": mx.nd.zeros((3,))}, {})
    with open(prefix + "-symbol.json") as handle:
        graph = json.load(handle)
    del graph["attrs"]
    graph["nodes"][3]["attrs"]["lr_mult"] = "2"
    with open(prefix + "-symbol.json", "w") as handle:
        json.dump(graph, handle)
    want = _nodes_as_mxnet_reads(prefix + "-symbol.json")
    assert "axis" not in want[4].get("attrs", {})  # what MXNet does, so what the test checks
    assert _nodes_as_mxmixed_reads(prefix) == want


def test_a_lone_surrogate_in_a_node_name_is_one_line(tmp_path, capsys):
    prefix = str(tmp_path / "s")
    mx.model.save_checkpoint(prefix, 0, mx.sym.FullyConnected(
        mx.sym.var("data"), num_hidden=3, name="fc"), {"fc_weight": mx.nd.ones((3, 4)),
                                                       "fc_bias": mx.nd.zeros((3,))}, {})
    path = prefix + "-symbol.json"
    with open(path) as handle:
        text = handle.read()
    with open(path, "w") as handle:
        handle.write(text.replace('"name": "fc"', '"name": "fc\\ud800"'))
    with pytest.raises(symbolic.ConversionError, match="not valid Unicode") as info:
        symbolic.load_checkpoint(prefix, 0)
    assert "\n" not in str(info.value) and info.value.__cause__ is None
    code, out, err = run_convert([prefix, "0", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not valid Unicode" in err, err
