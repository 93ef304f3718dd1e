"""Under bfloat16 AMP, the first training forward of each hybridized block is followed by one
measurement of its forward and backward in bfloat16 against float32: a record for
``bfloat16_speed()``, and a warning with the figure where bfloat16 is slower; it leaves the
user's parameters, gradients and random state as they were, and a failure is one warning."""
import json
import warnings

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from mxmixed._core.devices import bfloat16_support
from mxmixed.training import _speedcheck
from mxmixed.training import bfloat16_speed

RUNS, WHY = bfloat16_support()
pytestmark = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)
X = mx.nd.array(np.random.RandomState(0).uniform(size=(4, 3, 12, 12)))
Y = mx.nd.array([0, 1, 2, 3])
SLOWER = "bfloat16 training of block"


def _net(dropout=0.0, extra=None):
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(8, 3), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"))
    if dropout:
        net.add(gluon.nn.Dropout(dropout))
    if extra is not None:
        net.add(extra)
    net.add(gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def _train(net, steps=1):
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            update_on_kvstore=False)
    losses = []
    for _ in range(steps):
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(X), Y)
        loss.backward()
        trainer.step(X.shape[0])
        losses.append(float(loss.mean().asscalar()))
    return trainer, losses


def _new_records(before):
    return bfloat16_speed()[before:]


def _times(float32, bfloat16):
    return lambda twin: {"float32": float32, "bfloat16": bfloat16}[twin.name]


def test_first_training_forward_of_each_block_is_measured_once_with_both_times():
    before = len(bfloat16_speed())
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        first, second = _net(), _net()
        first(X).wait_to_read()  # inference: not measured
        assert _new_records(before) == ()
        _train(first, steps=3)
        _train(second, steps=2)
    records = _new_records(before)
    assert [r.block for r in records] == [first.name, second.name]
    for record in records:
        assert record.skipped is None and record.batch_size == X.shape[0]
        assert record.float32_seconds > 0 and record.bfloat16_seconds > 0
        assert record.speedup == pytest.approx(record.float32_seconds / record.bfloat16_seconds)
        assert record.spread[0] <= record.speedup <= record.spread[1]
        assert record.rounds == _speedcheck.ROUNDS and record.check_seconds > 0


def test_a_slower_bfloat16_warns_once_with_the_figure(monkeypatch):
    monkeypatch.setattr(_speedcheck, "_step_seconds", _times(0.9, 2.25))
    before = len(bfloat16_speed())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            net = _net()
            _train(net, steps=3)
    lines = [str(w.message) for w in caught if SLOWER in str(w.message)]
    assert lines == ["bfloat16 training of block '%s' is slower than float32 on this CPU: 0.40x "
                     "(forward+backward, batch 4: bfloat16 2.25 s, float32 0.9 s); train in "
                     "float32 here, or keep the slow ops float32 (fp32_ops=...)" % net.name]
    assert caught[[str(w.message) for w in caught].index(lines[0])].filename == __file__
    (record,) = _new_records(before)
    assert record.slower and record.speedup == pytest.approx(0.4)


def _one_net_trained_with_times(monkeypatch, float32, bfloat16):
    """One net trained under bfloat16 AMP with the check's times given: the warnings about
    bfloat16 training, and the net's record."""
    monkeypatch.setattr(_speedcheck, "_step_seconds", _times(float32, bfloat16))
    before = len(bfloat16_speed())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            _train(_net())
    (record,) = _new_records(before)
    return [w for w in caught if "bfloat16 training" in str(w.message)], record


def test_a_block_slower_by_under_a_millisecond_a_step_is_recorded_without_a_warning(
        monkeypatch):
    told, record = _one_net_trained_with_times(monkeypatch, 0.0002, 0.00024)
    assert told == []
    assert record.slower and record.speedup == pytest.approx(0.2 / 0.24)


