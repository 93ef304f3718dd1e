"""Symbol checkpoint files: checked loading, atomic saving, and params checked against a graph.

Every problem is a :class:`~mxmixed.symbolic.ConversionError` of one line. Re-exported by
:mod:`mxmixed.symbolic`.
"""
import json
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

import mxnet as mx

from .._core.graph import Graph, as_graph, load_graph, symbol_json
from .._core.convert import ConversionError
from .._core.dtypes import BFLOAT16, FLOAT16, FLOAT32, dtype_name
from .._core.errors import one_line
from .._core.params import is_param_name
from .._files.atomic import atomic_write_group
from .._files.untrusted import (MAX_GRAPH_BYTES, UnsafeFileError, check_graph, check_json_depth,
                          check_nd_bytes, json_object_pairs, nd_bytes)

__all__ = ["load_checkpoint", "save_checkpoint", "check_params", "checkpoint_paths", "data_inputs"]

# (sym, arg_params, aux_params), as mx.model.load_checkpoint returns them
Checkpoint = Tuple[mx.sym.Symbol, Dict[str, mx.nd.NDArray], Dict[str, mx.nd.NDArray]]


# ------------------------------------------------------------------ checkpoint files
def checkpoint_paths(prefix: str, epoch: int) -> Tuple[str, str]:
    """The two files of a checkpoint.

    Parameters
    ----------
    prefix : str
    epoch : int

    Returns
    -------
    tuple of str
        ``(prefix-symbol.json, prefix-%04d.params)``.
    """
    return "%s-symbol.json" % prefix, "%s-%04d.params" % (prefix, epoch)


def _read_bytes(path, what, limit=None):
    if not os.path.exists(path):
        raise ConversionError("%s file %s does not exist" % (what, path))
    # a FIFO would block the read and /dev/zero never end it (a folder fails to open below)
    if not (os.path.isfile(path) or os.path.isdir(path)):
        raise ConversionError("%s file %s is not a regular file (a device, a FIFO or a "
                              "socket); refusing to read it" % (what, path))
    if limit is not None and os.path.isfile(path) and os.path.getsize(path) > limit:
        raise ConversionError("%s file %s is refused: it has %d bytes, more than the limit of %d"
                              % (what, path, os.path.getsize(path), limit))
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise ConversionError("cannot read %s file %s: %s"
                              % (what, path, err.strerror or err)) from None


def _check_prefix(prefix, epoch):
    """A PREFIX that is a folder, or an epoch without a params file: say what exists."""
    name = os.path.basename(prefix)
    if os.path.isdir(prefix):
        found = sorted(f[:-len("-symbol.json")] for f in _listdir(prefix)
                       if f.endswith("-symbol.json"))
        raise ConversionError("PREFIX %r is a folder; give the checkpoint's prefix inside it "
                              "(its name without -symbol.json), such as %s"
                              % (prefix, os.path.join(prefix, found[0] if found else "model")))
    sym_path, params_path = checkpoint_paths(prefix, epoch)
    if os.path.exists(sym_path) and not os.path.lexists(params_path):
        pattern = re.compile(re.escape(name) + r"-(\d{4,})\.params")
        epochs = sorted(int(m.group(1)) for m in map(pattern.fullmatch,
                                                     _listdir(os.path.dirname(prefix) or "."))
                        if m)
        listed = ", ".join(map(str, epochs[:20])) + (", ..." if len(epochs) > 20 else "")
        raise ConversionError("params file %s does not exist; %s" % (
            params_path, "epochs with a params file for prefix %r: %s" % (prefix, listed)
            if epochs else "no params file (%s-EPOCH.params) exists for prefix %r"
            % (name, prefix)))


