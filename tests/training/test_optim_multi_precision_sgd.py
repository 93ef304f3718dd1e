"""Multi-precision SGD (float32 master weights) for ``net.cast('float16')`` networks.

The explicit master-weight helpers are checked bit for bit against MXNet's fused
``mp_sgd_mom_update`` and against a multi-precision Trainer; the 2**-11 rule of NVIDIA's talk
is checked with plain numpy and with MXNet's update ops; and the digits CNN cast to float16
trains with master weights and a static loss scale of 128 to float32 accuracy.
"""
import warnings

import numpy as np
import pytest

import mxnet as mx
from mxnet import autograd, gluon

import mxmixed
from mxmixed import emulation, optim
from mxmixed.tutorial import digits_cnn, digits_loaders, evaluate, fit
from mxmixed.tutorial.master import (grads_to_master, make_master_params, master_to_model,
                                     sgd_momentum_step)

ULP_AT_ONE = 2.0 ** -10          # float16 spacing just above 1.0
TINY = 2.0 ** -12                # a quarter ulp: lost when added to 1.0 in float16


def _bits16(array):
    return array.asnumpy().astype(np.float16).view(np.uint16)


def _bits32(array):
    return array.asnumpy().astype(np.float32).view(np.uint32)


def _float16_params(net):
    return {n: p for n, p in net.collect_params().items() if np.dtype(p.dtype) == np.float16}


def _param(name, values):
    """An initialized float16 Parameter holding ``values``."""
    values = np.asarray(values, dtype=np.float16)
    p = gluon.Parameter(name, shape=values.shape, dtype="float16")
    p.initialize(mx.init.Zero())
    p.set_data(mx.nd.array(values, dtype="float16"))
    return p


def _backward_constant_grad(param, grad_value):
    """Make ``param``'s gradient ``grad_value`` everywhere through autograd (fresh for step)."""
    with autograd.record():
        y = (param.data() * grad_value).sum()
    y.backward()


# ---------------------------------------------------------------- explicit helpers vs fused op
# A power-of-two rescale makes lr * (rescale * g) == (lr * rescale) * g; 1/100 tells them apart.
@pytest.mark.parametrize("rescale, clip_gradient", [(1.0 / 64, None), (1.0 / 100, None),
                                                    (1.0 / 100, 0.5)],
                         ids=["rescale-1/64", "rescale-1/100", "rescale-1/100-clip"])
def test_explicit_helpers_match_fused_mp_sgd_mom_update_bit_for_bit(rescale, clip_gradient):
    rs = np.random.RandomState(42)
    lr, momentum, wd = 0.1, 0.9, 1e-4
    shapes = [(16, 8), (33,), (3, 3, 5)]
    params, fused = [], []
    for k, shape in enumerate(shapes):
        w = rs.randn(*shape).astype(np.float16)
        params.append(_param("p%d" % k, w))
        w16 = mx.nd.array(w, dtype="float16")
        fused.append((w16, w16.astype("float32"), mx.nd.zeros(shape, dtype="float32")))
    master = make_master_params(params)
    clip = {} if clip_gradient is None else {"clip_gradient": clip_gradient}
    for _ in range(20):
        for p, (w16, w32, mom) in zip(params, fused):
            g = mx.nd.array((rs.randn(*p.shape) * 64).astype(np.float16), dtype="float16")
            p.grad()[:] = g
            mx.nd.mp_sgd_mom_update(w16, g, mom, w32, out=w16, lr=lr, momentum=momentum, wd=wd,
                                    rescale_grad=rescale, **clip)
        grads_to_master(params, master)
        sgd_momentum_step(master, lr, momentum, wd, rescale, clip_gradient=clip_gradient)
        master_to_model(master, params)
    for p, (w16, w32, mom) in zip(params, fused):
        assert not np.array_equal(_bits16(w16), _bits16(mx.nd.zeros(p.shape, dtype="float16")))
        np.testing.assert_array_equal(_bits16(p.data()), _bits16(w16))
        np.testing.assert_array_equal(_bits32(master.weights[p.name]), _bits32(w32))
        np.testing.assert_array_equal(_bits32(master.momentum[p.name]), _bits32(mom))


