"""The extension library's inf/NaN test (``_mxmixed_nonfinite``) flags exactly the arrays that
hold an inf or a NaN, as NumPy and MXNet's ``multi_all_finite`` see them, for every float16 bit
pattern and the float32 classes; the emulation's overflow check decides with it once the
library is loaded, and as before without it."""
import mxnet as mx
import numpy as np
import pytest
from mxnet.contrib.amp.loss_scaler import LossScaler as MXNetLossScaler

from mxmixed.emulation import _overflow, _round16
from mxmixed.emulation._overflow import REAL_HAS_OVERFLOW, all_finite, has_overflow, \
    nonfinite_flags


@pytest.fixture(scope="module", autouse=True)
def library():
    assert _round16.round16_op() == _round16.OP, _round16.status()
    assert _round16.nonfinite_op() == _round16.NONFINITE_OP


def _flags(arrays):
    found = nonfinite_flags(arrays)
    assert found is not None
    return np.concatenate([f.asnumpy() for f in found])


def _truth(arrays):
    with np.errstate(all="ignore"):
        return np.array([0.0 if np.isfinite(a.asnumpy()).all() else 1.0 for a in arrays])


@pytest.mark.slow
def test_every_float16_bit_pattern_is_flagged_as_numpy_sees_it():
    patterns = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    arrays = [mx.nd.array(patterns[start:start + 1], dtype="float16")
              for start in range(0, 1 << 16)]
    flags = _flags(arrays)
    with np.errstate(all="ignore"):
        expected = (~np.isfinite(patterns)).astype(np.float32)
    assert expected.sum() == 2 * 1024  # +-inf and 2046 NaNs: the test sees both kinds
    np.testing.assert_array_equal(flags, expected)


def test_float32_exponents_and_mantissas_are_flagged_as_numpy_sees_them():
    exponents = np.arange(256, dtype=np.uint32) << 23
    mantissas = np.array([0, 1, 2, 0x400000, 0x3FFFFF, 0x7FFFFF], dtype=np.uint32)
    signs = np.array([0, 0x80000000], dtype=np.uint32)
    bits = (signs[:, None, None] | exponents[None, :, None] | mantissas[None, None, :]).ravel()
    values = bits.view(np.float32)
    arrays = [mx.nd.array(values[i:i + 1], dtype="float32") for i in range(values.size)]
    np.testing.assert_array_equal(_flags(arrays), _truth(arrays))
    assert _flags(arrays).sum() == 2 * len(mantissas)  # sign x (inf, 5 NaNs)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("length", [1, 7, 8, 15, 16, 17, 31, 33, 64, 1000, 70001])
