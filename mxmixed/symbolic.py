"""Symbol graphs in float16: the manual recipe, conversion with a report, validation, search.

A user with a trained Symbol checkpoint (``prefix-symbol.json`` and ``prefix-0000.params``, from
the Module API or from a Gluon ``export()``) gets a float16 model they can check:

* :func:`float16_softmax_symbol` and :func:`multi_precision_params`: the manual recipe of
  MXNet's original float16 tutorial (cast after the input, float16 body, cast back to float32
  before ``SoftmaxOutput``; Module API training with ``multi_precision=True`` and static loss
  scaling);
* :func:`convert`: ``amp.convert_model`` with float32 inputs and outputs by default, op and
  layer exclusions, optional params cast to float16, and a :class:`ConversionReport`;
* :func:`validate`: the float32 and float16 models side by side on the same inputs
  (:class:`ValidationReport`);
* :func:`search_fp32_layers`: a small set of layers that must stay float32 for the outputs to
  meet a tolerance, found by ranking layers by their float32 activation range and bisecting;
* :func:`load_checkpoint` / :func:`save_checkpoint`: checked loading, and saving that writes
  both files or neither;
* :func:`load_float16`: a converted checkpoint as a ready ``SymbolBlock``;
* :func:`convert_hybrid_block`: ``amp.convert_hybrid_block`` that works on a CPU.

On a CPU the float16 graphs run through the emulation graph pass
(:func:`mxmixed.graphpass.emulate_symbol`); on a GPU they run unchanged.

.. note::
   ``Symbol.save``, ``Symbol.tojson``, ``mx.model.save_checkpoint`` and ``HybridBlock.export``
   all *remove* ``amp_cast`` nodes by default in MXNet 1.9.1 (``remove_amp_cast=True``). A
   converted graph saved that way feeds float32 data into float16 weights and no longer
   loads. This module always saves with ``remove_amp_cast=False``.
"""
import contextlib
import difflib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

import mxnet as mx
from mxnet import gluon
from mxnet.contrib import amp
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _DTYPE_NP_TO_MX

from . import emulation
from .graphpass import emulate_symbol

__all__ = ["ConversionError", "float16_softmax_symbol", "multi_precision_params",
           "multi_precision_optimizer", "load_checkpoint", "save_checkpoint", "check_params",
           "checkpoint_paths", "data_inputs",
           "convert", "ConvertedModel", "ConversionReport", "validate", "ValidationReport",
           "search_fp32_layers", "SearchResult", "load_float16", "convert_hybrid_block"]

_FLOAT16 = np.dtype(np.float16)
_FLOAT32 = np.dtype(np.float32)
_CAST_OPS = ("amp_cast", "amp_multicast")
# Loss-output ops of the Module API: their label input is unused at inference, where each
# one is its plain activation.
_LOSS_OUTPUTS = ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
                 "MAERegressionOutput", "SVMOutput")
# Ops whose inputs 1..4 are gamma, beta, moving mean and moving variance: float32 always
# (cuDNN and MXNet's type inference require it for float16 data; MXNet issue #17164).
_BATCHNORM_OPS = ("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm")
_PARAM_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var",
                   "_running_mean", "_running_var")


class ConversionError(ValueError):
    """A bad input to a conversion (files, graph, params or options), as one readable line."""


# ------------------------------------------------------------------ the manual recipe
def float16_softmax_symbol(body, dtype="float16", loss_scale=1.0, data_name="data",
                           name="softmax"):
    """Wrap a network body the way MXNet's original float16 tutorial does.

    The data is cast to ``dtype`` right after the input variable, the body runs in that
    dtype, and its output is cast back to float32 before ``SoftmaxOutput``, whose
    ``grad_scale`` is the static loss scale.

    Parameters
    ----------
    body : callable
        ``body(data) -> mxnet.symbol.Symbol``, the network from the (cast) input to the logits.
    dtype : {'float16', 'float32'}, default 'float16'
        ``'float32'`` builds the same network without casts, for a float32 baseline.
    loss_scale : float, default 1.0
        Static loss scale, set as ``grad_scale`` of ``SoftmaxOutput``. Pair it with
        :func:`multi_precision_optimizer` (same ``loss_scale``), which divides it back out.
    data_name : str, default 'data'
        Name of the input variable.
    name : str, default 'softmax'
        Name of the ``SoftmaxOutput`` op (its label input is ``name + '_label'``).

    Returns
    -------
    mxnet.symbol.Symbol

    .. note::
       Only static loss scaling exists for the Module API in MXNet 1.9.1; dynamic loss
       scaling (``amp.init_trainer``, :class:`mxmixed.LossScaler`) is Gluon-only.
    """
    if np.dtype(dtype) not in (_FLOAT16, _FLOAT32):
        raise ValueError("dtype must be 'float16' or 'float32', got %r" % (dtype,))
    if not loss_scale > 0:
        raise ValueError("loss_scale must be positive, got %r" % (loss_scale,))
    data = mx.sym.var(data_name)
    half = np.dtype(dtype) == _FLOAT16
    if half:
        data = mx.sym.Cast(data, dtype="float16", name=data_name + "_float16")
    out = body(data)
    if half:
        out = mx.sym.Cast(out, dtype="float32", name=name + "_input_float32")
    return mx.sym.SoftmaxOutput(out, name=name, grad_scale=float(loss_scale))


