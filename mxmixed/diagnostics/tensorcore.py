"""Tensor Core shape audit: GEMM-like layers whose dimensions are not multiples of 8.

Float16 Tensor Cores run a GEMM at full speed when its M, N and K are multiples of 8
(NVIDIA's Deep Learning Performance Guide); otherwise cuBLAS and cuDNN pad, fall back to
slower kernels, or skip Tensor Cores. The audit reads every layer's shapes with
``infer_shape`` (nothing runs), so it also works on nets that are not initialized.

=================  =====================================  =================================
layer              GEMM dimensions checked                note
=================  =====================================  =================================
FullyConnected     batch (M), input features (K),          ``flatten=False``: M is every
                   output features (N)                     leading dimension together
Convolution        input and output channels per group     the batch and pixel dimension
                                                           (N*P*Q) is tiled freely
Deconvolution      input and output channels per group
RNN                batch, input size, hidden size
Embedding          embedding size (the next GEMM's K),     a gather, not a GEMM
                   vocabulary (an output layer's N)
=================  =====================================  =================================

Depthwise convolutions (one input channel per group) do not use Tensor Cores at all; they
are listed as notes, not findings.
"""
from collections import namedtuple
from typing import List, Optional, Union

import numpy as np

import mxnet as mx
from mxnet import gluon

from .._core.mxbool import attr_bool
from ._tracing import (GraphInfo, InputShape, block_paths, check_block, layer_of, normalize_input_shape,
                     strip_amp_casts, trace)

__all__ = ["tensor_core_audit", "TensorCoreAudit", "Finding", "AUDITED_OPS"]

AUDITED_OPS = ("FullyConnected", "Convolution", "Deconvolution", "RNN", "Embedding")

Finding = namedtuple("Finding", ["layer", "node", "op", "dimension", "value", "suggested",
                                 "advice"])
Finding.__doc__ = """One dimension that is not a multiple of 8.

Parameters
----------
layer : str
    The Gluon block (``'net.output (Dense)'``) or the node name for a Symbol.
node : str
    The graph node.
op : str
    Its operator.
dimension : str
    Which dimension: 'batch', 'input features', 'output features', 'input channels',
    'output channels', 'input size', 'hidden size', 'embedding size', 'vocabulary'.
value : int
    Its size.
suggested : int
    The next multiple.
advice : str
    What to change.
"""


