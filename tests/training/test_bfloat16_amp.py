"""bfloat16 AMP training through the helpers: init_trainer without loss scaling by default
(bfloat16 has float32's exponent range), static or dynamic on request, scale_loss, step and
checkpoints; accuracy on the digits against float32 over 3 seeds."""
import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from mxmixed import checkpoint
from mxmixed._core.devices import bfloat16_support
from mxmixed.tutorial import digits_cnn, digits_loaders, train_precision

RUNS, WHY = bfloat16_support()
pytestmark = pytest.mark.skipif(not RUNS, reason="bfloat16 cannot run here: %s" % WHY)


def _steps(net, trainer, loader, count):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    dtypes, losses = set(), []
    for k, (X, y) in enumerate(loader):
        if k == count:
            break
        with autograd.record():
            out = net(X)
            loss = loss_fn(out, y)
            with mxmixed.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        mxmixed.step(trainer, X.shape[0])
        dtypes.add(out.dtype)
        losses.append(float(loss.mean().asscalar()))
    return dtypes, losses


def test_bfloat16_scope_trains_without_loss_scaling_by_default():
    train_loader, _ = digits_loaders(batch_size=64, seed=0)
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net = digits_cnn(seed=0)
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": 0.1, "momentum": 0.9})
        scaler = mxmixed.init_trainer(trainer)
        assert not scaler.dynamic and scaler.loss_scale == 1.0
        dtypes, losses = _steps(net, trainer, train_loader, 10)
    bf16 = np.dtype([("bfloat16", np.uint16)])
    assert dtypes == {bf16}  # the logits come out of a bfloat16 FullyConnected
    assert losses[-1] < losses[0] and scaler.skipped_steps == 0
    assert all(np.dtype(p.dtype) == np.float32 for p in net.collect_params().values())


def test_float16_keeps_dynamic_scaling_as_the_default():
    with mxmixed.amp_scope():
        net = digits_cnn(seed=0)
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        assert mxmixed.init_trainer(trainer).dynamic


@pytest.mark.parametrize("asked, dynamic, scale", [(128, False, 128.0),
                                                   ("dynamic", True, 2.0 ** 16)])
def test_bfloat16_still_takes_a_static_or_dynamic_scale_on_request(asked, dynamic, scale):
    train_loader, _ = digits_loaders(batch_size=64, seed=0)
    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net = digits_cnn(seed=0)
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        scaler = mxmixed.init_trainer(trainer, asked)
        assert scaler.dynamic == dynamic and scaler.loss_scale == scale
        _, losses = _steps(net, trainer, train_loader, 3)
    assert np.isfinite(losses).all()


@pytest.mark.slow
def test_bfloat16_checkpoint_resumes_to_the_same_weights(tmp_path):
    # two runs of 6 steps, one of them stopped after 3, saved, restored into a new net
    def run(split):
        train_loader, _ = digits_loaders(batch_size=64, seed=0)
        batches = [b for _, b in zip(range(6), train_loader)]
        with mxmixed.amp_scope(target_dtype="bfloat16"):
            net = digits_cnn(seed=0)
            trainer = gluon.Trainer(net.collect_params(), "sgd",
                                    {"learning_rate": 0.1, "momentum": 0.9})
            mxmixed.init_trainer(trainer)
            for k, batch in enumerate(batches):
                if split and k == 3:
                    path = str(tmp_path / "ck.mxmixed")
                    checkpoint.save(path, net, trainer)
                    net = digits_cnn(seed=5)
                    trainer = gluon.Trainer(net.collect_params(), "sgd",
                                            {"learning_rate": 0.1, "momentum": 0.9})
                    mxmixed.init_trainer(trainer)
                    checkpoint.load(path, net, trainer)
                _steps(net, trainer, [batch], 1)
            return {k: v.data().asnumpy() for k, v in net._collect_params_with_prefix().items()}
    whole, resumed = run(False), run(True)
    for name, value in whole.items():
        np.testing.assert_array_equal(value, resumed[name])


@pytest.mark.slow
def test_bfloat16_digits_accuracy_within_the_spread_of_float32_over_3_seeds():
    f32, bf16 = [], []
    for seed in (0, 1, 2):
        mx.random.seed(seed)
        loaders = digits_loaders(batch_size=64, seed=seed)
        f32.append(train_precision("float32", lambda: digits_cnn(seed=seed), loaders,
                                   epochs=4, progress=False)["accuracy"])
        mx.random.seed(seed)
        run = train_precision("bfloat16", lambda: digits_cnn(seed=seed), loaders, epochs=4,
                              progress=False)
        assert run["scales"][0] == 1.0 and run["skipped"] == 0
        bf16.append(run["accuracy"])
    assert np.mean(f32) > 0.9
    spread = max(f32) - min(f32)
    assert abs(np.mean(bf16) - np.mean(f32)) <= max(spread, 0.01), (f32, bf16)
