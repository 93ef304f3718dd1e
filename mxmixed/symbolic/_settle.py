"""Dtype settling: a converted graph in which every op gets inputs it accepts.

MXNet 1.9.1's AMP pass (``amp.convert_model``) leaves two kinds of graphs that do not
type-check, so that the conversion fails or the converted model cannot run:

* ops that are in none of its lists and take several floating inputs, such as
  ``_contrib_box_decode`` in SSD: the box predictions come out of a float16 convolution, the
  anchors stay float32 ("Incompatible attr in node ..._box_decode0 at 1-th input");
* excluded layers that feed a ``Concat`` or an elementwise add next to float16 branches
  (Inception's "Non-uniform data type in Concat"); MXNet's pass fails on them itself.

:func:`_settle` walks the converted graph in order, asks MXNet's own type inference about one
node at a time, and where a node's inputs do not fit together it casts them: up to float32
for most ops (the widest type, as ``amp_multicast`` does), down to float16 for the ops of
MXNet's float16 list (Convolution, FullyConnected, ...). Nodes named in ``forced`` always
compute in float32, with float32 weights. The fast path, a graph that already type-checks
and has nothing forced, is never touched.

:data:`DETECTION_OPS` is the data for the default: detection ops whose coordinates, anchors
and scores stay float32 (box decoding, NMS, anchors, ROI pooling and proposals).
"""
import json

import numpy as np

import mxnet as mx
from mxnet.contrib import amp
from mxnet.ndarray.ndarray import _DTYPE_MX_TO_NP, _DTYPE_NP_TO_MX

from ._common import ConversionError, _FLOAT16, _FLOAT32, _last_line

__all__ = []

# Detection ops that :func:`convert` keeps float32 by default (``keep_detection_float32``).
# Box coordinates need float32: float16 has a step of 0.25 pixel at 512 and of 0.5 at 1024,
# and NMS, IoU and matching compare coordinates and scores. Several are in none of MXNet's
# AMP lists, so the pass leaves their float16 and float32 inputs unmatched.
DETECTION_OPS = (
    "_contrib_box_decode",            # SSD / Faster R-CNN: in no AMP list; anchors float32
    "_contrib_box_encode",            # training targets; in no AMP list
    "_contrib_box_nms",               # NMS on scores and coordinates (AMP: widest type)
    "_contrib_box_non_maximum_suppression",
    "_contrib_box_iou",
    "_contrib_bipartite_matching",
    "_contrib_MultiBoxPrior",         # anchors (AMP: float32 list)
    "_contrib_MultiBoxTarget",
    "_contrib_MultiBoxDetection",
    "_contrib_Proposal",              # Faster R-CNN region proposals
    "_contrib_MultiProposal",
    "ROIPooling",                     # ROI ops: box coordinates as inputs
    "_contrib_ROIAlign",
    "_contrib_RROIAlign",
    "_contrib_PSROIPooling",
    "_contrib_DeformablePSROIPooling",
)


def _floating(dtype):
    return dtype is not None and np.issubdtype(dtype, np.floating)


def _node_types(node, in_types, n_out):
    """Output dtypes of ``node`` given input dtypes, from MXNet's inference (or None)."""
    nodes = [{"op": "null", "name": "in%d" % k, "inputs": []} for k in range(len(in_types))]
    nodes.append({"op": node["op"], "name": node["name"], "attrs": node.get("attrs", {}),
                  "inputs": [[k, 0, 0] for k in range(len(in_types))]})
    graph = {"nodes": nodes, "arg_nodes": list(range(len(in_types))),
             "heads": [[len(in_types), j, 0] for j in range(n_out)],
             "attrs": {"mxnet_version": ["int", 10901]}}
    try:
        sym = mx.sym.load_json(json.dumps(graph))
        names = sym.list_inputs()  # arguments and auxiliary states, in node order
        known = {n: t for n, t in zip(["in%d" % k for k in range(len(in_types))], in_types)
                 if t is not None}
        args, outs, auxs = sym.infer_type_partial(**{n: known[n] for n in names if n in known})
    except mx.base.MXNetError:
        return None
    return [np.dtype(t) if t is not None else None for t in outs]


