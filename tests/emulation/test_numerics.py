"""Forward numerics of the CPU float16 emulation against an independent NumPy reference.

The emulated ops (FullyConnected, Convolution, Deconvolution, dot, batch_dot) must compute
what a GPU with Tensor Cores computes: float16 operands, float32 accumulation, a float16
result. The reference here takes the same float16 operands, accumulates the exact products in
float64 (direct convolution and a scatter-add transposed convolution written below, not
MXNet's) and rounds once to float16.

Acceptance, per output element:

* within one float16 ulp of the rounded reference, the ulp taken as the absolute float16
  spacing at the reference's magnitude (``np.spacing(np.float16(ref))``, which also covers
  subnormals), or
* where cancellation makes the result small, within the float32 accumulation error bound
  ``K * 2**-23 * sum|a*b|`` (``K`` terms) of the exact float64 value, plus half a float16 ulp
  of the result for the final rounding.

Each case also reports the share of elements that differ at all from the rounded reference
and the largest distance in float16 ulps (printed with ``pytest -s``, attached to the test
report with ``record_property`` and summarized per op at the end of the module).

The inputs mix magnitudes from about 1e-6 (float16 subnormals) to about 1e3, with both signs,
chosen so that no result overflows; overflow is tested separately (``inf`` in both).
"""
import collections

import numpy as np
import pytest

import mxnet as mx
from mxnet import gluon

from mxmixed import emulation

F16 = np.float16
F16_MAX = float(np.finfo(F16).max)

# ------------------------------------------------------------------------ inputs and reference
# exponent ranges (base 2) of data, weights and bias, per magnitude profile:
#   wide: data and bias 2**-20 (~1e-6, subnormal in float16) .. 2**10 (~1e3); weights
#         2**-20 .. 2**-2, so |result| <= (K + 4) * 2**8 stays finite for every K used here
#         (K <= 200);
#   tiny: data 2**-18 .. 2**-10 (half of it subnormal in float16), weights 2**-14 .. 2**-10,
#         bias 2**-24 .. 2**-16: products of 2**-32 .. 2**-20 whose sums land mostly below
#         float16's smallest normal number (2**-14), so most results are subnormal.
PROFILES = {
    "wide": ((-20.0, 10.0), (-20.0, -2.0), (-20.0, 10.0)),
    "tiny": ((-18.0, -10.0), (-14.0, -10.0), (-24.0, -16.0)),
}


def wide_random(rng, shape, exponents):
    """Float16 values ``+-2**e`` with ``e`` uniform in ``exponents``: both signs, many scales."""
    lo, hi = exponents
    sign = rng.choice([-1.0, 1.0], size=shape)
    return (sign * np.exp2(rng.uniform(lo, hi, size=shape))).astype(F16)


def f64(a):
    return np.asarray(a, dtype=F16).astype(np.float64)


def ref_fully_connected(x, w, b):
    x, w, b = f64(x), f64(w), f64(b)
    return x @ w.T + b, np.abs(x) @ np.abs(w).T + np.abs(b), w.shape[1] + 1


