"""Dtype expectations for the CPU float16 emulation, as a table (in the style of apex's tests).

Each row of ``DTYPE_TABLE`` names an op and the dtypes of its inputs and gives the dtypes a GPU
run produces: of each forward output and of the gradient of each differentiable input. Every
row is checked in three execution modes: imperative ``mx.nd`` calls under autograd, a
hybridized Gluon block (so through the emulation's ``CachedOp`` hook) and ``simple_bind`` on
a Symbol followed by ``backward``.

The table covers the emulated ops (FullyConnected, Convolution, Deconvolution, RNN/LSTM, dot,
batch_dot, BatchNorm), a few neighbours (Activation relu, Pooling, elemwise_add, softmax;
whether mxmixed emulates them is read from ``mxmixed.emulation._ops``, the expected dtypes do
not depend on it) and the same ops in float32, where the emulation must change nothing at
all. BatchNorm with float16 data keeps gamma, beta and the moving statistics in float32, as
cuDNN does, and still updates the moving statistics in training.

Emulated float16 Deconvolution backward, imperative and hybridized, hits an MXNet 1.9.1
oneDNN bug (see ``DECONV_BACKWARD_BUG``); those two cases run in a subprocess and are marked
``xfail(strict=True)``.
"""
import json
import os
import sys

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

from mxmixed import emulation
from mxmixed.emulation._ops import EMULATED_OPS
from mxmixed.emulation import count_emulated
from mxmixed.emulation._wrappers import onednn_active

from conftest import run_command

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
T, N, I, H = 4, 3, 5, 6  # LSTM: sequence, batch, input size, hidden size
LSTM_PARAMS = 4 * H * I + 4 * H * H + 8 * H
AUX = ("moving_mean", "moving_var")
BN_MOMENTUM = 0.75

# op: (function of (F, *inputs), [(input name, shape), ...] in call order)
OPS = {
    "FullyConnected": (
        lambda F, data, weight, bias: F.FullyConnected(data, weight, bias, num_hidden=5),
        [("data", (4, 6)), ("weight", (5, 6)), ("bias", (5,))]),
    "Convolution": (
        lambda F, data, weight, bias: F.Convolution(data, weight, bias, kernel=(3, 3),
                                                    pad=(1, 1), num_filter=4),
        [("data", (2, 3, 5, 5)), ("weight", (4, 3, 3, 3)), ("bias", (4,))]),
    "Deconvolution": (
        lambda F, data, weight: F.Deconvolution(data, weight, kernel=(3, 3), stride=(2, 2),
                                                num_filter=4, no_bias=True),
        [("data", (2, 3, 4, 4)), ("weight", (3, 4, 3, 3))]),
    "RNN-lstm": (
        lambda F, data, parameters, state, state_cell: F.RNN(
            data, parameters, state, state_cell, state_size=H, num_layers=1, mode="lstm",
            state_outputs=True),
        [("data", (T, N, I)), ("parameters", (LSTM_PARAMS,)), ("state", (1, N, H)),
         ("state_cell", (1, N, H))]),
    "dot": (
        lambda F, lhs, rhs: F.dot(lhs, rhs, transpose_b=True),
        [("lhs", (4, 6)), ("rhs", (5, 6))]),
    "batch_dot": (
        lambda F, lhs, rhs: F.batch_dot(lhs, rhs),
        [("lhs", (2, 3, 4)), ("rhs", (2, 4, 5))]),
    "BatchNorm": (
        lambda F, data, gamma, beta, moving_mean, moving_var: F.BatchNorm(
            data, gamma, beta, moving_mean, moving_var, fix_gamma=False,
            momentum=BN_MOMENTUM),
        [("data", (4, 3, 2, 2)), ("gamma", (3,)), ("beta", (3,)), ("moving_mean", (3,)),
         ("moving_var", (3,))]),
    "Activation-relu": (
        lambda F, data: F.Activation(data, act_type="relu"),
        [("data", (4, 6))]),
    "Pooling-max": (
        lambda F, data: F.Pooling(data, kernel=(2, 2), stride=(2, 2), pool_type="max"),
        [("data", (2, 3, 4, 4))]),
    "elemwise_add": (
        lambda F, lhs, rhs: F.elemwise_add(lhs, rhs),
        [("lhs", (4, 6)), ("rhs", (4, 6))]),
    "softmax": (
        lambda F, data: F.softmax(data, axis=-1),
        [("data", (4, 6))]),
}



