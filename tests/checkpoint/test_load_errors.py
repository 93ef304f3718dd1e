"""Every error from a checkpoint file is one :class:`CheckpointError` line that names the file and
what is wrong, and trainer state is checked by kind and range at ``load()``.

Nothing but a CheckpointError escapes ``checkpoint.load`` for a crafted member: not a
``TypeError`` from NumPy, not a ``UnicodeDecodeError`` or a bare ``Exception`` from MXNet's
reader, and no crafted optimizer setting passes ``load()`` only to fail at the next step.
"""
import copy
import json
import random
import struct
import zipfile

import mxnet as mx
import pytest

from conftest import dense_and_trainer, dense_step
from mxmixed import checkpoint
from mxmixed._files import untrusted
from mxmixed.checkpoint import CheckpointError
from mxmixed.scaler import LossScaler


def _members(path):
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _write(path, members):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    net, trainer = dense_and_trainer(momentum=0.9)
    scaler = LossScaler(init_scale=128.0)
    dense_step(net, trainer)
    path = tmp_path_factory.mktemp("good") / "good.mxc"
    checkpoint.save(path, net, trainer, scaler,
                    extra={"step": 1, "rng": ("MT19937", [1, 2, 3]), "t": (1, 2.5)})
    return _members(path)


def _refused(path, trainer=True, match=None):
    """Load ``path`` into a fresh net (and trainer): one CheckpointError line naming it."""
    net, own = dense_and_trainer(momentum=0.9)
    with pytest.raises(CheckpointError, match=match) as info:
        checkpoint.load(path, net, own if trainer else None)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    assert info.value.__cause__ is None
    return message


# ----------------------------------------------------------------------------- extra.json
@pytest.mark.parametrize("value, match", [
    ({"$np": {"dtype": "<f3", "shape": [1], "data": "AAAA"}}, "dtype '<f3'"),
    ({"$np": {"dtype": "<u16", "shape": [1], "data": "AAAA"}}, "dtype '<u16'"),
    ({"$np": {"dtype": "<f4", "shape": [True], "data": "AAAA"}}, r"shape \[True\]"),
    ({"$np": {"dtype": "<i0", "shape": [], "data": ""}}, "dtype '<i0'"),
], ids=["f3", "u16", "bool-shape", "i0"])
def test_a_numpy_value_of_no_real_dtype_or_shape_is_a_checkpoint_error(good, tmp_path, value,
                                                                         match):
    path = _write(tmp_path / "np.mxc", dict(good, **{"extra.json": json.dumps(value)}))
    _refused(path, trainer=False, match=match)


def test_an_error_inside_a_dict_names_the_real_problem_and_where(good, tmp_path):
    bad = {"$np": {"dtype": "<f3", "shape": [1], "data": "AAAA"}}
    value = {"$dict": [["epoch", 3], ["state", {"$dict": [["rng", {"$tuple": [1, bad]}]]}]]}
    path = _write(tmp_path / "dict.mxc", dict(good, **{"extra.json": json.dumps(value)}))
    message = _refused(path, trainer=False)
    assert "dict key" not in message
    assert "extra['state']['rng'][1]" in message and "'<f3'" in message


def test_an_unhashable_dict_key_is_still_named_as_a_key(good, tmp_path):
    value = {"$dict": [[[1, 2], 3]]}
    path = _write(tmp_path / "key.mxc", dict(good, **{"extra.json": json.dumps(value)}))
    _refused(path, trainer=False, match="a dict key of type list")


# ----------------------------------------------------------------------------- array members
def _nd_with_name(name_bytes):
    array = mx.nd.array([1.0, 2.0])
    return b"".join([struct.pack("<QQQ", 0x112, 0, 1), array.__getstate__()["handle"],
                     struct.pack("<QQ", 1, len(name_bytes)), name_bytes])


@pytest.mark.parametrize("member", ["params.nd", "trainer.nd"])
def test_an_array_name_that_is_not_utf8_is_a_checkpoint_error_naming_the_member(good, tmp_path,
                                                                                member):
    path = _write(tmp_path / "name.mxc", dict(good, **{member: _nd_with_name(b"w\xff\xfe")}))
    message = _refused(path)
    assert member in message


