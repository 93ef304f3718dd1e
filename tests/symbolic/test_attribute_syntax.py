"""Attribute values written as MXNet's own parser accepts them (``eps="0.001f"``,
``kernel="(3L, 3L)"``, the spelling of Python 2's MXNet) are read as MXNet reads them: the
conversion, the folding and the emulation's graph pass give what the plain spelling gives."""
import json

import numpy as np
import pytest

import mxnet as mx

from conftest import run_convert
from mxmixed import cli
from mxmixed._core.graph import attr_float, attr_ints

SHAPE = (3, 8, 8)


@pytest.mark.parametrize("text, value", [("0.001f", 0.001), ("1e-3F", 0.001), ("0.5", 0.5),
                                         ("inf", float("inf")), (None, 7.0)])
def test_floats_are_read_as_mxnet_reads_them(text, value):
    assert attr_float(text, 7.0) == value


def _mxnet_reads_float(text):
    """The double MXNet's parser reads from ``text`` (a scalar added to a float64 zero), or
    'refused'."""
    try:
        sym = mx.sym._internal._plus_scalar(mx.sym.var("x"), scalar=text)
        zero = {"x": mx.nd.zeros((1,), dtype="float64")}
        return float(sym.bind(mx.cpu(), zero).forward()[0].asnumpy()[0])
    except mx.base.MXNetError:
        return "refused"


def _read_float(text):
    try:
        return attr_float(text, 7.0)
    except ValueError:
        return "refused"


@pytest.mark.parametrize("text", [
    "nan(1)", "nan(abc)", "nan()", "NaN", "-nan", "nan(1", "inf", "-inf", "infinity", "INF",
    "infin", "infx", "1e-3f", "0.001F", "1f", "1ef", "0x1p-3", " 0.5", "0.5 ", "1_0", ".5", "5.",
    "+0.5", "0.5x", "1e", "1E+2", "", ".", "-", "e5", "  ", "--1", "1.5.5", "1e308", "2e308",
    "1e309", "1e-308", "3e-308", "1e-400", "123456789012345678901234567890",
    "0.1234567890123456789012345", "1.7976931348623157e308", "6.02214076e23", "1e-7", "0.3"])
def test_a_float_is_read_or_refused_exactly_as_mxnets_parser_does(text):
    want, got = _mxnet_reads_float(text), _read_float(text)
    assert got == want or (got != got and want != want), (got, want)  # NaN: both NaN


@pytest.mark.parametrize("text, value", [("(3L, 3L)", (3, 3)), ("[3,3]", (3, 3)),
                                         ("(3,)", (3,)), ("3", (3,)), ("()", ()),
                                         ("(None, -1)", (None, -1)), ("None", None),
                                         (None, None), ((2, 2), (2, 2))])
def test_tuples_are_read_as_mxnet_reads_them(text, value):
    assert attr_ints(text) == value


def test_mxnet_accepts_the_spellings_read_here():
    data = mx.sym.var("data")
    sym = mx.sym.BatchNorm(mx.sym.Convolution(data, kernel="(3L, 3L)", num_filter=4), eps="0.001f")
    assert sym.infer_shape(data=(1,) + SHAPE)[1] == [(1, 4, 6, 6)]


def _checkpoint(folder, kernel, eps):
    data = mx.sym.var("data")
    conv = mx.sym.Convolution(data, kernel=kernel, num_filter=4, name="conv")
    sym = mx.sym.FullyConnected(mx.sym.relu(mx.sym.BatchNorm(conv, eps=eps, fix_gamma=False,
                                                             name="bn")), num_hidden=3,
                                name="fc")
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(1,) + SHAPE)
    rng = np.random.RandomState(0)
    args = {n: mx.nd.array(rng.uniform(0.5, 1.5, s))
            for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    auxs = {n: mx.nd.array(rng.uniform(0.5, 1.5, s))
            for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    prefix = str(folder / ("m-%s" % eps))
    mx.model.save_checkpoint(prefix, 0, sym, args, auxs)
    with open(prefix + "-symbol.json") as handle:
        assert '"(3L, 3L)"' in handle.read() or kernel == (3, 3)
    return prefix


@pytest.mark.slow
def test_a_checkpoint_in_mxnets_old_spelling_converts_folds_and_validates(tmp_path, capsys):
    x = np.random.RandomState(1).uniform(-1, 1, (4,) + SHAPE).astype(np.float32)
    np.save(str(tmp_path / "x.npy"), x)
    errors = {}
    for kernel, eps in (("(3L, 3L)", "0.25f"), ((3, 3), "0.25")):
        prefix = _checkpoint(tmp_path, kernel, eps)
        code, out, err = run_convert([prefix, "0", "--out", prefix + "-out", "--fold-bn",
                                      "--validate", "4", "--inputs", str(tmp_path / "x.npy")],
                                     capsys)
        assert code == cli.EXIT_OK, err
        assert "1 BatchNorm folded" in out
        errors[eps] = [line for line in out.splitlines() if "max abs error" in line]
        with open(prefix + "-out-symbol.json") as handle:
            assert not any(n["op"] == "BatchNorm" for n in json.load(handle)["nodes"])
    assert errors["0.25f"] == errors["0.25"]
