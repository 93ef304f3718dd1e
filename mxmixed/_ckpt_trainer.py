"""The trainer's part of a checkpoint: its optimizer, checked against a trainer and restored.

Format 2 stores the optimizer's attributes and states as plain data (:mod:`mxmixed._ckpt_plain`)
and restores them onto the trainer's own optimizer object. Format 1 stored
``Trainer.save_states``'s pickle, which is read only with ``trusted=True``.
"""
import pickle

import mxnet as mx
from mxnet import gluon

from ._ckpt_format import (PICKLED_VERSION, TRAINER, TRAINER_JSON, TRAINER_ND, CheckpointError,
                           corrupt, describe, dtype_name, json_member, nd_member, shape_fits)
from ._ckpt_plain import _Object, decode_plain, encode_plain


def trainer_params(trainer, named):
    """(name, shape, dtype) of each trainer parameter, in the trainer's order."""
    by_id = {}
    for name, param in named.items():
        by_id.setdefault(id(param), name)
    rows = []
    for param in trainer._params:
        name = by_id.get(id(param))
        rows.append({"name": name, "shape": list(param.shape or ()),
                     "dtype": dtype_name(param.dtype)})
    return rows


def check_trainer(trainer):
    if trainer is not None and not isinstance(trainer, gluon.Trainer):
        raise TypeError("trainer must be a gluon.Trainer, got %s" % type(trainer).__name__)


def _updaters(trainer):
    if trainer._update_on_kvstore:
        updater = trainer._kvstore._updater
        if updater is None:
            raise ValueError("the trainer updates on a distributed kvstore's servers, whose "
                             "optimizer states cannot be saved or loaded from a worker")
        return [updater]
    return trainer._updaters


def set_trainer_states(trainer, data):
    """What ``trainer.load_states`` does with the bytes of a states file, without a file.

    It unpickles ``data``: only for a format 1 checkpoint loaded with ``trusted=True``.
    """
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    updaters = _updaters(trainer)
    for updater in updaters:
        updater.set_states(data)
        updater.optimizer = updaters[0].optimizer
    trainer._optimizer = updaters[0].optimizer
    trainer._optimizer.param_dict = dict(enumerate(trainer._params))


def check_trainer_states(path, members, manifest, trainer, named):
    info = manifest["trainer"]
    if info is None:
        raise CheckpointError("checkpoint '%s' holds no trainer states; call load without a "
                              "trainer to restore only the net" % path)
    optimizer = type(trainer._optimizer).__name__
    if info.get("optimizer") != optimizer:
        raise CheckpointError("checkpoint '%s' was written with optimizer %s, this trainer uses "
                              "%s" % (path, info.get("optimizer"), optimizer))
    saved = info.get("params", [])
    mine = trainer_params(trainer, named)
    if len(saved) != len(mine):
        raise CheckpointError("checkpoint '%s' has optimizer states for %d parameters, this "
                              "trainer has %d" % (path, len(saved), len(mine)))
    order = _match_params(path, saved, mine)
    if manifest["format_version"] != PICKLED_VERSION:
        return read_trainer_json(path, members, trainer, order)
    data = members[TRAINER]  # format 1, read with trusted=True only: Trainer.save_states's pickle
    try:
        states = pickle.loads(data)
    except Exception as err:  # a damaged pickle raises almost anything
        raise corrupt(path, "unreadable trainer states: %s: %s"
                       % (type(err).__name__, err)) from None
    if not (isinstance(states, tuple) and len(states) == 2 and isinstance(states[0], dict)
            and isinstance(states[1], mx.optimizer.Optimizer)):
        raise corrupt(path, "the trainer states are not (states, optimizer)")
    if order != list(range(len(order))):
        data = pickle.dumps(_reindex(states, order))
    return data


def _match_params(path, saved, mine):
    """For each saved trainer parameter, the index of the same parameter in this trainer.

    A Trainer orders its parameters by their MXNet names, which carry process-wide counters
    (``dense9_weight``, ``dense10_weight``), so the same net built after other layers can list
    them in another order; the structural names (``0.weight``) match them whatever the order.
    """
    names = [r["name"] for r in mine]
    by_name = all(names) and len(set(names)) == len(names) and all(r["name"] for r in saved)
    where = {name: j for j, name in enumerate(names)}
    order = []
    for k, theirs in enumerate(saved):
        j = where.get(theirs["name"]) if by_name else k
        ours = mine[j] if j is not None else None
        if ours is None or theirs["dtype"] != ours["dtype"] or \
                not shape_fits(tuple(ours["shape"]), tuple(theirs["shape"])):
            raise CheckpointError(
                "checkpoint '%s' does not fit this trainer: its parameter %d is '%s' %s, the "
                "trainer's is %s" % (path, k, theirs["name"],
                                     describe(theirs["shape"], theirs["dtype"]),
                                     "'%s' %s" % (ours["name"], describe(ours["shape"],
                                                                          ours["dtype"]))
                                     if ours is not None else "missing"))
        order.append(j)
    return order


def _reindex(states, order):
    """``(states, optimizer)`` with the per-parameter entries moved to this trainer's indices."""
    per_param, optimizer = states
    move = {k: j for k, j in enumerate(order)}
    per_param = {move.get(k, k): v for k, v in per_param.items()}
    for counts in getattr(optimizer, "_all_index_update_counts", {}).values():
        items = list(counts.items())
        counts.clear()
        counts.update({move.get(k, k): v for k, v in items})
    return per_param, optimizer