def test_make_master_params_copies_float16_weights_exactly_into_float32():
    p = _param("w", [1.0, -2.5, 65504.0, 2.0 ** -24])
    master = make_master_params([p])
    assert master.names == ["w"] and "w" in master and len(master) == 1
    assert master["w"].dtype == np.float32
    np.testing.assert_array_equal(master["w"].asnumpy(), [1.0, -2.5, 65504.0, 2.0 ** -24])
    np.testing.assert_array_equal(master.momentum["w"].asnumpy(), np.zeros(4, np.float32))


def test_grads_to_master_casts_float16_grads_to_float32():
    p = _param("w", [0.0, 0.0, 0.0])
    p.grad()[:] = mx.nd.array([3.0, 2.0 ** -24, -65504.0], dtype="float16")
    master = make_master_params([p])
    grads_to_master([p], master)
    assert master.grads["w"].dtype == np.float32
    np.testing.assert_array_equal(master.grads["w"].asnumpy(), [3.0, 2.0 ** -24, -65504.0])


def test_master_to_model_rounds_to_nearest_even_float16():
    p = _param("w", [0.0, 0.0, 0.0])
    master = make_master_params([p])
    # 1 + 2**-11 is a tie between 1 and 1 + 2**-10: even wins (1.0); just above the tie rounds up.
    master.weights["w"][:] = mx.nd.array([1 + 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -20,
                                          1 + 3 * 2.0 ** -11])
    master_to_model(master, [p])
    np.testing.assert_array_equal(p.data().asnumpy(), [1.0, 1 + ULP_AT_ONE, 1 + 2 * ULP_AT_ONE])


def test_sgd_momentum_step_applies_lr_mult_and_wd_mult_like_a_trainer():
    p = _param("w", [1.0, 2.0])
    p.lr_mult, p.wd_mult = 0.5, 0.0
    master = make_master_params([p])
    p.grad()[:] = mx.nd.array([1.0, -1.0], dtype="float16")
    grads_to_master([p], master)
    sgd_momentum_step(master, lr=0.25, momentum=0.0, wd=1.0)
    # effective lr 0.125, no weight decay: w - 0.125 * g
    np.testing.assert_array_equal(master["w"].asnumpy(), [0.875, 2.125])


# ---------------------------------------------------------------- the Trainer keeps masters
def _digits_batches(n, seed=0):
    train_loader, _ = digits_loaders(batch_size=64, seed=seed)
    batches = []
    for X, y in train_loader:
        batches.append((X.astype("float16"), y))
        if len(batches) == n:
            return batches
    raise AssertionError("not enough batches")


def test_multi_precision_trainer_keeps_float32_masters_and_matches_explicit_helpers():
    batch, lr, momentum, wd = 64, 0.1, 0.9, 1e-4
    with emulation.emulated():
        net = digits_cnn(seed=0)
        net.cast("float16")
        trainer = optim.multi_precision_trainer(
            net.collect_params(), "sgd", {"learning_rate": lr, "momentum": momentum, "wd": wd})
        p16 = _float16_params(net)
        master = make_master_params(p16)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        for X, y in _digits_batches(3):
            with autograd.record():
                loss = loss_fn(net(X).astype("float32"), y)
            loss.backward()
            grads_to_master(p16, master)
            sgd_momentum_step(master, lr, momentum, wd, rescale_grad=1.0 / batch)
            trainer.step(batch)
            states = trainer._updaters[0].states
            for index, param in enumerate(trainer._params):
                if param.grad_req == "null":     # BatchNorm's running mean and variance
                    assert index not in states
                    continue
                state = states[index]
                if np.dtype(param.dtype) == np.float16:
                    mom, weight32 = state        # SGD's multi-precision state
                    assert weight32.dtype == np.float32 and mom.dtype == np.float32
                    np.testing.assert_array_equal(_bits32(weight32),
                                                  _bits32(master.weights[param.name]))
                    np.testing.assert_array_equal(_bits32(mom),
                                                  _bits32(master.momentum[param.name]))
                    np.testing.assert_array_equal(_bits16(param.data()),
                                                  _bits16(weight32.astype("float16")))
                else:                            # BatchNorm: float32, plain momentum state
                    assert isinstance(state, mx.nd.NDArray) and state.dtype == np.float32
        read = optim.master_weights(trainer)
        assert sorted(read) == sorted(p16)
        for name, weight32 in read.items():
            np.testing.assert_array_equal(_bits32(weight32), _bits32(master.weights[name]))
        # the masters hold bits the float16 weights lack
        assert any((w.astype("float16").astype("float32") != w).sum().asscalar() > 0
                   for w in read.values())


