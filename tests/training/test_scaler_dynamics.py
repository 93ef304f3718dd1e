"""LossScaler: PyTorch-equal dynamics, hysteresis, floor/ceiling, state, guard and bad input.

The overflow check itself (``has_overflow(params)``, MXNet's protocol) belongs to the handle that
links a Trainer to its scaler (``mxmixed.training._handle``); the tests below that need it go through it.
"""
import json
import math
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from conftest import ROOT
from mxmixed.training._handle import attach
from mxmixed.scaler import LossScaleError, LossScaler

with open(os.path.join(ROOT, "tests", "data", "gradscaler_table.json")) as _file:
    TABLE = [c for c in json.load(_file)["cases"] if not c.get("extreme")]


def _replay(scaler, overflows):
    scales, skipped = [], []
    for overflow in overflows:
        scales.append(scaler.loss_scale)
        scaler.update(overflow)
        skipped.append(scaler.last_step_skipped)
    return scales, skipped


@pytest.mark.parametrize("case", TABLE, ids=lambda c: "%s-%s" % (
    "g%(growth_factor)g-b%(backoff_factor)g-i%(growth_interval)d" % c["config"], c["sequence"]))
def test_scale_history_equals_torch_gradscaler(case):
    scaler = LossScaler(min_scale=None, max_scale=None, hysteresis=1, **case["config"])
    scales, skipped = _replay(scaler, case["overflows"])
    assert scales == case["torch"]["scales"]
    assert skipped == case["torch"]["skipped"]
    assert scaler.loss_scale == case["torch"]["final_scale"]
    assert scaler.skipped_steps == sum(case["torch"]["skipped"])