@pytest.mark.parametrize("member", ["params.nd", "trainer.nd"])
def test_a_shapeless_array_is_a_checkpoint_error_naming_the_member(good, tmp_path, member):
    # format v2, dense, 0 dimensions: MXNet's reader raises a bare "unknown storage type: -1"
    shapeless = struct.pack("<QQQ", 0x112, 0, 1) + struct.pack("<Iii", 0xF993FAC9, 0, 0) \
        + struct.pack("<Q", 0)
    path = _write(tmp_path / "shapeless.mxc", dict(good, **{member: shapeless}))
    message = _refused(path)
    assert member in message


def test_what_mxnets_reader_raises_is_a_checkpoint_error(good, tmp_path, monkeypatch):
    # whatever check_nd_bytes lets through, MXNet's own error is one line naming the member
    def refuse(data):
        raise Exception("unknown storage type: -1")  # what MXNet's Python reader raises
    monkeypatch.setattr(mx.nd, "load_frombuffer", refuse)
    message = _refused(_write(tmp_path / "mx.mxc", good), trainer=False)
    assert "params.nd" in message and "unknown storage type: -1" in message


# ----------------------------------------------------------------------------- manifest
@pytest.mark.parametrize("version", [True, 0, -3])
def test_a_format_version_that_is_no_version_is_refused(good, tmp_path, version):
    manifest = json.loads(good["manifest.json"])
    manifest["format_version"] = version
    path = _write(tmp_path / "v.mxc", dict(good, **{"manifest.json": json.dumps(manifest)}))
    _refused(path, match="format version")


# ----------------------------------------------------------------------------- trainer.json
def _with_attr(good, tmp_path, name, value):
    state = json.loads(good["trainer.json"])
    pairs = [p for p in state["attrs"]["$dict"] if p[0] != name]
    state["attrs"]["$dict"] = pairs + [[name, value]]
    return _write(tmp_path / ("%s.mxc" % name), dict(good, **{"trainer.json": json.dumps(state)}))


SCHEDULE = {"$object": {"class": "FactorScheduler", "attrs": {"$dict": []}}}


@pytest.mark.parametrize("name, value", [
    ("lr", {"$dict": []}),
    ("lr", SCHEDULE),
    ("lr", None),
    ("lr", -0.1),
    ("lr", {"$float": "nan"}),
    ("lr", {"$float": "inf"}),
    ("clip_gradient", "abc"),
    ("clip_gradient", [1, 2]),
    ("clip_gradient", {"$tuple": [1, 2]}),
    ("clip_gradient", -1.0),
    ("clip_gradient", {"$float": "nan"}),
    ("clip_gradient", True),
    ("wd", -1e-4),
    ("wd", "0"),
    ("momentum", {"$float": "nan"}),
    ("momentum", -0.9),
    ("rescale_grad", 0),
    ("rescale_grad", {"$float": "-inf"}),
    ("num_update", -1),
    ("num_update", 1.5),
    ("num_update", 10 ** 400),
    ("lr", 10 ** 400),
    ("momentum", 1e39),
    ("begin_num_update", "0"),
    ("multi_precision", 1),
    ("lazy_update", "yes"),
    ("aggregate_num", -4),
    ("lr_mult", {"$dict": [[0, "abc"]]}),
    ("wd_mult", {"$dict": [[0, {"$float": "nan"}]]}),
    ("lr_mult", [1, 2]),
    ("_all_index_update_counts", {"$dict": [[0, {"$dict": [[0, "many"]]}]]}),
    ("_all_index_update_counts", {"$dict": [[0, {"$dict": [["w", 1]]}]]}),
    ("_all_index_update_counts", {"$dict": [[0, {"$dict": [[0, -1]]}]]}),
    ("idx2name", {"$dict": [[0, 7]]}),
    ("sym_info", {"$tuple": [1, 2, 3]}),
    ("param_dict", {"$dict": []}),
], ids=lambda v: v if isinstance(v, str) else json.dumps(v)[:24])
def test_a_crafted_optimizer_setting_is_refused_at_load_naming_the_field(good, tmp_path, name,
                                                                        value):
    path = _with_attr(good, tmp_path, name, value)
    message = _refused(path)
    assert repr(name) in message or name in message, message