def test_a_faster_bfloat16_is_recorded_without_a_warning(monkeypatch):
    told, record = _one_net_trained_with_times(monkeypatch, 1.5, 1.0)
    assert told == []
    assert not record.slower and record.speedup == pytest.approx(1.5)


def test_the_environment_variable_turns_the_check_off(monkeypatch):
    monkeypatch.setenv("MXMIXED_BFLOAT16_SPEED_CHECK", "0")
    timed = []
    monkeypatch.setattr(_speedcheck, "_step_seconds", lambda twin: timed.append(twin) or 1.0)
    before = len(bfloat16_speed())
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        _train(_net(), steps=2)
    assert _new_records(before) == () and timed == []


def test_a_bad_value_of_the_variable_is_one_line_when_amp_starts(monkeypatch):
    monkeypatch.setenv("MXMIXED_BFLOAT16_SPEED_CHECK", "yes")
    with pytest.raises(ValueError, match="^MXMIXED_BFLOAT16_SPEED_CHECK must be 0 or 1"):
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            pass


def _first_step(check, monkeypatch):
    monkeypatch.setenv("MXMIXED_BFLOAT16_SPEED_CHECK", "1" if check else "0")
    mx.random.seed(0)
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net = _net(dropout=0.5)
        _, losses = _train(net)
        params = {name.split("_", 1)[1]: p for name, p in net.collect_params().items()}
        state = {name: (p.data().asnumpy(),
                        None if p.grad_req == "null" else p.grad().asnumpy())
                 for name, p in params.items()}
        _, more = _train(net)
        draw = mx.nd.random.uniform(shape=(8,)).asnumpy()
    return state, losses + more, draw


def test_parameters_gradients_and_random_state_are_those_of_a_run_without_the_check(
        monkeypatch):
    before = len(bfloat16_speed())
    off = _first_step(False, monkeypatch)
    assert _new_records(before) == ()
    on = _first_step(True, monkeypatch)
    (record,) = _new_records(before)
    assert record.skipped is None  # the check ran, on a net with Dropout and BatchNorm
    assert on[0].keys() == off[0].keys()
    for name in off[0]:
        for got, want in zip(on[0][name], off[0][name]):
            assert (got is None and want is None) or np.array_equal(got, want), name
    assert on[1] == off[1]  # the second step's Dropout drew the same mask
    assert np.array_equal(on[2], off[2])


def test_a_failed_measurement_is_one_warning_and_training_goes_on(monkeypatch):
    def broken(twins, block_name):  # a real MXNet error, with its C++ location and traceback
        mx.nd.dot(mx.nd.ones((2, 3)), mx.nd.ones((2, 3))).wait_to_read()
    monkeypatch.setattr(_speedcheck, "_time", broken)
    before = len(bfloat16_speed())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            net = _net()
            _, losses = _train(net, steps=3)
    lines = [str(w.message) for w in caught if "bfloat16 training" in str(w.message)]
    assert lines == ["bfloat16 training speed of block '%s' not measured: the measurement "
                     "failed: L[!Ta].Size() == R[Tb].Size() (3 vs. 2) : dot shape error: [2,3] "
                     "X [2,3]" % net.name]
    assert len(losses) == 3 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    (record,) = _new_records(before)
    assert record.speedup is None and record.skipped.endswith("dot shape error: [2,3] X [2,3]")


def test_a_graph_that_draws_random_numbers_is_not_measured_and_says_why(monkeypatch):
    noise = gluon.nn.HybridLambda(lambda F, x: F.broadcast_add(x, F.random.normal(shape=(1,))))
    monkeypatch.setattr(_speedcheck, "_step_seconds", lambda twin: pytest.fail("timed"))
    before = len(bfloat16_speed())
    with pytest.warns(UserWarning, match="not measured: its graph draws random numbers "
                                         r"\(_random_normal\)"):
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            _train(_net(extra=noise))
    (record,) = _new_records(before)
    assert record.speedup is None


def _ops(symbol):
    return sorted(node["op"] for node in json.loads(symbol.tojson(remove_amp_cast=False))["nodes"])


