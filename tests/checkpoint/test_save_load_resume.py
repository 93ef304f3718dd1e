"""``mxmixed.checkpoint``: one-file checkpoints that are atomic, checked, and resume exactly.

The exact-resume test runs AMP (``mxmixed.init``), whose patches cannot be undone, so its
three runs happen in fresh interpreters; run B kills itself with SIGKILL after saving.
"""
import json
import os
import signal
import zipfile

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from conftest import run_python
from mxmixed import checkpoint, emulation
from mxmixed.checkpoint import CheckpointError
from mxmixed.scaler import LossScaler
from mxmixed.training import init_trainer, loss_scaler, scale_loss, step
from mxmixed.tutorial import digits_arrays, digits_cnn

BATCH = 64


@pytest.fixture(scope="module")
def digits():
    X, y, _, _ = digits_arrays()
    return X, y


def _params(net):
    return {name: p.data().asnumpy().copy()
            for name, p in net._collect_params_with_prefix().items()}


def _assert_same_params(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert np.array_equal(a[name], b[name]), name


def _plain_cnn(seed):
    """A small CNN without BatchNorm, so that ``net.cast('float16')`` makes every parameter
    float16 (see test_round_trip_of_cast_digits_cnn_with_batchnorm for the mixed case)."""
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(16, 3, padding=1, in_channels=1, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Dense(64, activation="relu", in_units=256),
            gluon.nn.Dense(10, in_units=64))
    net.initialize(mx.init.Xavier(magnitude=2.0))
    return net


def _float16_setup(seed, scaler=None):
    """A float16 CNN, hybridized, with a multi-precision SGD trainer and a dynamic scaler."""
    net = _plain_cnn(seed)
    net.cast("float16")
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True},
                            update_on_kvstore=False)
    scaler = init_trainer(trainer, scaler or LossScaler(init_scale=2.0 ** 16,
                                                        growth_interval=3))
    return net, trainer, scaler


def _train(net, trainer, X, y, rng, steps, dtype="float16", scaled=True):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        idx = rng.choice(len(y), BATCH, replace=False)
        data = mx.nd.array(X[idx]).astype(dtype)
        label = mx.nd.array(y[idx])
        with autograd.record():
            loss = loss_fn(net(data), label)
            if scaled:
                with scale_loss(loss, trainer) as scaled_loss:
                    autograd.backward(scaled_loss)
            else:
                loss.backward()
        if scaled:
            step(trainer, BATCH)
        else:
            trainer.step(BATCH)


def _updater_states(trainer):
    """{index: [numpy arrays]} of the trainer's optimizer states, nested tuples flattened."""
    def flat(state):
        if state is None:
            return []
        if isinstance(state, (tuple, list)):
            return [a for s in state for a in flat(s)]
        return [state.asnumpy().copy()]
    return {k: flat(v) for k, v in trainer._updaters[0].states.items()}


# ----------------------------------------------------------------------------- round trip
@pytest.mark.slow
def test_round_trip_restores_params_master_weights_counters_and_scaler(tmp_path, digits):
    X, y = digits
    emulation.enable()
    net, trainer, scaler = _float16_setup(seed=0)
    rng = np.random.RandomState(7)
    _train(net, trainer, X, y, rng, steps=8)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer, extra={"rng": rng.get_state(), "step": 8})

    net2, trainer2, scaler2 = _float16_setup(seed=1)
    before = _params(net2)
    assert not all(np.array_equal(before[n], v) for n, v in _params(net).items())
    extra = checkpoint.load(path, net2, trainer2)

    _assert_same_params(_params(net), _params(net2))
    assert {p.data().dtype for p in net2.collect_params().values()} == {np.float16}
    saved_states, loaded_states = _updater_states(trainer), _updater_states(trainer2)
    trainable = [k for k, p in enumerate(trainer._params) if p.grad_req != "null"]
    assert sorted(saved_states) == sorted(loaded_states) == trainable
    masters = 0
    for k in trainable:
        param = trainer._params[k]
        for a, b in zip(saved_states[k], loaded_states[k]):
            assert a.dtype == b.dtype and np.array_equal(a, b), param.name
        if np.dtype(param.dtype) == np.float16:
            # multi_precision: (float32 master weight, float32 momentum)
            assert [a.dtype for a in loaded_states[k]] == [np.float32, np.float32]
            masters += 1
    assert masters == len(trainable) == 6  # the weights and biases of 1 conv + 2 Dense
    applied = scaler.steps - scaler.skipped_steps  # skipped steps do not count
    assert scaler.steps == 8 and 0 < applied < 8
    assert trainer2._optimizer.num_update == trainer._optimizer.num_update == applied
    assert trainer2._optimizer._index_update_count == trainer._optimizer._index_update_count
    assert scaler2.state_dict() == scaler.state_dict()
    assert scaler2 is loss_scaler(trainer2)
    assert extra["step"] == 8
    state = extra["rng"]
    assert state[0] == "MT19937" and np.array_equal(state[1], rng.get_state()[1])

    # and both continue bit for bit alike
    rng2 = np.random.RandomState(0)
    rng2.set_state(extra["rng"])
    _train(net, trainer, X, y, rng, steps=4)
    _train(net2, trainer2, X, y, rng2, steps=4)
    _assert_same_params(_params(net), _params(net2))
    assert scaler2.state_dict() == scaler.state_dict()