def test_an_optimizer_state_of_the_wrong_shape_or_dtype_is_refused_at_load(good, tmp_path):
    arrays = mx.nd.load_frombuffer(good["trainer.nd"])
    for key, bad in ((next(iter(arrays)), mx.nd.zeros((7,))),
                     (next(iter(arrays)), mx.nd.zeros(arrays[next(iter(arrays))].shape,
                                                      dtype="int32"))):
        members = dict(good, **{"trainer.nd": untrusted.nd_bytes(dict(arrays, **{key: bad}))})
        path = _write(tmp_path / "state.mxc", members)
        _refused(path, match="optimizer state of parameter")


def test_a_genuine_trainer_state_still_loads_and_steps(good, tmp_path):
    path = _write(tmp_path / "fine.mxc", good)
    net, trainer = dense_and_trainer(momentum=0.9)
    checkpoint.load(path, net, trainer, LossScaler())
    assert trainer._optimizer.lr == 0.1 and trainer._optimizer.momentum == 0.9
    dense_step(net, trainer)


# ----------------------------------------------------------------------------- fuzz
_SUBSTITUTES = [None, True, False, 0, -1, 1, 2.5, -2.5, 10 ** 30, 10 ** 400, 1e308, "", "abc",
                [], [1, 2], [[1]], {"$tuple": [None, None]},
                {"$dict": []}, {"$tuple": []}, {"$float": "nan"}, {"$float": "-inf"},
                {"$nd": "0"}, {"$nd": "999"},
                {"$np": {"dtype": "<f3", "shape": [1], "data": "AAAA"}},
                {"$np": {"dtype": "<f4", "shape": [True], "data": "AAAA"}},
                {"$np": {"dtype": "<f4", "shape": [1], "data": "AAAAAA=="}},
                {"$object": {"class": "FactorScheduler", "attrs": {"$dict": []}}},
                {"$dict": [[[1], 2]]}, {"$unknown": 1}, {"a": 1, "b": 2}]


def _paths(value, path=()):
    """Every place in a JSON value, as a tuple of keys and indices."""
    yield path
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, path + (key,))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, path + (index,))


def _replaced(value, path, new):
    if not path:
        return copy.deepcopy(new)
    value = copy.deepcopy(value)
    holder = value
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = copy.deepcopy(new)
    return value


def _fuzz_cases(good, count, seed):
    rng = random.Random(seed)
    cases = []
    for member in ("manifest.json", "trainer.json", "extra.json", "scaler.json"):
        data = json.loads(good[member])
        places = list(_paths(data))
        for _ in range(count):
            place = rng.choice(places)
            cases.append((member, place, _replaced(data, place, rng.choice(_SUBSTITUTES))))
    return cases


def _only_checkpoint_errors(good, tmp_path, cases):
    accepted = 0
    for number, (member, place, value) in enumerate(cases):
        text = json.dumps(value)
        path = _write(tmp_path / ("fuzz%d.mxc" % number), dict(good, **{member: text}))
        net, trainer = dense_and_trainer(momentum=0.9)
        try:
            checkpoint.load(path, net, trainer, LossScaler())
        except CheckpointError as err:
            assert "\n" not in str(err) and str(path) in str(err), (member, place, str(err))
            continue
        except Exception as err:  # noqa: BLE001 -- the point: nothing else may escape
            pytest.fail("%s at %s = %.80s: %s: %s" % (member, list(place), text,
                                                      type(err).__name__, err))
        accepted += 1
        try:  # what load() accepted must train
            dense_step(net, trainer)
        except Exception as err:  # noqa: BLE001
            pytest.fail("load() accepted %s at %s = %.80s, then the step failed: %s: %s"
                        % (member, list(place), text, type(err).__name__,
                           str(err).splitlines()[0]))
        path.unlink()
    return accepted


def test_fuzzed_members_raise_only_checkpoint_errors(good, tmp_path):
    _only_checkpoint_errors(good, tmp_path, _fuzz_cases(good, 40, seed=35))


@pytest.mark.slow
def test_fuzzed_members_raise_only_checkpoint_errors_at_length(good, tmp_path):
    _only_checkpoint_errors(good, tmp_path, _fuzz_cases(good, 400, seed=3535))