def _listdir(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _parse_symbol(path):
    """The Symbol of a ``-symbol.json`` from someone else: its JSON checked, then its graph
    (:func:`mxmixed._files.untrusted.check_graph`), before MXNet's loader sees it. The file's
    bytes, its text and the parsed dict each go as soon as the next form exists (a long graph's
    dict is several times its file)."""
    text = _read_bytes(path, "symbol", MAX_GRAPH_BYTES)
    nbytes = len(text)
    try:
        check_json_depth(text, "symbol file %s" % path)
    except UnsafeFileError as err:
        raise ConversionError(str(err)) from None
    try:
        text = text.decode("utf-8")
        graph = json.loads(text, object_pairs_hook=json_object_pairs)
    except UnicodeDecodeError:
        raise ConversionError("symbol file %s is not text (is it a params file?)" % path) from None
    except json.JSONDecodeError as err:
        raise ConversionError("symbol file %s is not valid JSON (truncated?): %s at line %d "
                              "column %d" % (path, err.msg, err.lineno, err.colno)) from None
    except ValueError as err:  # a key given twice
        raise ConversionError("symbol file %s is refused: %s" % (path, err)) from None
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) \
            or not isinstance(graph.get("heads"), list):
        raise ConversionError("symbol file %s is JSON but not an MXNet symbol (no 'nodes' and "
                              "'heads')" % path)
    del text
    try:
        as_written = check_graph(graph, "symbol file %s" % path, nbytes)
    except UnsafeFileError as err:
        raise ConversionError(str(err)) from None
    try:
        if as_written:
            return Graph(graph).to_symbol()
        # MXNet changes this graph as it loads it (older attribute spellings, an older
        # version's upgrades): the model is MXNet's reading, so the Graph is made of it
        return Graph(load_graph(graph)).to_symbol()
    except mx.base.MXNetError as err:
        raise ConversionError("symbol file %s is not a valid MXNet symbol: %s"
                              % (path, one_line(err))) from None


def _split_params(loaded, path):
    if not isinstance(loaded, dict) or not loaded:
        raise ConversionError("params file %s holds no named parameters" % path)
    arg_params, aux_params = {}, {}
    for key, value in loaded.items():
        kind, _, name = key.partition(":")
        if kind == "arg" and name:
            arg_params[name] = value
        elif kind == "aux" and name:
            aux_params[name] = value
        else:
            raise ConversionError("params file %s has an entry %r without the 'arg:'/'aux:' "
                                  "prefix of a checkpoint" % (path, key))
    return arg_params, aux_params


def load_checkpoint(prefix: str, epoch: int = 0, allow_float16: bool = True) -> Checkpoint:
    """Load and check a Symbol checkpoint, with one-line errors instead of MXNet tracebacks.

    Parameters
    ----------
    prefix : str
        Path prefix: reads ``prefix-symbol.json`` and ``prefix-%04d.params``.
    epoch : int, default 0
        The epoch number in the params file name.
    allow_float16 : bool, default True
        Whether float16 params are acceptable (a converted or partly cast model).

    Returns
    -------
    tuple
        ``(sym, arg_params, aux_params)`` as ``mx.model.load_checkpoint`` returns them.

    Raises
    ------
    ConversionError
        For a missing or unreadable file, invalid or truncated JSON, a params file that is not
        one or does not match the symbol, or params of an unsupported dtype; and before MXNet
        reads them, for a graph or a params file that fails the checks for files from someone
        else (ops that call an address or run code, an edge to an output its node lacks,
        counts that would make MXNet allocate far more than the file's size: see
        ``docs/untrusted-files.md``).
    """
    if not isinstance(epoch, int) or epoch < 0:
        raise ConversionError("epoch must be a non-negative integer, got %r" % (epoch,))
    _check_prefix(prefix, epoch)
    sym_path, params_path = checkpoint_paths(prefix, epoch)
    sym = _parse_symbol(sym_path)
    data = _read_bytes(params_path, "params")
    try:
        check_nd_bytes(data, "params file %s" % params_path)
    except UnsafeFileError as err:
        raise ConversionError(str(err)) from None
    try:
        loaded = mx.nd.load_frombuffer(data)
    except mx.base.MXNetError as err:
        raise ConversionError("params file %s cannot be loaded (truncated, or not an MXNet "
                              "params file): %s" % (params_path, one_line(err))) from None
    arg_params, aux_params = _split_params(loaded, params_path)
    check_params(sym, arg_params, aux_params, allow_float16=allow_float16, source=params_path)
    return sym, arg_params, aux_params


_FLAT_SHAPE = re.compile(r"\s*[(\[]\s*((?:-?\d+\s*,\s*)*(?:-?\d+)?)\s*,?\s*[)\]]\s*")


