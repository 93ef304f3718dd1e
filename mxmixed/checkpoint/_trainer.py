"""The trainer's part of a checkpoint: its optimizer, checked against a trainer and restored.

Format 2 stores the optimizer's attributes and states as plain data (:mod:`mxmixed.checkpoint._plain`)
and restores them onto the trainer's own optimizer object. Format 1 stored
``Trainer.save_states``'s pickle, which is read only with ``trusted=True``.
"""
import copy

import mxnet as mx
from mxnet import gluon

from .._core.dtypes import FLOAT32_MAX, numpy_name
from ._format import (PICKLED_VERSION, TRAINER, TRAINER_JSON, TRAINER_ND, CheckpointError,
                           corrupt, describe, json_member, nd_member, shape_fits)
from ._legacy import repickle, unpickle
from ._plain import SavedSchedule, decode_plain, encode_plain, quoted


def trainer_params(trainer, named):
    """(name, shape, dtype) of each trainer parameter, in the trainer's order."""
    by_id = {}
    for name, param in named.items():
        by_id.setdefault(id(param), name)
    rows = []
    for param in trainer._params:
        name = by_id.get(id(param))
        rows.append({"name": name, "shape": list(param.shape or ()),
                     "dtype": numpy_name(param.dtype)})
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
    states = unpickle(path, data, "trainer states")
    if not (isinstance(states, tuple) and len(states) == 2 and isinstance(states[0], dict)
            and isinstance(states[1], mx.optimizer.Optimizer)):
        raise corrupt(path, "the trainer states are not (states, optimizer)")
    if order != list(range(len(order))):
        data = repickle(_reindex(states, order))
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
    """Check the saved optimizer against ``trainer``'s and decode it (format 2).

    Every setting the loader restores is checked by kind and range against the trainer's own
    optimizer (:func:`_attr_problem`), and every state array against its parameter, so that a
    crafted ``trainer.json`` is refused here rather than at the next step.
    """
    data = json_member(path, members, TRAINER_JSON)
    arrays = nd_member(path, members, TRAINER_ND)
    attrs, current, states = _decode_trainer(path, data, arrays)
    optimizer = trainer._optimizer
    _check_attrs(path, attrs, optimizer)
    _check_states(path, states, attrs, trainer, order)
    _check_schedule(path, attrs.get("lr_scheduler"), optimizer)
    counts = attrs.get("_all_index_update_counts", {})
    if current is not None and (type(current) is not int or current not in counts):
        raise corrupt(path, "the update counters name an unknown device")
    return TrainerData(attrs, current, data.get("states"), arrays, order)


def _decode_trainer(path, data, arrays):
    """The optimizer's attributes, its current counter and its states, decoded once."""
    if not isinstance(data, dict) or not isinstance(data.get("attrs"), dict):
        raise corrupt(path, "the trainer member is not an object")
    try:
        attrs = decode_plain(data["attrs"], arrays, objects=True, where="the optimizer's "
                             "attributes")
        current = decode_plain(data.get("current_counts"), arrays, where="current_counts")
        states = decode_plain(data.get("states"), arrays,  # checked once; decoded per updater
                              where="the optimizer states")
    except ValueError as err:
        raise corrupt(path, "unreadable trainer states: %s" % err) from None
    if not isinstance(attrs, dict) or not isinstance(states, dict):
        raise corrupt(path, "the trainer states are not named")
    return attrs, current, states


def _check_attrs(path, attrs, optimizer):
    """Each saved attribute is one ``optimizer`` has, of the same kind, in its range."""
    own = vars(optimizer)
    unknown = sorted(k if isinstance(k, str) else quoted(k) for k in attrs
                     if not isinstance(k, str) or k not in own or k.startswith("__"))
    if unknown:
        raise CheckpointError("checkpoint '%s' sets optimizer attributes that this %s lacks "
                              "(%s); was it written by another MXNet version?"
                              % (path, type(optimizer).__name__, ", ".join(unknown[:3])))
    for name, value in attrs.items():
        if not _same_kind(own[name], value):
            raise corrupt(path, "optimizer attribute %r is a %s, this %s's is a %s"
                          % (name, type(value).__name__, type(optimizer).__name__,
                             type(own[name]).__name__))
        problem = _attr_problem(name, value)
        if problem:
            raise corrupt(path, "optimizer attribute %r is %s: %s" % (name, quoted(value), problem))