def multi_precision_params(batch_size, loss_scale=1.0, learning_rate=0.01, **kwargs):
    """Optimizer settings for float16 Module API training: master weights, static scaling.

    Pass them as ``mod.fit(..., optimizer='sgd', optimizer_params=...)``.

    Parameters
    ----------
    batch_size : int
        The batch size; ``rescale_grad`` is ``1 / (loss_scale * batch_size)``, which undoes
        both the loss scale and the summed ``SoftmaxOutput`` gradient.
    loss_scale : float, default 1.0
        The static loss scale given to :func:`float16_softmax_symbol`.
    learning_rate : float, default 0.01
        The learning rate.
    **kwargs
        Further optimizer settings (``momentum``, ``wd``, ...).

    Returns
    -------
    dict
        With ``multi_precision=True``: the optimizer keeps float32 master copies of the
        float16 weights and updates those.

    .. note::
       The original tutorial's ``mx.optimizer.create('sgd', multi_precision=True, lr=0.01)``
       raises TypeError in MXNet 1.9.1: the keyword is ``learning_rate``.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1, got %r" % (batch_size,))
    if not loss_scale > 0:
        raise ValueError("loss_scale must be positive, got %r" % (loss_scale,))
    params = dict(kwargs)
    params.update(multi_precision=True, learning_rate=learning_rate,
                  rescale_grad=1.0 / (float(loss_scale) * batch_size))
    return params


def multi_precision_optimizer(batch_size, loss_scale=1.0, optimizer="sgd", learning_rate=0.01,
                              **kwargs):
    """The optimizer of :func:`multi_precision_params`, created.

    Parameters
    ----------
    batch_size, loss_scale, learning_rate, **kwargs
        As in :func:`multi_precision_params`.
    optimizer : str, default 'sgd'
        A name known to ``mx.optimizer.create``.

    Returns
    -------
    mxnet.optimizer.Optimizer

    .. note::
       ``Module.fit`` warns that ``rescale_grad`` "is not normalized to 1.0/batch_size" when
       given an optimizer object with a loss scale; that is intended here. The
       ``optimizer_params`` form (:func:`multi_precision_params`) does not warn.
    """
    return mx.optimizer.create(optimizer, **multi_precision_params(
        batch_size, loss_scale, learning_rate, **kwargs))


# ------------------------------------------------------------------ checkpoint files
def checkpoint_paths(prefix, epoch):
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


def _last_line(err):
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else type(err).__name__
    for marker in ("Check failed: ", "MXNetError: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text


def _read_bytes(path, what):
    if not os.path.exists(path):
        raise ConversionError("%s file %s does not exist" % (what, path))
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise ConversionError("cannot read %s file %s: %s"
                              % (what, path, err.strerror or err)) from None


def _parse_symbol(text, path):
    try:
        graph = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConversionError("symbol file %s is not text (is it a params file?)" % path) from None
    except json.JSONDecodeError as err:
        raise ConversionError("symbol file %s is not valid JSON (truncated?): %s at line %d "
                              "column %d" % (path, err.msg, err.lineno, err.colno)) from None
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) \
            or not isinstance(graph.get("heads"), list):
        raise ConversionError("symbol file %s is JSON but not an MXNet symbol (no 'nodes' and "
                              "'heads')" % path)
    try:
        return mx.sym.load_json(json.dumps(graph))
    except mx.base.MXNetError as err:
        raise ConversionError("symbol file %s is not a valid MXNet symbol: %s"
                              % (path, _last_line(err))) from None


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


def load_checkpoint(prefix, epoch=0, allow_float16=True):
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
        one or does not match the symbol, or params of an unsupported dtype.
    """
    if not isinstance(epoch, int) or epoch < 0:
        raise ConversionError("epoch must be a non-negative integer, got %r" % (epoch,))
    sym_path, params_path = checkpoint_paths(prefix, epoch)
    sym = _parse_symbol(_read_bytes(sym_path, "symbol"), sym_path)
    _read_bytes(params_path, "params")
    try:
        loaded = mx.nd.load(params_path)
    except mx.base.MXNetError as err:
        raise ConversionError("params file %s cannot be loaded (truncated, or not an MXNet "
                              "params file): %s" % (params_path, _last_line(err))) from None
    arg_params, aux_params = _split_params(loaded, params_path)
    check_params(sym, arg_params, aux_params, allow_float16=allow_float16, source=params_path)
    return sym, arg_params, aux_params


def _graph(sym):
    return json.loads(sym.tojson(remove_amp_cast=False))


def _shape_attr(text):
    try:
        shape = json.loads(text.replace("(", "[").replace(")", "]").replace(",]", "]"))
    except ValueError:
        return None
    return tuple(shape) if isinstance(shape, list) else None


def data_inputs(sym, arg_params, aux_params):
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


def check_params(sym, arg_params, aux_params, allow_float16=True, source="the params",
                 data_shapes=None):
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
    missing_args = sorted(n for n in args - set(arg_params)
                          if n.endswith(_PARAM_SUFFIXES) or "__init__" in attrs.get(n, {})
                          or "__shape__" in attrs.get(n, {}))
    if extra or missing_aux or missing_args:
        parts = []
        if extra:
            parts.append("%d name(s) not in the symbol (e.g. %r)" % (len(extra), extra[0]))
        if missing_aux or missing_args:
            absent = missing_args + missing_aux
            parts.append("%d parameter(s) of the symbol missing (e.g. %r)"
                         % (len(absent), absent[0]))
        raise ConversionError("%s do not match the symbol: %s" % (source, "; ".join(parts)))
    allowed = (_FLOAT32, _FLOAT16) if allow_float16 else (_FLOAT32,)
    for name, value in list(arg_params.items()) + list(aux_params.items()):
        if np.dtype(value.dtype) not in allowed:
            raise ConversionError("%s hold %r as %s, an unsupported dtype: only %s "
                                  "checkpoints can be converted"
                                  % (source, name, np.dtype(value.dtype).name,
                                     " or ".join(d.name for d in allowed)))
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
        except mx.base.MXNetError as err:
            raise ConversionError("%s do not match the symbol for data shapes %s: %s"
                                  % (source, dict(data_shapes), _last_line(err))) from None
        inferred = dict(zip(sym.list_arguments(), arg_shapes))
        inferred.update(zip(sym.list_auxiliary_states(), aux_shapes))
        for name, value in list(arg_params.items()) + list(aux_params.items()):
            if inferred.get(name) and tuple(inferred[name]) != tuple(value.shape):
                raise ConversionError("%s do not match the symbol: %r has shape %s, the graph "
                                      "needs %s" % (source, name, value.shape, inferred[name]))