def test_the_float32_twin_is_the_graph_float32_training_runs():
    float32 = _net(dropout=0.5)
    _train(float32)
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        amp = _net(dropout=0.5)
        _train(amp)
    graph, why = _speedcheck._measured_graph(amp)
    assert why is None and "_copy" in _ops(graph.to_symbol())  # training/_accumulate's copies
    assert _ops(_speedcheck._float32_twin(graph)) == _ops(float32._cached_graph[1])


def test_a_block_trained_after_the_scope_is_not_measured():
    original = gluon.HybridBlock._call_cached_op
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        assert gluon.HybridBlock._call_cached_op is not original
    before = len(bfloat16_speed())
    assert gluon.HybridBlock._call_cached_op is original
    _train(_net())
    assert _new_records(before) == ()


def test_a_check_that_would_not_fit_in_memory_is_skipped_with_a_note(monkeypatch):
    monkeypatch.setattr(_speedcheck, "_available_bytes", lambda: 1000)
    monkeypatch.setattr(_speedcheck, "_step_seconds", lambda twin: pytest.fail("timed"))
    before = len(bfloat16_speed())
    with pytest.warns(UserWarning, match=r"not measured: it would need about \d+ MB of memory "
                                         r"for a few seconds, and 0 MB is available"):
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            _, losses = _train(_net(), steps=2)
    (record,) = _new_records(before)
    assert record.speedup is None and len(losses) == 2


def _train_in_pieces(steps=1):
    """A model hybridized in pieces, as GluonNLP's Transformer: a body, then a head and a loss
    block, each with its own cached graph; the head and the loss get the body's output."""
    body, head = _net(), gluon.nn.Dense(10)
    head.initialize(mx.init.Xavier())
    head.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    loss_fn.hybridize()
    params = body.collect_params()
    params.update(head.collect_params())
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1}, update_on_kvstore=False)
    for _ in range(steps):
        with autograd.record():
            loss = loss_fn(head(body(X)), Y)
        loss.backward()
        trainer.step(X.shape[0])
    return body, head, loss_fn


def test_blocks_that_get_another_blocks_output_are_measured_with_its_gradient():
    before = len(bfloat16_speed())
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        body, head, loss_fn = _train_in_pieces()
    records = {r.block: r for r in _new_records(before)}
    assert set(records) == {body.name, head.name, loss_fn.name}
    assert [r.skipped for r in records.values()] == [None, None, None]


def test_pieces_each_slower_by_under_a_millisecond_warn_once_together(monkeypatch):
    monkeypatch.setattr(_speedcheck, "_step_seconds", _times(0.001, 0.0018))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            body, head, _ = _train_in_pieces(steps=2)
    lines = [str(w.message) for w in caught if "bfloat16 training of block" in str(w.message)]
    assert lines == ["bfloat16 training of blocks '%s', '%s' is slower than float32 on this "
                     "CPU, together with the 2 blocks measured with them: 0.56x "
                     "(forward+backward a step: bfloat16 0.0036 s, float32 0.002 s); train in "
                     "float32 here, or keep the slow ops float32 (fp32_ops=...)"
                     % (body.name, head.name)]


def test_a_block_no_gradient_flows_through_is_timed_forward_only():
    targets = gluon.nn.HybridLambda(lambda F, y: F.one_hot(y, 10) * 0.9 + 0.01)
    targets.hybridize()
    before = len(bfloat16_speed())
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net = _net()
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                update_on_kvstore=False)
        with autograd.record():
            soft = targets(Y)
            loss = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=False)(net(X), soft)
        loss.backward()
        trainer.step(X.shape[0])
    records = {r.block: r for r in _new_records(before)}
    label = records[targets.name]  # AMP casts its arithmetic's inputs to float32
    assert label.skipped is None and not label.backward
    assert "forward only: no gradient flows through it" in str(label)
    assert records[net.name].backward