def optimizer_json(trainer, arrays):
    """The trainer's optimizer (settings, counters, schedule) and states as plain data."""
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    updater = _updaters(trainer)[0]
    optimizer = updater.optimizer
    attrs = {k: v for k, v in vars(optimizer).items()
             if k not in ("param_dict", "_index_update_count")}
    current = [k for k, v in optimizer._all_index_update_counts.items()
               if v is optimizer._index_update_count]
    return {"class": type(optimizer).__name__,
            "attrs": encode_plain(attrs, arrays, "optimizer attribute", objects=True),
            "current_counts": encode_plain(current[0] if current else None, arrays, "counts"),
            "states": encode_plain(updater.states, arrays, "optimizer state")}


class TrainerData:
    """Decoded optimizer settings and states, checked against a trainer, not yet applied."""

    def __init__(self, attrs, current, states_json, arrays, order):
        self.attrs, self.current = attrs, current
        self.states_json, self.arrays, self.order = states_json, arrays, order


def read_trainer_json(path, members, trainer, order):
    """Check the saved optimizer against ``trainer``'s and decode it (format 2)."""
    data = json_member(path, members, TRAINER_JSON)
    arrays = nd_member(path, members, TRAINER_ND)
    optimizer = trainer._optimizer
    if not isinstance(data, dict) or not isinstance(data.get("attrs"), dict):
        raise corrupt(path, "the trainer member is not an object")
    try:
        attrs = decode_plain(data["attrs"], arrays, objects=True)
        current = decode_plain(data.get("current_counts"), arrays)
        states = decode_plain(data.get("states"), arrays)  # checked once; decoded per updater
    except ValueError as err:
        raise corrupt(path, "unreadable trainer states: %s" % err) from None
    if not isinstance(attrs, dict) or not isinstance(states, dict):
        raise corrupt(path, "the trainer states are not named")
    own = vars(optimizer)
    unknown = sorted(str(k) for k in attrs if not isinstance(k, str) or k not in own
                     or k.startswith("__"))
    if unknown:
        raise CheckpointError("checkpoint '%s' sets optimizer attributes that this %s lacks "
                              "(%s); was it written by another MXNet version?"
                              % (path, type(optimizer).__name__, ", ".join(unknown[:3])))
    for name, value in attrs.items():
        if not _same_kind(own[name], value):
            raise corrupt(path, "optimizer attribute %r is a %s, this %s's is a %s"
                          % (name, type(value).__name__, type(optimizer).__name__,
                             type(own[name]).__name__))
    bad = [k for k, v in states.items() if not (isinstance(k, int) and 0 <= k < len(order)
                                                and _is_state(v))]
    if bad:
        raise corrupt(path, "the optimizer state of parameter %.20r is not made of arrays"
                      % (bad[0],))
    schedule = attrs.get("lr_scheduler")
    if isinstance(schedule, _Object):
        mine = optimizer.lr_scheduler
        if mine is None or type(mine).__name__ != schedule.name:
            raise CheckpointError(
                "checkpoint '%s' was written with the learning-rate schedule %s, this trainer's "
                "optimizer has %s: build the trainer with the same kind of lr_scheduler"
                % (path, schedule.name, type(mine).__name__ if mine is not None else "none"))
        unknown = sorted(k for k in schedule.attrs if k not in vars(mine) or k.startswith("__"))
        if unknown:
            raise CheckpointError("checkpoint '%s' sets schedule attributes that this %s lacks "
                                  "(%s)" % (path, schedule.name, ", ".join(unknown[:3])))
    elif schedule is not None:
        raise corrupt(path, "the learning-rate schedule is not a schedule")
    counts = attrs.get("_all_index_update_counts", {})
    if not (isinstance(counts, dict) and all(isinstance(c, dict) for c in counts.values())):
        raise corrupt(path, "the update counters are not counters")
    if current is not None and current not in counts:
        raise corrupt(path, "the update counters name an unknown device")
    return TrainerData(attrs, current, data.get("states"), arrays, order)


def _same_kind(mine, theirs):
    """Whether a saved optimizer attribute can stand where the trainer's own value stands."""
    if mine is None or theirs is None or isinstance(theirs, _Object):
        return True
    number = (int, float)
    if isinstance(mine, bool) or isinstance(theirs, bool):
        return isinstance(mine, bool) == isinstance(theirs, bool)
    if isinstance(mine, number):
        return isinstance(theirs, number)
    return isinstance(theirs, type(mine)) or isinstance(mine, type(theirs))


def _is_state(value):
    """An optimizer state: None, an NDArray, or a tuple or list of states."""
    if value is None or isinstance(value, mx.nd.NDArray):
        return True
    return isinstance(value, (tuple, list)) and all(_is_state(v) for v in value)


def set_trainer_json(trainer, data):
    """Apply :class:`TrainerData` to ``trainer``: its own optimizer object gets the settings."""
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    optimizer = trainer._optimizer
    attrs = dict(data.attrs)
    move = dict(enumerate(data.order))
    for counts in attrs.get("_all_index_update_counts", {}).values():
        items = list(counts.items())
        counts.clear()
        counts.update({move.get(k, k): v for k, v in items})
    schedule = attrs.pop("lr_scheduler", None)
    if isinstance(schedule, _Object):
        vars(optimizer.lr_scheduler).update(schedule.attrs)
    else:
        optimizer.lr_scheduler = None
    vars(optimizer).update(attrs)
    optimizer._index_update_count = optimizer._all_index_update_counts.setdefault(
        data.current if data.current is not None else 0, {})
    for k, updater in enumerate(_updaters(trainer)):
        states = decode_plain(data.states_json, data.arrays, copy=k > 0)
        updater.states = {move.get(i, i): v for i, v in states.items()}
        updater.states_synced = dict.fromkeys(updater.states, False)
        updater.optimizer = optimizer
    optimizer.param_dict = dict(enumerate(trainer._params))