def test_round_trip_of_cast_digits_cnn_with_batchnorm(tmp_path, digits):
    """float16 weights with float32 BatchNorm parameters, a multi-precision trainer without
    loss scaling, and a stand-alone LossScaler passed explicitly."""
    X, y = digits
    emulation.enable()

    def setup(seed):
        net = digits_cnn(seed=seed)
        net.cast("float16")
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": 0.05, "momentum": 0.9,
                                 "multi_precision": True})
        return net, trainer

    net, trainer = setup(0)
    _train(net, trainer, X, y, np.random.RandomState(3), steps=3, scaled=False)
    scaler = LossScaler(init_scale=1024.0, growth_interval=2)
    for overflow in (False, True, False):
        scaler.update(overflow)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer, scaler=scaler)

    net2, trainer2 = setup(1)
    scaler2 = LossScaler()
    assert checkpoint.load(path, net2, trainer2, scaler=scaler2) is None
    params = _params(net2)
    _assert_same_params(_params(net), params)
    assert params["features.0.weight"].dtype == np.float16
    assert params["features.1.gamma"].dtype == np.float32
    assert params["features.1.running_var"].dtype == np.float32
    saved, loaded = _updater_states(trainer), _updater_states(trainer2)
    assert sorted(saved) == sorted(loaded) and saved
    for k in saved:
        dtypes = [a.dtype for a in loaded[k]]
        if np.dtype(trainer._params[k].dtype) == np.float16:
            assert dtypes == [np.float32, np.float32]  # master weight and momentum
        else:
            assert dtypes == [np.float32]  # momentum only
        for a, b in zip(saved[k], loaded[k]):
            assert np.array_equal(a, b)
    assert scaler2.state_dict() == scaler.state_dict()
    assert scaler2.loss_scale == 512.0 and scaler2.skipped_steps == 1


def test_net_only_load_of_a_full_checkpoint_returns_extra_quietly(tmp_path, recwarn):
    emulation.enable()
    net, trainer, _ = _float16_setup(seed=0)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer, extra={"step": 3})
    fresh = _plain_cnn(seed=1)
    fresh.cast("float16")
    assert checkpoint.load(path, fresh) == {"step": 3}
    _assert_same_params(_params(net), _params(fresh))
    assert not [w for w in recwarn if "checkpoint" in str(w.message)]


def test_save_into_a_missing_folder_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="the folder '.*nowhere' does not exist"):
        checkpoint.save(tmp_path / "nowhere" / "ckpt.mxc", digits_cnn(seed=0))


def test_checkpoint_holds_named_members_and_params_loadable_by_load_parameters(tmp_path):
    net = digits_cnn(seed=0)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net)
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist() == ["manifest.json", "params.nd"]
        archive.extract("params.nd", tmp_path)
    manifest = checkpoint.read_manifest(path)
    assert manifest["format_version"] == checkpoint.FORMAT_VERSION
    names = [row["name"] for row in manifest["params"]]
    assert names == list(net._collect_params_with_prefix())
    assert "features.1.running_mean" in names and "hidden.weight" in names
    other = digits_cnn(seed=1)
    other.load_parameters(str(tmp_path / "params.nd"))
    _assert_same_params(_params(net), _params(other))


def test_load_restores_batchnorm_running_stats(tmp_path, digits):
    X, y = digits
    net = digits_cnn(seed=0)
    with autograd.record():
        out = net(mx.nd.array(X[:BATCH]))
    out.backward()  # MXNet updates BatchNorm's running statistics in the backward pass
    mean = net.features[1].running_mean.data().asnumpy()
    assert not np.array_equal(mean, np.zeros_like(mean))
    checkpoint.save(tmp_path / "ckpt.mxc", net)
    other = digits_cnn(seed=0)
    checkpoint.load(tmp_path / "ckpt.mxc", other)
    assert np.array_equal(other.features[1].running_mean.data().asnumpy(), mean)
    assert np.array_equal(other.features[4].running_var.data().asnumpy(),
                          net.features[4].running_var.data().asnumpy())


