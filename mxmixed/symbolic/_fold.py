"""BatchNorm folded into the Convolution before it, in float32, before a conversion.

At inference a BatchNorm after a Convolution is an affine map per output channel,
``y = (x - mean) * gamma / sqrt(var + eps) + beta``, which the convolution's weight and bias
can carry: ``W' = W * s`` and ``b' = (b - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``
per output channel (gamma counts as 1 under ``fix_gamma``). Done in float64 on the float32
params and stored in float32, the folded model equals the unfolded one within float32
rounding; the cast to bfloat16 or float16 comes after. oneDNN's subgraph backend then has no
Convolution+BatchNorm pair left to fuse in the low-precision graph (its own fusion of a bfloat16
pair costs accuracy: docs/bfloat16.md).

A pair is folded only where nothing else can tell: the BatchNorm reads output 0 of a
Convolution in a channels-first layout that no other node (nor a head) reads, it normalizes
axis 1 and returns only its output, and the convolution's weight and bias and the BatchNorm's
four params are variables that only these two nodes read, counted by name (a weight shared
by two layers is left alone, also where each reads it through a variable node of its own).
The converted model is for inference: a folded BatchNorm no longer learns.
"""
import numpy as np

import mxnet as mx

from .._core.convert import ConversionError
from .._core.graph import as_graph, attr_float, unused_name
from .._core.mxbool import attr_bool

__all__ = ["fold_batchnorm"]

def _attr(node, key, default):
    return node.attrs.get(key, default)


def _variable(graph, entry, params, shared):
    """The name of the variable at ``entry`` if it is in ``params`` and read only once."""
    node = graph.nodes[entry[0]]
    if node.op != "null" or node.name not in params or node.name in shared:
        return None
    return node.name


def _shared_names(graph, heads):
    """Variable names read more than once in all, or returned as a head.

    A param is bound by name: two variable nodes of one name read one array, so its readers
    are counted per name, never per node.
    """
    reads = {}
    for i, node in enumerate(graph.nodes):
        if node.op == "null":
            name = node.name
            reads[name] = reads.get(name, 0) + len(graph.readers((i, 0))) + ((i, 0) in heads)
    return {name for name, count in reads.items() if count != 1}


def _foldable(graph, index, args, auxs, heads, keep, shared):
    """``(conv index, weight, bias or None, (gamma, beta, mean, var))`` or None."""
    bn = graph.nodes[index]
    if bn.op != "BatchNorm" or bn.name in keep or len(bn.inputs) != 5:
        return None
    if int(_attr(bn, "axis", "1")) != 1 or \
            attr_bool(bn.attrs, "output_mean_var", False):
        return None
    src, out = bn.inputs[0][:2]
    conv = graph.nodes[src]
    if conv.op != "Convolution" or out != 0 or conv.name in keep:
        return None
    if not str(_attr(conv, "layout", "NC")).upper().startswith("NC"):
        return None
    if graph.readers((src, 0)) != [index] or (src, 0) in heads:
        return None
    if any(graph.readers((index, k)) or (index, k) in heads for k in (1, 2)):
        return None
    names = [_variable(graph, e, args, shared) for e in bn.inputs[1:3]] + \
            [_variable(graph, e, auxs, shared) for e in bn.inputs[3:5]]
    weight = (_variable(graph, conv.inputs[1], args, shared)
              if len(conv.inputs) > 1 else None)
    no_bias = attr_bool(conv.attrs, "no_bias", False)
    bias = None if no_bias else (_variable(graph, conv.inputs[2], args, shared)
                                 if len(conv.inputs) > 2 else None)
    if None in names or weight is None or (not no_bias and bias is None):
        return None
    return src, weight, bias, tuple(names)


def _check_shapes(bn, conv, weight, params):
    """One line where the pair's params do not fit together (MXNet could not run the pair).

    ``params``: ``(name, NDArray)`` of the BatchNorm's four and the convolution's bias."""
    channels = weight.shape[0] if weight.ndim else None
    for name, value in params:
        shape = tuple(value.shape)
        if shape != (channels,):
            raise ConversionError(
                "cannot fold BatchNorm %r into Convolution %r: %s has the shape %s, and the "
                "convolution's weight %s has %s output channels" % (
                    bn.name[:80], conv.name[:80], name[:80], shape,
                    tuple(weight.shape), channels))