def ref_conv2d(x, w, b, stride, pad, dilate, groups):
    """Direct grouped 2-D convolution (cross-correlation, NCHW) in float64."""
    x, w, b = f64(x), f64(w), f64(b)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilate
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    xg = xp.reshape(n, groups, cg, xp.shape[2], xp.shape[3])
    wg = w.reshape(groups, f // groups, cg, kh, kw)
    out = np.zeros((n, groups, f // groups, ho, wo))
    mag = np.zeros_like(out)
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                       j * dw:j * dw + sw * (wo - 1) + 1:sw]
            out += np.einsum("ngchw,goc->ngohw", patch, wg[..., i, j])
            mag += np.einsum("ngchw,goc->ngohw", np.abs(patch), np.abs(wg[..., i, j]))
    out = out.reshape(n, f, ho, wo) + b[None, :, None, None]
    mag = mag.reshape(n, f, ho, wo) + np.abs(b)[None, :, None, None]
    return out, mag, cg * kh * kw + 1


def ref_deconv2d(x, w, b, stride, pad, dilate, adj, groups):
    """Grouped 2-D transposed convolution in float64, as the adjoint of the convolution.

    Every input pixel scatters ``x * w`` into a zero canvas of the padded output size; the
    padding is cropped afterwards.
    """
    x, w, b = f64(x), f64(w), f64(b)
    n, c, h, wd = x.shape
    _, fg, kh, kw = w.shape
    cg = c // groups
    (sh, sw), (ph, pw), (dh, dw), (ah, aw) = stride, pad, dilate, adj
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + 1 + ah
    wo = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + 1 + aw
    xg = x.reshape(n, groups, cg, h, wd)
    wg = w.reshape(groups, cg, fg, kh, kw)
    canvas = np.zeros((n, groups, fg, ho + 2 * ph, wo + 2 * pw))
    mag = np.zeros_like(canvas)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (h - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (wd - 1) + 1, sw)
            canvas[:, :, :, rows, cols] += np.einsum("ngchw,gco->ngohw", xg, wg[..., i, j])
            mag[:, :, :, rows, cols] += np.einsum("ngchw,gco->ngohw", np.abs(xg),
                                                  np.abs(wg[..., i, j]))
    crop = (slice(None), slice(None), slice(None), slice(ph, ph + ho), slice(pw, pw + wo))
    out = canvas[crop].reshape(n, groups * fg, ho, wo) + b[None, :, None, None]
    mag = mag[crop].reshape(n, groups * fg, ho, wo) + np.abs(b)[None, :, None, None]
    return out, mag, cg * kh * kw + 1


def ref_dot(a, b, transpose_a=False, transpose_b=False):
    a, b = f64(a), f64(b)
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    return a @ b, np.abs(a) @ np.abs(b), a.shape[-1]


# ------------------------------------------------------------------------ comparison
def ordinal(a):
    """Map float16 values to integers that are consecutive for consecutive float16 values."""
    bits = np.asarray(a, dtype=F16).view(np.int16).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFF), bits)


def compare(out, exact, mag, k):
    """Check ``out`` (float16) against the exact float64 result; return the statistics.

    Parameters
    ----------
    out : numpy.ndarray of float16
        The emulated result.
    exact : numpy.ndarray of float64
        The reference before its final rounding.
    mag : numpy.ndarray of float64
        ``sum |a*b|`` per element (plus ``|bias|``).
    k : int
        Number of terms in each sum.
    """
    assert out.dtype == F16
    assert np.isfinite(exact).all() and np.abs(exact).max() < F16_MAX, "test inputs overflow"
    ref = exact.astype(F16)
    out64 = out.astype(np.float64)
    within_ulp = np.abs(out64 - ref.astype(np.float64)) <= np.spacing(np.abs(ref)).astype(
        np.float64)
    accumulation = k * 2.0 ** -23 * mag + 0.5 * np.spacing(np.abs(out)).astype(np.float64)
    within_bound = np.abs(out64 - exact) <= accumulation
    ulps = np.abs(ordinal(out) - ordinal(ref))
    bad = ~(within_ulp | within_bound)
    stats = {"elements": out.size,
             "share_differing": float(np.mean(out != ref)),
             "max_ulp": int(ulps.max()),
             "beyond_1_ulp": int(np.sum(ulps > 1))}
    assert not bad.any(), (
        "%d elements outside the bounds, e.g. out=%r ref=%r exact=%r" % (
            bad.sum(), out[bad][:3], ref[bad][:3], exact[bad][:3]))
    return stats


@pytest.fixture(scope="module")
def numerics_report():
    """Collect per-op statistics; print a summary table when the module is done."""
    table = collections.defaultdict(lambda: {"elements": 0, "differing": 0.0, "max_ulp": 0})
    yield table
    if table:
        print("\n\nCPU float16 emulation vs float64-accumulated reference (per op)")
        print("%-16s %9s %16s %8s" % ("op", "elements", "share differing", "max ulp"))
        for op, row in sorted(table.items()):
            print("%-16s %9d %15.3f%% %8d" % (op, row["elements"],
                                              100.0 * row["differing"] / row["elements"],
                                              row["max_ulp"]))