@pytest.mark.parametrize("name", optim.MULTI_PRECISION_OPTIMIZERS)
def test_each_listed_optimizer_accumulates_tiny_updates_in_a_float32_master(name):
    p = _param("w", np.ones((2, 3)))
    trainer = optim.multi_precision_trainer([p], name, {"learning_rate": 1e-4})
    for _ in range(3):
        _backward_constant_grad(p, 1.0)
        trainer.step(1)
    master = optim.master_weights(trainer)["w"]
    assert master.dtype == np.float32 and master.shape == (2, 3)
    np.testing.assert_array_equal(_bits16(p.data()), _bits16(master.astype("float16")))
    assert (master.asnumpy() != p.data().asnumpy().astype(np.float32)).any()


# ---------------------------------------------------------------- cast keeps BatchNorm float32
def test_cast_float16_keeps_batchnorm_params_float32_and_makes_conv_dense_float16():
    net = digits_cnn(seed=0)
    net.cast("float16")
    dtypes = {n[len(net.prefix):]: np.dtype(p.dtype).name
              for n, p in net.collect_params().items()}
    batchnorm = {"features_batchnorm%d_%s" % (k, kind): "float32" for k in (0, 1)
                 for kind in ("gamma", "beta", "running_mean", "running_var")}
    conv_dense = {"features_conv0_weight": "float16", "features_conv1_weight": "float16",
                  "hidden_weight": "float16", "hidden_bias": "float16",
                  "output_weight": "float16", "output_bias": "float16"}
    assert dtypes == dict(batchnorm, **conv_dense)


# ---------------------------------------------------------------- the 2**-11 rule
def test_tiny_update_vanishes_in_float16_but_accumulates_in_float32_numpy():
    one = np.float16(1.0)
    assert one + np.float16(TINY) == one
    assert one + np.float16(2.0 ** -11) == one           # a tie: rounds to even, i.e. 1.0
    assert one + np.float16(ULP_AT_ONE) != one
    w16 = np.float16(1.0)
    w32 = np.float32(1.0)
    for _ in range(8):
        w16 = np.float16(w16 + np.float16(TINY))
        w32 = np.float32(w32 + np.float32(TINY))
    assert w16 == np.float16(1.0)
    assert w32 == np.float32(1 + 2.0 ** -9)
    assert np.float16(w32) == np.float16(1 + 2.0 ** -9)


def test_tiny_update_vanishes_with_float16_sgd_update_and_accumulates_with_mp_sgd_update():
    w16 = mx.nd.ones((4,), dtype="float16")
    wmp = mx.nd.ones((4,), dtype="float16")
    w32 = mx.nd.ones((4,), dtype="float32")
    grad = mx.nd.full((4,), -TINY, dtype="float16")        # with lr 1: an update of +2**-12
    for _ in range(8):
        mx.nd.sgd_update(w16, grad, out=w16, lr=1.0, wd=0.0)
        mx.nd.mp_sgd_update(wmp, grad, w32, out=wmp, lr=1.0, wd=0.0)
    np.testing.assert_array_equal(w16.asnumpy(), np.ones(4))
    np.testing.assert_array_equal(w32.asnumpy(), np.full(4, 1 + 2.0 ** -9))
    np.testing.assert_array_equal(wmp.asnumpy(), np.full(4, 1 + 2.0 ** -9))


