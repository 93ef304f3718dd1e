"""Messages that name the fix, for mistakes a new user makes: an ``--exclude`` name the graph
lacks says where layer names are (and lists some), a ``.npz`` whose names are not the graph's is one line
and exit 2, and float32 data fed to a ``net.cast('float16')`` net says ``X.astype('float16')``.
"""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from conftest import run_convert
from mxmixed import cli, emulation


def test_an_unknown_exclude_says_where_layer_names_are_and_lists_some(digits_pair, tmp_path, capsys):
    code, _, err = run_convert([digits_pair, "0", "--out", str(tmp_path / "out"),
                             "--exclude", "nosuchlayer"], capsys)
    assert code == cli.EXIT_USAGE
    line, = err.strip().splitlines()
    assert "no layer named 'nosuchlayer' in " + digits_pair + "-symbol.json" in line, line
    assert '"name" of its nodes whose "op" is not "null"' in line, line
    assert "digits_features_conv0_fwd (Convolution)" in line, line
    assert not [f for f in os.listdir(tmp_path) if f.startswith("out")]


def test_a_misspelt_exclude_suggests_the_layer(digits_pair, tmp_path, capsys):
    code, _, err = run_convert([digits_pair, "0", "--out", str(tmp_path / "out"),
                             "--exclude", "digits_features_conv0"], capsys)
    assert code == cli.EXIT_USAGE
    assert "did you mean 'digits_features_conv0_fwd'?" in err, err


@pytest.mark.parametrize("arrays", [{"x": np.zeros((4, 1, 8, 8), np.float32),
                                     "y": np.zeros(4)}, {}], ids=["two-arrays", "empty"])
def test_a_npz_given_to_inputs_is_one_line_and_exit_2(digits_pair, tmp_path, capsys, arrays):
    npz = str(tmp_path / "samples.npz")
    np.savez(npz, **arrays)
    code, _, err = run_convert([digits_pair, "0", "--out", str(tmp_path / "out"), "--validate", "4",
                             "--inputs", npz], capsys)
    assert code == cli.EXIT_USAGE, err
    line, = err.strip().splitlines()
    assert npz in line, line
    assert "Traceback" not in err and "AttributeError" not in err
    if arrays:  # a .npz holds one array per data input, by name: this graph's is 'data'
        assert "no data input named 'x', 'y'" in line and "data inputs are data" in line, line
    else:
        assert "no arrays" in line, line


def _float16_net(hybridize):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=1), gluon.nn.Dense(10, in_units=4 * 6 * 6))
    net.initialize()
    net.cast("float16")
    if hybridize:
        net.hybridize()
    return net


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_float32_data_into_a_float16_net_says_astype_float16(hybridize):
    emulation.enable()
    net = _float16_net(hybridize)
    with pytest.raises(TypeError, match=r"the net is float16 but its input (data )?is float32: "
                                        r"pass X\.astype\('float16'\)") as info:
        net(mx.nd.ones((2, 1, 8, 8))).wait_to_read()
    assert "\n" not in str(info.value)
    out = net(mx.nd.ones((2, 1, 8, 8)).astype("float16"))  # the fix it names works
    assert out.dtype == np.float16


def test_mixed_dtypes_without_a_float16_net_get_no_such_hint():
    emulation.enable()
    data = mx.nd.ones((2, 4), dtype="float16")
    weight = mx.nd.ones((3, 4), dtype="float32")
    with pytest.raises(TypeError) as info:
        mx.nd.FullyConnected(data, weight, no_bias=True, num_hidden=3)
    assert "astype" not in str(info.value)


def test_mixed_dtypes_of_two_data_arrays_get_no_such_hint():
    emulation.enable()
    with pytest.raises(TypeError) as info:
        mx.nd.dot(mx.nd.ones((2, 4)), mx.nd.ones((4, 3), dtype="float16"))
    assert "astype" not in str(info.value)
