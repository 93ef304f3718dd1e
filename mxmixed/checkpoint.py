"""One-file training checkpoints: parameters, trainer states, loss scaler and your own state.

:func:`save` writes everything an exact resume needs into a single file, atomically;
:func:`load` checks that the file is whole and fits the net before it changes anything, then
restores it all.

The file format
---------------
A checkpoint is an uncompressed ZIP archive (:mod:`zipfile`, ``ZIP_STORED``; every member
carries a CRC-32 that is checked on reading). Its members:

``manifest.json``
    ``{"format": "mxmixed-checkpoint", "format_version": 1, "mxmixed_version": ...,
    "mxnet_version": ..., "params": [{"name", "shape", "dtype"}, ...], "trainer": {...} or
    null, "has_scaler": bool, "has_extra": bool}``. Parameter names are the structural names
    of ``Block.save_parameters`` (``features.0.weight``, ``hidden.bias``), which do not depend
    on how many blocks the process created before, unlike ``Parameter.name``.
``params.nd``
    All parameters, BatchNorm's running mean and variance included, in the format of
    ``mx.nd.save`` and under the same names as ``net.save_parameters`` writes them: unzip it
    and ``net.load_parameters('params.nd')`` loads it.
``trainer.states`` (optional)
    Exactly the bytes ``Trainer.save_states`` writes: the optimizer (with its update
    counters and learning-rate schedule) and its per-parameter states, such as the momentum
    and, for ``multi_precision``, the float32 master weights of float16 parameters.
``scaler.json`` (optional)
    :meth:`mxmixed.LossScaler.state_dict`.
``extra.pkl`` (optional)
    Your ``extra`` object, pickled: a step counter, the state of the generator that draws
    the batches, ...

Writing is atomic: the archive goes to a temporary file next to ``path``
(``.<name>.<pid>.<random>.tmp``), is flushed and fsync'ed, and then replaces ``path`` with
``os.replace``. A failure while writing removes the temporary file and leaves an earlier
checkpoint at ``path`` as it was. A process killed outright (SIGKILL, power loss) cannot
clean up: it may leave such a temporary file behind, never a partial file at ``path``.

.. warning::
   ``trainer.states`` and ``extra.pkl`` are pickles, as MXNet's own ``Trainer.load_states``
   files are: load only checkpoints you trust.

Exact resume
------------
A run resumed from a checkpoint continues bit for bit like the uninterrupted run (same
parameters, same loss scale, same skipped steps), on the same machine and MXNet build, when:

* the net has no random layers (no ``Dropout``, no random augmentation inside the graph).
  MXNet 1.9.1 cannot save or restore the state of ``mx.random``, so a random layer draws
  other numbers after a resume;
* the batches come from a seeded NumPy generator whose state goes into ``extra`` (e.g.
  ``extra={"rng": rng.get_state(), "step": step}``, or
  :meth:`mxmixed.tutorial.data.SeededSampler.get_state`), and not from NumPy's global generator
  or Gluon's ``RandomSampler``;
* the resumed process builds the same net and trainer the same way (``mxmixed.init()``
  before the net is built, the same optimizer class, :func:`mxmixed.init_trainer`) and
  calls :func:`load` before its first step.

The optimizer is restored as saved (learning rate and schedule included), as
``Trainer.load_states`` does; only its class must match the trainer's.
"""
import json
import os
import pickle
import secrets
import warnings
import zipfile

import numpy as np

import mxnet as mx
from mxnet import gluon

from ._version import __version__

__all__ = ["save", "load", "read_manifest", "CheckpointError", "FORMAT_VERSION"]

FORMAT = "mxmixed-checkpoint"
FORMAT_VERSION = 1

_MANIFEST = "manifest.json"
_PARAMS = "params.nd"
_TRAINER = "trainer.states"
_SCALER = "scaler.json"
_EXTRA = "extra.pkl"


class CheckpointError(ValueError):
    """A checkpoint is truncated, corrupt, not a checkpoint, or does not fit the net/trainer."""


