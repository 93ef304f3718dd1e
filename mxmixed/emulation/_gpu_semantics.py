"""Ops whose MXNet 1.9.1 CPU kernel gives another answer than the GPU's: the emulation follows
the GPU (on CPU contexts, while it is on).

* ``_contrib_ROIAlign``: for a padding ROI (batch index -1) the GPU kernel writes zeros to the
  ROI's whole output row. The CPU kernel skips the row, leaving whatever the memory held, and
  writes one 0 at flat position ``n`` of the *whole* output (``top_data[n] = 0``), which can
  clobber an element of the first ROI's row. The emulation runs the CPU kernel with the
  padding ROIs' batch index set to 0 (nothing is clobbered) and then zeroes their rows, in any
  dtype. Their data gradient is zero, as on the GPU, which skips them.
* float16 ``dot`` of a CSR matrix and a dense one (not transposed): the CPU refuses float16;
  the GPU accumulates in float32 (``MXNET_REAL_ACC_TYPE_SWITCH``) and rounds once. Its scalar
  kernel, used when the dense operand has more than 4 columns, multiplies in ``half_t``, so
  each product is rounded to float16 before it is added; its vector kernel (4 columns or
  fewer) multiplies in float32. The emulation does the same.
"""


import mxnet as mx
from mxnet.ndarray import NDArray

from .._core.devices import is_cpu
from .._core.dtypes import FLOAT16
from .._core.graph import inline_nodes
from .._core.state import EMULATION
from ._names import emu_name

__all__ = ["roi_align_as_on_gpu", "follow_gpu_in_graph", "csr_dot_as_on_gpu", "is_float16_csr"]

ROI_ALIGN = "_contrib_ROIAlign"
_GPU_SUFFIX = emu_name("", "gpu")


def roi_align_as_on_gpu(F, roi_align, data, rois, **attrs):
    """``ROIAlign`` with the GPU's zero rows for padding ROIs (batch index < 0).

    Parameters
    ----------
    F : module
        ``mx.sym`` or ``mx.nd``.
    roi_align : callable
        MXNet's own ``ROIAlign`` of that namespace.
    data, rois : Symbol or NDArray
    **attrs
        ROIAlign's attributes.

    Returns
    -------
    Symbol or NDArray
    """
    first = F.slice_axis(rois, axis=1, begin=0, end=1)
    columns = F.sum(F.ones_like(F.slice_axis(rois, axis=0, begin=0, end=1)), axis=1,
                    keepdims=True)                       # 4 or 5, in the rois' dtype
    has_index = F.broadcast_like(columns == 5, first)
    padding = (first < 0) * has_index                    # 1 for a padding ROI
    safe = F.concat(first - first * padding, F.slice_axis(rois, axis=1, begin=1, end=None),
                    dim=1)
    out = roi_align(data, safe, **attrs)
    # built from ``out`` first, so that the graph lists its inputs as the user's op did
    keep = F.broadcast_mul(F.ones_like(out), F.reshape(1 - padding, shape=(-1, 1, 1, 1)))
    return F.where(keep, out, F.zeros_like(out))


def _roi_align_nodes(node, first_id):
    """Graph nodes computing a ``_contrib_ROIAlign`` node as the GPU does."""
    placeholders = [mx.sym.var("data"), mx.sym.var("rois")]
    attrs = dict(node.attrs)

    def native(data, rois, **kw):
        return mx.sym.contrib.ROIAlign(data, rois, name=emu_name(node.name, "gpu"), **kw)

    sub = roi_align_as_on_gpu(mx.sym, native, *placeholders, **attrs)
    nodes = inline_nodes(sub, dict(zip(["data", "rois"], node.inputs)), first_id)
    for k, sub_node in enumerate(nodes):
        if sub_node.op != ROI_ALIGN:
            sub_node["name"] = emu_name(node.name, "gpu", k)
    nodes[-1]["name"] = node.name
    return nodes


