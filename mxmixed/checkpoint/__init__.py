"""One-file training checkpoints: parameters, trainer states, loss scaler and your own state.

:func:`save` writes everything an exact resume needs into a single file, atomically;
:func:`load` checks that the file is whole and fits the net before it changes anything, then
restores it all.

The file format
---------------
A checkpoint is an uncompressed ZIP archive (:mod:`zipfile`, ``ZIP_STORED``; every member
carries a CRC-32 that is checked on reading). Nothing in it is a pickle: loading a checkpoint,
even one from someone else, runs no code. Its members (format version 2):

``manifest.json``
    ``{"format": "mxmixed-checkpoint", "format_version": 2, "mxmixed_version": ...,
    "mxnet_version": ..., "params": [{"name", "shape", "dtype"}, ...], "trainer": {...} or
    null, "has_scaler": bool, "has_extra": bool}``. Parameter names are the structural names
    of ``Block.save_parameters`` (``features.0.weight``, ``hidden.bias``), which do not depend
    on how many blocks the process created before, unlike ``Parameter.name``.
``params.nd``
    All parameters, BatchNorm's running mean and variance included, in the format of
    ``mx.nd.save`` and under the same names as ``net.save_parameters`` writes them: unzip it
    and ``net.load_parameters('params.nd')`` loads it.
``trainer.json`` and ``trainer.nd`` (optional)
    The optimizer's settings and counters (learning rate, schedule, update counts, ...) and the
    layout of its per-parameter states as JSON, and the states themselves (the momentum and,
    for ``multi_precision``, the float32 master weights of float16 parameters) in the format of
    ``mx.nd.save``. This is what ``Trainer.save_states`` stores, without its pickle.
``scaler.json`` (optional)
    :meth:`mxmixed.LossScaler.state_dict`.
``extra.json`` and ``extra.nd`` (optional)
    Your ``extra``: None, bool, int, float, str, list, tuple and dict (any of these as keys),
    NumPy arrays and scalars of numbers (base64 in the JSON), and NDArrays (in ``extra.nd``).
    ``rng.get_state()`` of a NumPy ``RandomState`` is such data. Anything else is refused by
    :func:`save`.

Reading checks sizes before it reads: at most 16 members, none compressed, none declaring more
bytes than the file holds (a "zip bomb" is refused without inflating anything); JSON members of
at most 16 MiB nested at most 100 levels deep (``mxmixed._files.untrusted.MAX_JSON_DEPTH``);
array members whose every declared shape fits in the bytes that follow it. A refusal is a
:class:`CheckpointError` of one line that names the file and the limit. What is read is then
checked by kind and range, and refused by a :class:`CheckpointError` too: ``extra``'s values
(named where they sit), array names that are not UTF-8, and the optimizer's settings and
states, at :func:`load` rather than at the next step (finite learning rate and weight decay,
``clip_gradient`` None or above 0, counts as counts, each state shaped as its parameter).

Format 1 (written by earlier mxmixed builds) stored the trainer states and ``extra`` as pickles
(``trainer.states``, ``extra.pkl``), which can run code when loaded. :func:`load` reads such a
file only with ``trusted=True``; without it, it refuses in one line before unpickling anything
(a format 1 file without trainer states or extra loads as it is). Saving it again writes
format 2.

Writing is atomic (:mod:`mxmixed._files.atomic`, the one writer of checkpoints and converted models):
the archive goes to a temporary file next to ``path`` (``.<name>.<pid>.<tag>.tmp``), is
fsync'ed, replaces ``path`` with ``os.replace``, and the folder is fsync'ed. Nothing is
written anywhere else (no ``/tmp``). A failure while writing (a full disk, Ctrl-C, SIGTERM)
removes the temporary file and leaves an earlier checkpoint at ``path`` as it was; a SIGTERM is
then delivered again and ends the process as usual. SIGINT and SIGTERM are held back during the
rename itself, so that ``path`` always holds the earlier checkpoint or the new one, whole. A
process killed outright (SIGKILL, power loss) cannot clean up: it may leave such a temporary
file behind, never a partial file at ``path``, and the next :func:`save` to the same ``path``
removes the temporary files of processes that no longer run. A ``path`` that is a symbolic
link, a device, a FIFO or a socket is refused (an ``OSError``) and left as it is.

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

The optimizer is restored as saved (learning rate, update counters and schedule included), as
``Trainer.load_states`` does, but onto the trainer's own optimizer object: its class must match
the saved one, and a saved learning-rate schedule needs a schedule of the same class on the
trainer, whose settings and position are then restored.
"""
import json
import os
import warnings
import zipfile
from typing import Any, Optional, Union

import mxnet as mx

from .._core.dtypes import numpy_name
from .._core.errors import one_line
from .._files import atomic, untrusted
from ._format import (EXTRA, FORMAT, FORMAT_VERSION, MANIFEST, PARAMS, PICKLED_VERSION,
                           SCALER, TRAINER_JSON, TRAINER_ND, CheckpointError, check_scaler,
                           check_scaler_state, corrupt, extra_bytes, load_arrays,
                           named_params, net_mismatches, parse_manifest, read_extra,
                           read_manifest, read_members)