# ----------------------------------------------------------------------------- helpers
def _named_params(net):
    if not isinstance(net, gluon.Block):
        raise TypeError("net must be a gluon Block, got %s" % type(net).__name__)
    return net._collect_params_with_prefix()


def _dtype_name(dtype):
    return np.dtype(dtype).name


def _describe(shape, dtype):
    return "%s %s" % (tuple(shape), dtype)


def _shape_fits(own, saved):
    """Whether a parameter of shape ``own`` (0 or -1: not known yet) can take ``saved``."""
    if own is None or len(own) == 0:
        return True
    return len(own) == len(saved) and all(mine in (0, -1, theirs)
                                          for mine, theirs in zip(own, saved))


def _trainer_params(trainer, named):
    """(name, shape, dtype) of each trainer parameter, in the trainer's order."""
    by_id = {}
    for name, param in named.items():
        by_id.setdefault(id(param), name)
    rows = []
    for param in trainer._params:
        name = by_id.get(id(param))
        rows.append({"name": name, "shape": list(param.shape or ()),
                     "dtype": _dtype_name(param.dtype)})
    return rows


def _default_scaler(trainer):
    if trainer is None:
        return None
    from .training import loss_scaler

    try:
        return loss_scaler(trainer)
    except ValueError:
        return None


def _check_trainer(trainer):
    if trainer is not None and not isinstance(trainer, gluon.Trainer):
        raise TypeError("trainer must be a gluon.Trainer, got %s" % type(trainer).__name__)


def _check_scaler(scaler):
    if scaler is not None and not (hasattr(scaler, "state_dict")
                                   and hasattr(scaler, "load_state_dict")):
        raise TypeError("scaler must be an mxmixed.LossScaler (something with state_dict and "
                        "load_state_dict), got %s" % type(scaler).__name__)


def _trainer_states_bytes(trainer, scratch):
    fname = os.path.join(scratch, "trainer.states")
    trainer.save_states(fname)
    with open(fname, "rb") as fileobj:
        return fileobj.read()


def _params_bytes(named, scratch):
    arrays = {}
    for name, param in named.items():
        try:
            arrays[name] = param._reduce()
        except (RuntimeError, mx.base.MXNetError) as err:
            raise ValueError("parameter '%s' has no data to save (%s); initialize the net and, "
                             "for deferred shapes, run one forward pass first"
                             % (name, str(err).splitlines()[0])) from None
    fname = os.path.join(scratch, "params.nd")
    mx.nd.save(fname, arrays)
    with open(fname, "rb") as fileobj:
        data = fileobj.read()
    rows = [{"name": n, "shape": list(a.shape), "dtype": _dtype_name(a.dtype)}
            for n, a in arrays.items()]
    return data, rows