def follow_gpu_in_graph(graph):
    """Rewrite, in a graph, the ops whose CPU kernel differs from the GPU's.

    Parameters
    ----------
    graph : mxmixed._core.graph.Graph

    Returns
    -------
    Graph or None
        The rewritten graph, or None when nothing needed rewriting.
    """
    nodes = graph.nodes
    if not any(n.op == ROI_ALIGN and not n.name.endswith(_GPU_SUFFIX) for n in nodes):
        return None
    new = graph.rebuild()
    for i, node in enumerate(nodes):
        node = new.mapped(node)
        if node.op == ROI_ALIGN and not node.name.endswith(_GPU_SUFFIX):
            new.place(i, new.add(*_roi_align_nodes(node, new.next_id)))  # one output: the last's
        else:
            new.place(i, new.add(node))
    return new.graph()


def is_float16_csr(lhs, rhs, transpose_a=False, transpose_b=False):
    """Whether ``dot(lhs, rhs)`` is the float16 CSR x dense product the CPU refuses."""
    return (isinstance(lhs, NDArray) and isinstance(rhs, NDArray) and lhs.stype == "csr"
            and rhs.stype == "default" and lhs.dtype == FLOAT16 and rhs.dtype == FLOAT16
            and is_cpu(lhs.context) and not transpose_a and not transpose_b)


def csr_dot_as_on_gpu(lhs, rhs):
    """float16 CSR x dense as MXNet 1.9.1's GPU kernels compute it (see the module docstring).

    Parameters
    ----------
    lhs : CSRNDArray (float16)
    rhs : NDArray (float16, 2-D)

    Returns
    -------
    NDArray
        float16, dense.
    """
    rows, columns = lhs.shape[0], rhs.shape[1]
    values = mx.nd.amp_cast(lhs.data, dtype="float32")
    if columns <= 4:  # vector kernel: float32 products
        wide = mx.nd.sparse.csr_matrix((values, lhs.indices, lhs.indptr), shape=lhs.shape)
        out = mx.nd.sparse.dot(wide, mx.nd.amp_cast(rhs, dtype="float32"))
        return mx.nd.amp_cast(out, dtype="float16")
    # scalar kernel: each product rounded to float16 (half_t arithmetic), summed in float32
    picked = mx.nd.amp_cast(mx.nd.take(rhs, lhs.indices.astype("int64"), axis=0),
                            dtype="float32")
    products = mx.nd.broadcast_mul(picked, values.reshape((-1, 1)))
    products = mx.nd.amp_cast(mx.nd.amp_cast(products, dtype="float16"), dtype="float32")
    nnz = values.shape[0]
    selector = mx.nd.sparse.csr_matrix(
        (mx.nd.ones((nnz,)), mx.nd.arange(nnz, dtype="int64"), lhs.indptr), shape=(rows, nnz))
    return mx.nd.amp_cast(mx.nd.sparse.dot(selector, products), dtype="float16")


def _roi_align_wrapper(original):
    def roi_align(data=None, rois=None, out=None, **attrs):
        if not (EMULATION.active and isinstance(rois, NDArray)
                and is_cpu(rois.context)):
            return original(data, rois, out=out, **attrs)
        result = roi_align_as_on_gpu(mx.nd, original, data, rois, **attrs)
        if out is not None:
            result.copyto(out)
            return out
        return result

    roi_align.__name__, roi_align.__doc__ = original.__name__, original.__doc__
    return roi_align


def _sparse_dot_wrapper(original):
    def dot(lhs, rhs, transpose_a=False, transpose_b=False, forward_stype=None):
        if EMULATION.active and is_float16_csr(lhs, rhs, transpose_a, transpose_b):
            return csr_dot_as_on_gpu(lhs, rhs)
        return original(lhs, rhs, transpose_a=transpose_a, transpose_b=transpose_b,
                        forward_stype=forward_stype)

    dot.__name__, dot.__doc__ = original.__name__, original.__doc__
    return dot


def install_gpu_semantics(patches):
    """Wrap ``mx.nd.contrib.ROIAlign`` and ``mx.nd.sparse.dot`` through ``patches``."""
    for holder, attr, make in ((mx.nd.contrib, "ROIAlign", _roi_align_wrapper),
                               (mx.nd.sparse, "dot", _sparse_dot_wrapper)):
        patches.patch(holder, attr, make(getattr(holder, attr)))