def _shape_attr(text):
    """A declared ``__shape__`` such as ``(3, 4)`` or ``[0, 3]``; None for anything else (read
    with a flat pattern, never a recursive parser: the attribute comes from the file)."""
    match = _FLAT_SHAPE.fullmatch(text) if len(text) <= 400 else None
    if match is None:
        return None
    return tuple(int(d) for d in match.group(1).split(",") if d.strip())


def data_inputs(sym: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray],
                aux_params: Dict[str, mx.nd.NDArray]) -> List[str]:
    """The inputs of a graph that are not parameters (data, labels), in graph order.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    arg_params, aux_params : dict of str to mxnet.nd.NDArray

    Returns
    -------
    list of str
    """
    params = set(arg_params) | set(aux_params)
    return [name for name in sym.list_inputs() if name not in params]


def check_params(sym: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray],
                 aux_params: Dict[str, mx.nd.NDArray], allow_float16: bool = True,
                 source: str = "the params",
                 data_shapes: Optional[Dict[str, Tuple[int, ...]]] = None) -> None:
    """Check that parameters belong to a symbol: names, declared shapes and dtypes.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    arg_params, aux_params : dict of str to mxnet.nd.NDArray
    allow_float16 : bool, default True
        Whether float16 params are acceptable besides float32.
    source : str
        How to name the params in messages (a file path).
    data_shapes : dict of str to tuple, optional
        Shapes of the data inputs; when given, every param shape is checked against MXNet's
        shape inference too.

    Raises
    ------
    ConversionError
        On any mismatch, in one line.
    """
    args, auxs = set(sym.list_arguments()), set(sym.list_auxiliary_states())
    extra = sorted(set(arg_params) - args) + sorted(set(aux_params) - auxs)
    missing_aux = sorted(auxs - set(aux_params))
    attrs = sym.attr_dict()
    data_slots = _first_inputs_only(sym)
    missing_args = sorted(n for n in args - set(arg_params)
                          if is_param_name(n) or "__init__" in attrs.get(n, {})
                          or ("__shape__" in attrs.get(n, {}) and n not in data_slots))
    if extra or missing_aux or missing_args:
        parts = []
        if extra:
            parts.append("%d name(s) not in the symbol (e.g. %r)" % (len(extra), extra[0]))
        if missing_aux or missing_args:
            absent = missing_args + missing_aux
            parts.append("%d parameter(s) of the symbol missing (e.g. %r)"
                         % (len(absent), absent[0]))
        raise ConversionError("%s do not match the symbol: %s" % (source, "; ".join(parts)))
    allowed = (FLOAT32, FLOAT16, BFLOAT16) if allow_float16 else (FLOAT32,)
    for name, value in list(arg_params.items()) + list(aux_params.items()):
        if np.dtype(value.dtype) not in allowed:
            raise ConversionError("%s hold %r as %s, an unsupported dtype: only %s "
                                  "checkpoints can be converted"
                                  % (source, name, dtype_name(value.dtype),
                                     " or ".join(dtype_name(d) for d in allowed)))
        declared = attrs.get(name, {}).get("__shape__")
        shape = _shape_attr(declared) if declared else None
        if shape is not None and (len(shape) != len(value.shape) or any(
                d not in (0, -1, v) for d, v in zip(shape, value.shape))):
            raise ConversionError("%s do not match the symbol: %r has shape %s, the symbol "
                                  "declares %s" % (source, name, value.shape, declared))
    if data_shapes:
        known = dict(data_shapes)
        known.update({n: v.shape for n, v in arg_params.items()})
        known.update({n: v.shape for n, v in aux_params.items()})
        try:
            arg_shapes, _, aux_shapes = sym.infer_shape_partial(**known)
        except Exception as err:  # MXNetError; a bare Exception for a tensor over 2^31 elements
            _check_data_shapes(sym, data_shapes)
            params_alone = {n: tuple(v.shape) for n, v in list(arg_params.items())
                            + list(aux_params.items())}
            try:
                sym.infer_shape_partial(**params_alone)
            except Exception:  # the params do not fit together, whatever the data
                raise ConversionError("%s do not match the symbol: %s"
                                      % (source, one_line(err))) from None
            raise ConversionError("data shapes %s (batch axis first) do not fit the model's "
                                  "params: %s" % (dict(data_shapes), one_line(err))) from None
        inferred = dict(zip(sym.list_arguments(), arg_shapes))
        inferred.update(zip(sym.list_auxiliary_states(), aux_shapes))
        for name, value in list(arg_params.items()) + list(aux_params.items()):
            if inferred.get(name) and tuple(inferred[name]) != tuple(value.shape):
                raise ConversionError("%s do not match the symbol: %r has shape %s, the graph "
                                      "needs %s" % (source, name, value.shape, inferred[name]))