def mx_op(op):
    """The MXNet operator name of an ``OPS`` key ('Activation-relu' -> 'Activation')."""
    return op.split("-")[0]


# Which ops the emulation covers comes from mxmixed itself (the list grows with measurements);
# the expected dtypes below do not depend on it: they are what a GPU produces.
EMULATED = {op for op in OPS if mx_op(op) in EMULATED_OPS}

# op, input dtypes, forward output dtypes, gradient dtypes (differentiable inputs only)
DTYPE_TABLE = [
    ("FullyConnected", {"data": F16, "weight": F16, "bias": F16},
     (F16,), {"data": F16, "weight": F16, "bias": F16}),
    ("Convolution", {"data": F16, "weight": F16, "bias": F16},
     (F16,), {"data": F16, "weight": F16, "bias": F16}),
    ("Deconvolution", {"data": F16, "weight": F16},
     (F16,), {"data": F16, "weight": F16}),
    ("RNN-lstm", {"data": F16, "parameters": F16, "state": F16, "state_cell": F16},
     (F16, F16, F16), {"data": F16, "parameters": F16, "state": F16, "state_cell": F16}),
    ("dot", {"lhs": F16, "rhs": F16}, (F16,), {"lhs": F16, "rhs": F16}),
    ("batch_dot", {"lhs": F16, "rhs": F16}, (F16,), {"lhs": F16, "rhs": F16}),
    ("BatchNorm", {"data": F16, "gamma": F32, "beta": F32, "moving_mean": F32,
                   "moving_var": F32},
     (F16,), {"data": F16, "gamma": F32, "beta": F32}),
    ("Activation-relu", {"data": F16}, (F16,), {"data": F16}),
    ("Pooling-max", {"data": F16}, (F16,), {"data": F16}),
    ("elemwise_add", {"lhs": F16, "rhs": F16}, (F16,), {"lhs": F16, "rhs": F16}),
    ("softmax", {"data": F16}, (F16,), {"data": F16}),
    # float32 in, float32 out: the emulation must not touch these
    ("FullyConnected", {"data": F32, "weight": F32, "bias": F32},
     (F32,), {"data": F32, "weight": F32, "bias": F32}),
    ("Convolution", {"data": F32, "weight": F32, "bias": F32},
     (F32,), {"data": F32, "weight": F32, "bias": F32}),
    ("Deconvolution", {"data": F32, "weight": F32},
     (F32,), {"data": F32, "weight": F32}),
    ("RNN-lstm", {"data": F32, "parameters": F32, "state": F32, "state_cell": F32},
     (F32, F32, F32), {"data": F32, "parameters": F32, "state": F32, "state_cell": F32}),
    ("dot", {"lhs": F32, "rhs": F32}, (F32,), {"lhs": F32, "rhs": F32}),
    ("batch_dot", {"lhs": F32, "rhs": F32}, (F32,), {"lhs": F32, "rhs": F32}),
    ("BatchNorm", {"data": F32, "gamma": F32, "beta": F32, "moving_mean": F32,
                   "moving_var": F32},
     (F32,), {"data": F32, "gamma": F32, "beta": F32}),
    ("Activation-relu", {"data": F32}, (F32,), {"data": F32}),
    ("softmax", {"data": F32}, (F32,), {"data": F32}),
]


def row_id(row):
    return "%s-%s" % (row[0], row[1][OPS[row[0]][1][0][0]].name)


def input_values(op, dtypes, seed=0):
    """Deterministic inputs for ``op`` in the given dtypes (moving variance positive)."""
    rng = np.random.RandomState(seed)
    values = {}
    for name, shape in OPS[op][1]:
        if name == "moving_var":
            value = rng.uniform(0.5, 1.5, shape)
        elif name == "parameters":
            value = rng.uniform(-0.3, 0.3, shape)
        else:
            value = rng.normal(0.0, 1.0, shape)
        values[name] = value.astype(dtypes[name])
    return values


