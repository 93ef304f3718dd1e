"""How :mod:`mxmixed.symbolic` runs a graph for inference, and the dtypes it runs in.

The inference form of Module API loss outputs, the inference ``SymbolBlock`` (emulated on a
CPU) that the conversion, validation, search and loading code share, the dtype of each graph
entry, and the ``keep_io_types=False`` rewrite.
"""
import weakref
from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

import mxnet as mx
from mxnet import gluon
from mxnet.contrib import amp
from ..emulation import emulate_symbol
from .._core.amx import request_amx
from .._core.convert import ConversionError
from .._core import devices
from .._core.devices import is_cpu
from .._core.dtypes import BFLOAT16, FLOAT16, amp_list_key, is_floating
from .._core.errors import one_line
from .._core.graph import GraphTypeError, Record, as_graph, cast_node, dtype_code, var_dtype
from .._core.mxbool import attr_bool
from .._core.ops import BATCHNORM_OPS, LOSS_OUTPUT_OPS
from ._bfloat16_emulation import emulate_bfloat16

__all__ = ["batchnorm_params", "block_facts", "BlockFacts", "compute_dtype", "consumed_dtypes",
           "default_ctx", "inference_graph", "io_float16", "is_fp32_listed", "known_types",
           "symbol_block"]


# ------------------------------------------------------------------ graph helpers
def consumed_dtypes(graph, known):
    """Dtype of every entry ``(node, output)`` consumed in ``graph`` (a Graph) or at its heads."""
    try:
        dtypes, _ = graph.entry_dtypes(graph.consumed_entries(), known)
    except GraphTypeError as err:
        raise ConversionError("MXNet's type inference rejects the graph: %s"
                              % err.reason) from None
    return dtypes


def compute_dtype(node, dtypes):
    """The dtype an op computes in: that of its first floating input."""
    for src, out, _ in node.inputs:
        dtype = dtypes.get((src, out))
        if is_floating(dtype):
            return dtype
    return None


def is_fp32_listed(node, target):
    key = amp_list_key(target)
    if node.op in amp.list_fp32_ops(key):
        return True
    for op, attr, values in amp.list_conditional_fp32_ops(key):
        if node.op == op and node.attrs.get(attr) in values:
            return True
    return False


def known_types(arg_params, aux_params, data_types):
    known = {n: np.dtype(v.dtype) for n, v in list(arg_params.items()) + list(aux_params.items())}
    known.update(data_types)
    return known


def io_float16(graph, data_names, dtypes):
    """Drop the boundary casts: float16 data inputs and float16 outputs (keep_io_types=False).

    A data input that the converted graph casts to float16 becomes a float16 input (an
    ``amp_cast`` to float32 is put in front of any consumer that needs float32); an output
    cast back to float32 is returned as float16. Inputs that only feed float32 ops (labels)
    stay float32.
    """
    nodes = graph.nodes
    down_casts, widen = {}, set()
    for d, node in enumerate(nodes):
        if node.op != "null" or node.name not in data_names:
            continue
        users = graph.consumers(d)
        down = [j for j in users if nodes[j].op == "amp_cast"
                and nodes[j].attrs.get("dtype") == "float16"]
        if down:
            down_casts[d] = down
            if len(down) < len(users):
                widen.add(d)
    head_redirect = {}
    for src, out, _ in graph.heads:
        node = nodes[src]
        if node.op == "amp_cast" and node.attrs.get("dtype") == "float32":
            inner = tuple(node.inputs[0][:2])
            if dtypes.get(inner) == FLOAT16:
                head_redirect[(src, out)] = inner
    if not down_casts and not head_redirect:
        return graph
    used = {src for node in nodes for src, _, _ in node.inputs}
    drop = {j for down in down_casts.values() for j in down}
    drop |= {src for src, _ in head_redirect if src not in used}
    new, upcast = graph.rebuild(), {}
    for i, node in enumerate(nodes):
        if i in drop:
            continue
        node = Record(node, inputs=[[upcast[e[0]], 0, 0] if e[0] in upcast else new.entry(e)
                                    for e in node.inputs])
        if i in down_casts:
            node["attrs"] = dict(node.attrs, __dtype__=dtype_code(np.float16))
        new.place(i, new.add(node))
        for j in down_casts.get(i, ()):
            new.redirect((j, 0), (new.entry([i, 0])))
        if i in widen:  # its other readers need float32
            upcast[i] = new.add(cast_node(node.name + "_amp_cast_float32", "float32",
                                          new.entry([i, 0])))
    return new.graph(heads=[list(head_redirect.get((src, out), (src, out))) + [version]
                            for src, out, version in graph.heads])