def _up(value, multiple):
    return int(-(-value // multiple) * multiple)


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


_ADVICE = {
    "batch": "use a batch size that is a multiple of {m} ({up})",
    "rows": "make the product of the leading dimensions a multiple of {m} (batch or sequence "
            "length; {up})",
    "input features": "make the preceding layer's output size {up}, or pad the features with "
                      "zeros",
    "output features": "use {up} units (for a classifier: {up} outputs, and ignore or slice "
                       "off the {extra} extra logits)",
    "input channels": "give the preceding layer {up} channels",
    "input channels (image)": "the input has {v} channel(s): pad it with zero channels to "
                              "{up} (NVIDIA's NHWC examples pad to 4); it is one layer, so the "
                              "gain is usually small",
    "output channels": "use {up} filters",
    "input size": "make the input features {up} (pad with zeros or change the embedding size)",
    "hidden size": "use a hidden size of {up}",
    "embedding size": "use an embedding size of {up}: it is the K of the next GEMM",
    "vocabulary": "pad the vocabulary to {up} tokens if an output layer predicts it (or "
                  "shares its weights)",
}


class TensorCoreAudit:
    """What :func:`tensor_core_audit` found.

    Attributes
    ----------
    layers : list of dict
        Every audited layer: ``node``, ``layer``, ``op`` and ``dims`` (name -> size).
    findings : list of Finding
        The dimensions that are not multiples of ``multiple``.
    notes : list of str
        Layers the rule does not apply to (depthwise convolutions).
    multiple : int
        The multiple checked (8 for float16).
    """

    def __init__(self, layers, findings, notes, multiple):
        self.layers, self.findings, self.notes, self.multiple = layers, findings, notes, multiple

    def __bool__(self):
        return bool(self.findings)

    def __len__(self):
        return len(self.findings)

    def find(self, node: Optional[str] = None, dimension: Optional[str] = None) -> List[Finding]:
        """The findings for a node (name or Gluon label substring) and/or a dimension."""
        return [f for f in self.findings
                if (node is None or node == f.node or node in f.layer)
                and (dimension is None or f.dimension == dimension)]

    def __str__(self):
        lines = ["Tensor Core audit: %d GEMM-like layers, %d dimension(s) not a multiple of %d"
                 % (len(self.layers), len(self.findings), self.multiple)]
        for f in self.findings:
            lines.append("  %s [%s]: %s = %d -> %d: %s"
                         % (f.layer, f.op, f.dimension, f.value, f.suggested, f.advice))
        if self.notes:
            lines.append("notes:")
            lines += ["  " + n for n in self.notes]
        return "\n".join(lines)

    def __repr__(self):
        return "TensorCoreAudit(layers=%d, findings=%d)" % (len(self.layers), len(self.findings))


def _graph_of(net_or_sym, what):
    if isinstance(net_or_sym, mx.sym.Symbol):
        return strip_amp_casts(net_or_sym), None
    if not isinstance(net_or_sym, gluon.Block):
        raise TypeError("%s needs a Gluon HybridBlock or an mxnet Symbol, got %s"
                        % (what, type(net_or_sym).__name__))
    check_block(net_or_sym, what)
    return strip_amp_casts(trace(net_or_sym)), block_paths(net_or_sym)


def tensor_core_audit(net: Union[gluon.HybridBlock, mx.sym.Symbol], input_shape: InputShape,
                      multiple: int = 8) -> "TensorCoreAudit":
    """List the batch, channel, hidden and output dimensions that are not multiples of 8.

    Parameters
    ----------
    net : mxnet.gluon.HybridBlock or mxnet.symbol.Symbol
        The model (it need not be initialized).
    input_shape : tuple or dict of str to tuple
        Shape of the data input, batch first, e.g. ``(32, 3, 224, 224)``; a dict for graphs
        with several inputs or an input not called ``'data'``.
    multiple : int, default 8
        8 for float16 Tensor Cores (16 helps INT8 and some older cuBLAS versions).

    Returns
    -------
    TensorCoreAudit
        ``print(audit)`` lists each finding with what to change.

    Raises
    ------
    TypeError
        For a plain ``gluon.Block`` or anything else.
    ValueError
        For an input shape that does not fit the model.

    Examples
    --------
    >>> from mxnet import gluon
    >>> from mxmixed import diagnostics
    >>> net = gluon.nn.HybridSequential()
    >>> net.add(gluon.nn.Dense(30, activation="relu"), gluon.nn.Dense(10))
    >>> net.initialize()
    >>> audit = diagnostics.tensor_core_audit(net, (32, 64))
    >>> len(audit.findings) > 0                  # 30 and 10 units are not multiples of 8
    True
    """
    if isinstance(multiple, bool) or not isinstance(multiple, (int, np.integer)) or multiple < 2:
        raise ValueError("multiple must be an integer >= 2, got %r" % (multiple,))
    sym, paths = _graph_of(net, "tensor_core_audit")
    shapes = normalize_input_shape(sym, input_shape)
    info = GraphInfo(sym, shapes, {n: "float32" for n in shapes})
    data_names = set(shapes)
    layers, findings, notes = [], [], []
    for i in info.op_nodes(AUDITED_OPS):
        node = info.nodes[i]
        label = layer_of(node.name, paths) or node.name
        dims, kinds = _dims(info, i, data_names)
        if dims is None:
            notes.append("%s [%s]: depthwise convolution (%d channels, one per group): Tensor "
                         "Cores do not apply; nothing to change" % (label, node.op, kinds))
            layers.append({"node": node.name, "layer": label, "op": node.op, "dims": {}})
            continue
        layers.append({"node": node.name, "layer": label, "op": node.op, "dims": dims})
        for name, value in dims.items():
            if value % multiple == 0:
                continue
            up = _up(value, multiple)
            advice = _ADVICE[kinds.get(name, name)].format(m=multiple, up=up, v=value,
                                                           extra=up - value)
            findings.append(Finding(label, node.name, node.op, name, int(value), up,
                                    advice))
    return TensorCoreAudit(layers, findings, notes, multiple)


def _dims(info, i, data_names):
    """The GEMM dimensions of one layer, and which advice fits each."""
    node = info.nodes[i]
    attrs = info.attrs(i)
    op = node.op
    data_shape = info.input(i, 0)[0]
    if op == "FullyConnected":
        if attr_bool(attrs, "flatten", True):
            rows, k = data_shape[0], int(np.prod(data_shape[1:]))
            row_name = "batch"
        else:
            rows, k = int(np.prod(data_shape[:-1])), data_shape[-1]
            row_name = "rows"
        dims = {row_name: rows, "input features": k,
                "output features": _int(attrs.get("num_hidden"))}
        return dims, {}
    if op in ("Convolution", "Deconvolution"):
        groups = max(_int(attrs.get("num_group"), 1), 1)
        layout = attrs.get("layout", "None")
        channel_axis = -1 if layout not in ("None", None) and layout.endswith("C") else 1
        c_in = data_shape[channel_axis]
        c_out = _int(attrs.get("num_filter"))
        if groups > 1 and c_in // groups == 1:
            return None, c_in
        src = info.nodes[node.inputs[0][0]]
        first = src.is_variable and src.name in data_names
        dims = {"input channels": c_in // groups, "output channels": c_out // groups}
        return dims, ({"input channels": "input channels (image)"} if first else {})
    if op == "RNN":
        # data is (T, N, I) in MXNet's RNN op
        return {"batch": data_shape[1], "input size": data_shape[2],
                "hidden size": _int(attrs.get("state_size"))}, {}
    if op == "Embedding":
        return {"embedding size": _int(attrs.get("output_dim")),
                "vocabulary": _int(attrs.get("input_dim"))}, {}
    raise AssertionError(op)  # pragma: no cover