# ----------------------------------------------------------------------------- atomicity
def test_failure_mid_write_keeps_previous_checkpoint_and_leaves_no_temp_file(
        tmp_path, digits, monkeypatch):
    X, y = digits
    emulation.enable()
    net, trainer, _ = _float16_setup(seed=0)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer, extra={"step": 0})
    saved = _params(net)
    original_bytes = path.read_bytes()
    _train(net, trainer, X, y, np.random.RandomState(0), steps=2)

    real_writestr = zipfile.ZipFile.writestr
    calls = []

    def failing_writestr(self, name, data, *args, **kwargs):
        calls.append(name)
        if len(calls) == 3:  # after the manifest and the parameters, in the trainer states
            raise OSError(28, "No space left on device")
        return real_writestr(self, name, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", failing_writestr)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(path, net, trainer, extra={"step": 2})
    monkeypatch.undo()

    assert calls == ["manifest.json", "params.nd", "trainer.json"]
    assert sorted(os.listdir(tmp_path)) == ["ckpt.mxc"]
    assert path.read_bytes() == original_bytes
    fresh, fresh_trainer, _ = _float16_setup(seed=3)
    assert checkpoint.load(path, fresh, fresh_trainer) == {"step": 0}
    _assert_same_params(saved, _params(fresh))


def test_extra_that_is_not_plain_data_fails_before_touching_the_file(tmp_path):
    net = digits_cnn(seed=0)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, extra=1)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"extra\['f'\]\[1\] is a builtins.function; a "
                                         r"checkpoint stores, without pickle, only None"):
        checkpoint.save(path, net, extra={"f": [1, lambda: None]})
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt.mxc"]


KILLED_SAVE_SCRIPT = """
import os, signal, sys
import numpy as np
from mxmixed import checkpoint
from mxmixed.tutorial import digits_cnn

path = sys.argv[1]
net = digits_cnn(seed=0)
checkpoint.save(path, net, extra="first")
np.save(path + ".first.npy", net.hidden.weight.data().asnumpy())
net.hidden.weight.set_data(net.hidden.weight.data() + 1)

def killed_fsync(fd):
    # the archive is fully written to the temporary file, but not yet renamed
    os.kill(os.getpid(), signal.SIGKILL)

os.fsync = killed_fsync
checkpoint.save(path, net, extra="second")
print("NOT KILLED")
"""


@pytest.mark.slow
def test_process_killed_during_save_leaves_previous_checkpoint_loadable(tmp_path):
    path = tmp_path / "ckpt.mxc"
    proc = run_python("import sys; sys.argv[1:] = [%r]\n" % str(path) + KILLED_SAVE_SCRIPT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert "NOT KILLED" not in proc.stdout
    leftovers = [n for n in os.listdir(tmp_path) if n not in ("ckpt.mxc", "ckpt.mxc.first.npy")]
    # SIGKILL allows no clean-up: at most the (documented) hidden temporary file is left
    assert all(n.startswith(".ckpt.mxc.") and n.endswith(".tmp") for n in leftovers), leftovers
    net = digits_cnn(seed=5)
    assert checkpoint.load(path, net) == "first"
    assert np.array_equal(net.hidden.weight.data().asnumpy(),
                          np.load(str(path) + ".first.npy"))


# ----------------------------------------------------------------------------- mismatches
@pytest.mark.parametrize("other, first_name, expected, found", [
    (lambda: digits_cnn(seed=1, hidden=32), "hidden.weight", "(32, 512) float32",
     "(64, 512) float32"),
    (lambda: digits_cnn(seed=1, channels=(8, 32)), "features.0.weight", "(8, 1, 3, 3) float32",
     "(16, 1, 3, 3) float32"),
], ids=["other-layer-size", "other-channels"])
def test_checkpoint_from_other_net_names_first_mismatching_parameter_and_changes_nothing(
        tmp_path, other, first_name, expected, found):
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, digits_cnn(seed=0))
    target = other()
    before = _params(target)
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(path, target)
    message = str(err.value)
    assert "parameter '%s'" % first_name in message
    assert "net expects %s, the checkpoint holds %s" % (expected, found) in message
    assert "Nothing was loaded" in message
    _assert_same_params(before, _params(target))