def _check_states(path, states, attrs, trainer, order):
    """Each saved state belongs to a parameter and holds the arrays its optimizer makes."""
    bad = [k for k, v in states.items() if not (type(k) is int and 0 <= k < len(order)
                                                and _is_state(v))]
    if bad:
        raise corrupt(path, "the optimizer state of parameter %s is not made of arrays"
                      % quoted(bad[0], 20))
    templates = _state_templates(trainer._optimizer, attrs,
                                 [trainer._params[j] for j in order])
    for k, state in states.items():
        param = trainer._params[order[k]]
        problem = _state_problem(state, templates[k],
                                 tuple(param.shape) if param.shape is not None else None)
        if problem:
            raise corrupt(path, "the optimizer state of parameter %d ('%s') holds %s"
                          % (k, param.name, problem))


def _check_schedule(path, schedule, optimizer):
    """A saved learning-rate schedule is of the kind ``optimizer`` has, with its attributes."""
    if isinstance(schedule, SavedSchedule):
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
        for name, value in schedule.attrs.items():
            mine_value = vars(mine)[name]
            if not _same_kind(mine_value, value) or isinstance(value, SavedSchedule) \
                    or not _finite(value):
                raise corrupt(path, "schedule attribute %r is %s, this %s's is a %s"
                              % (name, quoted(value), schedule.name, type(mine_value).__name__))
    elif schedule is not None:
        raise corrupt(path, "the learning-rate schedule is not a schedule")


# The settings of MXNet 1.9.1's optimizers that are read at every step, and what they may hold
# (mxnet/optimizer/optimizer.py). A setting not named here is checked by the kind of the
# trainer's own value (_same_kind) and, if it is a number, for being finite.
_COUNTERS = {"num_update", "begin_num_update", "aggregate_num"}
_POSITIVE = {"rescale_grad"}
_NON_NEGATIVE = {"lr", "wd", "momentum", "epsilon", "float_stable_eps", "beta1", "beta2", "rho",
                 "gamma1", "gamma2", "lamda1", "beta", "wd_lh", "eta", "lamda", "eps",
                 "schedule_decay"}
_POSITIVE_OR_NONE = {"clip_gradient", "clip_weights"}  # None: no clipping
_NUMBER_OR_NONE = {"lower_bound", "upper_bound", "last_lr", "cur_lr"}
_MULTIPLIERS = {"lr_mult", "wd_mult"}
_NOT_SAVED = {"param_dict", "_index_update_count"}  # rebuilt from the trainer, never written


_MAX_COUNT = 2 ** 31 - 1  # and their counters (LAMB's t) as int