def save_checkpoint(prefix, epoch, sym, arg_params, aux_params):
    """Write a checkpoint pair atomically: both files, or neither.

    Both files are written to temporary names in the target folder and then renamed. On any
    failure (including an interrupt) the temporary files and any output already renamed are
    removed. ``amp_cast`` nodes are kept (MXNet's ``save_checkpoint`` drops them).

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
    temps, done = [], []
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        for suffix in ("-symbol.json.tmp", ".params.tmp"):
            handle, path = tempfile.mkstemp(dir=folder, prefix=".mxmixed-", suffix=suffix)
            os.close(handle)
            temps.append(path)
            os.chmod(path, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        with open(temps[0], "w") as handle:
            handle.write(sym.tojson(remove_amp_cast=False))
        payload = {"arg:%s" % k: v for k, v in arg_params.items()}
        payload.update({"aux:%s" % k: v for k, v in aux_params.items()})
        mx.nd.save(temps[1], payload)
        os.replace(temps[0], sym_path)
        done.append(sym_path)
        os.replace(temps[1], params_path)
        done.append(params_path)
    except BaseException:
        for path in temps + done:
            with contextlib.suppress(OSError):
                os.remove(path)
        raise
    return sym_path, params_path


# ------------------------------------------------------------------ graph helpers
def _entry_dtypes(graph, known):
    """Dtype of every entry ``(node, output)`` consumed in the graph or at its heads."""
    entries = sorted({(src, out) for node in graph["nodes"] for src, out, _ in node["inputs"]}
                     | {(src, out) for src, out, _ in graph["heads"]})
    probe = {k: v for k, v in graph.items() if k != "node_row_ptr"}
    probe["heads"] = [[src, out, 0] for src, out in entries]
    sym = mx.sym.load_json(json.dumps(probe))
    names = set(sym.list_inputs())
    try:
        _, out_types, _ = sym.infer_type_partial(**{n: t for n, t in known.items() if n in names})
    except mx.base.MXNetError as err:
        raise ConversionError("MXNet's type inference rejects the graph: %s"
                              % _last_line(err)) from None
    return {entry: (np.dtype(t) if t is not None else None)
            for entry, t in zip(entries, out_types)}


def _compute_dtype(node, dtypes):
    """The dtype an op computes in: that of its first floating input."""
    for src, out, _ in node["inputs"]:
        dtype = dtypes.get((src, out))
        if dtype is not None and np.issubdtype(dtype, np.floating):
            return dtype
    return None


def _is_fp32_listed(node, target):
    if node["op"] in amp.list_fp32_ops(target):
        return True
    for op, attr, values in amp.list_conditional_fp32_ops(target):
        if node["op"] == op and node.get("attrs", {}).get(attr) in values:
            return True
    return False


def _known_types(arg_params, aux_params, data_types):
    known = {n: np.dtype(v.dtype) for n, v in list(arg_params.items()) + list(aux_params.items())}
    known.update(data_types)
    return known


def _var_dtype(node, default=_FLOAT32):
    code = node.get("attrs", {}).get("__dtype__")
    if code is None or code == "-1":
        return default
    return np.dtype(_DTYPE_MX_TO_NP[int(code)])


def _rebuild(graph, keep, entry_map, extra_after):
    """Copy ``graph`` keeping nodes in ``keep``, remapping entries, inserting new nodes.

    ``entry_map(consumer, (src, out)) -> (src, out)`` redirects inputs (in old indices, where a
    negative ``src`` names a new node by ``-1 - k``); ``extra_after[i]`` lists new nodes to
    place right after old node ``i`` (their inputs in old indices).
    """
    new_nodes, index, extra_index = [], {}, {}

    def mapped(consumer, entry):
        src, out = entry_map(consumer, (entry[0], entry[1]))
        return [extra_index[src] if src < 0 else index[src], out, 0]

    for i, node in enumerate(graph["nodes"]):
        if i in keep:
            node = dict(node)
            node["inputs"] = [mapped(i, e) for e in node["inputs"]]
            new_nodes.append(node)
            index[i] = len(new_nodes) - 1
        for extra in extra_after.get(i, ()):
            extra = dict(extra)
            extra["inputs"] = [[index[src], out, 0] for src, out, _ in extra["inputs"]]
            new_nodes.append(extra)
            extra_index[extra["_id"]] = len(new_nodes) - 1
            del extra["_id"]
    heads = [mapped(None, e) for e in graph["heads"]]
    return {"nodes": new_nodes, "heads": heads, "attrs": graph.get("attrs", {}),
            "arg_nodes": [j for j, n in enumerate(new_nodes) if n["op"] == "null"]}


def _io_float16(graph, data_names, dtypes):
    """Drop the boundary casts: float16 data inputs and float16 outputs (keep_io_types=False).

    A data input that the converted graph casts to float16 becomes a float16 input (an
    ``amp_cast`` to float32 is put in front of any consumer that needs float32); an output
    cast back to float32 is returned as float16. Inputs that only feed float32 ops (labels)
    stay float32.
    """
    nodes = graph["nodes"]
    consumers = {}
    for j, node in enumerate(nodes):
        for src, out, _ in node["inputs"]:
            consumers.setdefault(src, []).append(j)
    drop, redirect, up_for = set(), {}, {}
    extra_after = {}
    for d, node in enumerate(nodes):
        if node["op"] != "null" or node["name"] not in data_names:
            continue
        users = sorted(set(consumers.get(d, [])))
        down = [j for j in users if nodes[j]["op"] == "amp_cast"
                and nodes[j]["attrs"].get("dtype") == "float16"]
        if not down:
            continue
        nodes[d] = dict(node, attrs=dict(node.get("attrs", {}), __dtype__=str(
            _DTYPE_NP_TO_MX[np.float16])))
        for j in down:
            drop.add(j)
            redirect[(j, 0)] = (d, 0)
        others = [j for j in users if j not in down]
        if others:
            new_id = -1 - len(extra_after)
            extra_after[d] = [{"op": "amp_cast", "name": node["name"] + "_amp_cast_float32",
                               "attrs": {"dtype": "float32"}, "inputs": [[d, 0, 0]],
                               "_id": new_id}]
            for j in others:
                up_for[j, d] = new_id
    head_redirect = {}
    for src, out, _ in graph["heads"]:
        node = nodes[src]
        if node["op"] == "amp_cast" and node["attrs"].get("dtype") == "float32":
            inner = tuple(node["inputs"][0][:2])
            if dtypes.get(inner) == _FLOAT16:
                head_redirect[(src, out)] = inner
    if not drop and not head_redirect:
        return graph

    def entry_map(consumer, entry):
        if consumer is None:
            entry = head_redirect.get(entry, entry)
        elif (consumer, entry[0]) in up_for:
            return up_for[consumer, entry[0]], 0
        return redirect.get(entry, entry)

    used = {src for node in nodes for src, _, _ in node["inputs"]}
    drop |= {src for src, _ in head_redirect if src not in used}
    keep = {i for i in range(len(nodes)) if i not in drop}
    return _rebuild(graph, keep, entry_map, extra_after)


def _batchnorm_params(graph):
    """Names of the gamma, beta and moving-statistics inputs of every BatchNorm node."""
    nodes = graph["nodes"]
    return {nodes[src]["name"] for node in nodes if node["op"] in _BATCHNORM_OPS
            for src, _, _ in node["inputs"][1:5] if nodes[src]["op"] == "null"}


def _inference_graph(sym):
    """Replace Module-API loss outputs by their inference form, dropping label inputs."""
    graph = _graph(sym)
    heads = graph["heads"]
    if not any(graph["nodes"][src]["op"] in _LOSS_OUTPUTS for src, _, _ in heads):
        return sym
    outputs = []
    for k, (src, _, _) in enumerate(heads):
        node = graph["nodes"][src]
        head = sym[k]
        if node["op"] not in _LOSS_OUTPUTS:
            outputs.append(head)
            continue
        x = head.get_children()[0]
        attrs = node.get("attrs", {})
        name = node["name"]
        if node["op"] == "SoftmaxOutput":
            if attrs.get("multi_output") in ("True", "1", "true"):
                outputs.append(mx.sym.softmax(x, axis=1, name=name))
            elif attrs.get("preserve_shape") in ("True", "1", "true"):
                outputs.append(mx.sym.softmax(x, axis=-1, name=name))
            else:
                flat = mx.sym.softmax(mx.sym.flatten(x), axis=1)
                outputs.append(mx.sym.reshape_like(flat, x, name=name))
        elif node["op"] == "LogisticRegressionOutput":
            outputs.append(mx.sym.sigmoid(x, name=name))
        else:
            outputs.append(mx.sym.identity(x, name=name))
    return outputs[0] if len(outputs) == 1 else mx.sym.Group(outputs)


def _default_ctx(ctx):
    if ctx is not None:
        return ctx
    try:
        return mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()
    except mx.base.MXNetError:
        return mx.cpu()


def _is_cpu(ctx):
    return ctx.device_type in ("cpu", "cpu_pinned", "cpu_shared")


def _symbol_block(sym, arg_params, aux_params, ctx):
    """A SymbolBlock for inference; on a CPU with the float16 emulation in its graph."""
    params = dict(arg_params)
    params.update(aux_params)
    sym = _inference_graph(sym)
    graph = _graph(sym)
    var_nodes = {n["name"]: n for n in graph["nodes"] if n["op"] == "null"}
    data_names = [n for n in sym.list_inputs() if n not in params]
    data_types = {n: _var_dtype(var_nodes[n]) for n in data_names}
    types = {n: np.dtype(v.dtype) for n, v in params.items()}
    types.update(data_types)
    try:
        sym.infer_type_partial(**types)
        if _is_cpu(ctx):
            sym = emulate_symbol(sym, types)
    except (TypeError, mx.base.MXNetError) as err:
        raise ConversionError(
            "the graph does not type-check with the dtypes of its params (a converted graph "
            "saved without its amp_cast nodes, as mx.model.save_checkpoint and "
            "HybridBlock.export do by default, cannot run): %s"
            % _last_line(err).rsplit("): ", 1)[-1]) from None
    inputs = [mx.sym.var(n, dtype=data_types[n]) for n in data_names]
    block = gluon.SymbolBlock(sym, inputs)
    block_params = block.collect_params()
    for name, param in block_params.items():
        if name in params and np.dtype(param.dtype) != np.dtype(params[name].dtype):
            param.cast(params[name].dtype)
    payload = {"arg:%s" % k: v for k, v in arg_params.items()}
    payload.update({"aux:%s" % k: v for k, v in aux_params.items()})
    try:
        block_params.load_dict(payload, ctx=ctx, ignore_extra=True)
    except (AssertionError, mx.base.MXNetError) as err:
        raise ConversionError("the params do not fit the graph: %s" % _last_line(err)) from None
    block._mxmixed_input_dtypes = data_types
    return block


# ------------------------------------------------------------------ the report
def _format_bytes(n):
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return "%.2f %s" % (n / size, unit)
    return "%d B" % n


def _bytes_by_dtype(*dicts):
    out = {}
    for params in dicts:
        for value in params.values():
            dtype = np.dtype(value.dtype)
            out[dtype.name] = out.get(dtype.name, 0) + int(np.prod(value.shape)) * dtype.itemsize
    return out


@dataclass
class ConversionReport:
    """What a float16 conversion changed.

    Attributes
    ----------
    target_dtype : str
        The low precision type.
    ops : dict of str to dict of str to int
        For every operator type, how many nodes compute in each dtype
        (``{'Convolution': {'float16': 20, 'float32': 0}}``). Casts are counted apart.
    casts_inserted : int
        ``amp_cast`` / ``amp_multicast`` nodes added by the conversion.
    param_bytes_before, param_bytes_after : dict of str to int
        Parameter bytes per dtype name, before and after.
    fp32_layers : list of (str, str, str)
        ``(layer name, op, reason)`` for every computing node kept in float32; the reason is
        ``'search'``, ``'excluded layer'``, ``'excluded op'``, ``'float32 op list'`` (MXNet's
        AMP lists) or ``'float32 input'`` (it follows a float32 layer or input).
    input_dtypes, output_dtypes : dict of str to str
        Dtype of each data input and each output of the converted graph.
    keep_io_types, cast_optional_params : bool
        The settings used.
    seconds : float
        Time the conversion and this report took.
    layer_dtypes : dict of str to str
        Compute dtype of every computing node, by name (not printed).
    """

    target_dtype: str
    ops: Dict[str, Dict[str, int]]
    casts_inserted: int
    param_bytes_before: Dict[str, int]
    param_bytes_after: Dict[str, int]
    fp32_layers: List[Tuple[str, str, str]]
    input_dtypes: Dict[str, str]
    output_dtypes: Dict[str, str]
    keep_io_types: bool
    cast_optional_params: bool
    seconds: float = 0.0
    layer_dtypes: Dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def bytes_before(self):
        """Total parameter bytes before the conversion (int)."""
        return sum(self.param_bytes_before.values())

    @property
    def bytes_after(self):
        """Total parameter bytes after the conversion (int)."""
        return sum(self.param_bytes_after.values())

    @property
    def size_ratio(self):
        """Parameter bytes after / before (float)."""
        return self.bytes_after / self.bytes_before if self.bytes_before else 1.0

    def count(self, op, dtype):
        """Number of ``op`` nodes computing in ``dtype`` (int)."""
        return self.ops.get(op, {}).get(np.dtype(dtype).name, 0)

    def __str__(self):
        dtypes = sorted({d for counts in self.ops.values() for d in counts},
                        key=lambda d: (d not in ("float16", "float32"), d))
        for d in ("float32", "float16"):
            if d not in dtypes:
                dtypes.insert(0, d)
        width = max([len("operator")] + [len(op) for op in self.ops])
        lines = ["Float16 conversion report (target %s, %.2f s)" % (self.target_dtype,
                                                                  self.seconds),
                 "inputs: %s" % ", ".join("%s=%s" % kv for kv in self.input_dtypes.items()),
                 "outputs: %s" % ", ".join("%s=%s" % kv for kv in self.output_dtypes.items()),
                 "keep_io_types=%s  cast_optional_params=%s"
                 % (self.keep_io_types, self.cast_optional_params), ""]
        lines.append("%-*s %s" % (width, "operator", " ".join("%8s" % d for d in dtypes)))
        for op in sorted(self.ops):
            lines.append("%-*s %s" % (width, op, " ".join("%8d" % self.ops[op].get(d, 0)
                                                          for d in dtypes)))
        lines += ["", "cast nodes inserted: %d" % self.casts_inserted, ""]
        names = sorted(set(self.param_bytes_before) | set(self.param_bytes_after),
                       key=lambda d: (d != "float32", d))
        lines.append("%-10s %12s %12s" % ("params", "before", "after"))
        for name in names:
            lines.append("%-10s %12s %12s" % (name,
                                             _format_bytes(self.param_bytes_before.get(name, 0)),
                                             _format_bytes(self.param_bytes_after.get(name, 0))))
        lines.append("%-10s %12s %12s  (%.1f%%)" % ("total", _format_bytes(self.bytes_before),
                                                    _format_bytes(self.bytes_after),
                                                    100.0 * self.size_ratio))
        lines.append("")
        if not self.fp32_layers:
            lines.append("layers kept in float32: none")
        else:
            lines.append("layers kept in float32: %d" % len(self.fp32_layers))
            nwidth = max(len("layer"), *(len(n) for n, _, _ in self.fp32_layers))
            owidth = max(len("op"), *(len(o) for _, o, _ in self.fp32_layers))
            lines.append("  %-*s %-*s %s" % (nwidth, "layer", owidth, "op", "reason"))
            for name, op, reason in self.fp32_layers:
                lines.append("  %-*s %-*s %s" % (nwidth, name, owidth, op, reason))
        return "\n".join(lines)


def _build_report(before_graph, sym, arg_before, aux_before, arg_after, aux_after, data_names,
                  reasons, settings, target):
    graph = _graph(sym)
    nodes = graph["nodes"]
    var_nodes = {n["name"]: n for n in nodes if n["op"] == "null"}
    data_types = {n: _var_dtype(var_nodes[n]) for n in data_names if n in var_nodes}
    dtypes = _entry_dtypes(graph, _known_types(arg_after, aux_after, data_types))
    ops, layer_dtypes, fp32_layers = {}, {}, []
    for node in nodes:
        if node["op"] == "null" or node["op"] in _CAST_OPS:
            continue
        dtype = _compute_dtype(node, dtypes)
        name = dtype.name if dtype is not None else "other"
        counts = ops.setdefault(node["op"], {"float16": 0, "float32": 0})
        counts[name] = counts.get(name, 0) + 1
        layer_dtypes[node["name"]] = name
        if dtype == _FLOAT32:
            reason = reasons.get(node["name"])
            if reason is None:
                reason = "float32 op list" if _is_fp32_listed(node, target) else "float32 input"
            fp32_layers.append((node["name"], node["op"], reason))
    casts_before = sum(1 for n in before_graph["nodes"] if n["op"] in _CAST_OPS)
    casts_after = sum(1 for n in nodes if n["op"] in _CAST_OPS)
    outputs = {}
    for name, (src, out, _) in zip(sym.list_outputs(), graph["heads"]):
        dtype = dtypes.get((src, out))
        outputs[name] = dtype.name if dtype is not None else "unknown"
    return ConversionReport(
        target_dtype=target, ops=ops, casts_inserted=casts_after - casts_before,
        param_bytes_before=_bytes_by_dtype(arg_before, aux_before),
        param_bytes_after=_bytes_by_dtype(arg_after, aux_after), fp32_layers=fp32_layers,
        input_dtypes={n: t.name for n, t in data_types.items()}, output_dtypes=outputs,
        keep_io_types=settings["keep_io_types"],
        cast_optional_params=settings["cast_optional_params"], layer_dtypes=layer_dtypes)


# ------------------------------------------------------------------ conversion
@dataclass
class ConvertedModel:
    """A converted float16 model: graph, params and the :class:`ConversionReport`.

    Attributes
    ----------
    symbol : mxnet.symbol.Symbol
    arg_params, aux_params : dict of str to mxnet.nd.NDArray
    report : ConversionReport
    """

    symbol: mx.sym.Symbol
    arg_params: Dict[str, mx.nd.NDArray] = field(repr=False)
    aux_params: Dict[str, mx.nd.NDArray] = field(repr=False)
    report: ConversionReport = field(repr=False)

    def save(self, prefix, epoch=0):
        """Write ``prefix-symbol.json`` and ``prefix-%04d.params``: both or neither.

        Returns
        -------
        tuple of str
            The two paths.
        """
        return save_checkpoint(prefix, epoch, self.symbol, self.arg_params, self.aux_params)

    def to_block(self, ctx=None):
        """The model as a ``SymbolBlock`` for inference (emulated on a CPU).

        Parameters
        ----------
        ctx : mxnet.Context, optional
            The first GPU when there is one, else the CPU.

        Returns
        -------
        mxnet.gluon.SymbolBlock
        """
        return _symbol_block(self.symbol, self.arg_params, self.aux_params, _default_ctx(ctx))

    def __iter__(self):
        return iter((self.symbol, self.arg_params, self.aux_params))


def _check_target(target_dtype):
    name = str(target_dtype)
    if name == "float16":
        return name
    if name == "bfloat16":
        raise ConversionError("target dtype bfloat16 is not supported: MXNet's bfloat16 AMP "
                              "needs AVX512-BF16 and mxmixed emulates float16 only")
    raise ConversionError("unsupported target dtype %r: only float16 is supported" % (name,))


def _closest(name, choices):
    close = difflib.get_close_matches(name, choices, n=1)
    return " (did you mean %r?)" % close[0] if close else ""


def convert(sym, arg_params, aux_params, target_dtype="float16", exclude_layers=(),
            exclude_ops=(), keep_io_types=True, cast_optional_params=True, searched_layers=()):
    """Convert a float32 Symbol model to float16 mixed precision, with a report.

    A wrapper of ``mxnet.contrib.amp.convert_model`` that leaves the caller's dicts alone
    (MXNet's modifies them in place) and never runs the model.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
        The float32 graph.
    arg_params, aux_params : dict of str to mxnet.nd.NDArray
        Its params; float16 ones (a partly cast model) are taken back to float32 first.
    target_dtype : str, default 'float16'
        Only float16 is supported.
    exclude_layers : sequence of str
        Node names to keep in float32 (``excluded_sym_names``).
    exclude_ops : sequence of str
        Operator types to keep in float32 (every node of that type is excluded).
    keep_io_types : bool, default True
        Keep data inputs and outputs float32. With False, inputs the graph casts to float16
        become float16 inputs and float16 outputs are returned without the cast back.
    cast_optional_params : bool, default True
        Store params as float16 wherever the graph only uses them in float16, so the file is
        about half the size. **MXNet's default is False** (params stay float32 and are cast
        on every run); pass False for that behaviour.
    searched_layers : sequence of str
        Layers found by :func:`search_fp32_layers`: kept float32 like ``exclude_layers`` and
        reported with the reason ``'search'``.

    Returns
    -------
    ConvertedModel
        Graph, params and :class:`ConversionReport`; unpacks as ``sym, args, auxs``.

    Raises
    ------
    ConversionError
        For an unsupported target dtype, params that do not match the graph, an already
        converted graph, or unknown layer or op names.

    .. note::
       BatchNorm gamma, beta and moving statistics always stay float32 (MXNet issue #17164).
    """
    start = time.perf_counter()
    target = _check_target(target_dtype)
    if not isinstance(sym, mx.sym.Symbol):
        raise ConversionError("sym must be an mxnet Symbol, got %s" % type(sym).__name__)
    if not isinstance(arg_params, dict) or not isinstance(aux_params, dict):
        raise ConversionError("arg_params and aux_params must be dicts of name to NDArray")
    for names, what in ((exclude_layers, "exclude_layers"), (exclude_ops, "exclude_ops"),
                        (searched_layers, "searched_layers")):
        if isinstance(names, str):
            raise ConversionError("%s must be a list of names, not the string %r"
                                  % (what, names))
    check_params(sym, arg_params, aux_params)
    before_graph = _graph(sym)
    nodes = before_graph["nodes"]
    if any(n["op"] in _CAST_OPS for n in nodes):
        raise ConversionError("the graph already holds amp_cast nodes: it is mixed precision "
                              "already (load it with load_float16)")
    layer_names = [n["name"] for n in nodes if n["op"] != "null"]
    registered = set(mx.operator.get_all_registered_operators())
    reasons = {}
    for op in exclude_ops:
        if op not in registered:
            raise ConversionError("unknown operator %r in exclude_ops%s"
                                  % (op, _closest(op, sorted(registered))))
        for node in nodes:
            if node["op"] == op:
                reasons.setdefault(node["name"], "excluded op")
    for names, reason in ((exclude_layers, "excluded layer"), (searched_layers, "search")):
        for name in names:
            if name not in layer_names:
                raise ConversionError("no layer named %r in the graph%s"
                                      % (name, _closest(name, layer_names)))
            reasons[name] = reason
    arg32 = {k: (v.astype("float32") if np.dtype(v.dtype) == _FLOAT16 else v)
             for k, v in arg_params.items()}
    aux32 = {k: (v.astype("float32") if np.dtype(v.dtype) == _FLOAT16 else v)
             for k, v in aux_params.items()}
    data_names = data_inputs(sym, arg_params, aux_params)
    try:
        new_sym, new_args, new_auxs = amp.convert_model(
            sym, dict(arg32), dict(aux32), target_dtype=target,
            excluded_sym_names=sorted(reasons), cast_optional_params=bool(cast_optional_params))
    except (AssertionError, ValueError, mx.base.MXNetError) as err:
        raise ConversionError("MXNet cannot convert this graph: %s" % _last_line(err)) from None
    converted = dict(new_args, **new_auxs)
    bad = sorted(name for name in _batchnorm_params(_graph(new_sym))
                 if name in converted and np.dtype(converted[name].dtype) != _FLOAT32)
    if bad:  # cannot happen with MXNet 1.9.1's op lists; guards against other lists
        raise ConversionError("the conversion made BatchNorm params %s float16; BatchNorm "
                              "needs them float32 (MXNet issue #17164)" % bad)
    if not keep_io_types:
        graph = _graph(new_sym)
        data_types = {n: _FLOAT32 for n in data_names}
        dtypes = _entry_dtypes(graph, _known_types(new_args, new_auxs, data_types))
        new_sym = mx.sym.load_json(json.dumps(_io_float16(graph, set(data_names), dtypes)))
    report = _build_report(before_graph, new_sym, arg_params, aux_params, new_args, new_auxs,
                           data_names, reasons,
                           {"keep_io_types": bool(keep_io_types),
                            "cast_optional_params": bool(cast_optional_params)}, target)
    report.seconds = time.perf_counter() - start
    return ConvertedModel(new_sym, new_args, new_auxs, report)


# ------------------------------------------------------------------ running models
def _batches(inputs, batch_size):
    """Split ``inputs`` (array or iterable of batches / (X, y) pairs) into NumPy batches."""
    if isinstance(inputs, mx.nd.NDArray):
        inputs = inputs.asnumpy()
    if isinstance(inputs, np.ndarray):
        if inputs.ndim < 1 or len(inputs) == 0:
            raise ConversionError("inputs must hold at least one sample")
        return [inputs[i:i + batch_size] for i in range(0, len(inputs), batch_size)]
    batches = []
    for batch in inputs:
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        batches.append(batch.asnumpy() if isinstance(batch, mx.nd.NDArray) else np.asarray(batch))
    if not batches:
        raise ConversionError("inputs yielded no batches")
    return batches


class _Runner:
    """Runs one model (Block, ConvertedModel or (sym, args, auxs)) on NumPy batches."""

    def __init__(self, model, ctx, input_dtype=None):
        self.ctx = ctx
        if isinstance(model, ConvertedModel):
            model = tuple(model)
        if isinstance(model, tuple) and len(model) == 3:
            self.block = _symbol_block(*model, ctx)
        elif isinstance(model, gluon.Block):
            self.block = model
            if _is_cpu(ctx) and self._has_float16(model):
                cached = getattr(model, "_cached_op", None)
                if cached is not None and not isinstance(cached, emulation.EmulatedCachedOp):
                    model._clear_cached_op()  # built before emulation: rebuild it emulated
        else:
            raise ConversionError("a model must be a Gluon Block, a ConvertedModel or a "
                                  "(sym, arg_params, aux_params) tuple, got %s"
                                  % type(model).__name__)
        types = getattr(self.block, "_mxmixed_input_dtypes", None) or {"data": _FLOAT32}
        if len(types) != 1:
            raise ConversionError("validation supports models with one data input; this one "
                                  "has %s" % sorted(types))
        self.input_dtype = np.dtype(input_dtype or list(types.values())[0])

    @staticmethod
    def _has_float16(block):
        return any(np.dtype(p.dtype) == _FLOAT16 for p in block.collect_params().values())

    def __call__(self, batch):
        X = mx.nd.array(batch, ctx=self.ctx, dtype=self.input_dtype)
        scope = emulation.emulated() if _is_cpu(self.ctx) else contextlib.nullcontext()
        with scope:
            out = self.block(X)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            return [o.astype("float32").asnumpy() for o in outs]


def _progress(iterable, enabled, desc, total=None):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False)


def _run(runner, batches, progress, desc):
    outputs = None
    for batch in _progress(batches, progress, desc, total=len(batches)):
        outs = runner(batch)
        if outputs is None:
            outputs = [[] for _ in outs]
        for store, out in zip(outputs, outs):
            store.append(out)
    return [np.concatenate(parts) for parts in outputs]


@dataclass
class ValidationReport:
    """The float16 model against the float32 model on the same inputs.

    Attributes
    ----------
    samples : int
        Number of inputs compared.
    max_abs_error : float
        Largest ``|y16 - y32|`` over all outputs (inf when float16 gave inf or NaN).
    max_rel_error : float
        ``max_abs_error / max|y32|``: the error relative to the output scale. Element-wise
        relative error is meaningless near zero outputs, so it is not used.
    nonfinite_share : float
        Share of float16 output values that are inf or NaN.
    top1_agreement : float or None
        Share of samples whose arg-max class is the same in both, for classifiers (outputs
        of shape ``(N, classes)``); None otherwise.
    device : str
        Where it ran, and whether float16 was emulated.
    seconds : float
        Wall time of both runs.
    """

    samples: int
    max_abs_error: float
    max_rel_error: float
    nonfinite_share: float
    top1_agreement: Optional[float]
    device: str
    seconds: float

    def passes(self, tolerance):
        """Whether every output is finite and ``max_rel_error <= tolerance`` (bool)."""
        return self.nonfinite_share == 0.0 and self.max_rel_error <= tolerance

    def __str__(self):
        top1 = "n/a" if self.top1_agreement is None else "%.2f%%" % (100 * self.top1_agreement)
        rows = [("samples", "%d" % self.samples),
                ("max abs error", "%.4g" % self.max_abs_error),
                ("max rel error", "%.4g  (max abs error / max |float32 output|)"
                 % self.max_rel_error),
                ("non-finite outputs", "%.2f%%" % (100 * self.nonfinite_share)),
                ("top-1 agreement", top1),
                ("device", self.device),
                ("time", "%.2f s" % self.seconds)]
        return "Validation: float16 against float32\n" + "\n".join(
            "  %-19s %s" % row for row in rows)


def _compare(ref, got):
    abs_err, scale, nonfinite, total = 0.0, 0.0, 0, 0
    for a, b in zip(ref, got):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(b64)
        nonfinite += int((~finite).sum())
        total += b64.size
        diff = np.abs(a64 - b64)
        diff[~np.isfinite(diff)] = np.inf
        if diff.size:
            abs_err = max(abs_err, float(diff.max()))
            scale = max(scale, float(np.abs(a64[np.isfinite(a64)]).max(initial=0.0)))
    rel = abs_err / scale if scale > 0 else (0.0 if abs_err == 0 else math.inf)
    top1 = None
    if ref and ref[0].ndim == 2 and ref[0].shape[1] > 1:
        top1 = float(np.mean(ref[0].argmax(axis=1) == got[0].argmax(axis=1)))
    return abs_err, rel, (nonfinite / total if total else 0.0), top1


def _device_text(ctx):
    return "%s (float16 %s)" % (ctx, "emulated" if _is_cpu(ctx) else "native")


def validate(fp32_model, fp16_model, inputs, batch_size=8, ctx=None, progress=True,
             input_dtype=None):
    """Run the float32 and the float16 model on the same inputs and compare the outputs.

    On a CPU the float16 model runs through the emulation graph pass (float16 numerics,
    not speed); on a GPU, natively.

    Parameters
    ----------
    fp32_model, fp16_model : mxnet.gluon.Block, ConvertedModel or tuple
        Gluon blocks (a :func:`load_float16` block, a hybridized net), converted models, or
        ``(sym, arg_params, aux_params)`` tuples. One data input each.
    inputs : array-like or iterable
        An array of samples ``(N, ...)`` (split into batches), or an iterable of batches or
        ``(X, y)`` pairs such as a DataLoader.
    batch_size : int, default 8
        Batch size when ``inputs`` is one array.
    ctx : mxnet.Context, optional
        The first GPU when there is one, else the CPU.
    progress : bool, default True
        Show a tqdm bar.
    input_dtype : str, optional
        Dtype of the data given to the float16 model: by default the one it declares
        (float16 after ``keep_io_types=False``), else float32; ``'float16'`` for a Gluon
        block cast with ``cast('float16')``. The float32 model always gets float32.

    Returns
    -------
    ValidationReport
    """
    if batch_size < 1:
        raise ConversionError("batch_size must be at least 1, got %r" % (batch_size,))
    ctx = _default_ctx(ctx)
    start = time.perf_counter()
    batches = _batches(inputs, batch_size)
    ref = _run(_Runner(fp32_model, ctx), batches, progress, "validate float32")
    got = _run(_Runner(fp16_model, ctx, input_dtype), batches, progress, "validate float16")
    if len(ref) != len(got) or any(a.shape != b.shape for a, b in zip(ref, got)):
        raise ConversionError("the two models give outputs of different shapes: %s and %s"
                              % ([a.shape for a in ref], [b.shape for b in got]))
    abs_err, rel, nonfinite, top1 = _compare(ref, got)
    return ValidationReport(samples=sum(len(b) for b in batches), max_abs_error=abs_err,
                            max_rel_error=rel, nonfinite_share=nonfinite, top1_agreement=top1,
                            device=_device_text(ctx), seconds=time.perf_counter() - start)


# ------------------------------------------------------------------ the fp32-layer search
@dataclass
class SearchResult:
    """The outcome of :func:`search_fp32_layers`.

    Attributes
    ----------
    layers : list of str
        The layers to keep in float32 (empty when full float16 already meets the tolerance).
    tolerance : float
        The tolerance on the relative output error (see :class:`ValidationReport`).
    error : float
        The relative error with ``layers`` kept float32.
    initial_error : float
        The relative error with no layer kept float32 (inf when outputs overflow).
    evaluations : int
        Conversions run and compared; a naive one-layer-at-a-time search needs one per
        candidate.
    ranking : list of (str, float)
        The candidate layers, ``(name, max |float32 activation|)``, most at risk first.
    model : ConvertedModel
        The model converted with ``layers`` kept float32 (reported with reason 'search').
    """

    layers: List[str]
    tolerance: float
    error: float
    initial_error: float
    evaluations: int
    ranking: List[Tuple[str, float]] = field(repr=False)
    model: ConvertedModel = field(repr=False)

    def __str__(self):
        lines = ["float32-layer search: tolerance %.3g on max rel error" % self.tolerance,
                 "  error all float16:     %.4g" % self.initial_error,
                 "  error after search:    %.4g" % self.error,
                 "  evaluations:           %d (for %d candidate layers)"
                 % (self.evaluations, len(self.ranking)),
                 "  layers kept float32:   %s" % (", ".join(self.layers) or "none")]
        return "\n".join(lines)


def _activation_ranges(sym, arg_params, aux_params, candidates, batches, ctx, progress):
    """Largest |output| of each candidate layer in float32, plus the float32 outputs."""
    graph = _graph(_inference_graph(sym))
    position = {n["name"]: i for i, n in enumerate(graph["nodes"])}
    probe = {k: v for k, v in graph.items() if k != "node_row_ptr"}
    heads = list(graph["heads"])
    probe["heads"] = heads + [[position[name], 0, 0] for name in candidates]
    probe_sym = mx.sym.load_json(json.dumps(probe))
    runner = _Runner((probe_sym, arg_params, aux_params), ctx)
    outputs = None
    ranges = np.zeros(len(candidates))
    for batch in _progress(batches, progress, "search: float32 ranges", total=len(batches)):
        outs = runner(batch)
        if outputs is None:
            outputs = [[] for _ in heads]
        for store, out in zip(outputs, outs[:len(heads)]):
            store.append(out)
        for k, act in enumerate(outs[len(heads):]):
            finite = np.abs(act[np.isfinite(act)])
            ranges[k] = max(ranges[k], float(finite.max(initial=0.0)))
    return ranges, [np.concatenate(parts) for parts in outputs]


def search_fp32_layers(sym, arg_params, aux_params, inputs, tolerance=1e-2, exclude_layers=(),
                       exclude_ops=(), keep_io_types=True, cast_optional_params=True,
                       batch_size=8, ctx=None, progress=True):
    """Find a small set of layers to keep in float32 so the outputs meet a tolerance.

    Like onnxconverter-common's ``auto_convert_mixed_precision``, but faster than trying
    one layer at a time: the layers that compute in float16 are ranked once by the largest
    magnitude of their float32 output on ``inputs`` (the ones nearest float16's limit of
    65504 first), then a bisection finds the shortest prefix of that ranking that meets the
    tolerance, and a last pass drops any layer of that prefix that is not needed.
    That takes about ``2 + log2(n) + k`` conversions for ``n`` candidates and ``k`` layers
    found.

    Parameters
    ----------
    sym, arg_params, aux_params
        The float32 model.
    inputs : array-like or iterable
        Representative inputs, as in :func:`validate`.
    tolerance : float, default 1e-2
        Largest acceptable relative error, ``max|y16 - y32| / max|y32|``; outputs must also
        be finite.
    exclude_layers, exclude_ops, keep_io_types, cast_optional_params
        As in :func:`convert`; the user's exclusions are always kept.
    batch_size : int, default 8
        Batch size when ``inputs`` is one array.
    ctx : mxnet.Context, optional
        The first GPU when there is one, else the CPU (emulated float16).
    progress : bool, default True
        Show tqdm bars.

    Returns
    -------
    SearchResult

    Raises
    ------
    ConversionError
        When the tolerance cannot be met even with every layer in float32.

    .. note::
       The bisection assumes that keeping more of the ranked layers in float32 never makes
       the error worse, which holds for overflow; the final pruning pass keeps the set small
       when it does not hold exactly.
    """
    if not tolerance > 0:
        raise ConversionError("tolerance must be positive, got %r" % (tolerance,))
    ctx = _default_ctx(ctx)
    batches = _batches(inputs, batch_size)
    settings = dict(exclude_layers=list(exclude_layers), exclude_ops=list(exclude_ops),
                    keep_io_types=keep_io_types, cast_optional_params=cast_optional_params)
    base = convert(sym, arg_params, aux_params, **settings)
    candidates = [name for name, dtype in base.report.layer_dtypes.items() if dtype == "float16"]
    ranges, reference = _activation_ranges(sym, arg_params, aux_params, candidates, batches,
                                           ctx, progress)
    order = sorted(range(len(candidates)), key=lambda k: (-ranges[k], k))
    ranking = [(candidates[k], float(ranges[k])) for k in order]
    names = [name for name, _ in ranking]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=2 + max(1, math.ceil(math.log2(max(len(names), 1)))),
                   desc="search: bisect", leave=False)
    cache = {}

    def error_with(layers):
        key = tuple(sorted(layers))
        if key not in cache:
            model = convert(sym, arg_params, aux_params, searched_layers=list(layers),
                            **settings) if layers else base
            got = _run(_Runner(model, ctx), batches, False, "")
            _, rel, nonfinite, _ = _compare(reference, got)
            cache[key] = math.inf if nonfinite else rel
            if bar is not None:
                bar.update(1)
        return cache[key]

    try:
        initial = error_with([])
        if initial <= tolerance:
            return SearchResult([], float(tolerance), initial, initial, len(cache), ranking, base)
        full = error_with(names)
        if full > tolerance:
            raise ConversionError("tolerance %.3g cannot be met even with all %d float16 "
                                  "layers kept float32 (error %.4g)"
                                  % (tolerance, len(names), full))
        low, high = 0, len(names)  # error(top low) > tolerance >= error(top high)
        while high - low > 1:
            mid = (low + high) // 2
            if error_with(names[:mid]) <= tolerance:
                high = mid
            else:
                low = mid
        chosen = names[:high]
        if bar is not None:
            bar.total = len(cache) + len(chosen) - 1
            bar.refresh()
        for name in reversed(list(chosen)):
            if len(chosen) == 1:
                break
            trial = [n for n in chosen if n != name]
            if error_with(trial) <= tolerance:
                chosen = trial
    finally:
        if bar is not None:
            bar.close()
    model = convert(sym, arg_params, aux_params, searched_layers=list(chosen), **settings)
    return SearchResult(list(chosen), float(tolerance), cache[tuple(sorted(chosen))], initial,
                        len(cache), ranking, model)


# ------------------------------------------------------------------ loading and Gluon blocks
def load_float16(prefix, epoch=0, ctx=None):
    """Load a converted checkpoint as a ``SymbolBlock`` ready for inference.

    On a CPU the graph goes through the emulation pass, so the float16 layers run (with
    float16 numerics) whether or not :func:`mxmixed.emulation.enable` is on. Module API
    loss outputs (``SoftmaxOutput`` ...) are replaced by their inference form, so the block
    takes only the data.

    Parameters
    ----------
    prefix : str
        Path prefix of ``prefix-symbol.json`` and ``prefix-%04d.params``.
    epoch : int, default 0
        The epoch number of the params file.
    ctx : mxnet.Context, optional
        The first GPU when there is one, else the CPU.

    Returns
    -------
    mxnet.gluon.SymbolBlock
        Call it with data of the saved input dtype (float32 unless converted with
        ``keep_io_types=False``).

    .. note::
       On a CPU the block's graph holds the emulation casts; export the converted checkpoint
       itself, not this block, to deploy on a GPU.
    """
    sym, arg_params, aux_params = load_checkpoint(prefix, epoch)
    return _symbol_block(sym, arg_params, aux_params, _default_ctx(ctx))


def _deferred(block):
    for param in block.collect_params().values():
        try:
            param.list_data()
        except gluon.parameter.DeferredInitializationError:
            return True
    return False


def _block_graph(block, inputs, ctx):
    if not block._cached_graph:
        if inputs is None:
            raise ConversionError("block %s has not run hybridized yet: pass example inputs "
                                  "(inputs=...) so it can be hybridized and run once"
                                  % block.name)
        inputs = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        data = [mx.nd.array(x, ctx=ctx) if not isinstance(x, mx.nd.NDArray)
                else x.as_in_context(ctx) for x in inputs]
        if not block._active:
            block.hybridize()
        if _deferred(block):  # shapes are unknown until the block runs once
            try:
                with emulation.emulated() if _is_cpu(ctx) else contextlib.nullcontext():
                    block(*data)
                    mx.nd.waitall()
            except mx.base.MXNetError as err:
                raise ConversionError("block %s failed on the example inputs: %s"
                                      % (block.name, _last_line(err))) from None
        else:  # trace the graph without running it: a cast block may not run (#17164)
            block._get_graph(*data)
    data_vars, sym = block._cached_graph
    graph = _graph(sym)
    for node in graph["nodes"]:  # a float32 graph: forget dtypes of a cast block (#17164)
        if node["op"] == "null":
            attrs = node.get("attrs", {})
            if "__dtype__" in attrs and _var_dtype(node) == _FLOAT16:
                attrs["__dtype__"] = str(_DTYPE_NP_TO_MX[np.float32])
    return [v.name for v in data_vars], mx.sym.load_json(json.dumps(graph))


def convert_hybrid_block(block, inputs=None, ctx=None, exclude_layers=(), exclude_ops=(),
                         keep_io_types=True, cast_optional_params=True, return_report=False):
    """Convert a Gluon HybridBlock to float16 mixed precision, on a CPU or a GPU.

    Unlike ``mxnet.contrib.amp.convert_hybrid_block`` (``ctx=gpu(0)`` by default, and an
    error unless the block was hybridized and run), this hybridizes and runs the block once
    when needed, works on a CPU through emulation, and keeps BatchNorm gamma, beta and
    moving statistics float32 even for a block cast with ``cast('float16')`` whose BatchNorm
    is built from symbols (MXNet issue #17164).

    Parameters
    ----------
    block : mxnet.gluon.HybridBlock
        An initialized block (float32, or cast to float16).
    inputs : NDArray or list of NDArray, optional
        Example inputs, needed when the block has not run hybridized yet.
    ctx : mxnet.Context, optional
        Where the returned block lives: the first GPU when there is one, else the CPU.
    exclude_layers, exclude_ops, keep_io_types, cast_optional_params
        As in :func:`convert`.
    return_report : bool, default False
        Also return the :class:`ConversionReport`.

    Returns
    -------
    mxnet.gluon.SymbolBlock or (SymbolBlock, ConversionReport)
        Emulated on a CPU, native on a GPU.
    """
    if not isinstance(block, gluon.HybridBlock):
        raise ConversionError("block must be a HybridBlock, got %s" % type(block).__name__)
    ctx = _default_ctx(ctx)
    params = block.collect_params()
    first = next(iter(params.values()), None)
    run_ctx = first.list_ctx()[0] if first is not None else ctx
    data_names, sym = _block_graph(block, inputs, run_ctx)
    arg_names, aux_names = set(sym.list_arguments()), set(sym.list_auxiliary_states())
    arg_params, aux_params = {}, {}
    for name, param in params.items():
        if name in arg_names:
            arg_params[name] = param.list_data()[0].copyto(mx.cpu())
        elif name in aux_names:
            aux_params[name] = param.list_data()[0].copyto(mx.cpu())
    missing = sorted(set(sym.list_inputs()) - set(arg_params) - set(aux_params)
                     - set(data_names))
    if missing:
        raise ConversionError("the block's graph uses inputs that are neither data nor its "
                              "params: %s" % missing)
    model = convert(sym, arg_params, aux_params, exclude_layers=exclude_layers,
                    exclude_ops=exclude_ops, keep_io_types=keep_io_types,
                    cast_optional_params=cast_optional_params)
    converted = model.to_block(ctx)
    return (converted, model.report) if return_report else converted