def batchnorm_params(graph):
    """Names of the gamma, beta and moving-statistics inputs of every BatchNorm node."""
    nodes = graph.nodes
    return {nodes[src].name for node in nodes if node.op in BATCHNORM_OPS
            for src, _, _ in node.inputs[1:5] if nodes[src].op == "null"}


def inference_graph(sym):
    """Replace Module-API loss outputs by their inference form, dropping label inputs."""
    graph = as_graph(sym)
    heads = graph.heads
    if not any(graph.nodes[src].op in LOSS_OUTPUT_OPS for src, _, _ in heads):
        return sym
    outputs = []
    for k, (src, _, _) in enumerate(heads):
        node = graph.nodes[src]
        head = sym[k]
        if node.op not in LOSS_OUTPUT_OPS:
            outputs.append(head)
            continue
        x = head.get_children()[0]
        attrs = node.attrs
        name = node.name
        if node.op == "SoftmaxOutput":
            if attr_bool(attrs, "multi_output", False):
                outputs.append(mx.sym.softmax(x, axis=1, name=name))
            elif attr_bool(attrs, "preserve_shape", False):
                outputs.append(mx.sym.softmax(x, axis=-1, name=name))
            else:
                flat = mx.sym.softmax(mx.sym.flatten(x), axis=1)
                outputs.append(mx.sym.reshape_like(flat, x, name=name))
        elif node.op == "LogisticRegressionOutput":
            outputs.append(mx.sym.sigmoid(x, name=name))
        else:
            outputs.append(mx.sym.identity(x, name=name))
    return outputs[0] if len(outputs) == 1 else mx.sym.Group(outputs)


def default_ctx(ctx):
    if ctx is not None:
        return ctx
    try:
        return mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()
    except mx.base.MXNetError:
        return mx.cpu()


def _is_bfloat16_graph(graph, types):
    """Whether a converted graph computes in bfloat16 (casts to it, or bfloat16 inputs)."""
    return (any(t == BFLOAT16 for t in types.values())
            or any(n.op == "amp_cast" and n.attrs.get("dtype") == "bfloat16"
                   for n in graph.nodes))


def _subgraph_backend(graph, emulated):
    """oneDNN's subgraph backend for a bfloat16 graph that runs natively, unless it holds a
    BatchNorm: oneDNN's own bfloat16 Convolution+BatchNorm fusion costs accuracy (a folded
    graph has none left). The backend fuses FullyConnected with its bias and activation, and
    runs gluonnlp's attention GEMMs (``_contrib_interleaved_matmul_selfatt_*``) as oneDNN
    matmuls (``_sg_mkldnn_selfatt_*``), 5x faster than their own CPU kernels."""
    if emulated is not None or any(n.op in BATCHNORM_OPS for n in graph.nodes):
        return None
    return "MKLDNN"


@dataclass(frozen=True)
class BlockFacts:
    """What :func:`symbol_block` knew of a block it built, kept beside the block, never on it.

    Attributes
    ----------
    input_dtypes : dict of str to numpy.dtype, or None
        The dtype of each data input, in the block's order; None for a block that
        :func:`symbol_block` did not build.
    bfloat16 : bool
        The graph computes in bfloat16: oneDNN runs it, the float16 emulation stays off.
    bfloat16_emulated : str or None
        Why it runs under the bfloat16 emulation (MXNet's bfloat16 cannot run here); None
        when it runs natively, or is not bfloat16.
    """

    input_dtypes: Optional[Dict[str, np.dtype]] = None
    bfloat16: bool = False
    bfloat16_emulated: Optional[str] = None


