"""softmax and LayerNorm of float16 data as MXNet 1.9.1's GPU kernels compute them, with and
without ``MXNET_SAFE_ACCUMULATION``.

The reference here is a NumPy transcription of the CUDA kernels (``softmax-inl.h``'s
``softmax_stride1_compute_kernel`` / ``softmax_compute_kernel`` and their grad kernels,
``layer_norm.cu``'s contiguous kernels), thread by thread: each simulated thread runs its own
loop, shared-memory trees and warp shuffles (``__shfl_down_sync``, ``__shfl_xor_sync``) move
values between simulated lanes as on the GPU. ``half_t`` arithmetic is float32 arithmetic
rounded to float16 (``mshadow/half.h``); AType is float with the variable set. The emulation
must give its bits; the float64 tests bound both settings' error.
"""
import math

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxmixed import emulation
from mxmixed.emulation._ops import EMULATED_OPS, SAFE_ACCUMULATION, gpu_arithmetic

F16, F32 = np.float16, np.float32


def rounding(safe):
    """AType's rounding: float keeps float32 values, half_t rounds each result."""
    return (lambda v: np.asarray(v, F32)) if safe else (lambda v: np.asarray(v, F16).astype(F32))


def h(v):
    return np.asarray(v, F16).astype(F32)


def expf(v):
    return np.exp(np.asarray(v, np.float64)).astype(F32)  # a correctly rounded expf