def _settle(graph, forced, param_types, data_types, target="float16"):
    """Rewrite ``graph`` (converted JSON) so that every node type-checks.

    Parameters
    ----------
    graph : dict
        The converted graph, with its ``amp_cast`` nodes.
    forced : set of str
        Node names that must compute in float32.
    param_types : dict of str to numpy.dtype
        Dtype of every param (as stored after the conversion).
    data_types : dict of str to numpy.dtype
        Dtype of every data input.

    Returns
    -------
    graph : dict
        The new graph.
    widened : list of str
        Nodes (not forced) whose inputs were cast up to float32 because they did not match.
    fp32_params : set of str
        Params that only forced nodes use: store them float32.
    """
    nodes = graph["nodes"]
    lp16 = set(amp.list_lp16_ops(target))
    n_out = {}
    for node in nodes:
        for src, out, _ in node["inputs"]:
            n_out[src] = max(n_out.get(src, 1), out + 1)
    for src, out, _ in graph["heads"]:
        n_out[src] = max(n_out.get(src, 1), out + 1)
    consumers = {}
    for j, node in enumerate(nodes):
        for src, _, _ in node["inputs"]:
            consumers.setdefault(src, set()).add(j)
    # Params read only by forced nodes (directly or through one amp_cast) stay float32.
    fp32_params = set()
    for i, node in enumerate(nodes):
        if node["op"] != "null" or node["name"] not in param_types:
            continue
        users = consumers.get(i, set())
        readers = set()
        for j in users:
            if nodes[j]["op"] == "amp_cast":
                readers |= consumers.get(j, set())
            else:
                readers.add(j)
        if readers and all(nodes[j]["name"] in forced for j in readers) and any(
                nodes[j]["name"] in forced for j in readers):
            fp32_params.add(node["name"])
    new_nodes, where, types = [], {}, {}
    cast_cache, widened = {}, []

    def cast(entry, dtype):
        key = (entry, np.dtype(dtype).name)
        if key not in cast_cache:
            src = new_nodes[entry[0]]
            new_nodes.append({"op": "amp_cast", "name": "%s_settle_%s" % (src["name"], key[1]),
                              "attrs": {"dtype": key[1]}, "inputs": [[entry[0], entry[1], 0]]})
            cast_cache[key] = (len(new_nodes) - 1, 0)
            types[cast_cache[key]] = np.dtype(dtype)
        return cast_cache[key]

    for i, node in enumerate(nodes):
        node = dict(node)
        if node["op"] == "null":
            name = node["name"]
            if name in fp32_params:
                dtype = _FLOAT32
                node["attrs"] = dict(node.get("attrs", {}),
                                     __dtype__=str(_DTYPE_NP_TO_MX[np.float32]))
            elif name in param_types:
                dtype = np.dtype(param_types[name])
            else:
                dtype = np.dtype(data_types.get(name, _FLOAT32))
            new_nodes.append(node)
            where[i] = len(new_nodes) - 1
            types[(where[i], 0)] = dtype
            continue
        entries = [(where[src], out) for src, out, _ in node["inputs"]]
        if node["op"] == "amp_cast" and nodes[node["inputs"][0][0]]["name"] in fp32_params:
            # a float16 cast of a param kept float32 for a forced node: pass it through
            where[i] = entries[0][0]
            continue
        if node["name"] in forced:
            entries = [cast(e, _FLOAT32) if types.get(e) == _FLOAT16 else e for e in entries]
        in_types = [types.get(e) for e in entries]
        outs = _node_types(node, in_types, n_out.get(i, 1))
        if outs is None and node["name"] not in forced:
            floats = {t.name for t in in_types if _floating(t)}
            if node["op"] in lp16:
                entries = [cast(e, _FLOAT16) if _floating(types.get(e))
                           and types.get(e) != _FLOAT16 else e for e in entries]
            else:
                entries = [cast(e, _FLOAT32) if types.get(e) == _FLOAT16 else e
                           for e in entries]
                if len(floats) > 1:
                    widened.append(node["name"])
            in_types = [types.get(e) for e in entries]
            outs = _node_types(node, in_types, n_out.get(i, 1))
        if outs is None:
            raise ConversionError("cannot give node %r (%s) inputs of one dtype: %s"
                                  % (node["name"], node["op"],
                                     [t.name if t is not None else "?" for t in in_types]))
        node["inputs"] = [[s, o, 0] for s, o in entries]
        new_nodes.append(node)
        where[i] = len(new_nodes) - 1
        for j, t in enumerate(outs):
            types[(where[i], j)] = t
    heads = [[where[src], out, 0] for src, out, _ in graph["heads"]]
    new_graph = {"nodes": new_nodes, "heads": heads, "attrs": graph.get("attrs", {}),
                 "arg_nodes": [j for j, n in enumerate(new_nodes) if n["op"] == "null"]}
    return new_graph, widened, fp32_params


def _param_types_after(graph, arg_params, aux_params):
    """Stored dtype of each param: its ``__dtype__`` in the converted graph, else its own."""
    declared = {}
    for node in graph["nodes"]:
        code = node.get("attrs", {}).get("__dtype__") if node["op"] == "null" else None
        if code is not None and code != "-1":
            declared[node["name"]] = np.dtype(_DTYPE_MX_TO_NP[int(code)])
    out = {}
    for params in (arg_params, aux_params):
        for name, value in params.items():
            out[name] = declared.get(name, np.dtype(value.dtype))
    return out


def _error_text(err):
    return _last_line(err)
