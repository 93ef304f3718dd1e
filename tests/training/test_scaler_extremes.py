"""The loss scale at both ends of float32: GradScaler's rule at the top, never 0 or inf, and every
reachable state round-trips through ``state_dict`` and strict JSON.

The ``extreme`` cases of ``tests/data/gradscaler_table.json`` were recorded from
torch.amp.GradScaler (torch 2.13.0+cpu) by ``tests/data/make_gradscaler_table.py``. At the top
mxmixed equals them. At the bottom GradScaler backs off through the float32 subnormals to 0 and
stays there; mxmixed deliberately stops at the smallest normal float32, 2**-126 (the rule in the
LossScaler docstring), so for those cases the expected scales below are derived by hand from that
rule, and the test checks that they agree with the recorded GradScaler values up to the first
back-off that GradScaler takes below 2**-126.
"""
import json
import math
import os

import numpy as np
import pytest

from conftest import ROOT
from mxmixed.scaler import SCALE_RANGE, LossScaler

TINY, BIGGEST = SCALE_RANGE

with open(os.path.join(ROOT, "tests", "data", "gradscaler_table.json")) as _file:
    EXTREME = {c["sequence"]: c for c in json.load(_file)["cases"] if c.get("extreme")}

TOP = [name for name in EXTREME if name.startswith("top")]
BOTTOM = [name for name in EXTREME if name.startswith("bottom")]


def _replay(scaler, overflows, each_step=None):
    scales, skipped = [], []
    for overflow in overflows:
        scales.append(scaler.loss_scale)
        scaler.update(overflow)
        skipped.append(scaler.last_step_skipped)
        if each_step is not None:
            each_step(scaler)
    return scales, skipped


def _torch_equal_config(case):
    return LossScaler(min_scale=None, max_scale=None, hysteresis=1, **case["config"])


def test_the_table_covers_both_ends_of_the_scale():
    top = [max(EXTREME[n]["torch"]["scales"]) for n in TOP]
    bottom = [min(EXTREME[n]["torch"]["scales"]) for n in BOTTOM]
    assert len(TOP) >= 4 and len(BOTTOM) >= 4
    assert max(top) > 2.0 ** 127 and min(bottom) == 0.0


@pytest.mark.parametrize("name", TOP)
def test_growth_that_would_overflow_float32_is_not_applied_as_in_gradscaler(name):
    case = EXTREME[name]
    scaler = _torch_equal_config(case)
    scales, skipped = _replay(scaler, case["overflows"])
    assert scales == case["torch"]["scales"]
    assert skipped == case["torch"]["skipped"]
    assert scaler.loss_scale == case["torch"]["final_scale"]
    assert math.isfinite(scaler.loss_scale)


def test_issue_reproduction_keeps_2_pow_126():
    s = LossScaler(init_scale=2.0 ** 126, growth_factor=4.0, growth_interval=1, min_scale=None,
                   max_scale=None)
    s.update(False)
    assert s.loss_scale == 2.0 ** 126


def _hand_derived_bottom(name):
    """The scales mxmixed uses at the bottom, derived by hand from its documented rule: a
    back-off whose float32 result falls below 2**-126 is not applied."""
    p = [2.0 ** -k for k in range(200)]  # p[k] = 2**-k
    if name == "bottom_halving_from_2^-120":
        # 6 back-offs reach 2**-126; the other 29 overflows keep it; 3 clean steps double it
        scales = [2.0 ** -(120 + i) for i in range(7)] + [p[126]] * 29 + [p[125], p[124]]
        return scales, p[123]
    if name == "bottom_long_overflow_run_from_2^16":
        # 2**16 halves 142 times to 2**-126, which the remaining 58 overflows keep
        return [2.0 ** (16 - i) for i in range(143)] + [p[126]] * 57, p[126]
    if name == "bottom_then_growth":
        return [p[124], p[125], p[126], p[126], p[126], p[125], p[124], p[123]], p[122]
    if name == "bottom_backoff0.1_from_1e-30":
        # float32 products of 0.1: 1e-30 ... about 1e-37 (7 back-offs); 1e-38 would be below
        # 2**-126 (1.18e-38), so the other 13 overflows keep it; 2 clean steps double it
        scales = [float(np.float32(1e-30))]
        for _ in range(7):
            scales.append(float(np.float32(scales[-1] * 0.1)))
        held = scales[-1]
        scales += [held] * 12  # steps 8..19; step 7 is the last back-off result above
        scales += [held, float(np.float32(held * 2.0))]
        return scales, float(np.float32(held * 4.0))
    raise KeyError(name)


@pytest.mark.parametrize("name", BOTTOM)
def test_backoff_never_goes_below_the_smallest_normal_float32(name):
    case = EXTREME[name]
    scaler = _torch_equal_config(case)
    scales, skipped = _replay(scaler, case["overflows"])
    expected, final = _hand_derived_bottom(name)
    assert scales == expected and scaler.loss_scale == final
    assert skipped == case["overflows"]
    assert all(TINY <= s <= BIGGEST for s in scales + [final])
    # up to GradScaler's first step below 2**-126, the two agree exactly
    torch_scales = case["torch"]["scales"]
    first_below = next(i for i, s in enumerate(torch_scales) if s < TINY)
    assert first_below > 0 and scales[:first_below] == torch_scales[:first_below]


@pytest.mark.parametrize("hysteresis", [1, 2])
@pytest.mark.parametrize("name", sorted(EXTREME))
def test_every_reachable_state_round_trips_through_strict_json(name, hysteresis):
    case = EXTREME[name]
    scaler = LossScaler(min_scale=None, max_scale=None, hysteresis=hysteresis, history_size=8,
                        **case["config"])

    def round_trip(s):
        text = json.dumps(s.state_dict(), allow_nan=False)  # strict JSON: no inf, no NaN
        restored = LossScaler()
        restored.load_state_dict(json.loads(text))
        assert restored.state_dict() == s.state_dict()
        assert restored.loss_scale == s.loss_scale

    _replay(scaler, case["overflows"], each_step=round_trip)


@pytest.mark.parametrize("scale", [2.0 ** 128, 1e39, math.inf, 2.0 ** -127, 1e-45, 0.0])
def test_scales_outside_the_normal_float32_range_are_refused(scale):
    with pytest.raises(ValueError):
        LossScaler(init_scale=scale, min_scale=None, max_scale=None)
    state = LossScaler().state_dict()
    state["loss_scale"] = scale
    scaler = LossScaler(init_scale=512)
    with pytest.raises(ValueError):
        scaler.load_state_dict(state)
    assert scaler.loss_scale == 512  # a refused state changes nothing