# ----------------------------------------------------------------------------- save
def save(path, net, trainer=None, scaler=None, extra=None):
    """Write a checkpoint of ``net`` (and a trainer, a loss scaler and ``extra``) atomically.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file. An existing file there is replaced only once the new one is
        complete and on disk.
    net : mxnet.gluon.Block
        The network; all its parameters are saved, BatchNorm's running statistics included.
    trainer : mxnet.gluon.Trainer, optional
        Its optimizer and optimizer states are saved through ``Trainer.save_states``.
    scaler : mxmixed.LossScaler, optional
        The loss scaler to save. By default the one :func:`mxmixed.init_trainer` attached to
        ``trainer``, if any.
    extra : object, optional
        Anything picklable that the resume needs, e.g.
        ``{"rng": rng.get_state(), "step": step}``; :func:`load` returns it.

    Raises
    ------
    TypeError
        For a net that is not a Gluon Block, a trainer that is not a Gluon Trainer, or a
        scaler without ``state_dict``.
    ValueError
        When ``extra`` cannot be pickled or a parameter has no data yet.
    OSError
        When the file cannot be written; an earlier checkpoint at ``path`` is then intact and
        no temporary file is left.
    """
    import tempfile

    path = os.fspath(path)
    named = _named_params(net)
    _check_trainer(trainer)
    if scaler is None:
        scaler = _default_scaler(trainer)
    _check_scaler(scaler)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError("cannot write checkpoint '%s': the folder '%s' does not exist"
                                % (path, folder))
    if os.path.isdir(path):
        raise IsADirectoryError("cannot write checkpoint '%s': it is a folder" % path)
    if extra is not None:
        try:
            extra_bytes = pickle.dumps(extra, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:  # pickle raises many types (PicklingError, TypeError, ...)
            raise ValueError("extra cannot be pickled: %s" % err) from None
    scaler_bytes = None
    if scaler is not None:
        try:
            scaler_bytes = json.dumps(scaler.state_dict(), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as err:
            raise ValueError("the scaler's state_dict is not plain JSON data: %s" % err) from None

    with tempfile.TemporaryDirectory(prefix="mxmixed-ckpt-") as scratch:
        params_bytes, rows = _params_bytes(named, scratch)
        trainer_bytes = None
        trainer_info = None
        if trainer is not None:
            trainer_bytes = _trainer_states_bytes(trainer, scratch)
            trainer_info = {"optimizer": type(trainer._optimizer).__name__,
                            "params": _trainer_params(trainer, named)}

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "mxmixed_version": __version__, "mxnet_version": mx.__version__,
                "params": rows, "trainer": trainer_info,
                "has_scaler": scaler_bytes is not None, "has_extra": extra is not None}
    members = [(_MANIFEST, json.dumps(manifest, indent=1).encode("utf-8")),
               (_PARAMS, params_bytes)]
    if trainer_bytes is not None:
        members.append((_TRAINER, trainer_bytes))
    if scaler_bytes is not None:
        members.append((_SCALER, scaler_bytes))
    if extra is not None:
        members.append((_EXTRA, extra_bytes))
    _atomic_write(path, members)


def _open_temp(path):
    folder, base = os.path.split(os.path.abspath(path))
    while True:
        tmp = os.path.join(folder, ".%s.%d.%s.tmp" % (base, os.getpid(), secrets.token_hex(4)))
        try:
            # 0o666 and the umask, as open() would give the final file.
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue


def _atomic_write(path, members):
    tmp, fd = _open_temp(path)
    try:
        with os.fdopen(fd, "wb") as fileobj:
            with zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED,
                                 allowZip64=True) as archive:
                for name, data in members:
                    archive.writestr(name, data)
            fileobj.flush()
            os.fsync(fileobj.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _fsync_folder(os.path.dirname(os.path.abspath(path)))


def _fsync_folder(folder):
    # Makes the rename itself durable on POSIX; not possible (nor needed) on Windows.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- reading
def _corrupt(path, detail):
    return CheckpointError("checkpoint '%s' is truncated or corrupt (%s); it cannot be loaded. "
                           "Use an earlier checkpoint." % (path, detail))


def _read_members(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError("no checkpoint at '%s'" % path)
    if os.path.isdir(path):
        raise IsADirectoryError("'%s' is a folder, not a checkpoint file" % path)
    with open(path, "rb") as fileobj:
        head = fileobj.read(4)
    if head[:4] != b"PK\x03\x04":
        if not head:
            raise _corrupt(path, "the file is empty")
        raise CheckpointError("'%s' is not an mxmixed checkpoint (not a ZIP archive written by "
                              "mxmixed.checkpoint.save; a file from net.save_parameters loads "
                              "with net.load_parameters)" % path)
    try:
        with zipfile.ZipFile(path, "r") as archive:
            names = archive.namelist()
            if _MANIFEST not in names:
                raise CheckpointError("'%s' is a ZIP archive but not an mxmixed checkpoint "
                                      "(no %s)" % (path, _MANIFEST))
            members = {name: archive.read(name) for name in names}
    except CheckpointError:
        raise
    except zipfile.BadZipFile as err:
        if "not a zip file" in str(err):
            raise _corrupt(path, "its end, the ZIP central directory, is missing") from None
        raise _corrupt(path, str(err)) from None
    except Exception as err:  # EOFError, zlib.error, struct.error, a bad seek...
        raise _corrupt(path, "%s: %s" % (type(err).__name__, err)) from None
    return path, members


def _parse_manifest(path, members):
    try:
        manifest = json.loads(members[_MANIFEST].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise _corrupt(path, "unreadable manifest: %s" % err) from None
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
            raise _corrupt(path, "the manifest lacks %r" % key)
    for name, flag in ((_TRAINER, manifest["trainer"] is not None),
                       (_SCALER, manifest["has_scaler"]), (_EXTRA, manifest["has_extra"]),
                       (_PARAMS, True)):
        if flag and name not in members:
            raise _corrupt(path, "the member %s is missing" % name)
    return manifest


def read_manifest(path):
    """The manifest of a checkpoint: versions, parameter names, shapes and dtypes.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    dict
        As described in the module docstring.
    """
    path, members = _read_members(path)
    return _parse_manifest(path, members)


def _load_arrays(path, members, manifest):
    try:
        arrays = mx.nd.load_frombuffer(members[_PARAMS])
    except mx.base.MXNetError as err:
        raise _corrupt(path, "unreadable parameters: %s" % str(err).splitlines()[0]) from None
    if not isinstance(arrays, dict):
        raise _corrupt(path, "the parameters are not a named dictionary")
    listed = {row["name"]: row for row in manifest["params"]}
    if set(listed) != set(arrays):
        raise _corrupt(path, "the manifest and the parameters name different arrays")
    for name, array in arrays.items():
        row = listed[name]
        if tuple(row["shape"]) != array.shape or row["dtype"] != _dtype_name(array.dtype):
            raise _corrupt(path, "parameter '%s' differs from the manifest" % name)
    return arrays


def _net_mismatches(named, manifest):
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
        own_dtype = _dtype_name(param.dtype)
        if not _shape_fits(own_shape, shape) or own_dtype != dtype:
            problems.append("parameter '%s': the net expects %s, the checkpoint holds %s"
                            % (name, _describe(own_shape if own_shape is not None else (),
                                               own_dtype), _describe(shape, dtype)))
    for name in saved:
        if name not in named:
            problems.append("the checkpoint holds parameter '%s', which the net lacks" % name)
    return problems


def _load_trainer_states(path, members, manifest, trainer, named):
    info = manifest["trainer"]
    if info is None:
        raise CheckpointError("checkpoint '%s' holds no trainer states; call load without a "
                              "trainer to restore only the net" % path)
    optimizer = type(trainer._optimizer).__name__
    if info.get("optimizer") != optimizer:
        raise CheckpointError("checkpoint '%s' was written with optimizer %s, this trainer uses "
                              "%s" % (path, info.get("optimizer"), optimizer))
    saved = info.get("params", [])
    mine = _trainer_params(trainer, named)
    if len(saved) != len(mine):
        raise CheckpointError("checkpoint '%s' has optimizer states for %d parameters, this "
                              "trainer has %d" % (path, len(saved), len(mine)))
    for k, (theirs, ours) in enumerate(zip(saved, mine)):
        same_name = theirs["name"] is None or ours["name"] is None \
            or theirs["name"] == ours["name"]
        if not same_name or theirs["dtype"] != ours["dtype"] or \
                not _shape_fits(tuple(ours["shape"]), tuple(theirs["shape"])):
            raise CheckpointError(
                "checkpoint '%s' does not fit this trainer: its parameter %d is '%s' %s, the "
                "trainer's is '%s' %s" % (path, k, theirs["name"],
                                         _describe(theirs["shape"], theirs["dtype"]),
                                         ours["name"], _describe(ours["shape"], ours["dtype"])))
    data = members[_TRAINER]
    try:
        states = pickle.loads(data)
    except Exception as err:  # a damaged pickle raises almost anything
        raise _corrupt(path, "unreadable trainer states: %s: %s"
                       % (type(err).__name__, err)) from None
    if not (isinstance(states, tuple) and len(states) == 2 and isinstance(states[0], dict)
            and isinstance(states[1], mx.optimizer.Optimizer)):
        raise _corrupt(path, "the trainer states are not (states, optimizer)")
    return data


def _load_scaler_state(path, members):
    from .scaler import LossScaler

    try:
        state = json.loads(members[_SCALER].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise _corrupt(path, "unreadable loss-scaler state: %s" % err) from None
    try:
        LossScaler().load_state_dict(state)  # validate on a throwaway scaler first
    except (ValueError, TypeError) as err:
        raise _corrupt(path, "bad loss-scaler state: %s" % err) from None
    return state


# ----------------------------------------------------------------------------- load
def load(path, net, trainer=None, scaler=None):
    """Restore a checkpoint written by :func:`save` into ``net`` (and a trainer and scaler).

    Everything is read and checked first: a truncated or corrupt file, or one that does not
    fit ``net`` or ``trainer``, raises before anything is changed.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    net : mxnet.gluon.Block
        Built like the saved one: the same structural parameter names, shapes and dtypes.
    trainer : mxnet.gluon.Trainer, optional
        Gets the saved optimizer and optimizer states (``Trainer.load_states``). It must
        train the same parameters, in the same order, with the same optimizer class.
    scaler : mxmixed.LossScaler, optional
        Gets the saved loss-scaler state. By default the scaler attached to ``trainer`` by
        :func:`mxmixed.init_trainer`, if any.

    Returns
    -------
    object
        The ``extra`` given to :func:`save` (None if there was none).

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path``.
    CheckpointError
        (a ValueError) When the file is truncated, corrupt or not a checkpoint, or does not
        fit: the message names the first mismatching parameter (name, expected and found
        shape and dtype) or the missing or extra names.
    """
    path, members = _read_members(path)
    manifest = _parse_manifest(path, members)
    named = _named_params(net)
    _check_trainer(trainer)
    explicit_scaler = scaler is not None
    if scaler is None:
        scaler = _default_scaler(trainer)
    _check_scaler(scaler)

    # 1. check everything
    problems = _net_mismatches(named, manifest)
    if problems:
        more = " (and %d more mismatches)" % (len(problems) - 1) if len(problems) > 1 else ""
        raise CheckpointError("checkpoint '%s' does not fit this net: %s%s. Nothing was loaded."
                              % (path, problems[0], more))
    arrays = _load_arrays(path, members, manifest)
    trainer_data = None
    if trainer is not None:
        trainer_data = _load_trainer_states(path, members, manifest, trainer, named)
    scaler_state = None
    if manifest["has_scaler"]:
        scaler_state = _load_scaler_state(path, members)
        if scaler is None and trainer is not None:
            warnings.warn("checkpoint '%s' holds a loss-scaler state, but no scaler was given "
                          "and the trainer has none attached: the scale is not restored"
                          % path, stacklevel=2)
    elif scaler is not None:
        if explicit_scaler:
            raise CheckpointError("checkpoint '%s' holds no loss-scaler state to load into the "
                                  "given scaler" % path)
        warnings.warn("checkpoint '%s' holds no loss-scaler state; the trainer's scaler keeps "
                      "its current state" % path, stacklevel=2)
    extra = None
    if manifest["has_extra"]:
        try:
            extra = pickle.loads(members[_EXTRA])
        except Exception as err:  # a damaged pickle raises almost anything
            raise _corrupt(path, "unreadable extra: %s: %s" % (type(err).__name__, err)) from None

    # 2. apply it
    for name, param in named.items():
        if param._data is not None:
            param.set_data(arrays[name])
        else:
            param._load_init(arrays[name], None)
    if trainer_data is not None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mxmixed-ckpt-") as scratch:
            fname = os.path.join(scratch, "trainer.states")
            with open(fname, "wb") as fileobj:
                fileobj.write(trainer_data)
            trainer.load_states(fname)
    if scaler_state is not None and scaler is not None:
        mirror = getattr(scaler, "_mirror", None)
        scaler.load_state_dict(scaler_state)
        # LossScaler.load_state_dict re-runs __init__, which drops the link to AMP's global
        # scaler (read by SoftmaxOutput and MXNet's other loss-output ops); put it back.
        if mirror is not None and getattr(scaler, "_mirror", None) is None:
            scaler._mirror = mirror
            scaler._sync_mirror()
    return extra
