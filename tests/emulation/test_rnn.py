"""The fused RNN op under CPU float16 emulation: what it computes and how far that is from cuDNN.

The emulation wraps the fused ``RNN`` op at its boundary: float16 data, parameters and initial
states are cast to float32, the whole sequence runs in float32 and the outputs are rounded to
float16 once. Inside the op the hidden and cell states therefore stay float32 from one time
step to the next, where cuDNN with float16 tensors stores them (and its GEMM outputs) in
float16 after every step.

Two NumPy references for a one-layer LSTM (sequence 20, batch 8, input 32, hidden 32, weights
~ U(-0.3, 0.3)):

* ``float32-states``: the float16 operands, the whole recurrence in float64, one final
  rounding to float16. This is exactly what the emulation computes (up to float32 vs float64
  arithmetic), so the emulated output must be within one float16 ulp of it.
* ``float16-steps``: a step-by-step model of cuDNN with float16 tensors. Per time step t:

  - ``zx = W_x x_t + b_x`` and ``zh = W_h h_{t-1} + b_h``: float16 operands, float32
    accumulation (NumPy float32 matmul), each rounded to float16, as cuDNN stores its GEMM
    outputs in float16 buffers;
  - ``i, f, g, o = sigmoid/tanh(zx + zh)`` in float32 (variant ``+activations``: each gate
    also rounded to float16);
  - ``c_t = f * c_{t-1} + i * g`` in float32, rounded to float16;
  - ``h_t = o * tanh(c_t)`` in float32 from the rounded ``c_t``, rounded to float16;
  - ``y_t = h_t``; ``h_t`` and ``c_t`` enter step t+1 as float16.

The measured difference between the emulation and ``float16-steps`` is reported (``pytest -s``
and ``record_property``) and bounded; ``docs/emulation.md`` quotes the numbers.
"""
import numpy as np
import pytest

import mxnet as mx

from mxmixed import emulation

F16 = np.float16
T, N, I, H = 20, 8, 32, 32  # sequence, batch, input size, hidden size
N_PARAMS = 4 * H * I + 4 * H * H + 8 * H
SEEDS = [0, 1, 2]


def operands(seed):
    """Float64 originals of data, parameters, h0 and c0 (round them to get the operands)."""
    rng = np.random.RandomState(seed)
    return (rng.uniform(-1.0, 1.0, (T, N, I)), rng.uniform(-0.3, 0.3, N_PARAMS),
            rng.uniform(-0.5, 0.5, (1, N, H)), rng.uniform(-0.5, 0.5, (1, N, H)))


def to16(arrays):
    return [a.astype(F16) for a in arrays]


def unpack(params, dtype):
    """MXNet's fused LSTM layout: W_x (4H, I), W_h (4H, H), b_x (4H), b_h (4H); gates i,f,g,o."""
    params = params.astype(dtype)
    k1, k2, k3 = 4 * H * I, 4 * H * I + 4 * H * H, 4 * H * I + 4 * H * H + 4 * H
    return (params[:k1].reshape(4 * H, I), params[k1:k2].reshape(4 * H, H), params[k2:k3],
            params[k3:])


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm_float32_states(x, params, h0, c0):
    """The whole recurrence in float64 from the given operands; outputs not rounded."""
    w_x, w_h, b_x, b_h = unpack(params, np.float64)
    h, c = h0[0].astype(np.float64), c0[0].astype(np.float64)
    ys = []
    for t in range(T):
        z = x[t].astype(np.float64) @ w_x.T + b_x + h @ w_h.T + b_h
        i, f, g, o = np.split(z, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h[None], c[None]


def lstm_float16_steps(x, params, h0, c0, round_activations=False):
    """Step-by-step float16 LSTM as described in the module docstring; float16 outputs."""
    w_x, w_h, b_x, b_h = unpack(params, np.float32)  # exact: they are float16 values

    def r16(a):
        return a.astype(F16).astype(np.float32)

    h, c = h0[0].astype(np.float32), c0[0].astype(np.float32)
    ys = []
    for t in range(T):
        zx = r16(x[t].astype(np.float32) @ w_x.T + b_x)
        zh = r16(h @ w_h.T + b_h)
        zi, zf, zg, zo = np.split(zx + zh, 4, axis=1)
        i, f, g, o = sigmoid(zi), sigmoid(zf), np.tanh(zg), sigmoid(zo)
        if round_activations:
            i, f, g, o = r16(i), r16(f), r16(g), r16(o)
        c = r16(f * c + i * g)
        h = r16(o * np.tanh(c))
        ys.append(h)
    return np.stack(ys).astype(F16)


def emulated_lstm(x, params, h0, c0):
    with emulation.emulated():
        out, hn, cn = mx.nd.RNN(*[mx.nd.array(a, dtype=F16) for a in (x, params, h0, c0)],
                                state_size=H, num_layers=1, mode="lstm", state_outputs=True)
        return out.asnumpy(), hn.asnumpy(), cn.asnumpy()


def ordinal(a):
    """Map float16 values to integers that are consecutive for consecutive float16 values."""
    bits = np.asarray(a, dtype=F16).view(np.int16).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFF), bits)