@pytest.fixture
def report(numerics_report, record_property):
    def add(op, case, stats):
        row = numerics_report[op]
        row["elements"] += stats["elements"]
        row["differing"] += stats["share_differing"] * stats["elements"]
        row["max_ulp"] = max(row["max_ulp"], stats["max_ulp"])
        for key, value in stats.items():
            record_property(key, value)
        print("\n%s %s: %d elements, %.3f%% differ, max %d ulp"
              % (op, case, stats["elements"], 100 * stats["share_differing"],
                 stats["max_ulp"]))
    return add


@pytest.fixture
def emu():
    with emulation.emulated():
        yield


def nd16(a):
    return mx.nd.array(a, dtype=F16)


def assert_bias_added_as_on_gpu(biased, nobias, b, axis=1):
    """The biased output is the no-bias output, rounded, plus the bias in float16 arithmetic.

    That is how MXNet 1.9.1's GPU kernels compose it (add_bias_kernel, cudnnAddTensor):
    round16(float32(no-bias output) + float32(bias)), compared bit for bit.
    """
    shape = [1] * nobias.ndim
    shape[axis] = -1
    expected = (nobias.astype(np.float32) + b.astype(np.float32).reshape(shape)).astype(F16)
    assert biased.dtype == F16
    assert np.array_equal(biased.view(np.uint16), expected.view(np.uint16)), (
        "%d of %d elements differ" % (np.sum(biased.view(np.uint16) != expected.view(np.uint16)),
                                      biased.size))


# ------------------------------------------------------------------------ forward numerics
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_fully_connected_matches_float64_reference(profile, emu, report):
    rng = np.random.RandomState(1)
    dexp, wexp, bexp = PROFILES[profile]
    x = wide_random(rng, (32, 96), dexp)
    w = wide_random(rng, (48, 96), wexp)
    b = wide_random(rng, (48,), bexp)
    out = mx.nd.FullyConnected(nd16(x), nd16(w), None, num_hidden=48, no_bias=True).asnumpy()
    report("FullyConnected", profile, compare(out, *ref_fully_connected(x, w, 0 * b)))
    biased = mx.nd.FullyConnected(nd16(x), nd16(w), nd16(b), num_hidden=48).asnumpy()
    assert_bias_added_as_on_gpu(biased, out, b, axis=-1)