def _folded_params(bn, conv_params, bn_params):
    """The folded weight and bias (float32 NDArrays) of one pair."""
    weight, bias = conv_params
    gamma, beta, mean, var = (p.asnumpy().astype(np.float64) for p in bn_params)
    if attr_bool(bn.attrs, "fix_gamma", True):
        gamma = np.ones_like(gamma)
    scale = gamma / np.sqrt(var + attr_float(_attr(bn, "eps", None), 0.001))
    w = weight.asnumpy().astype(np.float64)
    b = np.zeros_like(scale) if bias is None else bias.asnumpy().astype(np.float64)
    new_w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    new_b = (b - mean) * scale + beta
    return mx.nd.array(new_w, dtype="float32"), mx.nd.array(new_b, dtype="float32")


def fold_batchnorm(graph, arg_params, aux_params, keep=()):
    """Fold every foldable BatchNorm into the Convolution before it.

    Parameters
    ----------
    graph : Graph or mxnet.symbol.Symbol
        A float32 inference graph.
    arg_params, aux_params : dict of str to NDArray
        Its float32 params (not changed).
    keep : iterable of str, optional
        Layer names that must stay as they are (layers excluded from the conversion).

    Returns
    -------
    graph : Graph
        The graph without the folded BatchNorms (the same object when none was folded).
    arg_params, aux_params : dict of str to NDArray
        New dicts: folded weights and biases replace the convolutions' (a convolution without
        a bias gets one, ``<conv>_bias``), the BatchNorms' params are gone.
    folded : list of (str, str)
        ``(BatchNorm name, Convolution name)`` of each pair folded, in graph order.
    """
    graph = as_graph(graph)
    heads = {(src, out) for src, out, _ in graph.heads}
    keep = set(keep)
    shared = _shared_names(graph, heads)
    pairs = {}
    for i in range(len(graph.nodes)):
        found = _foldable(graph, i, arg_params, aux_params, heads, keep, shared)
        if found is not None:
            pairs[found[0]] = (i,) + found[1:]
    if not pairs:
        return graph, dict(arg_params), dict(aux_params), []
    args, auxs = dict(arg_params), dict(aux_params)
    taken = {node.name for node in graph.nodes} | set(args) | set(auxs)
    rebuild = graph.rebuild()
    folded, dropped = [], set()
    for bn_index, *_ in pairs.values():
        dropped.add(bn_index)
        dropped.update(e[0] for e in graph.nodes[bn_index].inputs[1:])
    for i, node in enumerate(graph.nodes):
        if i in dropped:
            continue
        if i not in pairs:
            rebuild.place(i, rebuild.add(rebuild.mapped(node)))
            continue
        bn_index, weight, bias, (gamma, beta, mean, var) = pairs[i]
        bn = graph.nodes[bn_index]
        _check_shapes(bn, node, args[weight],
                      [(name, params[name]) for name, params in (
                          (gamma, args), (beta, args), (mean, auxs), (var, auxs))]
                      + ([(bias, args[bias])] if bias is not None else []))
        new_w, new_b = _folded_params(bn, (args[weight], args.get(bias)),
                                      (args[gamma], args[beta], auxs[mean], auxs[var]))
        conv = rebuild.mapped(node)
        if bias is None:
            bias = unused_name(node.name + "_bias", taken)
            taken.add(bias)
            bias_id = rebuild.add({"op": "null", "name": bias, "inputs": []})
            conv["inputs"] = conv.inputs[:2] + [[bias_id, 0, 0]]
            conv["attrs"] = dict(conv.attrs, no_bias="False")
        args[weight], args[bias] = new_w, new_b
        for name in (gamma, beta):
            args.pop(name)
        for name in (mean, var):
            auxs.pop(name)
        new_id = rebuild.add(conv)
        rebuild.place(i, new_id)
        rebuild.redirect((bn_index, 0), (new_id, 0))
        folded.append((bn.name, node.name))
    return rebuild.graph(), args, auxs, folded
