"""The overflow check is exact but fast on a CPU: float32 sums of squares first, MXNet's exact
per-element test only for the arrays whose sum is not finite; the decision is always the exact
one (MXNet's ``multi_all_finite``'s). This is the route without the emulation's extension
library (``tests/emulation/test_nonfinite_op.py`` tests the route with it)."""
import mxnet as mx
import numpy as np
import pytest
from mxnet.contrib.amp.loss_scaler import LossScaler as MXNetLossScaler

from conftest import run_python
from mxmixed import emulation
from mxmixed._core.finite import all_finite, each_finite, exact_all_finite, nonfinite_sums
from mxmixed.emulation import _overflow
from mxmixed.emulation._overflow import REAL_HAS_OVERFLOW, has_overflow

INF, NAN = float("inf"), float("nan")


def _arrays(*specs, ctx=None):
    """``(values, dtype)`` pairs (values: a list, or an int n for n normal values)."""
    rng = np.random.RandomState(0)
    out = []
    for values, dtype in specs:
        data = rng.normal(size=values) if isinstance(values, int) else np.array(values)
        out.append(mx.nd.array(data, dtype=dtype, ctx=ctx or mx.cpu()))
    return out


# name -> arrays (a function, so every test gets fresh ones)
CASES = {
    "float32 finite": lambda: _arrays((1000, "float32"), ([1.0, -2.0], "float32")),
    "float32 inf": lambda: _arrays((1000, "float32"), ([1.0, INF], "float32")),
    "float32 -inf": lambda: _arrays(([-INF], "float32"), (10, "float32")),
    "float32 NaN": lambda: _arrays((10, "float32"), ([NAN, 0.0], "float32")),
    "float32 1e30 (square overflows)": lambda: _arrays((10, "float32"), ([1e30, -3e38], "float32")),
    "float32 1e19 (sum overflows)": lambda: _arrays(([1.5e19] * 4, "float32")),
    "float16 65504": lambda: _arrays(([65504.0, -65504.0], "float16"), (100, "float16")),
    "float16 300 (float16 square would overflow)": lambda: _arrays(([300.0] * 8, "float16")),
    "float16 inf": lambda: _arrays((100, "float16"), ([1.0, INF], "float16")),
    "float16 NaN": lambda: _arrays(([NAN], "float16"),),
    "float64 1e200": lambda: _arrays(([1e200, 1.0], "float64")),
    "float64 inf": lambda: _arrays(([1.0, -INF], "float64")),
    "mixed dtypes finite": lambda: _arrays(([65504.0], "float16"), ([1e30], "float32"),
                                           (50, "float32"), (50, "float16")),
    "mixed dtypes, inf in float32": lambda: _arrays((50, "float16"), ([INF], "float32")),
    "mixed dtypes, NaN in float16": lambda: _arrays(([NAN], "float16"), (50, "float32")),
    "250 arrays, inf in the last": lambda: _arrays(*([(3, "float32")] * 249 + [([INF], "float32")])),
    "250 arrays finite": lambda: _arrays(*([(3, "float32")] * 250)),
    "two CPU contexts, NaN on cpu(1)": lambda: (_arrays((20, "float32"))
                                                + _arrays(([NAN], "float32"), ctx=mx.cpu(1))),
    "two CPU contexts finite": lambda: (_arrays((20, "float32"))
                                        + _arrays(([1e30], "float32"), ctx=mx.cpu(1))),
}


def _truth(arrays):
    # MXNet 1.9.1's multi_all_finite reads float64 as float32: 1e200 counts as inf there
    with np.errstate(over="ignore"):
        return all(np.isfinite(a.asnumpy().astype(np.float32)).all() for a in arrays)