CONV_CASES = {
    # name: (in_channels, num_filter, size, kernel, stride, pad, dilate, num_group)
    "3x3": (8, 12, 9, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    "3x3-stride2": (8, 12, 9, (3, 3), (2, 2), (0, 0), (1, 1), 1),
    "1x1": (16, 8, 6, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    "5x3-pad-stride": (6, 6, 11, (5, 3), (2, 1), (2, 1), (1, 1), 1),
    "3x3-dilate2": (8, 8, 10, (3, 3), (1, 1), (2, 2), (2, 2), 1),
    "groups4": (8, 12, 8, (3, 3), (1, 1), (1, 1), (1, 1), 4),
    "depthwise": (12, 12, 8, (3, 3), (1, 1), (1, 1), (1, 1), 12),
    "depthwise-stride2": (12, 12, 9, (3, 3), (2, 2), (1, 1), (1, 1), 12),
}


def conv_inputs(rng, case, profile):
    c, f, size, kernel, _, _, _, groups = CONV_CASES[case]
    dexp, wexp, bexp = PROFILES[profile]
    x = wide_random(rng, (2, c, size, size), dexp)
    w = wide_random(rng, (f, c // groups) + kernel, wexp)
    b = wide_random(rng, (f,), bexp)
    return x, w, b


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_convolution_matches_float64_reference(case, emu, report):
    rng = np.random.RandomState(2)
    _, f, _, kernel, stride, pad, dilate, groups = CONV_CASES[case]
    x, w, b = conv_inputs(rng, case, "wide")
    kwargs = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate, num_filter=f,
                  num_group=groups)
    out = mx.nd.Convolution(nd16(x), nd16(w), None, no_bias=True, **kwargs).asnumpy()
    report("Convolution", case,
           compare(out, *ref_conv2d(x, w, 0 * b, stride, pad, dilate, groups)))
    assert_bias_added_as_on_gpu(mx.nd.Convolution(nd16(x), nd16(w), nd16(b), **kwargs).asnumpy(),
                                out, b)


def test_convolution_1d_matches_float64_reference(emu, report):
    rng = np.random.RandomState(3)
    dexp, wexp, _ = PROFILES["wide"]
    x = wide_random(rng, (3, 8, 20), dexp)
    w = wide_random(rng, (10, 8, 5), wexp)
    b = wide_random(rng, (10,), dexp)
    kwargs = dict(kernel=(5,), stride=(2,), pad=(1,), num_filter=10)
    out = mx.nd.Convolution(nd16(x), nd16(w), None, no_bias=True, **kwargs).asnumpy()
    assert_bias_added_as_on_gpu(mx.nd.Convolution(nd16(x), nd16(w), nd16(b), **kwargs).asnumpy(),
                                out, b)
    exact, mag, k = ref_conv2d(x[:, :, None], w[:, :, None], 0 * b, (1, 2), (0, 1), (1, 1), 1)
    report("Convolution", "1d", compare(out, exact[:, :, 0], mag[:, :, 0], k))


def test_convolution_tiny_values_give_subnormal_results(emu, report):
    rng = np.random.RandomState(4)
    x, w, b = conv_inputs(rng, "3x3", "tiny")
    out = mx.nd.Convolution(nd16(x), nd16(w), None, kernel=(3, 3), pad=(1, 1),
                            num_filter=12, no_bias=True).asnumpy()
    exact, mag, k = ref_conv2d(x, w, 0 * b, (1, 1), (1, 1), (1, 1), 1)
    assert np.mean(np.abs(exact) < np.finfo(F16).tiny) > 0.5  # mostly subnormal results
    assert np.mean(np.abs(x) < np.finfo(F16).tiny) > 0.3  # from partly subnormal data
    report("Convolution", "tiny", compare(out, exact, mag, k))


DECONV_CASES = {
    # name: (in_channels, num_filter, size, kernel, stride, pad, dilate, adj, num_group)
    "3x3": (8, 6, 7, (3, 3), (1, 1), (1, 1), (1, 1), (0, 0), 1),
    "4x4-stride2": (8, 6, 6, (4, 4), (2, 2), (1, 1), (1, 1), (0, 0), 1),
    "3x3-stride2-adj1": (6, 4, 5, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
    "3x3-stride2-groups2": (8, 6, 5, (3, 3), (2, 2), (1, 1), (1, 1), (0, 0), 2),
    "3x3-dilate2": (4, 4, 6, (3, 3), (1, 1), (2, 2), (2, 2), (0, 0), 1),
}


@pytest.mark.parametrize("case", sorted(DECONV_CASES))
def test_deconvolution_matches_float64_reference(case, emu, report):
    rng = np.random.RandomState(5)
    c, f, size, kernel, stride, pad, dilate, adj, groups = DECONV_CASES[case]
    dexp, wexp, _ = PROFILES["wide"]
    x = wide_random(rng, (2, c, size, size), dexp)
    w = wide_random(rng, (c, f // groups) + kernel, wexp)
    b = wide_random(rng, (f,), dexp)
    kwargs = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate, adj=adj, num_filter=f,
                  num_group=groups)
    out = mx.nd.Deconvolution(nd16(x), nd16(w), None, no_bias=True, **kwargs).asnumpy()
    report("Deconvolution", case,
           compare(out, *ref_deconv2d(x, w, 0 * b, stride, pad, dilate, adj, groups)))
    biased = mx.nd.Deconvolution(nd16(x), nd16(w), nd16(b), no_bias=False, **kwargs).asnumpy()
    assert_bias_added_as_on_gpu(biased, out, b)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_dot_matches_float64_reference(transpose_a, transpose_b, profile, emu, report):
    rng = np.random.RandomState(6)
    dexp, wexp, _ = PROFILES[profile]
    m, k, n = 24, 80, 40
    a = wide_random(rng, (k, m) if transpose_a else (m, k), dexp)
    b = wide_random(rng, (n, k) if transpose_b else (k, n), wexp)
    out = mx.nd.dot(nd16(a), nd16(b), transpose_a=transpose_a,
                    transpose_b=transpose_b).asnumpy()
    report("dot", "%s ta=%d tb=%d" % (profile, transpose_a, transpose_b),
           compare(out, *ref_dot(a, b, transpose_a, transpose_b)))


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_dot_matches_float64_reference(transpose_a, transpose_b, emu, report):
    rng = np.random.RandomState(7)
    dexp, wexp, _ = PROFILES["wide"]
    batch, m, k, n = 4, 12, 64, 20
    # here the second operand spans the data range and the first the weight range
    a = wide_random(rng, (batch, k, m) if transpose_a else (batch, m, k), wexp)
    b = wide_random(rng, (batch, n, k) if transpose_b else (batch, k, n), dexp)
    out = mx.nd.batch_dot(nd16(a), nd16(b), transpose_a=transpose_a,
                          transpose_b=transpose_b).asnumpy()
    report("batch_dot", "ta=%d tb=%d" % (transpose_a, transpose_b),
           compare(out, *ref_dot(a, b, transpose_a, transpose_b)))


# ------------------------------------------------------------------------ attention GEMMs
# MXNet 1.9.1's interleaved attention ops (transformer.cu): strided-batched cuBLAS GEMMs,
# float16 operands, float32 compute, the qk ops' 1/sqrt(head_dim) as the GEMM's float32
# alpha, one rounding; each gradient is one such GEMM too. Layouts: selfatt's input is
# (T, B, heads * 3 * D) with q, k, v interleaved per head; encdec's queries (Tq, B, heads * D),
# keys_values (Tk, B, heads * 2 * D) interleaved per head; scores (B * heads, Tq, Tk).
HEADS, BATCH = 2, 3


def _heads(x, parts):
    """(T, B, heads * parts * D) -> parts arrays of (B * heads, T, D), in float64."""
    t, b, width = x.shape
    x = f64(x).reshape(t, b, HEADS, parts, width // (HEADS * parts))
    return [np.ascontiguousarray(x[:, :, :, p, :].transpose(1, 2, 0, 3)).reshape(
        b * HEADS, t, -1) for p in range(parts)]


def _merge(y):
    """(B * heads, T, D) -> (T, B, heads * D)."""
    bh, t, d = y.shape
    return y.reshape(bh // HEADS, HEADS, t, d).transpose(2, 0, 1, 3).reshape(t, bh // HEADS, -1)


def _interleave(parts, which):
    """Gradients of some parts, zeros for the others, back in the interleaved layout."""
    bh, t, d = next(p for p in parts if p is not None).shape
    full = np.zeros((t, bh // HEADS, HEADS, len(parts), d))
    for p, g in enumerate(parts):
        if g is not None:
            full[:, :, :, p, :] = g.reshape(bh // HEADS, HEADS, t, d).transpose(2, 0, 1, 3)
    return full.reshape(t, bh // HEADS, -1), which


def _gemm(a, b, scale=1.0):
    """``scale * a @ b`` batched, its magnitude sum and term count (one extra: the alpha)."""
    return scale * (a @ b), scale * (np.abs(a) @ np.abs(b)), a.shape[-1] + 1


def _scale(d):
    return float(np.float32(1.0 / np.sqrt(np.float32(d))))


def ref_selfatt_qk(qkv, g):
    q, k, _ = _heads(qkv, 3)
    s = _scale(q.shape[-1])
    g = f64(g)
    out = _gemm(q, k.transpose(0, 2, 1), s)
    dq, dk = _gemm(g, k, s), _gemm(g.transpose(0, 2, 1), q, s)
    grad = [_interleave([x[i] for x in (dq, dk)] + [None], 0)[0] for i in range(2)]
    return out, [(grad[0], grad[1], dq[2])]


def ref_selfatt_valatt(qkv, att, g):
    _, _, v = _heads(qkv, 3)
    att, g = f64(att), _heads(g, 1)[0]
    out = _gemm(att, v)
    dv, datt = _gemm(att.transpose(0, 2, 1), g), _gemm(g, v.transpose(0, 2, 1))
    dqkv = [_interleave([None, None, dv[i]], 0)[0] for i in range(2)]
    return tuple(_merge(x) for x in out[:2]) + (out[2],), [(dqkv[0], dqkv[1], dv[2]), datt]


def ref_encdec_qk(q, kv, g):
    q, (k, _) = _heads(q, 1)[0], _heads(kv, 2)
    s, g = _scale(q.shape[-1]), f64(g)
    out = _gemm(q, k.transpose(0, 2, 1), s)
    dq, dk = _gemm(g, k, s), _gemm(g.transpose(0, 2, 1), q, s)
    dkv = [_interleave([dk[i], None], 0)[0] for i in range(2)]
    return out, [(_merge(dq[0]), _merge(dq[1]), dq[2]), (dkv[0], dkv[1], dk[2])]


def ref_encdec_valatt(kv, att, g):
    _, v = _heads(kv, 2)
    att, g = f64(att), _heads(g, 1)[0]
    out = _gemm(att, v)
    dv, datt = _gemm(att.transpose(0, 2, 1), g), _gemm(g, v.transpose(0, 2, 1))
    dkv = [_interleave([None, dv[i]], 0)[0] for i in range(2)]
    return tuple(_merge(x) for x in out[:2]) + (out[2],), [(dkv[0], dkv[1], dv[2]), datt]


def _attention_case(op, rng, d):
    """Inputs (float16), the emulated op, its reference; head_dim ``d``, Tq 5, Tk 7."""
    act, att, grad = (-20.0, 4.0), (-20.0, 0.0), (-20.0, 2.0)
    contrib = mx.nd.contrib
    if op == "selfatt_qk":
        qkv = wide_random(rng, (5, BATCH, HEADS * 3 * d), act)
        g = wide_random(rng, (BATCH * HEADS, 5, 5), grad)
        return [qkv], g, lambda x: contrib.interleaved_matmul_selfatt_qk(x, heads=HEADS), \
            ref_selfatt_qk(qkv, g)
    if op == "selfatt_valatt":
        qkv = wide_random(rng, (7, BATCH, HEADS * 3 * d), act)
        a = wide_random(rng, (BATCH * HEADS, 7, 7), att)
        g = wide_random(rng, (7, BATCH, HEADS * d), grad)
        return [qkv, a], g, lambda x, y: contrib.interleaved_matmul_selfatt_valatt(
            x, y, heads=HEADS), ref_selfatt_valatt(qkv, a, g)
    if op == "encdec_qk":
        q = wide_random(rng, (5, BATCH, HEADS * d), act)
        kv = wide_random(rng, (7, BATCH, HEADS * 2 * d), act)
        g = wide_random(rng, (BATCH * HEADS, 5, 7), grad)
        return [q, kv], g, lambda x, y: contrib.interleaved_matmul_encdec_qk(
            x, y, heads=HEADS), ref_encdec_qk(q, kv, g)
    kv = wide_random(rng, (7, BATCH, HEADS * 2 * d), act)
    a = wide_random(rng, (BATCH * HEADS, 5, 7), att)
    g = wide_random(rng, (5, BATCH, HEADS * d), grad)
    return [kv, a], g, lambda x, y: contrib.interleaved_matmul_encdec_valatt(
        x, y, heads=HEADS), ref_encdec_valatt(kv, a, g)


@pytest.mark.parametrize("head_dim", [4, 6])  # scale 0.5 exactly; float32(1/sqrt(6))
@pytest.mark.parametrize("op", ["selfatt_qk", "selfatt_valatt", "encdec_qk", "encdec_valatt"])
def test_interleaved_attention_matches_float64_reference(op, head_dim, emu, report):
    rng = np.random.RandomState(11 + head_dim)
    inputs, g, call, (out_ref, grad_refs) = _attention_case(op, rng, head_dim)
    arrays = [nd16(x) for x in inputs]
    for a in arrays:
        a.attach_grad()
    with mx.autograd.record():
        out = call(*arrays)
    out.backward(nd16(g))
    name = "interleaved_" + op
    assert out.dtype == F16
    report(name, "d=%d forward" % head_dim, compare(out.asnumpy(), *out_ref))
    for k, (a, ref) in enumerate(zip(arrays, grad_refs)):
        assert a.grad.dtype == F16
        report(name, "d=%d grad %d" % (head_dim, k), compare(a.grad.asnumpy(), *ref))

# ------------------------------------------------------------------------ range limits
def test_partial_sums_beyond_float16_range_stay_finite_with_float32_accumulation(emu):
    # 60000 + 60000 - 60000 - 30000: a float16 accumulator overflows to inf after the second
    # term in any order that adds the positive terms first; float32 accumulation gives 30000
    x = np.array([[60000.0, 60000.0, -60000.0, -30000.0]], dtype=F16)
    w = np.ones((1, 4), dtype=F16)
    out = mx.nd.FullyConnected(nd16(x), nd16(w), no_bias=True, num_hidden=1).asnumpy()
    assert out.dtype == F16
    assert out[0, 0] == 30000.0
    out = mx.nd.dot(nd16(x), nd16(w), transpose_b=True).asnumpy()
    assert out[0, 0] == 30000.0


@pytest.mark.parametrize("op", ["FullyConnected", "Convolution", "dot"])
def test_overflowing_result_is_inf_in_emulation_and_reference(op, emu):
    # products of 300 * 300 = 90000 exceed float16's largest value 65504; sums of finite
    # products (4 * 20000) overflow too; the sign of the sum decides the sign of inf
    x = np.array([[300.0, 300.0, 100.0, 100.0],
                  [-300.0, -300.0, 100.0, 100.0],
                  [150.0, 150.0, 150.0, 150.0],
                  [1.0, 2.0, 3.0, 4.0]], dtype=F16)
    w = np.array([[300.0, 1.0, 1.0, 1.0],
                  [150.0, 150.0, 0.0, 0.0]], dtype=F16)
    if op == "FullyConnected":
        out = mx.nd.FullyConnected(nd16(x), nd16(w), no_bias=True, num_hidden=2)
    elif op == "dot":
        out = mx.nd.dot(nd16(x), nd16(w), transpose_b=True)
    else:
        out = mx.nd.Convolution(nd16(x[:, :, None, None]), nd16(w[:, :, None, None]),
                                kernel=(1, 1), num_filter=2, no_bias=True)
    out = out.asnumpy().reshape(4, 2)
    with np.errstate(over="ignore"):
        ref = (f64(x) @ f64(w).T).astype(F16)
    assert np.isinf(ref).sum() == 4 and np.isfinite(ref[3]).all()
    np.testing.assert_array_equal(out, ref)


# ------------------------------------------------------------------------ other front ends
def _set_params(block, values):
    for name, param in block.collect_params().items():
        suffix = name.rsplit("_", 1)[-1]
        param.set_data(nd16(values[suffix]))


GLUON_CASES = {
    # name: (block factory, data shape, {param suffix: shape}, imperative call)
    "Dense": (lambda: gluon.nn.Dense(20, in_units=40),
              (8, 40), {"weight": (20, 40), "bias": (20,)},
              lambda x, p: mx.nd.FullyConnected(x, p["weight"], p["bias"], num_hidden=20)),
    "Conv2D-groups2": (lambda: gluon.nn.Conv2D(8, 3, padding=1, strides=2, groups=2,
                                               in_channels=6),
                       (2, 6, 9, 9), {"weight": (8, 3, 3, 3), "bias": (8,)},
                       lambda x, p: mx.nd.Convolution(x, p["weight"], p["bias"], kernel=(3, 3),
                                                      pad=(1, 1), stride=(2, 2), num_filter=8,
                                                      num_group=2)),
    "Conv2DTranspose": (lambda: gluon.nn.Conv2DTranspose(4, 4, strides=2, padding=1,
                                                         in_channels=6),
                        (2, 6, 5, 5), {"weight": (6, 4, 4, 4), "bias": (4,)},
                        lambda x, p: mx.nd.Deconvolution(x, p["weight"], p["bias"],
                                                         kernel=(4, 4), stride=(2, 2),
                                                         pad=(1, 1), num_filter=4,
                                                         no_bias=False)),
}


@pytest.mark.parametrize("case", sorted(GLUON_CASES))
def test_hybridized_gluon_block_equals_imperative_emulation(case):
    make, shape, pshapes, imperative = GLUON_CASES[case]
    rng = np.random.RandomState(8)
    dexp, wexp, _ = PROFILES["wide"]
    x = wide_random(rng, shape, dexp)
    values = {k: wide_random(rng, s, wexp if k == "weight" else dexp)
              for k, s in pshapes.items()}
    with emulation.emulated():
        net = make()
        net.initialize()
        net.cast("float16")
        _set_params(net, values)
        net.hybridize()
        hybrid = net(nd16(x)).asnumpy()
        direct = imperative(nd16(x), {k: nd16(v) for k, v in values.items()}).asnumpy()
    assert isinstance(net._cached_op, emulation.EmulatedCachedOp)
    assert hybrid.dtype == direct.dtype == F16
    np.testing.assert_array_equal(hybrid, direct)


SYMBOL_CASES = {
    "FullyConnected": (
        lambda d, w: mx.sym.FullyConnected(d, w, num_hidden=20, no_bias=True),
        (8, 40), (20, 40),
        lambda d, w: mx.nd.FullyConnected(d, w, num_hidden=20, no_bias=True)),
    "Convolution-depthwise": (
        lambda d, w: mx.sym.Convolution(d, w, kernel=(3, 3), pad=(1, 1), num_filter=6,
                                        num_group=6, no_bias=True),
        (2, 6, 7, 7), (6, 1, 3, 3),
        lambda d, w: mx.nd.Convolution(d, w, kernel=(3, 3), pad=(1, 1), num_filter=6,
                                       num_group=6, no_bias=True)),
    "Deconvolution-stride2": (
        lambda d, w: mx.sym.Deconvolution(d, w, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                          adj=(1, 1), num_filter=4),
        (2, 6, 5, 5), (6, 4, 3, 3),
        lambda d, w: mx.nd.Deconvolution(d, w, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                         adj=(1, 1), num_filter=4)),
    "dot-transpose_b": (
        lambda d, w: mx.sym.dot(d, w, transpose_b=True),
        (8, 40), (20, 40),
        lambda d, w: mx.nd.dot(d, w, transpose_b=True)),
    "batch_dot-transpose_a": (
        lambda d, w: mx.sym.batch_dot(d, w, transpose_a=True),
        (3, 30, 8), (3, 30, 10),
        lambda d, w: mx.nd.batch_dot(d, w, transpose_a=True)),
}


@pytest.mark.parametrize("case", sorted(SYMBOL_CASES))
def test_symbol_simple_bind_equals_imperative_emulation(case):
    build, dshape, wshape, imperative = SYMBOL_CASES[case]
    rng = np.random.RandomState(9)
    dexp, wexp, _ = PROFILES["wide"]
    x = wide_random(rng, dshape, dexp)
    w = wide_random(rng, wshape, wexp)
    sym = build(mx.sym.var("data"), mx.sym.var("weight"))
    with emulation.emulated():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", data=dshape, weight=wshape,
                              type_dict={"data": F16, "weight": F16})
        exe.arg_dict["data"][:] = nd16(x)
        exe.arg_dict["weight"][:] = nd16(w)
        bound = exe.forward(is_train=False)[0].asnumpy()
        direct = imperative(nd16(x), nd16(w)).asnumpy()
    assert bound.dtype == direct.dtype == F16
    np.testing.assert_array_equal(bound, direct)
