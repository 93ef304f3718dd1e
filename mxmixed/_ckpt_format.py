"""The checkpoint file format of :mod:`mxmixed.checkpoint`: members, manifest, and checks.

Everything here reads and checks; nothing changes a net, a trainer or a scaler. The format is
described in :mod:`mxmixed.checkpoint`.
"""
import base64
import json
import math
import os
import pickle
import re
import zipfile

import numpy as np

import mxnet as mx
from mxnet import gluon

from . import _io
from ._version import __version__
from .scaler import LossScaler

FORMAT = "mxmixed-checkpoint"
FORMAT_VERSION = 2
PICKLED_VERSION = 1  # trainer states and extra as pickles: read only with trusted=True

MANIFEST = "manifest.json"
PARAMS = "params.nd"
SCALER = "scaler.json"
TRAINER_JSON = "trainer.json"  # the optimizer's settings and the layout of its states
TRAINER_ND = "trainer.nd"      # the optimizer states' arrays
EXTRA_JSON = "extra.json"
EXTRA_ND = "extra.nd"
TRAINER = "trainer.states"     # format 1: Trainer.save_states's pickle
EXTRA = "extra.pkl"            # format 1: the pickled extra

MAX_MEMBERS = 16
MAX_JSON_BYTES = 256 << 20


class CheckpointError(ValueError):
    """A checkpoint is truncated, corrupt, not a checkpoint, or does not fit the net/trainer."""


# ----------------------------------------------------------------------------- helpers
def named_params(net):
    if not isinstance(net, gluon.Block):
        raise TypeError("net must be a gluon Block, got %s" % type(net).__name__)
    return net._collect_params_with_prefix()


def dtype_name(dtype):
    return np.dtype(dtype).name


def describe(shape, dtype):
    return "%s %s" % (tuple(shape), dtype)


def shape_fits(own, saved):
    """Whether a parameter of shape ``own`` (0 or -1: not known yet) can take ``saved``."""
    if own is None or len(own) == 0:
        return True
    return len(own) == len(saved) and all(mine in (0, -1, theirs)
                                          for mine, theirs in zip(own, saved))


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


def check_scaler(scaler):
    if scaler is not None and not (hasattr(scaler, "state_dict")
                                   and hasattr(scaler, "load_state_dict")):
        raise TypeError("scaler must be an mxmixed.LossScaler (something with state_dict and "
                        "load_state_dict), got %s" % type(scaler).__name__)



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


def _updaters(trainer):
    if trainer._update_on_kvstore:
        updater = trainer._kvstore._updater
        if updater is None:
            raise ValueError("the trainer updates on a distributed kvstore's servers, whose "
                             "optimizer states cannot be saved or loaded from a worker")
        return [updater]
    return trainer._updaters


# ----------------------------------------------------------------------------- plain data
# Optimizer states and the user's ``extra`` are stored as JSON plus arrays, never pickled:
# JSON values stand for themselves; a few tagged one-key objects stand for the rest.
_NUMPY_DTYPE = re.compile(r"^[<>|=]?[biufc][0-9]{1,2}$|^\|b1$")
_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class _Object:
    """A saved learning-rate schedule: its class name and attributes, applied onto the trainer's
    own schedule of the same class (never built from the file)."""

    def __init__(self, name, attrs):
        self.name, self.attrs = name, attrs