class OpBlock(gluon.HybridBlock):
    """A hybridizable block that applies ``fn(F, *inputs)`` to its inputs."""

    def __init__(self, fn):
        super().__init__()
        self._fn = fn

    def hybrid_forward(self, F, *args):
        return self._fn(F, *args)


def run(mode, op, dtypes, grad_names):
    """Forward (training) and backward with all-ones head gradients in one mode.

    Gradient buffers start as NaN, so a gradient that backward did not write shows.

    Returns
    -------
    outputs : list of NDArray
    grads : dict of str to NDArray
    aux : dict of str to NDArray
        The moving statistics after the call (BatchNorm only).
    """
    fn, spec = OPS[op]
    names = [name for name, _ in spec]
    values = input_values(op, dtypes)
    if mode == "symbol":
        sym = fn(mx.sym, *[mx.sym.var(name) for name in names])
        exe = sym.simple_bind(mx.cpu(), type_dict=dict(dtypes),
                              grad_req={n: "write" if n in grad_names else "null"
                                        for n in sym.list_arguments()},
                              **{n: s for n, s in spec if n not in AUX})
        for name in names:
            target = exe.aux_dict[name] if name in AUX else exe.arg_dict[name]
            target[:] = mx.nd.array(values[name], dtype=values[name].dtype)
        for name in grad_names:
            exe.grad_dict[name][:] = np.nan
        outputs = exe.forward(is_train=True)
        exe.backward([mx.nd.ones_like(o) for o in outputs])
        return (list(outputs), {n: exe.grad_dict[n] for n in grad_names},
                {n: exe.aux_dict[n] for n in names if n in AUX})
    arrays = {n: mx.nd.array(values[n], dtype=values[n].dtype) for n in names}
    for name in grad_names:
        arrays[name].attach_grad()
        arrays[name].grad[:] = np.nan
    if mode == "gluon":
        call = OpBlock(fn)
        call.hybridize()
    else:
        call = lambda *args: fn(mx.nd, *args)  # noqa: E731
    with autograd.record(train_mode=True):
        out = call(*[arrays[n] for n in names])
    outputs = list(out) if isinstance(out, (list, tuple)) else [out]
    autograd.backward(outputs, [mx.nd.ones_like(o) for o in outputs])
    return (outputs, {n: arrays[n].grad for n in grad_names},
            {n: arrays[n] for n in names if n in AUX})


def summarize(mode, row_index):
    """Run one table row under emulation; return the dtypes and whether values are finite."""
    op, dtypes, _, grad_dtypes = DTYPE_TABLE[row_index]
    with emulation.emulated():
        outputs, grads, aux = run(mode, op, dtypes, sorted(grad_dtypes))
        outputs = [o.asnumpy() for o in outputs]
        grads = {n: g.asnumpy() for n, g in grads.items()}
        aux = {n: a.asnumpy() for n, a in aux.items()}
    return {"outputs": [o.dtype.name for o in outputs],
            "grads": {n: g.dtype.name for n, g in grads.items()},
            "aux": {n: a.dtype.name for n, a in aux.items()},
            "outputs_finite": [bool(np.isfinite(o).all()) for o in outputs],
            "grads_finite": {n: bool(np.isfinite(g).all()) for n, g in grads.items()}}


