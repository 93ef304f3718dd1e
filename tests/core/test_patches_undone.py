"""Every patch mxmixed makes of MXNet is recorded by one registry and undone by it:
``amp_scope`` undoes the AMP helpers' patches on exit, ``emulation.disable`` the emulation's."""
import types

import mxnet as mx
import mxnet.ndarray.numpy._internal as nd_npi
import mxnet.ndarray.numpy_extension as nd_npx
import mxnet.numpy_extension as npx
import pytest
from mxnet.contrib.amp.loss_scaler import LossScaler as MXNetLossScaler

from conftest import run_python
from mxmixed import emulation
from mxmixed._core.patches import Patches
from mxmixed._core.state import EMULATION
from mxmixed.emulation._wrappers import AMP_MODULE


def _emulation_owners():
    """Everything the emulation may patch, as (owner, label)."""
    return [(mx.nd, "mx.nd"), (mx.nd.op, "mx.nd.op"), (mx.nd.contrib, "mx.nd.contrib"),
            (mx.nd.sparse, "mx.nd.sparse"), (mx.sym.Symbol, "Symbol"),
            (MXNetLossScaler, "LossScaler"), (AMP_MODULE, "mxnet.contrib.amp.amp"),
            (npx, "npx"), (npx._op, "npx._op"), (nd_npx, "mx.nd.npx"), (nd_npx._op, "mx.nd.npx._op"),
            (nd_npi, "mx.nd.npi")]


def _identities(owners):
    return {(label, name): value for owner, label in owners for name, value in vars(owner).items()}


def test_emulation_disable_gives_back_every_patched_object():
    owners = _emulation_owners()
    before = _identities(owners)
    emulation.enable()
    during = _identities(owners)
    changed = {key for key in before if during.get(key) is not before[key]}
    # the patches it is known to make, so that this test cannot pass by patching nothing
    assert {("mx.nd", "FullyConnected"), ("mx.nd.op", "Convolution"), ("mx.nd", "CachedOp"),
            ("Symbol", "bind"), ("Symbol", "simple_bind"), ("LossScaler", "has_overflow"),
            ("mxnet.contrib.amp.amp", "_cast_symbol_NDArray"), ("mx.nd.contrib", "ROIAlign"),
            ("mx.nd.sparse", "dot"), ("npx", "batch_dot"), ("mx.nd.npx._op", "fully_connected")} <= changed
    assert len(EMULATION.patches.applied()) == len(changed)  # each one through the registry
    emulation.disable()
    after = _identities(owners)
    assert set(after) == set(before)
    assert [key for key in before if after[key] is not before[key]] == []
    assert EMULATION.patches.applied() == []


def test_emulation_enabled_twice_is_undone_by_one_disable():
    real, real_cached_op = mx.nd.FullyConnected, mx.ndarray.CachedOp
    emulation.enable()
    emulation.enable("on")
    emulation.disable()
    assert mx.nd.FullyConnected is real and mx.ndarray.CachedOp is real_cached_op


AMP_SCOPE_SCRIPT = """
import mxnet as mx
from mxnet import gluon
from mxnet.contrib import amp
from mxnet.contrib.amp.loss_scaler import LossScaler as MXNetLossScaler
import mxmixed
from mxmixed.training._handle import FollowingScaler

own, own_module = amp.scale_loss, amp.amp.scale_loss
assert own is own_module and own.__module__ == "mxnet.contrib.amp.amp"
with mxmixed.amp_scope():
    net = gluon.nn.Dense(2, in_units=4)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", update_on_kvstore=False)
    mxmixed.init_trainer(trainer)
    glob = amp.amp._loss_scaler
    assert amp.scale_loss is not own and amp.amp.scale_loss is not own
    assert type(glob) is FollowingScaler
assert amp.scale_loss is own and amp.amp.scale_loss is own
assert type(glob) is MXNetLossScaler
assert not mxmixed.amp_initialized()
print("ok")
"""