def encode_plain(value, arrays, where, objects=False):
    """``value`` as JSON data; each NDArray goes into ``arrays`` and is referenced by its key.

    Raises
    ------
    ValueError
        For anything but None, bool, int, float, str, list, tuple, dict, NumPy arrays and
        scalars of numbers, and NDArrays (and, with ``objects``, MXNet learning-rate schedules).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)  # 0-d for a scalar (ascontiguousarray would make it 1-d)
        if array.dtype.kind not in "biufc" or array.dtype.fields is not None:
            raise ValueError("%s is a NumPy array of dtype %s; a checkpoint stores arrays of "
                             "numbers only" % (where, array.dtype))
        return {"$np": {"dtype": array.dtype.str, "shape": list(array.shape),
                        "scalar": isinstance(value, np.generic),
                        "data": base64.b64encode(array.tobytes(order="C")).decode("ascii")}}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
    if isinstance(value, mx.nd.NDArray):
        key = str(len(arrays))
        arrays[key] = value
        return {"$nd": key}
    if isinstance(value, list):
        return [encode_plain(v, arrays, "%s[%d]" % (where, k), objects)
                for k, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [encode_plain(v, arrays, "%s[%d]" % (where, k), objects)
                           for k, v in enumerate(value)]}
    if isinstance(value, dict):
        return {"$dict": [[encode_plain(k, arrays, "a key of %s" % where, objects),
                           encode_plain(v, arrays, "%s[%r]" % (where, k), objects)]
                          for k, v in value.items()]}
    if objects and isinstance(value, mx.lr_scheduler.LRScheduler):
        return {"$object": {"class": type(value).__name__,
                            "attrs": encode_plain(vars(value), arrays, where, False)}}
    raise ValueError("%s is a %s.%s; a checkpoint stores, without pickle, only None, bool, int, "
                     "float, str, list, tuple, dict, NumPy arrays of numbers and NDArrays"
                     % (where, type(value).__module__, type(value).__qualname__))


def decode_plain(data, arrays, copy=False, objects=False):
    """The value :func:`encode_plain` encoded; NDArrays are taken from ``arrays``.

    Raises
    ------
    ValueError
        For anything :func:`encode_plain` does not write.
    """
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode_plain(v, arrays, copy, objects) for v in data]
    if not (isinstance(data, dict) and len(data) == 1):
        raise ValueError("an unknown value %.60r" % (data,))
    (tag, body), = data.items()
    if tag == "$tuple" and isinstance(body, list):
        return tuple(decode_plain(v, arrays, copy, objects) for v in body)
    if tag == "$dict" and isinstance(body, list):
        out = {}
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError("a dict entry that is not a pair")
            key = decode_plain(pair[0], arrays, copy, objects)
            try:
                out[key] = decode_plain(pair[1], arrays, copy, objects)
            except TypeError:
                raise ValueError("a dict key of type %s" % type(key).__name__) from None
        return out
    if tag == "$float" and body in _FLOATS:
        return _FLOATS[body]
    if tag == "$nd" and isinstance(body, str):
        if body not in arrays:
            raise ValueError("a reference to the missing array %r" % body)
        return arrays[body].copy() if copy else arrays[body]
    if tag == "$np" and isinstance(body, dict):
        return _decode_numpy(body)
    if tag == "$object" and objects and isinstance(body, dict) \
            and isinstance(body.get("class"), str):
        attrs = decode_plain(body.get("attrs"), arrays, copy, False)
        if not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
            raise ValueError("a schedule whose attributes are not named")
        return _Object(body["class"], attrs)
    raise ValueError("an unknown value tagged %.40r" % (tag,))


def _decode_numpy(body):
    dtype, shape, data = body.get("dtype"), body.get("shape"), body.get("data")
    if not (isinstance(dtype, str) and _NUMPY_DTYPE.match(dtype) and isinstance(shape, list)
            and len(shape) <= 32 and all(isinstance(d, int) and d >= 0 for d in shape)
            and isinstance(data, str)):
        raise ValueError("a NumPy array of dtype %.20r and shape %.60r" % (dtype, shape))
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize
    if size > len(data):  # base64 takes 4 characters for every 3 bytes
        raise ValueError("a NumPy array of shape %s in %d characters" % (tuple(shape), len(data)))
    raw = base64.b64decode(data, validate=True)
    if len(raw) != size:
        raise ValueError("a NumPy array of shape %s with %d bytes" % (tuple(shape), len(raw)))
    array = np.frombuffer(raw, dtype).reshape(shape).copy()
    return array[()] if body.get("scalar") else array


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


def extra_bytes(extra):
    """The members that store ``extra`` without pickle: extra.json and, for NDArrays, extra.nd."""
    arrays = {}
    data = json.dumps(encode_plain(extra, arrays, "extra")).encode("utf-8")
    members = [(EXTRA_JSON, data)]
    if arrays:
        members.append((EXTRA_ND, _io.nd_bytes(arrays)))
    return members


def read_extra(path, members):
    data = json_member(path, members, EXTRA_JSON)
    arrays = nd_member(path, members, EXTRA_ND) if EXTRA_ND in members else {}
    try:
        return decode_plain(data, arrays)
    except ValueError as err:
        raise corrupt(path, "unreadable extra: %s" % err) from None


# ----------------------------------------------------------------------------- reading
def corrupt(path, detail):
    return CheckpointError("checkpoint '%s' is truncated or corrupt (%s); it cannot be loaded. "
                           "Use an earlier checkpoint." % (path, detail))


def _check_archive(path, archive):
    """Refuse, before any member is read, an archive whose members could not be this file's."""
    size = os.path.getsize(path)
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise CheckpointError("checkpoint '%s' has %d members, more than the limit of %d; "
                              "refusing to read it" % (path, len(infos), MAX_MEMBERS))
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        raise CheckpointError("checkpoint '%s' names a member twice; refusing to read it" % path)
    total = 0
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError("checkpoint '%s': member %s is compressed (method %d); "
                                  "mxmixed writes uncompressed members only and does not "
                                  "inflate them (the limit is the file's own size)"
                                  % (path, info.filename, info.compress_type))
        total += info.file_size
        if info.file_size != info.compress_size or total > size \
                or info.header_offset + info.compress_size > size:
            raise CheckpointError("checkpoint '%s': member %s declares %d bytes, more than the "
                                  "%d bytes of the file; refusing to read it"
                                  % (path, info.filename, info.file_size, size))


