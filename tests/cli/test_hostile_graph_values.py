"""Attribute values MXNet accepts in a ``-symbol.json`` that once ended ``mxmixed convert`` in a
traceback: ``eps='nan(1)'`` (MXNet reads a NaN) and a data input declaring its ``__dtype__``
(MXNet's AMP pass looks every declared input up among the params: ``KeyError: 'data'``). The
reference is MXNet's own run of the file."""
import json

import mxnet as mx
import numpy as np
import pytest

from conftest import run_convert
from mxmixed import bfloat16_support, symbolic

SHAPE = (3, 4, 4)
DTYPES = ["float16", pytest.param("bfloat16", marks=pytest.mark.skipif(
    not bfloat16_support()[0], reason="bfloat16 cannot run on this CPU"))]


def _checkpoint(prefix, change):
    out = mx.sym.Convolution(mx.sym.var("data"), kernel=(1, 1), num_filter=2, name="conv")
    out = mx.sym.FullyConnected(mx.sym.BatchNorm(out, fix_gamma=False, name="bn"), num_hidden=2,
                                name="fc")
    rng = np.random.RandomState(0)
    args = {"conv_weight": rng.randn(2, 3, 1, 1), "conv_bias": rng.randn(2),
            "bn_gamma": rng.rand(2) + 0.5, "bn_beta": rng.randn(2),
            "fc_weight": rng.randn(2, 32), "fc_bias": rng.randn(2)}
    aux = {"bn_moving_mean": rng.randn(2), "bn_moving_var": rng.rand(2) + 0.5}
    mx.model.save_checkpoint(prefix, 0, out, {k: mx.nd.array(v) for k, v in args.items()},
                             {k: mx.nd.array(v) for k, v in aux.items()})
    with open(prefix + "-symbol.json") as handle:
        graph = json.load(handle)
    for node in graph["nodes"]:
        change(node)
    with open(prefix + "-symbol.json", "w") as handle:
        json.dump(graph, handle)
    return prefix


def _mxnet_output(prefix, x):
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    args["data"] = mx.nd.array(x)
    return sym.bind(mx.cpu(), args, aux_states=aux, grad_req="null").forward()[0].asnumpy()


def _converted_output(prefix, dtype, x):
    load = symbolic.load_bfloat16 if dtype == "bfloat16" else symbolic.load_float16
    return load(prefix)(mx.nd.array(x)).astype("float32").asnumpy()


def _set_eps(node):
    if node["op"] == "BatchNorm":
        node["attrs"]["eps"] = "nan(1)"


def _declare_data(code):
    def change(node):
        if node["name"] == "data":
            node["attrs"] = {"__dtype__": code}
    return change


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_eps_of_nan_1_converts_to_the_nan_model_mxnet_runs(tmp_path, capsys, dtype):
    prefix = _checkpoint(str(tmp_path / "nan"), _set_eps)
    code, _, err = run_convert([prefix, "0", "--out", str(tmp_path / "out"), "--dtype", dtype,
                                "--validate", "2", "--input-shape", "3,4,4"], capsys)
    assert code == 0 and "Traceback" not in err, err
    x = np.random.RandomState(1).randn(2, *SHAPE).astype(np.float32)
    assert np.isnan(_mxnet_output(prefix, x)).all()
    assert np.isnan(_converted_output(str(tmp_path / "out"), dtype, x)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_data_input_declaring_float32_converts_to_the_model_mxnet_runs(tmp_path, capsys, dtype):
    prefix = _checkpoint(str(tmp_path / "declared"), _declare_data("0"))
    code, _, err = run_convert([prefix, "0", "--out", str(tmp_path / "out"), "--dtype", dtype,
                                "--validate", "2", "--input-shape", "3,4,4"], capsys)
    assert code == 0 and "Traceback" not in err, err
    x = np.random.RandomState(1).randn(2, *SHAPE).astype(np.float32)
    want = _mxnet_output(prefix, x)
    got = _converted_output(str(tmp_path / "out"), dtype, x)
    assert np.abs(got - want).max() / np.abs(want).max() < 3e-2


@pytest.mark.parametrize("code", ["12", "2", "4"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_data_input_declaring_another_dtype_is_one_line(tmp_path, capsys, dtype, code):
    """The float32 params cannot meet data of that dtype at the Convolution: MXNet cannot run
    the model given either."""
    prefix = _checkpoint(str(tmp_path / "declared"), _declare_data(code))
    status, _, err = run_convert([prefix, "0", "--out", str(tmp_path / "out"), "--dtype", dtype,
                                  "--validate", "2", "--input-shape", "3,4,4"], capsys)
    lines = [line for line in err.strip().splitlines() if not line.startswith("note:")]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