from ._legacy import unpickle
from ._trainer import (TrainerData, check_trainer, check_trainer_states, optimizer_json,
                            set_trainer_json, set_trainer_states, trainer_params)
from .._version import __version__
from ..scaler import LossScaler
from ..training import loss_scaler

# unpickle, imported above, also serves the tutorial's Module API loop (MXNet's own pickle of
# optimizer states, written by the same process); it is not for users
__all__ = ["save", "load", "read_manifest", "CheckpointError", "FORMAT_VERSION"]


def _default_scaler(trainer):
    if trainer is None:
        return None
    try:
        return loss_scaler(trainer)
    except ValueError:
        return None


def _params_bytes(named):
    arrays = {}
    for name, param in named.items():
        try:
            arrays[name] = param._reduce()
        except (RuntimeError, mx.base.MXNetError) as err:
            raise ValueError("parameter '%s' has no data to save (%s); initialize the net and, "
                             "for deferred shapes, run one forward pass first"
                             % (name, one_line(err))) from None
    rows = [{"name": n, "shape": list(a.shape), "dtype": numpy_name(a.dtype)}
            for n, a in arrays.items()]
    return untrusted.nd_bytes(arrays), rows


def save(path: Union[str, "os.PathLike[str]"], net: mx.gluon.Block,
         trainer: Optional[mx.gluon.Trainer] = None, scaler: Optional[LossScaler] = None,
         extra: Any = None) -> None:
    """Write a checkpoint of ``net`` (and a trainer, a loss scaler and ``extra``) atomically.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file. An existing file there is replaced only once the new one is
        complete and on disk. A symbolic link, a device, a FIFO or a socket there is refused.
    net : mxnet.gluon.Block
        The network; all its parameters are saved, BatchNorm's running statistics included.
    trainer : mxnet.gluon.Trainer, optional
        Its optimizer (settings, counters, schedule) and optimizer states are saved: what
        ``Trainer.save_states`` would write, without pickle.
    scaler : mxmixed.LossScaler, optional
        The loss scaler to save. By default the one :func:`mxmixed.init_trainer` attached to
        ``trainer``, if any.
    extra : object, optional
        Plain data that the resume needs, e.g. ``{"rng": rng.get_state(), "step": step}``:
        None, bool, int, float, str, list, tuple, dict, NumPy arrays and scalars of numbers,
        NDArrays. :func:`load` returns it.

    Returns
    -------
    None

    Raises
    ------
    TypeError
        For a net that is not a Gluon Block, a trainer that is not a Gluon Trainer, or a
        scaler without ``state_dict``.
    ValueError
        When ``extra`` (or an optimizer attribute) holds anything else than the data above,
        naming where, or a parameter has no data yet.
    OSError
        When the file cannot be written (one line, e.g. ``[Errno 28] No space left on
        device: 'ckpt.mxc'``); an earlier checkpoint at ``path`` is then intact and no
        temporary file is left.

    Examples
    --------
    >>> import os, tempfile
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> with mxmixed.amp_scope():
    ...     net = gluon.nn.Dense(10, in_units=64)
    ...     net.initialize()
    ...     trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...     scaler = mxmixed.init_trainer(trainer, scaler=128)
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.mxmixed")
    >>> mxmixed.checkpoint.save(path, net, trainer, extra={"epoch": 3})
    >>> os.path.isfile(path)
    True
    """
    path = os.fspath(path)
    named = named_params(net)
    check_trainer(trainer)
    if scaler is None:
        scaler = _default_scaler(trainer)
    check_scaler(scaler)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError("cannot write checkpoint '%s': the folder '%s' does not exist"
                                % (path, folder))
    kind = atomic.special_file(path)
    if kind == "a folder":
        raise IsADirectoryError("cannot write checkpoint '%s': it is a folder" % path)
    if kind is not None:
        raise atomic.NotRegularFileError("cannot write checkpoint '%s': it is %s, not a regular "
                                      "file, and is never replaced (remove it, or write "
                                      "elsewhere)" % (path, kind))
    extra_members = extra_bytes(extra) if extra is not None else []
    scaler_bytes = None
    if scaler is not None:
        try:
            scaler_bytes = json.dumps(scaler.state_dict(), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as err:
            raise ValueError("the scaler's state_dict is not plain JSON data: %s" % err) from None

    params_bytes, rows = _params_bytes(named)
    trainer_members = []
    trainer_info = None
    if trainer is not None:
        arrays = {}
        state = optimizer_json(trainer, arrays)
        trainer_members = [(TRAINER_JSON, json.dumps(state).encode("utf-8")),
                           (TRAINER_ND, untrusted.nd_bytes(arrays))]
        trainer_info = {"optimizer": type(trainer._optimizer).__name__,
                        "params": trainer_params(trainer, named)}

    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                "mxmixed_version": __version__, "mxnet_version": mx.__version__,
                "params": rows, "trainer": trainer_info,
                "has_scaler": scaler_bytes is not None, "has_extra": extra is not None}
    members = [(MANIFEST, json.dumps(manifest, indent=1).encode("utf-8")),
               (PARAMS, params_bytes)] + trainer_members
    if scaler_bytes is not None:
        members.append((SCALER, scaler_bytes))
    members += extra_members
    atomic.atomic_write(path, _archive(members))