def test_checkpoint_from_other_architecture_names_missing_and_extra_parameters(tmp_path):
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, digits_cnn(seed=0))
    mlp = gluon.nn.HybridSequential()
    mlp.add(gluon.nn.Dense(32, in_units=64), gluon.nn.Dense(10, in_units=32))
    mlp.initialize()
    before = _params(mlp)
    with pytest.raises(CheckpointError,
                       match=r"parameter '0\.weight' of the net is missing from the checkpoint"
                             r" \(and \d+ more mismatches\)"):
        checkpoint.load(path, mlp)
    _assert_same_params(before, _params(mlp))

    # a net that is a strict subset: the checkpoint's extra parameters are named
    subset = gluon.nn.HybridSequential()
    with subset.name_scope():
        subset.hidden = gluon.nn.Dense(64, in_units=512)
    subset.initialize()
    with pytest.raises(CheckpointError, match="the checkpoint holds parameter "
                                              "'features.0.weight', which the net lacks"):
        checkpoint.load(path, subset)


def test_float16_checkpoint_into_float32_net_names_the_dtype(tmp_path):
    path = tmp_path / "ckpt.mxc"
    net = digits_cnn(seed=0)
    net.cast("float16")
    checkpoint.save(path, net)
    target = digits_cnn(seed=1)
    before = _params(target)
    with pytest.raises(CheckpointError, match=r"parameter 'features\.0\.weight': the net expects "
                                              r"\(16, 1, 3, 3\) float32, the checkpoint holds "
                                              r"\(16, 1, 3, 3\) float16"):
        checkpoint.load(path, target)
    _assert_same_params(before, _params(target))


def test_trainer_with_other_optimizer_is_refused_before_the_net_changes(tmp_path):
    net = digits_cnn(seed=0)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer)
    target = digits_cnn(seed=1)
    adam = gluon.Trainer(target.collect_params(), "adam")
    before = _params(target)
    with pytest.raises(CheckpointError, match="optimizer SGD, this trainer uses Adam"):
        checkpoint.load(path, target, adam)
    _assert_same_params(before, _params(target))
    checkpoint.save(path, net)  # without a trainer
    with pytest.raises(CheckpointError, match="holds no trainer states"):
        checkpoint.load(path, target, adam)
    _assert_same_params(before, _params(target))


# ----------------------------------------------------------------------------- bad files
def _saved(tmp_path):
    emulation.enable()
    net, trainer, _ = _float16_setup(seed=0)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net, trainer, extra={"step": 1})
    return path


def test_truncated_checkpoint_fails_clearly_and_changes_nothing(tmp_path):
    path = _saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    net, trainer, scaler = _float16_setup(seed=1)
    before, scaler_before = _params(net), scaler.state_dict()
    with pytest.raises(CheckpointError, match="is truncated or corrupt") as err:
        checkpoint.load(path, net, trainer)
    assert str(path) in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    _assert_same_params(before, _params(net))
    assert scaler.state_dict() == scaler_before
    assert trainer._updaters == [] or not trainer._updaters[0].states


def test_corrupted_byte_is_caught_by_the_crc(tmp_path):
    path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("params.nd")
    # a byte inside the stored parameters (past the member's local header)
    position = info.header_offset + 30 + len(info.filename) + info.file_size // 2
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))
    net, trainer, _ = _float16_setup(seed=1)
    before = _params(net)
    with pytest.raises(CheckpointError, match="truncated or corrupt.*Bad CRC-32"):
        checkpoint.load(path, net, trainer)
    _assert_same_params(before, _params(net))


def test_missing_empty_and_foreign_files_fail_clearly(tmp_path):
    net = digits_cnn(seed=0)
    with pytest.raises(FileNotFoundError, match="no checkpoint at '.*nowhere.mxc'"):
        checkpoint.load(tmp_path / "nowhere.mxc", net)
    (tmp_path / "empty.mxc").write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated or corrupt \\(the file is empty\\)"):
        checkpoint.load(tmp_path / "empty.mxc", net)
    net.save_parameters(str(tmp_path / "net.params"))
    with pytest.raises(CheckpointError, match="not an mxmixed checkpoint.*load_parameters"):
        checkpoint.load(tmp_path / "net.params", net)


def test_checkpoint_from_a_newer_format_is_refused(tmp_path):
    net = digits_cnn(seed=0)
    path = tmp_path / "ckpt.mxc"
    checkpoint.save(path, net)
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    manifest = json.loads(members["manifest.json"])
    manifest["format_version"] = checkpoint.FORMAT_VERSION + 1
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(CheckpointError, match="format version %d.*upgrade mxmixed"
                       % (checkpoint.FORMAT_VERSION + 1)):
        checkpoint.load(path, net)


