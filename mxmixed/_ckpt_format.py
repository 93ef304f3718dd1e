"""The checkpoint file format of :mod:`mxmixed.checkpoint`: members, manifest, and checks.

Everything here reads and checks; nothing changes a net, a trainer or a scaler. The format is
described in :mod:`mxmixed.checkpoint`.
"""
import json
import os
import pickle
import zipfile

import numpy as np

import mxnet as mx
from mxnet import gluon

from ._version import __version__
from .scaler import LossScaler

FORMAT = "mxmixed-checkpoint"
FORMAT_VERSION = 1

MANIFEST = "manifest.json"
PARAMS = "params.nd"
TRAINER = "trainer.states"
SCALER = "scaler.json"
EXTRA = "extra.pkl"


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



def trainer_states(trainer):
    """The bytes ``trainer.save_states`` would write, without a file.

    ``Trainer.save_states`` writes exactly ``updater.get_states(dump_optimizer=True)`` of its
    (or its kvstore's) updater; doing it in memory leaves no temporary file anywhere.
    """
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    return _updaters(trainer)[0].get_states(dump_optimizer=True)


def set_trainer_states(trainer, data):
    """What ``trainer.load_states`` does with the bytes of a states file, without a file."""
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


# ----------------------------------------------------------------------------- reading
def corrupt(path, detail):
    return CheckpointError("checkpoint '%s' is truncated or corrupt (%s); it cannot be loaded. "
                           "Use an earlier checkpoint." % (path, detail))


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


def parse_manifest(path, members):
    try:
        manifest = json.loads(members[MANIFEST].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise corrupt(path, "unreadable manifest: %s" % err) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError("'%s' is not an mxmixed checkpoint (its manifest says format %r)"
                              % (path, manifest.get("format") if isinstance(manifest, dict)
                                 else None))
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError("checkpoint '%s' has format version %r, written by mxmixed %s; "
                              "this mxmixed %s reads versions up to %d: upgrade mxmixed"
                              % (path, version, manifest.get("mxmixed_version", "?"),
                                 __version__, FORMAT_VERSION))
    for key in ("params", "trainer", "has_scaler", "has_extra"):
        if key not in manifest:
            raise corrupt(path, "the manifest lacks %r" % key)
    for name, flag in ((TRAINER, manifest["trainer"] is not None),
                       (SCALER, manifest["has_scaler"]), (EXTRA, manifest["has_extra"]),
                       (PARAMS, True)):
        if flag and name not in members:
            raise corrupt(path, "the member %s is missing" % name)
    return manifest


def read_manifest(path):
    """The manifest of a checkpoint: versions, parameter names, shapes and dtypes.

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
    try:
        arrays = mx.nd.load_frombuffer(members[PARAMS])
    except mx.base.MXNetError as err:
        raise corrupt(path, "unreadable parameters: %s" % str(err).splitlines()[0]) from None
    if not isinstance(arrays, dict):
        raise corrupt(path, "the parameters are not a named dictionary")
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
    data = members[TRAINER]
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
    try:
        state = json.loads(members[SCALER].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise corrupt(path, "unreadable loss-scaler state: %s" % err) from None
    try:
        LossScaler().load_state_dict(state)  # validate on a throwaway scaler first
    except (ValueError, TypeError) as err:
        raise corrupt(path, "bad loss-scaler state: %s" % err) from None
    return state