def test_tiny_update_vanishes_in_float16_trainer_and_accumulates_in_multi_precision_trainer():
    plain, mixed = _param("plain", np.ones(4)), _param("mixed", np.ones(4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                   # MXNet warns about float16 accumulation
        plain_trainer = gluon.Trainer([plain], "sgd", {"learning_rate": TINY},
                                      update_on_kvstore=False)
        mixed_trainer = optim.multi_precision_trainer([mixed], "sgd", {"learning_rate": TINY})
        moved_after = None
        for k in range(1, 9):
            for p, trainer in ((plain, plain_trainer), (mixed, mixed_trainer)):
                _backward_constant_grad(p, -1.0)
                trainer.step(1)
            if moved_after is None and (mixed.data().asnumpy() != 1).any():
                moved_after = k
    np.testing.assert_array_equal(plain.data().asnumpy(), np.ones(4))
    np.testing.assert_array_equal(mixed.data().asnumpy(), np.full(4, 1 + 2.0 ** -9))
    np.testing.assert_array_equal(optim.master_weights(mixed_trainer)["mixed"].asnumpy(),
                                  np.full(4, 1 + 2.0 ** -9))
    # 2 steps: 1 + 2**-11, a tie that rounds back to 1; the 3rd step crosses half an ulp
    assert moved_after == 3


def test_explicit_helpers_keep_a_tiny_update_that_float16_loses():
    p = _param("w", np.ones(4))
    master = make_master_params([p])
    for _ in range(8):
        p.grad()[:] = mx.nd.full((4,), -1.0, dtype="float16")
        grads_to_master([p], master)
        sgd_momentum_step(master, lr=TINY, momentum=0.0)
        master_to_model(master, [p])
    np.testing.assert_array_equal(p.data().asnumpy(), np.full(4, 1 + 2.0 ** -9))


# ---------------------------------------------------------------- accuracy
SEEDS = (0, 1, 2)
EPOCHS = 6


def _train_cast_float16(seed):
    train_loader, test_loader = digits_loaders(batch_size=64, seed=seed)
    net = digits_cnn(seed=seed)
    net.cast("float16")
    net.hybridize()
    trainer = optim.multi_precision_trainer(net.collect_params(), "sgd",
                                            {"learning_rate": 0.1, "momentum": 0.9})
    mxmixed.init_trainer(trainer, scaler=128)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    skipped = 0
    for _ in range(EPOCHS):
        for X, y in train_loader:
            with autograd.record():
                loss = loss_fn(net(X.astype("float16")).astype("float32"), y)
                with mxmixed.scale_loss(loss, trainer) as scaled:
                    scaled.backward()
            skipped += not mxmixed.step(trainer, X.shape[0])
    return evaluate(net, test_loader, dtype="float16"), skipped


@pytest.mark.slow
def test_cast_float16_with_master_weights_reaches_float32_accuracy():
    fp32, fp16 = [], []
    with emulation.emulated():
        for seed in SEEDS:
            acc, skipped = _train_cast_float16(seed)
            assert skipped == 0
            fp16.append(acc)
    for seed in SEEDS:
        train_loader, test_loader = digits_loaders(batch_size=64, seed=seed)
        net = digits_cnn(seed=seed)
        net.hybridize()
        fp32.append(fit(net, train_loader, test_loader, epochs=EPOCHS, learning_rate=0.1,
                        momentum=0.9, progress=False)["accuracy"])
    print("float32 %s mean %.4f; cast float16 + master weights %s mean %.4f"
          % (fp32, np.mean(fp32), fp16, np.mean(fp16)))
    assert np.mean(fp32) > 0.9
    # Not more than a point below float32. Above it is chance: the seeds alone move one
    # float32 run by 4 points, and CPUs whose float32 kernels differ (AVX2, AVX-512) move the
    # means by 1-2 points either way.
    assert np.mean(fp16) >= np.mean(fp32) - 0.01


# ---------------------------------------------------------------- bad input
def test_trainer_refuses_unknown_optimizer_listing_supported_ones():
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamw'.*'sgd', 'nag'"):
        optim.multi_precision_trainer([_param("w", [1.0])], "adamw")


@pytest.mark.parametrize("name, reason", [("test", "internal test optimizer"),
                                          ("ccSGD", "deprecated alias")])
def test_trainer_refuses_registered_optimizers_it_does_not_list(name, reason):
    with pytest.raises(ValueError, match=reason):
        optim.multi_precision_trainer([_param("w", [1.0])], name)


def test_trainer_refuses_custom_optimizer_without_checked_master_weights():
    class Custom(mx.optimizer.SGD):
        pass

    with pytest.raises(ValueError, match="not one whose float32 master weights"):
        optim.multi_precision_trainer([_param("w", [1.0])], Custom(multi_precision=True))


def test_trainer_refuses_multi_precision_false():
    with pytest.raises(ValueError, match="drop multi_precision=False"):
        optim.multi_precision_trainer([_param("w", [1.0])], "sgd", {"multi_precision": False})


def test_trainer_refuses_optimizer_instance_without_multi_precision():
    with pytest.raises(ValueError, match="multi_precision=False"):
        optim.multi_precision_trainer([_param("w", [1.0])], mx.optimizer.SGD())


def test_trainer_refuses_optimizer_instance_with_optimizer_params():
    with pytest.raises(ValueError, match="optimizer_params must be empty"):
        optim.multi_precision_trainer([_param("w", [1.0])], mx.optimizer.SGD(multi_precision=True),
                                      {"learning_rate": 0.1})


def test_trainer_accepts_optimizer_instance_and_parameterdict():
    net = digits_cnn(seed=0)
    net.cast("float16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # float16 params: no "no float16" warning
        trainer = optim.multi_precision_trainer(
            net.collect_params(), mx.optimizer.NAG(multi_precision=True, momentum=0.9))
    assert trainer._optimizer.multi_precision
    assert trainer._kvstore_params["update_on_kvstore"] is False
    assert len(trainer._params) == len(net.collect_params().keys())


@pytest.mark.parametrize("bad, error", [("sgd", TypeError), ([1, 2], TypeError), ([], ValueError)])
def test_trainer_refuses_bad_params(bad, error):
    with pytest.raises(error, match="params"):
        optim.multi_precision_trainer(bad)


def test_trainer_refuses_bad_optimizer_type_and_params_type():
    with pytest.raises(TypeError, match="optimizer must be a name"):
        optim.multi_precision_trainer([_param("w", [1.0])], 3)
    with pytest.raises(TypeError, match="optimizer_params must be a dict"):
        optim.multi_precision_trainer([_param("w", [1.0])], "sgd", [("learning_rate", 0.1)])


def test_trainer_refuses_async_kvstore():
    with pytest.raises(ValueError, match="updates on the server"):
        optim.multi_precision_trainer([_param("w", [1.0])], kvstore="dist_async")


def test_trainer_warns_when_no_parameter_is_float16():
    p = gluon.Parameter("w32", shape=(2,))
    p.initialize()
    with pytest.warns(UserWarning, match="under AMP the parameters stay float32"):
        optim.multi_precision_trainer([p])


def test_master_weights_refuses_before_first_step_and_without_multi_precision():
    p = _param("w", [1.0])
    with pytest.raises(RuntimeError, match="first trainer.step"):
        optim.master_weights(optim.multi_precision_trainer([p]))
    q = _param("q", [1.0])
    with pytest.raises(ValueError, match="multi_precision=False"):
        optim.master_weights(gluon.Trainer([q], "sgd", update_on_kvstore=False))
    with pytest.raises(TypeError, match="gluon.Trainer"):
        optim.master_weights(mx.optimizer.SGD())


def test_make_master_params_refuses_float32_param_naming_batchnorm():
    net = digits_cnn(seed=0)
    net.cast("float16")
    with pytest.raises(ValueError, match=r"batchnorm.*is float32, not float16.*BatchNorm"):
        make_master_params(net.collect_params())


def test_make_master_params_refuses_uninitialized_params():
    p = gluon.Parameter("w", shape=(2,), dtype="float16")
    with pytest.raises(RuntimeError, match="'w' is not initialized"):
        make_master_params([p])
    deferred = gluon.nn.Dense(4, dtype="float16")
    deferred.initialize()
    with pytest.raises(RuntimeError, match="deferred initialization"):
        make_master_params(deferred.collect_params())


def test_make_master_params_refuses_frozen_and_duplicate_params():
    p = _param("w", [1.0])
    p.grad_req = "null"
    with pytest.raises(ValueError, match="grad_req='null'"):
        make_master_params([p])
    q = _param("q", [1.0])
    with pytest.raises(ValueError, match="more than once: q"):
        make_master_params([q, q])


def test_helpers_refuse_mismatched_names_and_shapes():
    a, b = _param("a", [1.0]), _param("b", [1.0])
    master = make_master_params([a])
    with pytest.raises(ValueError, match="missing from params: a; not in master: b"):
        grads_to_master([b], master)
    with pytest.raises(ValueError, match="not in master: b"):
        master_to_model(master, [a, b])
    other = _param("a", [1.0, 2.0])
    with pytest.raises(ValueError, match="'a' has shape"):
        master_to_model(master, [other])


def test_helpers_refuse_a_param_cast_back_to_float32():
    p = _param("w", [1.0])
    master = make_master_params([p])
    p.cast("float32")
    with pytest.raises(ValueError, match="'w' is float32, not float16"):
        grads_to_master([p], master)


def test_grads_to_master_refuses_a_param_frozen_after_prep():
    p = _param("w", [1.0])
    master = make_master_params([p])
    p.grad_req = "null"
    with pytest.raises(ValueError, match="'w' has grad_req='null' now"):
        grads_to_master([p], master)


def test_helpers_refuse_something_else_than_master_params():
    p = _param("w", [1.0])
    with pytest.raises(TypeError, match="MasterParams"):
        grads_to_master([p], {"w": mx.nd.ones(1)})
    with pytest.raises(TypeError, match="MasterParams"):
        sgd_momentum_step({"w": mx.nd.ones(1)}, 0.1)


def test_sgd_momentum_step_refuses_stale_grads():
    p = _param("w", [1.0])
    master = make_master_params([p])
    with pytest.raises(RuntimeError, match="call grads_to_master"):
        sgd_momentum_step(master, 0.1)
    grads_to_master([p], master)
    sgd_momentum_step(master, 0.1)
    with pytest.raises(RuntimeError, match="call grads_to_master"):
        sgd_momentum_step(master, 0.1)


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": 0.0}, "lr must be >"), ({"lr": float("nan")}, "lr must be a finite"),
    ({"lr": 0.1, "momentum": 1.0}, "momentum must be <"),
    ({"lr": 0.1, "wd": -1e-4}, "wd must be >="),
    ({"lr": 0.1, "rescale_grad": 0}, "rescale_grad must be >"),
    ({"lr": 0.1, "clip_gradient": -1.0}, "clip_gradient must be >"),
    ({"lr": "0.1"}, "lr must be a finite number")])
def test_sgd_momentum_step_refuses_bad_hyperparameters(kwargs, message):
    p = _param("w", [1.0])
    master = make_master_params([p])
    grads_to_master([p], master)
    with pytest.raises(ValueError, match=message):
        sgd_momentum_step(master, **kwargs)