def summarize_in_subprocess(mode, row_index):
    """:func:`summarize` in a fresh interpreter, for cases that corrupt the process."""
    tests = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, sys; sys.path.insert(0, %r); import test_dtypes as t; "
            "print('SUMMARY ' + json.dumps(t.summarize(%r, %d)))" % (tests, mode, row_index))
    root = os.path.dirname(os.path.dirname(tests))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    proc = run_command([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("SUMMARY ")]
    assert proc.returncode == 0 and lines, (
        "subprocess failed (rc=%d): %s" % (proc.returncode, proc.stderr.strip()[-600:]))
    return json.loads(lines[-1][len("SUMMARY "):])


MODES = ["nd", "gluon", "symbol"]

# MXNet 1.9.1's oneDNN Deconvolution fails in backward ("could not execute a primitive", then
# a corrupted heap) when its weight is computed by another op, as the emulation's cast of the
# float16 weight is. The emulation computes float16 Deconvolution as a Convolution instead
# (mxmixed/emulation/_deconv.py), so every mode trains in this process; only a Deconvolution
# whose pad MXNet derives from ``target_shape`` keeps the native op, and its training is refused.
ISOLATED = set()


def table_params():
    params = []
    for index, row in enumerate(DTYPE_TABLE):
        for mode in MODES:
            isolated = (row[0], row[1][OPS[row[0]][1][0][0]].name, mode) in ISOLATED
            params.append(pytest.param(index, mode, isolated,
                                       id="%s-%s" % (row_id(row), mode)))
    return params


def test_float16_deconvolution_with_target_shape_training_is_refused_clearly_on_onednn():
    if not onednn_active():
        pytest.skip("oneDNN is off: float16 Deconvolution trains under emulation")
    x = mx.nd.ones((1, 2, 3, 3), dtype=F16)
    w = mx.nd.ones((2, 2, 3, 3), dtype=F16)
    w.attach_grad()
    with emulation.emulated(), pytest.raises(NotImplementedError, match="MXNET_MKLDNN_ENABLED=0"):
        with mx.autograd.record():
            mx.nd.Deconvolution(x, w, kernel=(3, 3), stride=(2, 2), num_filter=2, no_bias=True,
                                target_shape=(6, 6))


@pytest.mark.parametrize("row_index, mode, isolated", table_params())
def test_forward_and_gradient_dtypes_match_table(row_index, mode, isolated):
    _, _, out_dtypes, grad_dtypes = DTYPE_TABLE[row_index]
    if isolated:
        summary = summarize_in_subprocess(mode, row_index)
    else:
        summary = summarize(mode, row_index)
    assert summary["outputs"] == [d.name for d in out_dtypes]
    assert summary["grads"] == {n: d.name for n, d in grad_dtypes.items()}
    assert all(summary["outputs_finite"])
    for name, finite in summary["grads_finite"].items():
        assert finite, "gradient of %s not (fully) written" % name
    assert all(d == "float32" for d in summary["aux"].values())


BN16 = next(row for row in DTYPE_TABLE if row[0] == "BatchNorm" and row[1]["data"] == F16)


@pytest.mark.parametrize("mode", MODES)
def test_batchnorm_float16_updates_float32_moving_stats_in_training(mode):
    _, dtypes, _, grad_dtypes = BN16
    before = input_values("BatchNorm", dtypes)
    with emulation.emulated():
        outputs, grads, aux = run(mode, "BatchNorm", dtypes, sorted(grad_dtypes))
        mean, var = aux["moving_mean"].asnumpy(), aux["moving_var"].asnumpy()
    assert mean.dtype == var.dtype == F32
    assert not np.allclose(mean, before["moving_mean"])
    assert not np.allclose(var, before["moving_var"])
    # the update itself: momentum * old + (1 - momentum) * batch statistic, where MXNet's
    # CPU BatchNorm uses the biased batch variance
    data = before["data"].astype(np.float64)
    batch_mean = data.mean(axis=(0, 2, 3))
    batch_var = data.var(axis=(0, 2, 3))
    np.testing.assert_allclose(
        mean, BN_MOMENTUM * before["moving_mean"] + (1 - BN_MOMENTUM) * batch_mean,
        rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        var, BN_MOMENTUM * before["moving_var"] + (1 - BN_MOMENTUM) * batch_var,
        rtol=1e-5, atol=1e-6)
    # the gradient w.r.t. beta with all-ones head gradients is the element count per channel
    np.testing.assert_array_equal(grads["beta"].asnumpy(), np.full(3, 16, dtype=F32))


@pytest.mark.parametrize("row", DTYPE_TABLE, ids=row_id)
def test_graph_pass_casts_exactly_the_float16_operands(row):
    op, dtypes, out_dtypes, _ = row
    fn, spec = OPS[op]
    sym = fn(mx.sym, *[mx.sym.var(name) for name, _ in spec])
    rewritten = emulation.emulate_symbol(sym, dtypes)
    if op in EMULATED and F16 in dtypes.values():
        expected = {"to_float32": sum(dtypes[n] == F16 for n, _ in spec),
                    "to_float16": sum(d == F16 for d in out_dtypes)}
        assert rewritten is not sym
        assert count_emulated(rewritten) == expected
        assert rewritten.list_inputs() == sym.list_inputs()
    else:
        assert rewritten is sym


UNTOUCHED = [row for row in DTYPE_TABLE if row[0] not in EMULATED or F16 not in row[1].values()]


@pytest.mark.parametrize("row", UNTOUCHED, ids=row_id)
def test_emulation_leaves_float32_and_native_float16_calls_bit_identical(row):
    op, dtypes, _, grad_dtypes = row
    grad_names = sorted(grad_dtypes)
    plain_out, plain_grads, plain_aux = run("nd", op, dtypes, grad_names)
    with emulation.emulated():
        emu_out, emu_grads, emu_aux = run("nd", op, dtypes, grad_names)
    assert len(plain_out) == len(emu_out)
    for plain, emu in zip(plain_out, emu_out):
        assert plain.dtype == emu.dtype
        np.testing.assert_array_equal(plain.asnumpy(), emu.asnumpy())
    for name in grad_names:
        np.testing.assert_array_equal(plain_grads[name].asnumpy(), emu_grads[name].asnumpy())
    for name in plain_aux:
        np.testing.assert_array_equal(plain_aux[name].asnumpy(), emu_aux[name].asnumpy())


def test_float32_graph_of_emulated_ops_is_returned_unchanged():
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=8, name="fc")
    net = mx.sym.BatchNorm(mx.sym.reshape(net, shape=(0, 2, 2, 2)), name="bn")
    net = mx.sym.Convolution(net, kernel=(1, 1), num_filter=3, name="conv")
    net = mx.sym.dot(mx.sym.flatten(net), mx.sym.var("proj"))
    types = {name: F32 for name in net.list_inputs()}
    assert emulation.emulate_symbol(net, types) is net
    assert emulation.emulate_symbol(net, {"data": F32}) is net