def _archive(members):
    def write(temp):
        with open(temp, "wb") as fileobj:
            with zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED,
                                 allowZip64=True) as archive:
                for name, data in members:
                    archive.writestr(name, data)
    return write


# ----------------------------------------------------------------------------- load
def load(path: Union[str, "os.PathLike[str]"], net: mx.gluon.Block,
         trainer: Optional[mx.gluon.Trainer] = None, scaler: Optional[LossScaler] = None,
         trusted: bool = False) -> Any:
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
        Gets the saved optimizer settings and states (what ``Trainer.load_states`` restores,
        without unpickling). It must train the same parameters (matched by their structural
        names), with the same optimizer class.
    scaler : mxmixed.LossScaler, optional
        Gets the saved loss-scaler state. By default the scaler attached to ``trainer`` by
        :func:`mxmixed.init_trainer`, if any.
    trusted : bool, default False
        Needed only for a checkpoint in format 1 (written by an older mxmixed) that holds
        trainer states or ``extra``: those are pickles, and unpickling a file runs any code
        its author put there. Pass True only for a file you trust. A format 2 file never
        needs it: nothing in it is a pickle.

    Returns
    -------
    object
        The ``extra`` given to :func:`save` (None if there was none).

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path``.
    CheckpointError
        (a ValueError) When the file is truncated, corrupt or not a checkpoint, breaks a size
        limit (members, shapes, JSON nesting), is a format 1 file with pickles and
        ``trusted`` is False, or does not fit: the message names the first mismatching
        parameter (name, expected and found shape and dtype) or the missing or extra names.

    Examples
    --------
    >>> import os, tempfile
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> def build():
    ...     with mxmixed.amp_scope():
    ...         net = gluon.nn.Dense(10, in_units=64)
    ...         net.initialize()
    ...         trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...         return net, trainer, mxmixed.init_trainer(trainer)
    >>> net, trainer, scaler = build()
    >>> scaler.update(overflow=True)                      # the scale is part of the state
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.mxmixed")
    >>> mxmixed.checkpoint.save(path, net, trainer, extra={"epoch": 3})
    >>> net2, trainer2, scaler2 = build()
    >>> mxmixed.checkpoint.load(path, net2, trainer2)
    {'epoch': 3}
    >>> scaler2.loss_scale
    32768.0
    >>> bool((net2.weight.data() == net.weight.data()).min())
    True
    """
    path, members = read_members(path)
    manifest = parse_manifest(path, members)
    if manifest["format_version"] == PICKLED_VERSION and not trusted and (
            manifest["has_extra"] or (trainer is not None and manifest["trainer"] is not None)):
        raise CheckpointError(
            "checkpoint '%s' is in format 1, whose trainer states and extra are pickles that can "
            "run code when loaded; pass trusted=True only if you trust its source (saving it "
            "again writes format 2, without pickle). Nothing was loaded." % path)
    named = named_params(net)
    check_trainer(trainer)
    explicit_scaler = scaler is not None
    if scaler is None:
        scaler = _default_scaler(trainer)
    check_scaler(scaler)

    # 1. check everything
    problems = net_mismatches(named, manifest)
    if problems:
        more = " (and %d more mismatches)" % (len(problems) - 1) if len(problems) > 1 else ""
        raise CheckpointError("checkpoint '%s' does not fit this net: %s%s. Nothing was loaded."
                              % (path, problems[0], more))
    arrays = load_arrays(path, members, manifest)
    trainer_data = None
    if trainer is not None:
        trainer_data = check_trainer_states(path, members, manifest, trainer, named)
    scaler_state = None
    if manifest["has_scaler"]:
        scaler_state = check_scaler_state(path, members)
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
    if manifest["has_extra"] and manifest["format_version"] != PICKLED_VERSION:
        extra = read_extra(path, members)
    elif manifest["has_extra"]:  # format 1, trusted=True
        extra = unpickle(path, members[EXTRA], "extra")

    # 2. apply it
    for name, param in named.items():
        if param._data is not None:
            param.set_data(arrays[name])
        else:
            param._load_init(arrays[name], None)
    if isinstance(trainer_data, TrainerData):
        set_trainer_json(trainer, trainer_data)
    elif trainer_data is not None:  # format 1, trusted=True
        set_trainer_states(trainer, trainer_data)
    if scaler_state is not None and scaler is not None:
        scaler.load_state_dict(scaler_state)
    return extra