def _exact(arrays):
    """mxmixed's check before: multi_all_finite per dtype and context."""
    groups = {}
    for a in arrays:
        groups.setdefault((a.dtype, a.context), []).append(a)
    return exact_all_finite(list(groups.values()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_all_finite_decides_as_the_exact_check(case):
    arrays = CASES[case]()
    assert all_finite(arrays) == _exact(arrays) == _truth(arrays)


def test_all_finite_of_no_arrays_is_true():
    assert all_finite([]) is True


def test_float16_is_summed_in_float32_so_large_finite_values_take_the_fast_path():
    # MXNet's multi_sum_sq squares float16 in float16: 300 ** 2 is inf there
    big = mx.nd.array([300.0, 65504.0], dtype="float16")
    assert not np.isfinite(mx.nd.multi_sum_sq(big, num_arrays=1).asnumpy()).all()
    assert nonfinite_sums([big]) == []
    huge = mx.nd.array([1e30], dtype="float32")
    assert nonfinite_sums([big, huge]) == [huge]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_one_array_all_finite_tests_elements_as_multi_all_finite(dtype):
    values = [INF, -INF, NAN, 1e30, 3.4e38, 65504.0, 1e200, 1e-40, 0.0, -0.0, 1.0]
    with np.errstate(all="ignore"):
        arrays = [mx.nd.array(np.array([1.0, v]).astype(dtype), dtype=dtype) for v in values]
    for array in arrays:
        assert each_finite([array]) == exact_all_finite([[array]])


@pytest.fixture
def counted_exact_check(monkeypatch):
    calls = {"multi_all_finite": 0, "all_finite": 0}
    for name in calls:
        real = getattr(mx.nd, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(mx.nd, name, counting)
    return calls


def test_only_arrays_with_a_nonfinite_sum_get_the_exact_test(counted_exact_check):
    assert all_finite(_arrays(([65504.0], "float16"), (50, "float32"), ([3e18], "float32")))
    assert counted_exact_check == {"multi_all_finite": 0, "all_finite": 0}  # the sums decided
    assert all_finite(_arrays((50, "float32"), ([1e30], "float32"), (50, "float32")))
    assert counted_exact_check == {"multi_all_finite": 0, "all_finite": 1}  # the 1e30 array
    assert not all_finite(_arrays((50, "float16"), ([INF], "float32"), ([NAN], "float16")))
    assert counted_exact_check == {"multi_all_finite": 0, "all_finite": 3}


@pytest.fixture
def sums_route(monkeypatch):
    """The emulation's check as it runs where its extension library is not loaded."""
    monkeypatch.setattr(_overflow, "nonfinite_op", lambda: None)


class _Param:
    """What LossScaler.has_overflow reads of a Parameter: ``_grad``."""

    def __init__(self, grad):
        self._grad = None if grad is None else [grad]


def _scaler_state(scaler):
    return (scaler.loss_scale, scaler._next_loss_scale, scaler._unskipped)


@pytest.mark.parametrize("case", sorted(c for c in CASES if "mixed" not in c and "two" not in c))
def test_mxnet_scaler_check_decides_and_counts_as_mxnet(sums_route, case):
    params = [_Param(a) for a in CASES[case]()] + [_Param(None)]
    ours, theirs = MXNetLossScaler(), MXNetLossScaler()
    for scaler in (ours, theirs):
        scaler._scale_seq_len = 3  # reach the growth branch too
    for _ in range(4):
        assert has_overflow(ours, params) == REAL_HAS_OVERFLOW(theirs, params) \
            == (not _truth([p._grad[0] for p in params if p._grad is not None]))
        assert _scaler_state(ours) == _scaler_state(theirs)


@pytest.mark.parametrize("params", [[], [_Param(None)], "mixed"], ids=["none", "no-grads",
                                                                       "mixed-dtypes"])
def test_mxnet_scaler_check_fails_where_mxnet_fails(params):  # either route
    if params == "mixed":
        params = [_Param(a) for a in CASES["mixed dtypes finite"]()]
    with pytest.raises(Exception) as theirs:
        REAL_HAS_OVERFLOW(MXNetLossScaler(), params)
    with pytest.raises(type(theirs.value)):
        has_overflow(MXNetLossScaler(), params)


def test_emulation_installs_the_check_and_disable_removes_it():
    assert emulation.emulation_active() is False
    assert MXNetLossScaler.has_overflow is REAL_HAS_OVERFLOW
    with emulation.emulated():
        assert MXNetLossScaler.has_overflow is has_overflow
    assert MXNetLossScaler.has_overflow is REAL_HAS_OVERFLOW
    emulation.enable()
    try:
        assert MXNetLossScaler.has_overflow is has_overflow
    finally:
        emulation.disable()
    assert MXNetLossScaler.has_overflow is REAL_HAS_OVERFLOW


SCRIPT = """
import mxnet as mx, numpy as np
from mxnet import autograd, gluon
from mxnet.contrib import amp
from mxnet.contrib.amp.loss_scaler import LossScaler
from mxmixed import emulation
from mxmixed.emulation import _round16
from mxmixed.emulation._overflow import has_overflow
emulation.enable(); amp.init()
assert LossScaler.has_overflow is has_overflow
calls = []
real = mx.nd.all_finite
def counting(*args, **kwargs):
    calls.append(1)
    return real(*args, **kwargs)
mx.nd.all_finite = counting
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(8, in_units=4, activation="relu"), gluon.nn.Dense(2, in_units=8))
net.initialize(mx.init.Xavier())
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                        update_on_kvstore=False)
amp.init_trainer(trainer)
loss_fn = gluon.loss.L2Loss()
def step(x):
    with autograd.record():
        loss = loss_fn(net(x), mx.nd.zeros((2, 2)))
        with amp.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    before = net[0].weight.data().asnumpy().copy()
    scale = trainer._amp_loss_scaler.loss_scale
    trainer.step(2)
    changed = not np.array_equal(before, net[0].weight.data().asnumpy())
    return changed, trainer._amp_loss_scaler._next_loss_scale / scale
x = mx.nd.ones((2, 4)) * 1e-3
print("CLEAN", step(x), len(calls))
x[0, 1] = float("inf")
print("INF", step(x), len(calls))
print("TEST", _round16.nonfinite_op())
"""


@pytest.mark.slow
def test_plain_amp_trainer_under_emulation_still_skips_a_planted_inf_step():
    proc = run_python(SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["TEST"] == "_mxmixed_nonfinite"  # the float32 carry loaded the library
    assert lines["CLEAN"] == "(True, 1.0) 0"  # updated; no MXNet test ran
    assert lines["INF"] == "(False, 0.5) 0"  # skipped, scale halved; the library's test decided