# ----------------------------------------------------------------------------- exact resume
RESUME_SCRIPT = r"""
import json, os, signal, sys
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
import mxmixed
from mxmixed import checkpoint
from mxmixed.tutorial import digits_arrays, digits_cnn

mode, workdir = sys.argv[1], sys.argv[2]
TOTAL, SAVE_AT = 40, 20
mxmixed.init()                      # AMP, with CPU float16 emulation (no GPU here)
assert mxmixed.emulation_active()
X, y, _, _ = digits_arrays()
net = digits_cnn(seed=0)
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                        update_on_kvstore=False)
scaler = mxmixed.init_trainer(trainer, mxmixed.LossScaler(init_scale=2.0 ** 16,
                                                          growth_interval=5))
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
rng = np.random.RandomState(1234)
path = os.path.join(workdir, "ckpt.mxc")
dtypes = set()


def train_step():
    idx = rng.choice(len(y), 64, replace=False)
    data, label = mx.nd.array(X[idx]), mx.nd.array(y[idx])
    with autograd.record():
        out = net(data)
        loss = loss_fn(out, label)
        with mxmixed.scale_loss(loss, trainer) as scaled:
            autograd.backward(scaled)
    dtypes.add(np.dtype(out.dtype).name)
    mxmixed.step(trainer, 64)


start = 0
if mode == "C":
    extra = checkpoint.load(path, net, trainer)
    rng.set_state(extra["rng"])
    start = extra["step"]
    from mxnet.contrib import amp
    # MXNet's loss-output ops read AMP's global scaler: it must follow the restored scale
    assert amp.amp._loss_scaler.loss_scale == scaler.loss_scale != 2.0 ** 16
for k in range(start, TOTAL):
    train_step()
    if mode == "B" and k + 1 == SAVE_AT:
        checkpoint.save(path, net, trainer, extra={"rng": rng.get_state(), "step": k + 1})
    if mode == "B" and k + 1 == SAVE_AT + 3:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
net.save_parameters(os.path.join(workdir, "final-%s.params" % mode))
with open(os.path.join(workdir, "final-%s.json" % mode), "w") as f:
    json.dump({"scale": scaler.loss_scale, "skipped": scaler.skipped_steps,
               "steps": scaler.steps, "history": scaler.history,
               "out_dtypes": sorted(dtypes)}, f)
"""


def _run(mode, workdir):
    code = "import sys; sys.argv[1:] = [%r, %r]\n" % (mode, str(workdir)) + RESUME_SCRIPT
    return run_python(code)


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical_under_amp_emulation_and_dynamic_scaling(
        tmp_path):
    run_a = _run("A", tmp_path)
    assert run_a.returncode == 0, run_a.stderr[-3000:]
    run_b = _run("B", tmp_path)
    assert run_b.returncode == -signal.SIGKILL, (run_b.returncode, run_b.stderr[-3000:])
    assert not (tmp_path / "final-B.json").exists()
    assert (tmp_path / "ckpt.mxc").exists()
    run_c = _run("C", tmp_path)
    assert run_c.returncode == 0, run_c.stderr[-3000:]

    a = json.loads((tmp_path / "final-A.json").read_text())
    c = json.loads((tmp_path / "final-C.json").read_text())
    assert a["out_dtypes"] == c["out_dtypes"] == ["float16"]  # AMP really ran in float16
    # the dynamic scale both backed off and grew, before and after the checkpoint
    scales = [h[1] for h in a["history"]] + [a["scale"]]
    changes = [b / s for s, b in zip(scales, scales[1:]) if b != s]
    assert 0.5 in changes and 2.0 in changes, scales
    assert a["skipped"] > 0
    assert len(set(scales[:21])) > 1 and len(set(scales[20:])) > 1, scales
    assert (a["scale"], a["skipped"], a["steps"]) == (c["scale"], c["skipped"], c["steps"])
    assert a["history"] == c["history"]

    final_a = mx.nd.load(str(tmp_path / "final-A.params"))
    final_c = mx.nd.load(str(tmp_path / "final-C.params"))
    assert sorted(final_a) == sorted(final_c)
    assert "features.1.running_mean" in final_a
    for name in final_a:
        assert np.array_equal(final_a[name].asnumpy(), final_c[name].asnumpy()), name
    start = digits_cnn(seed=0)  # the run really trained
    assert not np.array_equal(final_a["hidden.weight"].asnumpy(),
                              start.hidden.weight.data().asnumpy())