def _number(value):
    """A real number that an operator can take as a float32 setting."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and abs(value) <= FLOAT32_MAX  # False for NaN; no float() of a huge int


def _finite(value):
    """False for a number (however deep in a list, tuple or dict) that is inf, NaN, or out of
    float32's range."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _attr_problem(name, value):
    """What is wrong with the saved optimizer setting ``name`` (kind checked), or None."""
    if name in _NOT_SAVED:
        return "mxmixed never saves it"
    if isinstance(value, SavedSchedule) and name != "lr_scheduler":
        return "only lr_scheduler holds a schedule"
    if name in _COUNTERS:
        ok = type(value) is int and 0 <= value <= _MAX_COUNT
        return None if ok else "it must be a count (0, 1, ... up to 2^31 - 1)"
    if name in _POSITIVE:
        ok = _number(value) and value > 0
        return None if ok else "it must be a finite number above 0 (a float32)"
    if name in _NON_NEGATIVE:
        ok = _number(value) and value >= 0
        return None if ok else "it must be a finite number, 0 or more"
    if name in _POSITIVE_OR_NONE:
        ok = value is None or (_number(value) and value > 0)
        return None if ok else "it must be None or a finite number above 0"
    if name in _NUMBER_OR_NONE:
        ok = value is None or _number(value)
        return None if ok else "it must be None or a finite number"
    if name in _MULTIPLIERS:
        ok = isinstance(value, dict) and all(
            isinstance(k, (int, str)) and _number(v) and v >= 0
            for k, v in value.items())
        return None if ok else "it must map parameters to finite numbers, 0 or more"
    if name == "idx2name":
        ok = isinstance(value, dict) and all(type(k) is int and isinstance(v, str)
                                             for k, v in value.items())
        return None if ok else "it must map indices to names"
    if name == "sym_info":
        return None if isinstance(value, tuple) and len(value) in (0, 2) else \
            "it must be () or (attributes, argument names)"
    if name == "_all_index_update_counts":
        ok = isinstance(value, dict) and all(
            type(device) is int and isinstance(counts, dict)
            and all(type(k) is int and k >= 0 and type(c) is int and 0 <= c <= _MAX_COUNT
                    for k, c in counts.items())
            for device, counts in value.items())
        return None if ok else "it must map devices to counts of updates per parameter"
    if not _finite(value):
        return "its numbers must be finite and within float32's range"
    return None


def _state_templates(optimizer, attrs, params):
    """For each parameter, the state this optimizer, with the saved settings, would create.

    Built on a shallow copy of the optimizer, from a one-element weight of each parameter's
    number of dimensions and dtype: the structure (None, an array, a tuple of them) and the
    dtypes that the next step expects (the shapes are the parameter's, checked apart).
    """
    probe = copy.copy(optimizer)
    vars(probe).update({k: v for k, v in attrs.items() if not isinstance(v, SavedSchedule)})
    templates = []
    for index, param in enumerate(params):
        weight = mx.nd.zeros((1,) * max(len(param.shape or ()), 1), dtype=param.dtype)
        try:
            templates.append(probe.create_state_multi_precision(index, weight))
        except Exception:  # noqa: BLE001 -- an optimizer we cannot probe: kinds only
            templates.append(_UNKNOWN)
    return templates


_UNKNOWN = object()


def _state_problem(state, template, own_shape):
    """What is wrong with one parameter's saved optimizer state, or None.

    It must have the structure of ``template`` (what the optimizer creates for it), and each
    array its dtype and the parameter's shape.
    """
    if template is _UNKNOWN:
        return None
    if isinstance(template, mx.nd.NDArray):
        if not isinstance(state, mx.nd.NDArray):
            return "%s where the optimizer keeps an array" % quoted(state)
        if not shape_fits(own_shape, tuple(state.shape)) or state.dtype != template.dtype:
            return "an array of %s where the optimizer keeps one of %s" % (
                describe(state.shape, numpy_name(state.dtype)),
                describe(own_shape or (), numpy_name(template.dtype)))
        return None
    if isinstance(template, (tuple, list)):
        if not (isinstance(state, (tuple, list)) and len(state) == len(template)):
            return "%s where the optimizer keeps %d arrays" % (quoted(state), len(template))
        for inner, inner_template in zip(state, template):
            problem = _state_problem(inner, inner_template, own_shape)
            if problem:
                return problem
        return None
    if template is None and state is not None:
        return "%s where the optimizer keeps no state" % quoted(state)
    return None


def _same_kind(mine, theirs):
    """Whether a saved optimizer attribute can stand where the trainer's own value stands."""
    if mine is None or theirs is None or isinstance(theirs, SavedSchedule):
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
    if isinstance(schedule, SavedSchedule):
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
