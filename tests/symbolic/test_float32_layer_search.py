"""The float32-layer search on a net with planted float16-sensitive layers: it finds exactly
those within 2k + ceil(log2 n) + 4 evaluations; and the underflow warning of convert."""
import math

import numpy as np
import pytest

import mxnet as mx
from mxnet.gluon import nn

from mxmixed import symbolic
from mxmixed.symbolic._probe import layer_peaks

OVERFLOW = {4: 3e5, 15: 3e5}    # weights x3e5: outputs near 1e5 > 65504, weights too
UNDERFLOW = {9: 1e-6, 20: 1e-6}  # weights x1e-6: outputs near 1e-6, float16 subnormals


class PlantedNet(nn.HybridBlock):
    """A chain of Dense layers; the planted ones are scaled out of float16's range and a
    BatchNorm right after each undoes the scale (moving variance scale**2, float32 params,
    fine in float16), so float32 is unaffected."""

    def __init__(self, depth=24, **kwargs):
        super().__init__(**kwargs)
        self.depth = depth
        with self.name_scope():
            for i in range(depth):
                setattr(self, "d%d" % i, nn.Dense(16, in_units=16, prefix="d%d_" % i))
                if i in OVERFLOW or i in UNDERFLOW:
                    setattr(self, "n%d" % i, nn.BatchNorm(in_channels=16, epsilon=1e-20,
                                                          prefix="n%d_" % i))
            self.out = nn.Dense(4, in_units=16, prefix="out_")

    def hybrid_forward(self, F, x):
        for i in range(self.depth):
            x = getattr(self, "d%d" % i)(x)
            if i in OVERFLOW or i in UNDERFLOW:
                x = getattr(self, "n%d" % i)(x)
            x = F.relu(x)
        return self.out(x)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    mx.random.seed(0)
    net = PlantedNet(prefix="p_")
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2.0))
    for i, scale in list(OVERFLOW.items()) + list(UNDERFLOW.items()):
        dense = getattr(net, "d%d" % i)
        dense.weight.set_data(dense.weight.data() * scale)
        dense.bias.set_data(dense.bias.data() * scale)
        getattr(net, "n%d" % i).running_var.set_data(mx.nd.full((16,), scale ** 2))
    net.hybridize()
    X = np.random.RandomState(0).uniform(0.5, 1.5, size=(16, 16)).astype(np.float32)
    net(mx.nd.array(X))
    prefix = str(tmp_path_factory.mktemp("planted") / "planted")
    net.export(prefix)
    sym, args, auxs = mx.model.load_checkpoint(prefix, 0)
    return sym, args, auxs, X


def test_search_finds_the_planted_layers_within_the_bound(planted):
    sym, args, auxs, X = planted
    result = symbolic.search_fp32_layers(sym, args, auxs, X, tolerance=1e-2, progress=False)
    planted_names = {"p_d%d_fwd" % i for i in list(OVERFLOW) + list(UNDERFLOW)}
    assert set(result.layers) == planted_names, result
    n, k = len(result.ranking), len(result.layers)
    assert result.bound == 2 * k + math.ceil(math.log2(n)) + 4
    assert result.evaluations <= result.bound, result
    assert result.error <= 1e-2 < result.initial_error
    # the ranking put the planted layers first: overflow, then the error each layer adds
    assert {name for name, _ in result.ranking[:4]} == planted_names
    assert result.skipped == []
    assert "bound" in str(result)


def test_search_on_an_excluded_concat_branch_never_crashes(tmp_path):
    from .test_zoo_conversion import InceptionBlock, _export, _fan_in_init

    net = InceptionBlock(prefix="inc_")
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(4, 3, 8, 8)))
    with mx.name.NameManager():
        _fan_in_init(net, x)
        # stem weights large: the stem and what follows need float32 at a tight tolerance
        net.stem[0].weight.set_data(net.stem[0].weight.data() * 3e3)
        sym, args, auxs = _export(net, x, tmp_path, "inc")
    result = symbolic.search_fp32_layers(sym, args, auxs, x.asnumpy(), tolerance=2e-4,
                                         progress=False)
    assert result.error <= 2e-4
    assert result.evaluations <= result.bound + len(result.skipped)


def test_convert_warns_when_calibration_activations_underflow_float16():
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    net = mx.sym.FullyConnected(mx.sym.relu(net), num_hidden=4, name="fc2")
    rng = np.random.RandomState(0)
    args = {"fc1_weight": mx.nd.array(rng.normal(0, 1e-4, (8, 8))),
            "fc1_bias": mx.nd.zeros(8),
            "fc2_weight": mx.nd.array(rng.normal(0, 1e-4, (4, 8))),
            "fc2_bias": mx.nd.zeros(4)}
    X = rng.uniform(size=(4, 8)).astype(np.float32)
    quiet = symbolic.convert(net, args, {})
    assert not any("underflow" in n for n in quiet.report.notes)
    model = symbolic.convert(net, args, {}, calibration=X)
    notes = [n for n in model.report.notes if "underflow" in n]
    assert len(notes) == 1
    assert "search_fp32_layers" in notes[0] and "output(s) 0" in notes[0]
    assert "fc2" in notes[0] and "search_fp32_layers" in str(model.report)


def test_convert_does_not_warn_for_ordinary_activations():
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=4, name="fc1")
    args = {"fc1_weight": mx.nd.ones((4, 8)), "fc1_bias": mx.nd.zeros(4)}
    model = symbolic.convert(net, args, {}, calibration=np.ones((2, 8), np.float32))
    assert model.report.notes == []


@pytest.mark.parametrize("first, second, last", [("relu", "neg", "exp"),
                                                 ("dup", "dup", "dup_output")])
def test_calibration_peaks_follow_each_layer_whatever_its_name(first, second, last):
    """The calibration's op hook finds each layer by node, not only by the name MXNet reports:
    unique names, then two layers named alike (the last one is meant) and a name that reads
    like another's output; a split whose first output nothing reads is measured too."""
    data = mx.sym.var("data")
    relu = mx.sym.relu(data, name=first)
    neg = mx.sym.negative(relu * 3, name=second)
    halves = mx.sym.split(neg, num_outputs=2, axis=1, name="split")
    net = mx.sym.exp(halves[1] * 0.5, name=last)
    X = np.array([[1.0, -2.0, 4.0, 0.5], [0.25, 3.0, -1.0, 2.0]], np.float32)
    outputs, peaks = layer_peaks(net, {}, {}, [second, "split", last], [X[:1], X[1:]],
                                 mx.cpu(), False, "peaks")
    negated = -3 * np.maximum(X, 0)
    assert np.allclose(outputs[0], np.exp(negated[:, 2:] * 0.5))
    assert peaks.tolist() == pytest.approx([np.abs(negated).max(),
                                            np.abs(negated[:, :2]).max(),
                                            np.exp(negated[:, 2:] * 0.5).max()])