# ------------------------------------------------------------------------ softmax (reference)
def softmax_threads(m, last_axis, limit):
    """threads_per_row of the stride-1 kernel (get_load_type, get_rows_per_block), or the
    general kernel's 128."""
    if not last_axis or m > limit:
        return 128
    load = 8 if (2 * m) % 8 == 0 else (4 if (2 * m) % 4 == 0 else 2)
    wanted_threads = math.ceil((2 * m // load) / 2)
    warps = min(math.ceil(wanted_threads / 32), 16)
    return 32 * 2 ** math.ceil(math.log2(warps))


def block_reduce(values, threads, r):
    """Thread t sums values[:, t::threads] in order; shared-memory halving down to one warp
    (or the general kernel's Reduce1D), then warp_reduce's __shfl_down_sync steps."""
    scratch = np.zeros((values.shape[0], threads), F32)
    for t in range(threads):
        for i in range(t, values.shape[1], threads):
            scratch[:, t] = r(scratch[:, t] + values[:, i])
    size = threads // 2
    while size >= 32:
        scratch[:, :size] = r(scratch[:, :size] + scratch[:, size:2 * size])
        size //= 2
    lane = scratch[:, :32].copy()
    for offset in (16, 8, 4, 2, 1):
        source = np.concatenate([lane[:, offset:], lane[:, 32 - offset:]], axis=1)
        lane = r(lane + source)  # a lane past 31 reads its own value
    return lane[:, 0]


def softmax_gpu(x, safe, axis=-1):
    r = rounding(safe)
    moved = np.moveaxis(np.asarray(x, F32), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    threads = softmax_threads(rows.shape[1], axis in (-1, x.ndim - 1), 10240)
    d = h(rows - rows.max(axis=1, keepdims=True))
    total = block_reduce(r(expf(d)), threads, r)
    y = h(expf(d) / total[:, None])
    return np.moveaxis(y.reshape(moved.shape), -1, axis).astype(F16)


def softmax_grad_gpu(dy, y, safe):
    r = rounding(safe)
    dy2, y2 = (np.asarray(a, F32).reshape(-1, a.shape[-1]) for a in (dy, y))
    threads = softmax_threads(y2.shape[1], True, 5120)
    total = block_reduce(h(dy2 * y2), threads, r)
    return h(y2 * h(dy2 - total[:, None])).reshape(y.shape).astype(F16)


# ---------------------------------------------------------------------- LayerNorm (reference)
def welford(r, state, curr):
    mean, sigma2, count = state
    count = count + 1
    delta = r(curr - mean)
    mean = r(mean + r(delta / F32(count)))
    return mean, r(sigma2 + r(delta * r(curr - mean))), count


def chan_merge(r, lhs, rhs):
    """ChanMergePartition(lhs, rhs) on one lane's arrays over rows; returns the new rhs."""
    (lm, ls, lc), (rm, rs, rc) = lhs, rhs
    delta = r(rm - lm)
    na, nb = r(F32(lc)), r(F32(rc))
    count = int(r(na + nb))
    if count <= 0:
        return np.zeros_like(rm), np.zeros_like(rs), count
    na, nb = r(na / F32(count)), r(nb / F32(count))
    mean = r(r(na * lm) + r(nb * rm))
    spread = r(r(r(r(delta * delta) * na) * nb) * F32(count))
    return mean, r(r(rs + ls) + spread), count


def thread_values(tid, nthread, c, safe, odd_start):
    """The column indices one thread feeds its Welford sum, in order."""
    if not safe:  # the generic BlockWelfordOnlineSum: 4 consecutive values per pass
        out, l = [], 4 * tid
        while l + 3 < c:
            out += range(l, l + 4)
            l += 4 * nthread
        return out + list(range(l, c))
    shift = 1 if odd_start else 0  # the half2 specialization
    first = ([0] if shift else []) + ([c - 1] if (c - shift) % 2 else []) if tid == 0 else []
    pairs = (c - shift) // 2
    return first + [shift + 2 * l + k for l in range(tid, pairs, nthread) for k in (0, 1)]


def layernorm_stats_gpu(x, safe, odd_start):
    """The per-lane (mean, sigma2) that LayerNormFusedForwardKernelContig's threads end with,
    for rows of x all starting at an even element offset, or all at an odd one."""
    r = rounding(safe)
    c = x.shape[1]
    warps = 1 if c <= 128 else (2 if c <= 512 else 4)
    states = []
    for tid in range(32 * warps):
        state = (np.zeros(len(x), F32), np.zeros(len(x), F32), 0)
        for i in thread_values(tid, 32 * warps, c, safe, odd_start):
            state = welford(r, state, x[:, i])
        states.append(state)
    for y in range(warps):  # the xor shuffles: every lane merges its partner's values
        for mask in (16, 8, 4, 2, 1):
            before = states[32 * y:32 * y + 32]
            states[32 * y:32 * y + 32] = [chan_merge(r, before[k ^ mask], before[k])
                                          for k in range(32)]
    offset = warps // 2
    while offset > 0:
        for y in range(offset):
            for k in range(32):
                states[32 * y + k] = chan_merge(r, states[32 * (y + offset) + k],
                                                states[32 * y + k])
        offset //= 2
    return states[:32]


def layernorm_gpu(x, gamma, beta, eps, safe):
    """LayerNorm on the last axis: (out, mean, std), float16. A row at an odd element offset
    starts a half2 load one value in."""
    r = rounding(safe)
    x2 = np.asarray(x, F32).reshape(-1, x.shape[-1])
    c = x2.shape[1]
    out, means, stds = np.empty_like(x2), np.empty(len(x2), F32), np.empty(len(x2), F32)
    for row in range(len(x2)):
        lanes = layernorm_stats_gpu(x2[row:row + 1], safe, (row * c) % 2 == 1)
        for k, (mean, sigma2, _) in enumerate(lanes):
            std = r(np.sqrt(r(r(sigma2 / F32(c)) + r(F32(eps)))))
            invstd = h(F32(1.0) / std)  # DType(1.0) / std_eps: half_t
            cols = slice(k, c, 32)
            n = h(invstd * r(x2[row, cols] - mean))
            out[row, cols] = h(h(np.asarray(gamma, F32)[cols] * n) + np.asarray(beta, F32)[cols])
            if k == 0:
                means[row], stds[row] = h(mean)[0], h(std)[0]
    shape = x.shape[:-1] + (1,)
    return (out.reshape(x.shape).astype(F16), means.reshape(shape).astype(F16),
            stds.reshape(shape).astype(F16))


def layernorm_data_grad_gpu(dy, x, gamma, mean, std, safe):
    """LayerNormFusedBackwardKernel_Data: LOAD_UNROLL 4, xor all-reduce in each warp, then
    across warps."""
    r = rounding(safe)
    dy2, x2 = (np.asarray(a, F32).reshape(-1, a.shape[-1]) for a in (dy, x))
    c, g = x2.shape[1], np.asarray(gamma, F32)
    m, inv = np.asarray(mean, F32).reshape(-1), r(F32(1) / np.asarray(std, F32).reshape(-1))
    warps = 1 if c <= 32 else (2 if c <= 128 else (4 if c <= 512 else 8))
    sums = np.zeros((2, len(x2), 32 * warps), F32)
    for tid in range(32 * warps):
        for i in thread_values(tid, 32 * warps, c, False, False):  # the same 4-value passes
            scaled = r(dy2[:, i] * g[i])
            sums[0, :, tid] = r(sums[0, :, tid] + r(scaled * inv))
            sums[1, :, tid] = r(sums[1, :, tid] + r(r(r(scaled * r(x2[:, i] - m)) * inv) * inv))
    for y in range(warps):
        lanes = sums[:, :, 32 * y:32 * y + 32]
        for mask in (16, 8, 4, 2, 1):
            lanes[:] = r(lanes + lanes[:, :, np.arange(32) ^ mask])
    per_warp = sums[:, :, ::32].copy()
    offset = warps // 2
    while offset > 0:
        per_warp[:, :, :offset] = r(per_warp[:, :, :offset] + per_warp[:, :, offset:2 * offset])
        offset //= 2
    s0, s1 = (r(per_warp[k, :, 0] / F32(c))[:, None] for k in (0, 1))
    first = r(r(r(dy2 * g) * inv[:, None]) - s0)
    return h(first - r(r(r(x2 - m[:, None]) * inv[:, None]) * s1)).reshape(x.shape).astype(F16)


def layernorm_param_grads_gpu(dy, x, mean, std, safe):
    """_PartGammaBeta (16 parts of rows, blocks of 32 x 16 threads) and _GammaBeta."""
    r = rounding(safe)
    dy2, x2 = (np.asarray(a, F32).reshape(-1, a.shape[-1]) for a in (dy, x))
    m, s = (np.asarray(a, F32).reshape(-1) for a in (mean, std))
    rows, parts = len(x2), 16
    per_part = -(-rows // parts)
    part = np.zeros((2, parts, x2.shape[1]), F32)
    for p in range(parts):
        buf = np.zeros((2, 16, x2.shape[1]), F32)
        for y in range(16):
            for row in range(p * per_part + y, min((p + 1) * per_part, rows), 16):
                norm = r(r(x2[row] - m[row]) / s[row])
                buf[0, y] = r(buf[0, y] + r(norm * dy2[row]))
                buf[1, y] = r(buf[1, y] + dy2[row])
        for offset in (8, 4, 2):
            buf[:, :offset] = r(buf[:, :offset] + buf[:, offset:2 * offset])
        part[:, p] = r(buf[:, 0] + buf[:, 1])
    for offset in (8, 4, 2, 1):
        part[:, :offset] = r(part[:, :offset] + part[:, offset:2 * offset])
    return h(part[0, 0]).astype(F16), h(part[1, 0]).astype(F16)


# --------------------------------------------------------------------------------- the tests
@pytest.fixture
def emu(op, monkeypatch):
    """Emulation on, the variable unset (each test sets it)."""
    monkeypatch.delenv(SAFE_ACCUMULATION, raising=False)
    with emulation.emulated():
        yield monkeypatch


def _setting(monkeypatch, safe):
    monkeypatch.setenv(SAFE_ACCUMULATION, "1" if safe else "0")


def _run(op, arrays, head, **attrs):
    nds = [mx.nd.array(a, dtype=F16) for a in arrays]
    for a in nds:
        a.attach_grad()
    with autograd.record():
        out = op(*nds, **attrs)
    out.backward(mx.nd.array(head, dtype=F16))
    return out.asnumpy(), [a.grad.asnumpy() for a in nds]


def _bits(a):
    return np.asarray(a, F16).view(np.uint16)


# (shape, axis): threads per row 32 and 128 (stride-1 kernel), the general kernel (inner axis)
SOFTMAX_CASES = [((3, 100), -1), ((2, 700), -1), ((2, 150, 3), 1)]


@pytest.mark.parametrize("safe", [False, True], ids=["float16-sums", "safe-accumulation"])
@pytest.mark.parametrize("shape, axis", SOFTMAX_CASES)
def test_softmax_is_the_gpu_kernels_arithmetic_bit_for_bit(shape, axis, safe, emu):
    _setting(emu, safe)
    rng = np.random.RandomState(len(shape) + shape[-1])
    x = (rng.randn(*shape) * 3).astype(F16)
    dy = (rng.randn(*shape) * 0.1).astype(F16)
    out, (grad,) = _run(mx.nd.softmax, [x], dy, axis=axis)
    np.testing.assert_array_equal(_bits(out), _bits(softmax_gpu(x, safe, axis)))
    if axis == -1:
        np.testing.assert_array_equal(_bits(grad), _bits(softmax_grad_gpu(dy, out, safe)))


# rows of 100 (1 warp forward, 2 backward), 300 (2, 4), 600 (4, 8), and an odd 77 (half2 loads
# that start one value in on odd rows)
@pytest.mark.parametrize("safe", [False, True], ids=["float16-sums", "safe-accumulation"])
@pytest.mark.parametrize("shape", [(4, 100), (3, 300), (2, 2, 600), (5, 77)])
def test_layernorm_is_the_gpu_kernels_arithmetic_bit_for_bit(shape, safe, emu):
    _setting(emu, safe)
    rng = np.random.RandomState(shape[-1])
    x = (rng.randn(*shape) * 2 + 1).astype(F16)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(F16)
    beta = rng.uniform(-0.5, 0.5, shape[-1]).astype(F16)
    dy = (rng.randn(*shape) * 0.1).astype(F16)
    out, grads = _run(mx.nd.LayerNorm, [x, gamma, beta], dy, eps=1e-5)
    want, mean, std = layernorm_gpu(x, gamma, beta, 1e-5, safe)
    np.testing.assert_array_equal(_bits(out), _bits(want))
    np.testing.assert_array_equal(_bits(grads[0]), _bits(
        layernorm_data_grad_gpu(dy, x, gamma, mean, std, safe)))
    for got, expected in zip(grads[1:], layernorm_param_grads_gpu(dy, x, mean, std, safe)):
        np.testing.assert_array_equal(_bits(got), _bits(expected))


# ----------------------------------------------------------- against float64, either setting
def _ulp(a):
    return np.spacing(np.abs(np.asarray(a, F16))).astype(np.float64)


def _accumulation_unit(safe):
    """The unit roundoff of AType: float32's with the variable set, float16's without."""
    return 2.0 ** -24 if safe else 2.0 ** -11


@pytest.mark.parametrize("safe", [False, True], ids=["float16-sums", "safe-accumulation"])
def test_softmax_is_within_the_accumulation_bound_of_float64(safe, emu):
    # per element: one float16 ulp, plus first-order error bounds of the float16 roundings
    # (x - max, dy * y, dy - sum: 2**-11 relative each) and of M-term sums in AType
    _setting(emu, safe)
    rng = np.random.RandomState(7)
    x = (rng.randn(16, 256) * 4).astype(F16)
    dy = (rng.randn(16, 256) * 0.1).astype(F16)
    y, (grad,) = _run(mx.nd.softmax, [x], dy, axis=-1)
    x64, m, u = x.astype(np.float64), x.shape[1], _accumulation_unit(safe)
    d = x64 - x64.max(axis=1, keepdims=True)
    exact = np.exp(d) / np.exp(d).sum(axis=1, keepdims=True)
    bound = exact * (2 * np.abs(d).max() * 2.0 ** -11 + (m + 2) * u + 2.0 ** -11) + _ulp(exact)
    assert (np.abs(y.astype(np.float64) - exact) <= bound).all()
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    total = (dy64 * y64).sum(axis=1, keepdims=True)
    exact_grad = y64 * (dy64 - total)
    sum_error = (2.0 ** -11 + m * u) * np.abs(dy64 * y64).sum(axis=1, keepdims=True)
    bound = y64 * (np.abs(dy64 - total) * 2 * 2.0 ** -11 + sum_error) + _ulp(exact_grad)
    assert (np.abs(grad.astype(np.float64) - exact_grad) <= bound).all()


@pytest.mark.parametrize("safe", [False, True], ids=["float16-sums", "safe-accumulation"])
def test_layernorm_is_within_the_accumulation_bound_of_float64(safe, emu):
    # mean and variance from C-term sums in AType (first order: C * u relative), then four
    # float16 roundings (invstd, the normalised value, gamma * n, + beta: the last in the ulp)
    _setting(emu, safe)
    rng = np.random.RandomState(8)
    x = (rng.randn(12, 768) * 3 + 2).astype(F16)
    gamma = rng.uniform(0.5, 1.5, 768).astype(F16)
    beta = rng.uniform(-0.5, 0.5, 768).astype(F16)
    out = mx.nd.LayerNorm(*[mx.nd.array(a, dtype=F16) for a in (x, gamma, beta)]).asnumpy()
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    n = (x64 - mean) / np.sqrt(var + 1e-5)
    g = gamma.astype(np.float64)
    exact = g * n + beta.astype(np.float64)
    c, u = x.shape[1], _accumulation_unit(safe)
    shift = c * u * np.abs(x64).max(axis=1, keepdims=True) / np.sqrt(var)
    bound = np.abs(g) * (np.abs(n) * (3 * 2.0 ** -11 + c * u) + shift) + 2 * _ulp(exact)
    assert (np.abs(out.astype(np.float64) - exact) <= bound).all()


def test_the_two_settings_give_different_float16_results(emu):
    # the variable is read at each run, here of one hybridized block, as MXNet reads it
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.LayerNorm(in_channels=256), gluon.nn.HybridLambda(
        lambda F, a: F.softmax(a * 4, axis=-1)))
    net.initialize()
    net.cast("float16")
    net.hybridize()
    x = mx.nd.array(np.random.RandomState(3).randn(8, 256) * 3 + 1, dtype=F16)
    results = {}
    for value in ("0", "true", "1", "false", ""):
        emu.setenv(SAFE_ACCUMULATION, value)
        results[value] = net(x).asnumpy()
    assert (results["true"] == results["1"]).all() and (results["0"] == results[""]).all()
    assert (results["0"] == results["false"]).all()
    assert (results["0"] != results["1"]).any()
    emu.setenv(SAFE_ACCUMULATION, "yes")
    with pytest.raises(mx.base.MXNetError, match="MXNET_SAFE_ACCUMULATION"):
        net(x).asnumpy()


@pytest.mark.parametrize("safe", [False, True], ids=["float16-sums", "safe-accumulation"])
def test_hybridized_block_computes_what_the_imperative_ops_compute(safe, emu):
    _setting(emu, safe)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(96, flatten=False), gluon.nn.LayerNorm(in_channels=96),
            gluon.nn.HybridLambda(lambda F, a: F.softmax(a, axis=-1)))
    net.initialize(mx.init.Xavier())
    net.cast("float16")
    x = mx.nd.array(np.random.RandomState(4).randn(2, 5, 40), dtype=F16)
    imperative = net(x).asnumpy()
    net.hybridize()
    np.testing.assert_array_equal(_bits(net(x).asnumpy()), _bits(imperative))


def test_softmax_with_lengths_and_layernorm_on_another_axis_keep_their_native_kernels(emu):
    data = mx.sym.var("data")
    length = mx.sym.var("length", dtype="int32")
    masked = mx.sym.softmax(data, length, axis=-1, use_length=True)
    first_axis = mx.sym.LayerNorm(data, axis=0)
    for sym in (masked, first_axis):
        assert "_mxmixed_" not in emulation.emulate_symbol(sym, {"data": F16}).tojson()
    assert "_mxmixed_softmax16" in emulation.emulate_symbol(mx.sym.softmax(data),
                                                            {"data": F16}).tojson()


def test_the_op_table_says_what_the_gpu_computes_under_each_setting():
    for op in ("softmax", "LayerNorm"):
        spec = EMULATED_OPS[op]
        assert spec.setting == SAFE_ACCUMULATION
        assert gpu_arithmetic(spec, {}) == spec.gpu[False] != spec.gpu[True]
        assert gpu_arithmetic(spec, {SAFE_ACCUMULATION: "TRUE"}) == spec.gpu[True]
    assert gpu_arithmetic(EMULATED_OPS["FullyConnected"], {}) == EMULATED_OPS["FullyConnected"].gpu
    with pytest.raises(ValueError, match="MXNET_SAFE_ACCUMULATION='on'"):
        gpu_arithmetic(EMULATED_OPS["softmax"], {SAFE_ACCUMULATION: "on"})


def test_layernorm_inputs_given_by_name_in_any_order_are_its_inputs(emu):
    rng = np.random.RandomState(5)
    x, gamma, beta = (mx.nd.array(rng.randn(*s), dtype=F16) for s in ((3, 40), (40,), (40,)))
    by_position = mx.nd.LayerNorm(x, gamma, beta).asnumpy()
    by_name = mx.nd.LayerNorm(beta=beta, data=x, gamma=gamma).asnumpy()
    np.testing.assert_array_equal(_bits(by_name), _bits(by_position))
    mean = mx.nd.LayerNorm(x, gamma, beta, output_mean_var=True)[1].asnumpy()
    np.testing.assert_array_equal(_bits(mean), _bits(layernorm_gpu(
        x.asnumpy(), gamma.asnumpy(), beta.asnumpy(), 1e-5, False)[1]))