def test_one_special_anywhere_in_an_array_flags_it(dtype, length):
    rng = np.random.RandomState(length)
    base = rng.normal(size=length).astype(dtype)
    for where in sorted({0, length // 2, length - 1}):
        for special in (np.inf, -np.inf, np.nan):
            values = base.copy()
            values[where] = special
            assert _flags([mx.nd.array(values, dtype=dtype)]).tolist() == [1.0]
    assert _flags([mx.nd.array(base, dtype=dtype)]).tolist() == [0.0]


def test_largest_finite_subnormal_and_zero_values_are_finite():
    arrays = [mx.nd.array([3.4028235e38, -3.4028235e38, 1e-45, -0.0, 0.0], dtype="float32"),
              mx.nd.array([65504.0, -65504.0, 6e-8, -0.0], dtype="float16")]
    assert _flags(arrays).tolist() == [0.0, 0.0]


def test_each_of_more_than_200_arrays_gets_its_own_flag():
    rng = np.random.RandomState(0)
    arrays = [mx.nd.array(rng.normal(size=5)) for _ in range(450)]
    for index, special in ((0, np.inf), (201, np.nan), (449, -np.inf)):
        arrays[index][2] = special
    found = nonfinite_flags(arrays)
    assert [f.shape for f in found] == [(200,), (200,), (50,)]
    assert np.flatnonzero(np.concatenate([f.asnumpy() for f in found])).tolist() == [0, 201, 449]


def test_mixed_float16_and_float32_arrays_are_tested_in_one_call():
    arrays = [mx.nd.array([1.0, np.nan], dtype="float16"), mx.nd.array([1e30]),
              mx.nd.array([300.0], dtype="float16"), mx.nd.array([np.inf])]
    assert _flags(arrays).tolist() == [1.0, 0.0, 0.0, 1.0]


def test_an_array_in_a_onednn_layout_is_tested_by_its_values():
    # a convolution's output on a CPU is a oneDNN array; the op reads it through MXNet's reorder
    data = mx.nd.ones((1, 8, 9, 9))
    weight = mx.nd.ones((16, 8, 3, 3))
    finite = mx.nd.Convolution(data, weight, kernel=(3, 3), num_filter=16, no_bias=True)
    data[0, 3, 4, 4] = np.inf
    infinite = mx.nd.Convolution(data, weight, kernel=(3, 3), num_filter=16, no_bias=True)
    assert _flags([finite, infinite]).tolist() == [0.0, 1.0]
    assert _truth([finite, infinite]).tolist() == [0.0, 1.0]


def _row_sparse(value):
    return mx.nd.sparse.row_sparse_array(
        (np.array([[1.0, 2.0], [value, 3.0]], dtype="float32"), [0, 2]), shape=(4, 2))


@pytest.mark.parametrize("arrays", [
    [mx.nd.array([1.0], dtype="float64")],
    [mx.nd.array([1.0]), mx.nd.array([1.0], ctx=mx.cpu(1))],
    [mx.nd.array([1], dtype="int32")],
    [mx.nd.array([1.0]), _row_sparse(1.0)],
    [],
], ids=["float64", "two-contexts", "int32", "row-sparse", "none"])
def test_arrays_the_op_does_not_serve_are_left_to_the_sums(arrays):
    assert nonfinite_flags(arrays) is None


@pytest.mark.parametrize("value", [1.0, np.inf, np.nan])
def test_a_row_sparse_gradient_is_checked_by_the_sums(value):
    # a sparse Embedding's gradient: MXNet refuses sparse arrays to an extension op
    grads = [mx.nd.array([1.0, 2.0]), _row_sparse(value)]
    assert all_finite(grads) is bool(np.isfinite(value))
    ours, theirs = MXNetLossScaler(), MXNetLossScaler()
    params = [_Param(g) for g in grads]
    assert has_overflow(ours, params) is REAL_HAS_OVERFLOW(theirs, params) is (
        not np.isfinite(value))


def test_a_float64_array_given_to_the_op_directly_is_refused_in_one_line():
    handle = _overflow._handle(_round16.NONFINITE_OP)
    with pytest.raises(mx.base.MXNetError, match="float32 or float16 arrays; array 0 has type"):
        _overflow._imperative_invoke(handle, [mx.nd.array([1.0], dtype="float64")],
                                     ["num_arrays"], [1], None, False, False).asnumpy()


@pytest.mark.parametrize("count", ["0", "-1", "x", "2x"])
def test_a_bad_array_count_is_refused(count):
    handle = _overflow._handle(_round16.NONFINITE_OP)
    with pytest.raises(mx.base.MXNetError, match="needs num_arrays"):
        _overflow._imperative_invoke(handle, [mx.nd.array([1.0])], ["num_arrays"], [count],
                                     None, False, False).asnumpy()


@pytest.fixture(params=["library", "sums"])
def route(request, monkeypatch):
    """The overflow check with the library's op, and as it runs without the library."""
    if request.param == "sums":
        monkeypatch.setattr(_overflow, "nonfinite_op", lambda: None)
    return request.param


CASES = {
    "finite": lambda: [mx.nd.array([1.0, -2.0]), mx.nd.array(np.arange(1000.0))],
    "inf": lambda: [mx.nd.array(np.arange(1000.0)), mx.nd.array([1.0, np.inf])],
    "NaN": lambda: [mx.nd.array([np.nan, 0.0]), mx.nd.array([3.0])],
    "1e30 (its square overflows)": lambda: [mx.nd.array([1e30, -3e38])],
    "float16 65504": lambda: [mx.nd.array([65504.0, 300.0], dtype="float16")],
    "float16 -inf": lambda: [mx.nd.array([1.0], dtype="float16"),
                             mx.nd.array([-np.inf], dtype="float16")],
}


class _Param:
    def __init__(self, grad):
        self._grad = None if grad is None else [grad]


@pytest.mark.parametrize("case", sorted(CASES))
def test_all_finite_decides_as_numpy_on_either_route(route, case):
    arrays = CASES[case]()
    assert (nonfinite_flags(arrays) is not None) == (route == "library")
    assert all_finite(arrays) == (not _truth(arrays).any())


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_scaler_check_decides_and_counts_as_mxnet_on_either_route(route, case):
    params = [_Param(a) for a in CASES[case]()] + [_Param(None)]
    ours, theirs = MXNetLossScaler(), MXNetLossScaler()
    for scaler in (ours, theirs):
        scaler._scale_seq_len = 3
    for _ in range(4):
        assert has_overflow(ours, params) == REAL_HAS_OVERFLOW(theirs, params)
        assert (ours.loss_scale, ours._next_loss_scale, ours._unskipped) == \
            (theirs.loss_scale, theirs._next_loss_scale, theirs._unskipped)


def test_the_library_route_runs_no_exact_mxnet_test(monkeypatch):
    calls = []
    for name in ("multi_all_finite", "all_finite", "multi_sum_sq"):
        real = getattr(mx.nd, name)
        monkeypatch.setattr(mx.nd, name, lambda *a, _real=real, _name=name, **k:
                            calls.append(_name) or _real(*a, **k))
    assert not all_finite([mx.nd.array([1.0, np.inf]), mx.nd.array([1e30])])
    assert all_finite([mx.nd.array([1e30]), mx.nd.array([65504.0], dtype="float16")])
    assert calls == []
