"""init_trainer refuses to silently reset a scaler, and warns about a float16 trainer that would
lose small updates or an AMP run that would fail on a CPU without the emulation."""
import warnings

import mxnet as mx
import pytest
from mxnet import gluon
from mxnet.contrib import amp

import mxmixed
from conftest import run_python
from mxmixed.scaler import LossScaler


def _float16_trainer(multi_precision=True):
    net = gluon.nn.Dense(2, in_units=3)
    net.initialize()
    net.cast("float16")
    return gluon.Trainer(net.collect_params(), "sgd",
                         {"learning_rate": 0.1, "multi_precision": multi_precision})


def test_a_second_init_trainer_is_refused_with_the_way_to_replace_on_purpose():
    trainer = _float16_trainer()
    first = mxmixed.init_trainer(trainer, LossScaler(init_scale=512))
    first.update(True)
    with pytest.raises(ValueError, match=r"already called.*load_state_dict.*replace=True"):
        mxmixed.init_trainer(trainer)
    assert mxmixed.loss_scaler(trainer) is first and first.loss_scale == 256
    second = mxmixed.init_trainer(trainer, 64, replace=True)
    assert mxmixed.loss_scaler(trainer) is second and second.loss_scale == 64
    # the replaced scaler is free again
    assert mxmixed.init_trainer(_float16_trainer(), first) is first


def test_mxnets_own_scaler_is_not_replaced_silently():
    with mxmixed.amp_scope():
        net = gluon.nn.Dense(2, in_units=3)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd", update_on_kvstore=False)
        amp.init_trainer(trainer)
        with pytest.raises(ValueError, match=r"amp.init_trainer.*replace=True"):
            mxmixed.init_trainer(trainer)
        scaler = mxmixed.init_trainer(trainer, replace=True)
        assert mxmixed.loss_scaler(trainer) is scaler


def test_float16_params_without_multi_precision_warn_naming_the_fix():
    with pytest.warns(UserWarning, match=r"float16.*multi_precision': True.*"
                                         r"mxmixed.multi_precision_trainer"):
        mxmixed.init_trainer(_float16_trainer(multi_precision=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mxmixed.init_trainer(_float16_trainer(multi_precision=True))
        mxmixed.init_trainer(mxmixed.multi_precision_trainer(
            _float16_trainer()._params, "sgd", {"learning_rate": 0.1}))


AMP_WITHOUT_EMULATION = """
import warnings, mxnet as mx, mxmixed
from mxnet import autograd, gluon
from mxnet.contrib import amp
amp.init()
net = gluon.nn.Dense(2, in_units=3)
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "sgd", update_on_kvstore=False)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    mxmixed.init_trainer(trainer)
print("WARNED=" + " | ".join(str(w.message) for w in caught))
with autograd.record():
    loss = net(mx.nd.ones((4, 3))).astype("float32").sum()
    with mxmixed.scale_loss(loss, trainer) as scaled:
        scaled.backward()
try:
    mxmixed.step(trainer, 4)
    print("STEP=ran")
except RuntimeError as err:
    print("STEP=" + str(err))
"""


@pytest.mark.slow
def test_amp_without_emulation_on_cpu_names_the_emulation_in_the_warning_and_the_error():
    if mx.context.num_gpus():
        pytest.skip("a GPU runs float16 GEMMs natively")
    proc = run_python(AMP_WITHOUT_EMULATION)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = proc.stdout.split("WARNED=", 1)[1].splitlines()[0]
    step = proc.stdout.split("STEP=", 1)[1].splitlines()[0]
    assert "mxmixed.emulation.enable()" in warned
    assert "no float16 kernel" in step and "mxmixed.emulation.enable()" in step


AMP_INIT_FIRST = """
import mxnet as mx, numpy as np, mxmixed
from mxnet import autograd, gluon
from mxnet.contrib import amp
amp.init(%(direct)s)
try:
    mxmixed.init()
    print("INIT=accepted")
except RuntimeError as err:
    print("INIT=" + str(err).replace("\\n", " "))
    raise SystemExit(0)
print("EMULATED=%%s" %% mxmixed.emulation_active())
net = gluon.nn.Dense(2, in_units=3)
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "sgd", update_on_kvstore=False)
scaler = mxmixed.init_trainer(trainer, mxmixed.LossScaler(init_scale=128))
with autograd.record():
    out = net(mx.nd.ones((4, 3)))
    loss = out.astype("float32").sum()
    with mxmixed.scale_loss(loss, trainer) as scaled:
        scaled.backward()
print("DTYPE=%%s" %% np.dtype(out.dtype).name)
print("APPLIED=%%s" %% mxmixed.step(trainer, 4))
mxmixed.init()
print("AGAIN=ok")
"""


@pytest.mark.slow
def test_amp_init_then_mxmixed_init_is_accepted_and_adds_the_emulation():
    proc = run_python(AMP_INIT_FIRST % {"direct": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "INIT=accepted" in out and "AGAIN=ok" in out
    assert "DTYPE=float16" in out and "APPLIED=True" in out
    if not mx.context.num_gpus():
        assert "EMULATED=True" in out


@pytest.mark.slow
def test_amp_init_with_another_target_is_refused_naming_the_emulation():
    proc = run_python(AMP_INIT_FIRST % {"direct": "target_dtype='bfloat16'"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    message = proc.stdout.split("INIT=", 1)[1]
    assert message.startswith("AMP is already initialized by amp.init(target_dtype='bfloat16')")
    assert "mxmixed.emulation.enable()" in message


def test_a_replacing_scaler_also_leads_amps_loss_output_ops():
    with mxmixed.amp_scope():
        net = gluon.nn.Dense(2, in_units=3)
        net.initialize()
        trainer = gluon.Trainer(net.collect_params(), "sgd")
        mxmixed.init_trainer(trainer, LossScaler(init_scale=512))
        assert amp.amp._loss_scaler.loss_scale == 512
        mxmixed.init_trainer(trainer, LossScaler(init_scale=64), replace=True)
        assert amp.amp._loss_scaler.loss_scale == 64