def test_live_torch_gradscaler_agrees_when_torch_is_installed():
    pytest.importorskip("torch", reason="PyTorch is not installed; the stored table is checked")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "table", os.path.join(ROOT, "tests", "data", "make_gradscaler_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    overflows = [False, True, True, False, False, False, True] + [False] * 7
    config = {"init_scale": 512.0, "growth_factor": 2.0, "backoff_factor": 0.5,
              "growth_interval": 2}
    reference = module.torch_history(config, overflows)
    scales, skipped = _replay(LossScaler(min_scale=None, max_scale=None, **config), overflows)
    assert scales == reference["scales"] and skipped == reference["skipped"]


def test_defaults_are_mxnet_constants_with_a_floor_of_one():
    scaler = LossScaler()
    assert scaler.loss_scale == 2.0 ** 16
    assert (scaler.growth_factor, scaler.backoff_factor, scaler.growth_interval) == (2.0, 0.5, 2000)
    assert scaler.max_scale == 2.0 ** 24 and scaler.min_scale == 1.0 and scaler.hysteresis == 1


def test_backoff_applies_on_the_very_next_step():
    scaler = LossScaler(init_scale=1024)
    scaler.update(True)
    assert scaler.loss_scale == 512


def test_hysteresis_backs_off_on_the_nth_overflow_since_last_change():
    scaler = LossScaler(init_scale=1024, hysteresis=3, growth_interval=2)
    scales, skipped = _replay(scaler, [True, True, True, True, False, False, True, True, True])
    assert scales == [1024, 1024, 1024, 512, 512, 512, 1024, 1024, 1024]
    assert scaler.loss_scale == 512
    assert skipped == [True, True, True, True, False, False, True, True, True]


def test_scale_stops_at_ceiling_and_floor():
    top = LossScaler(init_scale=2.0 ** 23, max_scale=2.0 ** 24, growth_interval=1)
    _replay(top, [False] * 5)
    assert top.loss_scale == 2.0 ** 24
    bottom = LossScaler(init_scale=4.0, min_scale=2.0)
    _replay(bottom, [True] * 3)
    assert bottom.loss_scale == 2.0


def test_static_scaler_never_moves_but_counts_skips():
    scaler = LossScaler.static(128)
    scales, _ = _replay(scaler, [True, False, True] + [False] * 10)
    assert set(scales) == {128.0} and scaler.skipped_steps == 2


def test_history_is_bounded():
    scaler = LossScaler(history_size=5)
    _replay(scaler, [False] * 12)
    assert len(scaler.history) == 5 and scaler.history[-1][0] == 11


def test_state_dict_round_trip_continues_identically():
    a = LossScaler(init_scale=256, growth_interval=3, hysteresis=2)
    _replay(a, [True, False, True, True, False, False])
    b = LossScaler()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    rest = [False, False, True, True, False, False, False]
    assert _replay(a, rest) == _replay(b, rest)
    assert a.state_dict() == b.state_dict()


def test_load_state_dict_rejects_foreign_dicts():
    with pytest.raises(ValueError, match="not a LossScaler state"):
        LossScaler().load_state_dict({"loss_scale": 2.0})


@pytest.mark.parametrize("kwargs, match", [
    ({"init_scale": 0}, "positive"), ({"init_scale": -8}, "positive"),
    ({"init_scale": math.inf}, "finite"), ({"init_scale": math.nan}, "finite"),
    ({"growth_factor": 1.0}, "growth_factor must be > 1"),
    ({"growth_factor": 0.5}, "growth_factor must be > 1"),
    ({"backoff_factor": 1.0}, r"\(0, 1\)"), ({"growth_interval": 0}, "positive integer"),
    ({"hysteresis": 0}, "positive integer"), ({"min_scale": 4, "max_scale": 2}, "exceeds"),
    ({"init_scale": 0.5, "min_scale": 1.0}, "below min_scale"),
    ({"init_scale": "big"}, "must be a number"),
])
def test_bad_parameters_are_refused(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LossScaler(**kwargs)


def _params_with_grads(values):
    params = []
    for name, value in values.items():
        p = gluon.Parameter(name, shape=(len(value),))
        p.initialize(ctx=mx.cpu())
        p.grad()[:] = mx.nd.array(value)
        params.append(p)
    return params


def _has_overflow(scaler, params):
    """What a Trainer's update runs first: the handle's check of ``params``' gradients, whose
    values stand for gradients computed under ``scale_loss``."""
    handle = attach(gluon.Trainer(params, "sgd"), scaler)
    handle.begin_step(grad_scale=scaler.loss_scale)  # as scale_loss does
    return handle.has_overflow(params)


def test_has_overflow_skips_on_inf_and_nan_and_passes_finite():
    scaler = LossScaler(init_scale=64)
    assert not _has_overflow(scaler, _params_with_grads({"a": [1.0, 2.0]}))
    assert _has_overflow(scaler, _params_with_grads({"a": [1.0, np.inf]}))
    assert _has_overflow(scaler, _params_with_grads({"a": [np.nan, 0.0]}))
    assert scaler.loss_scale == 16 and scaler.skipped_steps == 2


@pytest.mark.parametrize("bad, kind", [(np.inf, "inf"), (np.nan, "NaN")])
def test_overflow_at_min_scale_raises_naming_kind_and_parameter(bad, kind):
    scaler = LossScaler(init_scale=1.0, min_scale=1.0)
    params = _params_with_grads({"first_ok": [1.0], "culprit_weight": [bad], "later": [bad]})
    with pytest.raises(LossScaleError) as err:
        _has_overflow(scaler, params)
    message = str(err.value)
    assert kind in message and "culprit_weight" in message and "float32" in message


def test_has_overflow_handles_float16_weights_with_float32_batchnorm_grads():
    from mxnet import autograd

    from mxmixed import emulation
    from mxmixed.tutorial import digits_cnn

    net = digits_cnn(seed=0)
    net.cast("float16")
    with emulation.emulated():
        with autograd.record():
            loss = net(mx.nd.ones((4, 1, 8, 8), dtype="float16")).astype("float32").sum()
        loss.backward()
        params = list(net.collect_params().values())
        assert {np.dtype(p.dtype).name for p in params} == {"float16", "float32"}
        scaler = LossScaler(init_scale=8)
        assert not _has_overflow(scaler, params)
        params[0].grad()[:] = np.inf
        assert _has_overflow(scaler, params)


def test_overflow_error_names_the_backward_most_parameter_where_overflow_began():
    from mxmixed.tutorial import digits_cnn

    net = digits_cnn(seed=0)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    for p in params:
        p.grad()[:] = 0.5
    for p in params[-4:]:
        p.grad()[:] = np.inf
    params[-1].grad()[0] = np.nan  # output bias: the last layer, where backward starts
    with pytest.raises(LossScaleError) as err:
        _has_overflow(LossScaler(init_scale=1.0, min_scale=1.0), params)
    message = str(err.value)
    assert "'%s' (NaN)" % params[-1].name in message
    assert "4 of %d parameters" % len(params) in message