@pytest.mark.slow
def test_amp_scope_exit_gives_back_mxnets_scale_loss_and_scaler_class():
    proc = run_python(AMP_SCOPE_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


INIT_SCRIPT = """
from mxnet import gluon
from mxnet.contrib import amp
import mxmixed
from mxmixed.training._handle import FollowingScaler, handle_scale_loss

mxmixed.init()
net = gluon.nn.Dense(2, in_units=4)
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "sgd", update_on_kvstore=False)
mxmixed.init_trainer(trainer)
mxmixed.emulation.disable()
# without a scope the AMP helpers' patches stay, as amp.init's own do
assert amp.scale_loss is handle_scale_loss and type(amp.amp._loss_scaler) is FollowingScaler
print("ok")
"""


@pytest.mark.slow
def test_after_a_process_wide_init_the_amp_patches_stay_and_disable_leaves_them():
    proc = run_python(INIT_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


WRAPPED_SINCE_SCRIPT = """
import mxnet as mx
from mxnet.contrib import amp
from mxmixed import emulation

real = mx.nd.FullyConnected
emulation.enable()
emulated = mx.nd.FullyConnected
amp.init()
wrapper = mx.nd.FullyConnected
assert wrapper is not emulated
emulation.disable()
assert mx.nd.FullyConnected is wrapper  # AMP's wrapper stays ...
cells = [c.cell_contents for c in wrapper.__closure__]
assert real in cells and emulated not in cells  # ... with MXNet's function beneath it
print("ok")
"""


@pytest.mark.slow
def test_disable_takes_the_emulation_from_beneath_amps_later_wrapper():
    proc = run_python(WRAPPED_SINCE_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_undo_puts_back_module_class_and_instance_attributes():
    class Scaler:
        def has_overflow(self):
            return "class"

    class Other(Scaler):
        pass

    module = types.SimpleNamespace(f=len)
    scaler = Scaler()
    patches = Patches("test")
    patches.patch(module, "f", abs)
    patches.patch(scaler, "has_overflow", lambda: "instance")
    patches.patch(scaler, "__class__", Other)
    assert (module.f, scaler.has_overflow(), type(scaler)) == (abs, "instance", Other)
    patches.undo()
    assert module.f is len and type(scaler) is Scaler
    assert "has_overflow" not in vars(scaler) and scaler.has_overflow() == "class"


def test_undo_since_a_mark_keeps_the_earlier_patches():
    module = types.SimpleNamespace(f=len, g=len)
    patches = Patches("test")
    patches.patch(module, "f", abs)
    with patches.applied_inside():
        patches.patch(module, "g", abs)
        patches.patch(module, "f", abs)  # already in place: nothing new to undo
    assert module.f is abs and module.g is len
    patches.undo()
    assert module.f is len


def test_a_patch_replaced_outright_since_is_left_to_whoever_replaced_it():
    module = types.SimpleNamespace(f=len)
    patches = Patches("test")
    patches.patch(module, "f", abs)
    module.f = min
    patches.undo()
    assert module.f is min and patches.applied() == []


@pytest.mark.parametrize("owner", [mx.nd, mx.sym.Symbol, MXNetLossScaler])
def test_disable_without_enable_changes_nothing(owner):
    before = dict(vars(owner))
    emulation.disable()
    assert all(vars(owner)[n] is v for n, v in before.items())


HAZARD_SCRIPT = """
import mxnet as mx
import mxmixed
from mxmixed import emulation

real = mx.nd.FullyConnected
with mxmixed.amp_scope():
    emulation.disable()  # inside a scope that switched the emulation on
assert mx.nd.FullyConnected is real and not emulation.emulation_active()
emulation.enable()  # wraps MXNet's function, not a leftover wrapper
emulation.disable()
assert mx.nd.FullyConnected is real
print("ok")
"""


@pytest.mark.slow
def test_disable_inside_amp_scope_leaves_mxnets_functions_after_the_scope():
    proc = run_python(HAZARD_SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