def ulps(a, b):
    return np.abs(ordinal(a) - ordinal(b))


@pytest.mark.parametrize("seed", SEEDS)
def test_fused_emulated_lstm_equals_float32_state_reference_within_one_ulp(seed,
                                                                           record_property):
    x, params, h0, c0 = to16(operands(seed))
    out, hn, cn = emulated_lstm(x, params, h0, c0)
    assert out.dtype == hn.dtype == cn.dtype == F16
    ref_y, ref_h, ref_c = (r.astype(F16) for r in lstm_float32_states(x, params, h0, c0))
    share, max_ulp = float(np.mean(out != ref_y)), int(ulps(out, ref_y).max())
    record_property("share_differing", share)
    record_property("max_ulp", max_ulp)
    print("\nfused emulated LSTM vs float32-state reference (seed %d): %.2f%% differ, max %d ulp"
          % (seed, 100 * share, max_ulp))
    assert max_ulp <= 1
    assert ulps(hn, ref_h).max() <= 1
    assert ulps(cn, ref_c).max() <= 1
    # the returned state is the last output, not a separately rounded copy
    np.testing.assert_array_equal(hn[0], out[-1])


def test_one_ulp_check_detects_unrounded_operands():
    # power of the previous test: a result computed from the float64 originals, i.e. with
    # operands that skipped the rounding to float16, is far more than 1 ulp away
    originals = operands(0)
    with_rounding = lstm_float32_states(*to16(originals))[0].astype(F16)
    without_rounding = lstm_float32_states(*originals)[0].astype(F16)
    assert ulps(with_rounding, without_rounding).max() > 10
    out = emulated_lstm(*to16(originals))[0]
    assert ulps(out, without_rounding).max() > 10


@pytest.mark.parametrize("round_activations", [False, True],
                         ids=["gemm-outputs", "gemm-outputs+activations"])
def test_fused_emulated_lstm_stays_close_to_float16_step_reference(round_activations,
                                                                   record_property):
    abs_diffs, scaled_ulps, exact_ulps = [], [], []
    for seed in SEEDS:
        x, params, h0, c0 = to16(operands(seed))
        out = emulated_lstm(x, params, h0, c0)[0]
        ref = lstm_float16_steps(x, params, h0, c0, round_activations)
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        # ulps at the reference's magnitude, floored at 2**-4: h near 0 carries the absolute
        # error of c (|c| ~ 0.5), so ulps of tiny values of h say little
        floor = np.maximum(np.abs(ref), F16(2.0 ** -4))
        abs_diffs.append(diff)
        scaled_ulps.append(diff / np.spacing(floor).astype(np.float64))
        exact_ulps.append(ulps(out, ref))
    diff, scaled, exact = (np.concatenate([a.ravel() for a in v])
                           for v in (abs_diffs, scaled_ulps, exact_ulps))
    stats = {"max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
             "share_differing": float(np.mean(exact > 0)), "max_ulp": int(exact.max()),
             "max_ulp_floored_2pow-4": float(scaled.max())}
    for key, value in stats.items():
        record_property(key, value)
    print("\nfused emulated LSTM vs float16-step reference (%s, %d seeds, %d outputs): "
          "max |diff| %.3g, mean |diff| %.3g, %.1f%% differ, max %d ulp (at own magnitude), "
          "max %.2f ulp (magnitude floored at 2**-4)"
          % ("+activations" if round_activations else "gemm outputs", len(SEEDS), diff.size,
             stats["max_abs_diff"], stats["mean_abs_diff"], 100 * stats["share_differing"],
             stats["max_ulp"], stats["max_ulp_floored_2pow-4"]))
    # Bounds, from the measurement over these seeds (docs/emulation.md): max |diff| 2**-11
    # (4.9e-4) in both variants; mean |diff| 3.3e-5 (gemm outputs) and 5.2e-5 (+activations);
    # at most 4 and 6 ulps with magnitudes floored at 2**-4. Allowed: about twice the worse
    # variant, so a different BLAS summation order cannot break the test, while an emulation
    # that is badly off still fails it: a swapped i/f gate order moves outputs by 0.45 and
    # ignoring the initial state by 0.27 (both measured), far beyond 2**-10. Unrounded
    # operands or a float32 result fail the 1-ulp and dtype checks of the test above.
    assert stats["max_abs_diff"] <= 2.0 ** -10
    assert stats["mean_abs_diff"] <= 1.5e-4
    assert stats["max_ulp_floored_2pow-4"] <= 12
    # and the two models do differ: float32 states are not what cuDNN computes
    assert stats["share_differing"] > 0.05


def test_float16_step_reference_differs_from_float32_states_reference():
    # sanity check of the reference itself: the per-step rounding is actually applied
    x, params, h0, c0 = to16(operands(0))
    steps = lstm_float16_steps(x, params, h0, c0)
    states32 = lstm_float32_states(x, params, h0, c0)[0].astype(F16)
    assert np.mean(steps != states32) > 0.05
    assert np.abs(steps.astype(np.float64) - states32).max() <= 2.0 ** -10