class ServingBlock(gluon.SymbolBlock):
    """The SymbolBlock of a bfloat16 graph: hybridized again, it stays as fast as it was built.

    :func:`symbol_block` hybridizes it with static memory and, where it helps, oneDNN's
    subgraph backend; the backend partitions the graph at the first call and keeps the
    partitioned graph. A later ``hybridize(backend='MKLDNN')`` (Gluon's default: no static
    memory) partitioned the partitioned graph again, and ResNet-50 ran 2.4x slower (0.457 s
    against 0.190 s per batch, an AMX Xeon). Here a backend the graph already went through is
    not applied twice, and static memory stays unless the call says otherwise.
    """

    def hybridize(self, active=True, backend=None, **kwargs):
        if backend is not None and backend == getattr(self, "_backend", None) \
                and self._cached_op is not None:  # run since: the graph is partitioned
            backend = None
        kwargs.setdefault("static_alloc", True)
        kwargs.setdefault("static_shape", True)
        super().hybridize(active, backend=backend, **kwargs)


_FACTS = weakref.WeakKeyDictionary()  # block -> BlockFacts, for the blocks symbol_block built


def block_facts(block):
    """What :func:`symbol_block` recorded of ``block``; the defaults for any other block.

    Parameters
    ----------
    block : mxnet.gluon.Block

    Returns
    -------
    BlockFacts
    """
    return _FACTS.get(block) or BlockFacts()


def symbol_block(sym, arg_params, aux_params, ctx, input_types=None):
    """A SymbolBlock for inference; on a CPU with the float16 emulation in its graph.

    A bfloat16 graph is left as it is (oneDNN runs it on the CPU) and the block is hybridized
    with static memory, the fast path of MXNet's CachedOp. ``input_types`` gives the dtype of
    data inputs that are not what the graph declares (integer token ids). Where MXNet's
    bfloat16 cannot run (:func:`mxmixed.bfloat16_support`), it runs under the bfloat16
    emulation instead (float32 arithmetic, bfloat16 rounding;
    :func:`._bfloat16_emulation.emulate_bfloat16`). :func:`block_facts` of the block says
    which: its input dtypes, whether it is bfloat16, and why it is emulated.
    """
    params = dict(arg_params)
    params.update(aux_params)
    sym = inference_graph(sym)
    graph = as_graph(sym)
    var_nodes = {n.name: n for n in graph.nodes if n.op == "null"}
    data_names = [n for n in sym.list_inputs() if n not in params]
    data_types = {n: var_dtype(var_nodes[n]) for n in data_names}
    data_types.update({n: np.dtype(t) for n, t in (input_types or {}).items() if n in data_types})
    types = {n: np.dtype(v.dtype) for n, v in params.items()}
    types.update(data_types)
    bfloat16 = _is_bfloat16_graph(graph, types)
    emulated = None
    if bfloat16:
        runs, why = devices.bfloat16_support()
        if runs:
            request_amx()
        else:  # float32 arithmetic, bfloat16 rounding: no bfloat16 op runs
            emulated = why
            sym, arg_params, aux_params = emulate_bfloat16(sym, arg_params, aux_params,
                                                           data_types)
            params = dict(arg_params)
            params.update(aux_params)
            types = {n: np.dtype(v.dtype) for n, v in params.items()}
            types.update(data_types)
    try:
        sym.infer_type_partial(**types)
        if is_cpu(ctx) and not bfloat16:
            sym = emulate_symbol(sym, types)
    except (TypeError, mx.base.MXNetError) as err:
        raise ConversionError(
            "the graph does not type-check with the dtypes of its params (a converted graph "
            "saved without its amp_cast nodes, as mx.model.save_checkpoint and "
            "HybridBlock.export do by default, cannot run): %s"
            % one_line(err).rsplit("): ", 1)[-1]) from None
    inputs = [mx.sym.var(n, dtype=data_types[n]) for n in data_names]
    block = ServingBlock(sym, inputs) if bfloat16 else gluon.SymbolBlock(sym, inputs)
    block_params = block.collect_params()
    for name, param in block_params.items():
        if name in params and np.dtype(param.dtype) != np.dtype(params[name].dtype):
            param.cast(params[name].dtype)
    payload = {"arg:%s" % k: v for k, v in arg_params.items()}
    payload.update({"aux:%s" % k: v for k, v in aux_params.items()})
    try:
        block_params.load_dict(payload, ctx=ctx, ignore_extra=True)
    except (AssertionError, mx.base.MXNetError) as err:
        raise ConversionError("the params do not fit the graph: %s" % one_line(err)) from None
    if bfloat16:
        block.hybridize(backend=_subgraph_backend(graph, emulated), static_alloc=True,
                        static_shape=True)
    _FACTS[block] = BlockFacts(data_types, bfloat16, emulated)
    return block