def read_members(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError("no checkpoint at '%s'" % path)
    if os.path.isdir(path):
        raise IsADirectoryError("'%s' is a folder, not a checkpoint file" % path)
    with open(path, "rb") as fileobj:
        head = fileobj.read(4)
    if head[:4] != b"PK\x03\x04":
        if not head:
            raise corrupt(path, "the file is empty")
        raise CheckpointError("'%s' is not an mxmixed checkpoint (not a ZIP archive written by "
                              "mxmixed.checkpoint.save; a file from net.save_parameters loads "
                              "with net.load_parameters)" % path)
    try:
        with zipfile.ZipFile(path, "r") as archive:
            _check_archive(path, archive)
            names = archive.namelist()
            if MANIFEST not in names:
                raise CheckpointError("'%s' is a ZIP archive but not an mxmixed checkpoint "
                                      "(no %s)" % (path, MANIFEST))
            members = {name: archive.read(name) for name in names}
    except CheckpointError:
        raise
    except zipfile.BadZipFile as err:
        if "not a zip file" in str(err):
            raise corrupt(path, "its end, the ZIP central directory, is missing") from None
        raise corrupt(path, str(err)) from None
    except Exception as err:  # EOFError, zlib.error, struct.error, a bad seek...
        raise corrupt(path, "%s: %s" % (type(err).__name__, err)) from None
    return path, members


def json_member(path, members, name):
    """A JSON member, its size and nesting depth checked before it is parsed."""
    data = members[name]
    if len(data) > MAX_JSON_BYTES:
        raise CheckpointError("checkpoint '%s': member %s holds %d bytes of JSON, more than the "
                              "limit of %d; refusing to parse it"
                              % (path, name, len(data), MAX_JSON_BYTES))
    try:
        _io.check_json_depth(data, "checkpoint '%s': member %s" % (path, name))
    except _io.UnsafeFileError as err:
        raise CheckpointError(str(err)) from None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise corrupt(path, "unreadable %s: %s" % (name, err)) from None


def nd_member(path, members, name):
    """An array member (``mx.nd.save``'s format), its declared sizes checked before loading."""
    data = members[name]
    try:
        _io.check_nd_bytes(data, "checkpoint '%s': member %s" % (path, name))
    except _io.UnsafeFileError as err:
        raise CheckpointError(str(err)) from None
    try:
        arrays = mx.nd.load_frombuffer(data)
    except mx.base.MXNetError as err:
        raise corrupt(path, "unreadable %s: %s" % (name, _mx_line(err))) from None
    if isinstance(arrays, list) and not arrays:
        return {}
    if not isinstance(arrays, dict):
        raise corrupt(path, "the arrays of %s are not named" % name)
    return arrays


def _mx_line(err):
    lines = [line.strip() for line in str(err).splitlines() if line.strip()
             and not line.startswith(("Traceback", "File "))]
    return lines[-1] if lines else type(err).__name__


def _rows_ok(rows, names_optional=False):
    return isinstance(rows, list) and all(
        isinstance(r, dict) and (isinstance(r.get("name"), str)
                                 or (names_optional and r.get("name") is None))
        and isinstance(r.get("shape"), list) and len(r["shape"]) <= 32
        and all(isinstance(d, int) and not isinstance(d, bool) for d in r["shape"])
        and isinstance(r.get("dtype"), str) for r in rows)


def parse_manifest(path, members):
    manifest = json_member(path, members, MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError("'%s' is not an mxmixed checkpoint (its manifest says format %.60r)"
                              % (path, manifest.get("format") if isinstance(manifest, dict)
                                 else None))
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError("checkpoint '%s' has format version %.20r, written by mxmixed %.20s; "
                              "this mxmixed %s reads versions up to %d: upgrade mxmixed"
                              % (path, version, manifest.get("mxmixed_version", "?"),
                                 __version__, FORMAT_VERSION))
    for key in ("params", "trainer", "has_scaler", "has_extra"):
        if key not in manifest:
            raise corrupt(path, "the manifest lacks %r" % key)
    trainer = manifest["trainer"]
    if not (_rows_ok(manifest["params"]) and isinstance(manifest["has_scaler"], bool)
            and isinstance(manifest["has_extra"], bool)
            and (trainer is None or (isinstance(trainer, dict)
                                     and isinstance(trainer.get("optimizer"), str)
                                     and _rows_ok(trainer.get("params"), True)))):
        raise corrupt(path, "the manifest's entries have the wrong types")
    if version == PICKLED_VERSION:
        needed = ((TRAINER, trainer is not None), (EXTRA, manifest["has_extra"]))
    else:
        needed = ((TRAINER_JSON, trainer is not None), (TRAINER_ND, trainer is not None),
                  (EXTRA_JSON, manifest["has_extra"]))
    for name, flag in needed + ((SCALER, manifest["has_scaler"]), (PARAMS, True)):
        if flag and name not in members:
            raise corrupt(path, "the member %s is missing" % name)
    return manifest


def read_manifest(path):
    """The manifest of a checkpoint: versions, parameter names, shapes and dtypes.

    Reading it runs no code, for any file: sizes and nesting are checked first.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    dict
        As described in :mod:`mxmixed.checkpoint`.

    Examples
    --------
    >>> import os, tempfile
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> net = gluon.nn.Dense(10, in_units=64)
    >>> net.initialize()
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.mxmixed")
    >>> mxmixed.checkpoint.save(path, net, extra={"epoch": 3})
    >>> manifest = mxmixed.checkpoint.read_manifest(path)
    >>> manifest["format_version"] == mxmixed.checkpoint.FORMAT_VERSION
    True
    """
    path, members = read_members(path)
    return parse_manifest(path, members)


def load_arrays(path, members, manifest):
    arrays = nd_member(path, members, PARAMS)
    listed = {row["name"]: row for row in manifest["params"]}
    if set(listed) != set(arrays):
        raise corrupt(path, "the manifest and the parameters name different arrays")
    for name, array in arrays.items():
        row = listed[name]
        if tuple(row["shape"]) != array.shape or row["dtype"] != dtype_name(array.dtype):
            raise corrupt(path, "parameter '%s' differs from the manifest" % name)
    return arrays


def net_mismatches(named, manifest):
    """Messages about the net's parameters that the checkpoint does not fit, first first."""
    saved = {row["name"]: row for row in manifest["params"]}
    problems = []
    for name, param in named.items():
        row = saved.get(name)
        if row is None:
            problems.append("parameter '%s' of the net is missing from the checkpoint" % name)
            continue
        shape = tuple(row["shape"])
        dtype = row["dtype"]
        own_shape = tuple(param.shape) if param.shape is not None else None
        own_dtype = dtype_name(param.dtype)
        if not shape_fits(own_shape, shape) or own_dtype != dtype:
            problems.append("parameter '%s': the net expects %s, the checkpoint holds %s"
                            % (name, describe(own_shape if own_shape is not None else (),
                                               own_dtype), describe(shape, dtype)))
    for name in saved:
        if name not in named:
            problems.append("the checkpoint holds parameter '%s', which the net lacks" % name)
    return problems


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


def check_scaler_state(path, members):
    state = json_member(path, members, SCALER)
    try:
        LossScaler().load_state_dict(state)  # validate on a throwaway scaler first
    except (ValueError, TypeError) as err:
        raise corrupt(path, "bad loss-scaler state: %s" % err) from None
    return state


