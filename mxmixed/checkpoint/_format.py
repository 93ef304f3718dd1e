"""The checkpoint file format of :mod:`mxmixed.checkpoint`: members, manifest, and checks.

Everything here reads and checks; nothing changes a net, a trainer or a scaler. The format is
described in :mod:`mxmixed.checkpoint`; the plain data of ``extra`` and of the optimizer is
:mod:`mxmixed.checkpoint._plain`, the trainer's part :mod:`mxmixed.checkpoint._trainer`.
"""
import json
import os
import re
import zipfile
from typing import Any, Dict, Union


import mxnet as mx
from mxnet import gluon

from .._core.dtypes import numpy_name
from .._core.errors import one_line
from .._files import untrusted
from ._plain import decode_plain, encode_plain
from .._version import __version__
from ..scaler import LossScaler

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
MAX_JSON_BYTES = 16 << 20  # Python objects take ~20x the bytes of dense JSON: ~300 MB at most


class CheckpointError(ValueError):
    """A checkpoint is truncated, corrupt, not a checkpoint, or does not fit the net/trainer.

    Its message is one line, whatever a crafted file put into the values it quotes.
    """

    def __init__(self, message):
        super().__init__(re.sub(r"\s*[\r\n]+\s*", " ", str(message)))


# ----------------------------------------------------------------------------- helpers


def named_params(net):
    if not isinstance(net, gluon.Block):
        raise TypeError("net must be a gluon Block, got %s" % type(net).__name__)
    return net._collect_params_with_prefix()


def describe(shape, dtype):
    return "%s %s" % (tuple(shape), dtype)


def shape_fits(own, saved):
    """Whether a parameter of shape ``own`` (0 or -1: not known yet) can take ``saved``."""
    if own is None or len(own) == 0:
        return True
    return len(own) == len(saved) and all(mine in (0, -1, theirs)
                                          for mine, theirs in zip(own, saved))


def check_scaler(scaler):
    if scaler is not None and not (hasattr(scaler, "state_dict")
                                   and hasattr(scaler, "load_state_dict")):
        raise TypeError("scaler must be an mxmixed.LossScaler (something with state_dict and "
                        "load_state_dict), got %s" % type(scaler).__name__)


def extra_bytes(extra):
    """The members that store ``extra`` without pickle: extra.json and, for NDArrays, extra.nd."""
    arrays = {}
    data = json.dumps(encode_plain(extra, arrays, "extra")).encode("utf-8")
    if len(data) > MAX_JSON_BYTES:  # load would refuse it: say so now, not at the resume
        raise ValueError("extra takes %d bytes of JSON, more than the %d that a checkpoint "
                         "reads back; pass large arrays as NDArrays (mx.nd.array(...)), which "
                         "are stored beside the JSON" % (len(data), MAX_JSON_BYTES))
    members = [(EXTRA_JSON, data)]
    if arrays:
        members.append((EXTRA_ND, untrusted.nd_bytes(arrays)))
    return members


def read_extra(path, members):
    data = json_member(path, members, EXTRA_JSON)
    arrays = nd_member(path, members, EXTRA_ND) if EXTRA_ND in members else {}
    try:
        return decode_plain(data, arrays, where="extra")
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
    if not os.path.isfile(path):  # a FIFO would block the read, /dev/zero never end it
        raise CheckpointError("'%s' is not a regular file (a device, a FIFO or a socket); "
                              "refusing to read it as a checkpoint" % path)
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
        untrusted.check_json_depth(data, "checkpoint '%s': member %s" % (path, name))
    except untrusted.UnsafeFileError as err:
        raise CheckpointError(str(err)) from None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise corrupt(path, "unreadable %s: %s" % (name, err)) from None


def nd_member(path, members, name):
    """An array member (``mx.nd.save``'s format), its declared sizes checked before loading."""
    data = members[name]
    try:
        untrusted.check_nd_bytes(data, "checkpoint '%s': member %s" % (path, name))
    except untrusted.UnsafeFileError as err:
        raise CheckpointError(str(err)) from None
    try:
        arrays = mx.nd.load_frombuffer(data)
    except UnicodeDecodeError:  # MXNet reads names as raw bytes; Python decodes them as UTF-8
        raise corrupt(path, "unreadable %s: an array name is not UTF-8" % name) from None
    except Exception as err:  # MXNetError, or a bare Exception ("unknown storage type: -1")
        raise corrupt(path, "unreadable %s: %s" % (name, one_line(err))) from None
    if isinstance(arrays, list) and not arrays:
        return {}
    if not isinstance(arrays, dict):
        raise corrupt(path, "the arrays of %s are not named" % name)
    return arrays


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
    if type(version) is not int or version < PICKLED_VERSION:
        raise corrupt(path, "the manifest's format version %.20r is not a version" % (version,))
    if version > FORMAT_VERSION:
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


def read_manifest(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
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
        if tuple(row["shape"]) != array.shape or row["dtype"] != numpy_name(array.dtype):
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
        own_dtype = numpy_name(param.dtype)
        if not shape_fits(own_shape, shape) or own_dtype != dtype:
            problems.append("parameter '%s': the net expects %s, the checkpoint holds %s"
                            % (name, describe(own_shape if own_shape is not None else (),
                                               own_dtype), describe(shape, dtype)))
    for name in saved:
        if name not in named:
            problems.append("the checkpoint holds parameter '%s', which the net lacks" % name)
    return problems


def check_scaler_state(path, members):
    state = json_member(path, members, SCALER)
    try:
        LossScaler().load_state_dict(state)  # validate on a throwaway scaler first
    except Exception as err:  # noqa: BLE001 -- whatever a crafted state makes it raise
        raise corrupt(path, "bad loss-scaler state: %s" % err) from None
    return state