# ------------------------------------------------------------------------ mixed dtypes
MIXED = [
    pytest.param({"data": F16, "weight": F32, "bias": F32}, id="float16-data-float32-weight"),
    pytest.param({"data": F32, "weight": F16, "bias": F16}, id="float32-data-float16-weight"),
]


@pytest.mark.parametrize("dtypes", MIXED)
def test_mixed_dtype_fully_connected_raises_type_error_imperative(dtypes):
    values = input_values("FullyConnected", dtypes)
    arrays = [mx.nd.array(values[n], dtype=values[n].dtype) for n in ("data", "weight", "bias")]
    with emulation.emulated():
        with pytest.raises(TypeError, match="FullyConnected"):
            mx.nd.FullyConnected(*arrays, num_hidden=5)


@pytest.mark.parametrize("dtypes", MIXED)
def test_mixed_dtype_fully_connected_raises_type_error_in_graph_pass(dtypes):
    fn, spec = OPS["FullyConnected"]
    sym = fn(mx.sym, *[mx.sym.var(name) for name, _ in spec])
    with pytest.raises(TypeError, match="type inference"):
        emulation.emulate_symbol(sym, dtypes)
    with emulation.emulated():
        with pytest.raises(TypeError, match="type inference"):
            sym.simple_bind(mx.cpu(), type_dict=dtypes, **dict(spec))


def test_mixed_dtype_fully_connected_raises_type_error_hybridized():
    values = input_values("FullyConnected", {"data": F16, "weight": F32, "bias": F32})
    arrays = [mx.nd.array(values[n], dtype=values[n].dtype) for n in ("data", "weight", "bias")]
    block = OpBlock(OPS["FullyConnected"][0])
    block.hybridize()
    with emulation.emulated():
        with pytest.raises(TypeError, match="type inference"):
            block(*arrays)