def _first_inputs_only(sym):
    """Variables that feed their ops only as the first input, where data goes (a weight never
    does): a data variable that declares its shape (``mx.sym.var('data', shape=...)``)."""
    nodes = as_graph(sym).nodes
    slots = {}
    for node in nodes:
        for k, (src, _, _) in enumerate(node.inputs):
            if nodes[src].op == "null":
                slots.setdefault(nodes[src].name, set()).add(k)
    return {name for name, seen in slots.items() if seen == {0}}


def _check_data_shapes(sym, data_shapes):
    """Blame the data shapes, not the params, when the graph rejects them on their own; name
    the number of dimensions the graph takes when that is what is wrong."""
    try:
        sym.infer_shape_partial(**dict(data_shapes))
    except Exception as err:  # MXNetError; a bare Exception for a tensor over 2^31 elements
        for name, shape in dict(data_shapes).items():
            ranks = _accepted_ranks(sym, name, shape)
            if ranks and len(shape) not in ranks:
                raise ConversionError(
                    "data %r takes %s dimensions with the batch axis first (%s per sample), "
                    "got shape %s" % (name, " or ".join(map(str, ranks)),
                                      " or ".join(str(r - 1) for r in ranks), tuple(shape))
                ) from None
        raise ConversionError("data shapes %s (batch axis first) do not fit the symbol: %s"
                              % (dict(data_shapes), one_line(err))) from None


def _accepted_ranks(sym, name, shape):
    """The numbers of dimensions (batch included) the graph accepts for input ``name``."""
    ranks = []
    for rank in range(2, 6):
        trial = (shape[0] if shape else 1,) + (224,) * (rank - 1)
        try:
            sym.infer_shape_partial(**{name: trial})
        except Exception:  # MXNetError
            continue
        ranks.append(rank)
    return ranks


def save_checkpoint(prefix: str, epoch: int, sym: mx.sym.Symbol, arg_params: Dict[str, mx.nd.NDArray],
                    aux_params: Dict[str, mx.nd.NDArray]) -> Tuple[str, str]:
    """Write a checkpoint pair atomically: both new files, or the earlier pair untouched.

    Both files go through :func:`mxmixed._files.atomic.atomic_write_group`: they are written to
    temporary names in the target folder, fsync'ed and renamed over the targets. On any failure
    (a full disk, an immutable file, an interrupt) the temporary files are removed and an
    earlier pair at ``prefix`` is left exactly as it was. SIGINT and SIGTERM are held back
    during the two renames, and two writers to the same prefix take turns for them, so the pair
    on disk is always one whole pair. A target that is a symbolic link, a device, a FIFO or a
    socket is refused (``NotRegularFileError``, an ``OSError``) and left as it is.
    ``amp_cast`` nodes are kept (MXNet's ``save_checkpoint`` drops them).

    Parameters
    ----------
    prefix : str
        Output prefix: writes ``prefix-symbol.json`` and ``prefix-%04d.params``.
    epoch : int
        The epoch number of the params file name.
    sym : mxnet.symbol.Symbol
    arg_params, aux_params : dict of str to mxnet.nd.NDArray

    Returns
    -------
    tuple of str
        The paths written: ``(symbol_path, params_path)``.
    """
    sym_path, params_path = checkpoint_paths(prefix, epoch)
    folder = os.path.dirname(os.path.abspath(sym_path))
    if not os.path.isdir(folder):
        raise ConversionError("output folder %s does not exist" % folder)
    payload = {"arg:%s" % k: v for k, v in arg_params.items()}
    payload.update({"aux:%s" % k: v for k, v in aux_params.items()})
    atomic_write_group([(sym_path, symbol_json(sym)),
                        (params_path, nd_bytes(payload))])
    return sym_path, params_path
