"""Emulated float16 Deconvolution as a Convolution, which MXNet's oneDNN build can train.

MXNet 1.9.1's oneDNN Deconvolution fails in its backward pass ("could not execute a
primitive", and corrupted state afterwards) whenever its weight is computed rather than a
variable: an ``amp_cast``, even a float32-to-float32 one, an ``identity`` or a ``reshape``
all trigger it, and the emulation must cast the float16 weight. oneDNN's Convolution has no
such bug. A transposed convolution is a convolution of the input with zeros inserted between
its elements (``stride - 1`` of them), padded by ``dilate * (kernel - 1) - pad`` on each side
(plus ``adj`` after), with the weight's two channel axes swapped within each group and its
kernel flipped. That is what this module builds, in float32, for the graph pass and the
NDArray wrappers alike; its forward and both gradients equal MXNet's float32 Deconvolution
up to float32 summation order (checked in ``tests/emulation/test_deconvolution.py``).
"""
import mxnet as mx

from .._core.graph import attr_ints, inline_nodes
from ._names import emu_name

__all__ = ["conv_form_applies", "deconvolution_as_convolution", "deconvolution_nodes"]


def _ints(value, default, n):
    value = attr_ints(value) if isinstance(value, (str, tuple, list)) or value is None \
        else (value,)
    if not value:
        return (default,) * n
    return tuple(default if v is None else int(v) for v in value)


def conv_form_applies(attrs):
    """Whether a Deconvolution with these attributes can run as :func:`deconvolution_as_convolution`.

    Not when MXNet derives pad and adj from ``target_shape``, nor for a channels-last layout.

    Parameters
    ----------
    attrs : dict

    Returns
    -------
    bool
    """
    kernel = _ints(attrs.get("kernel"), 0, 0)
    target = _ints(attrs.get("target_shape"), 0, 0)
    layout = str(attrs.get("layout", "None"))
    return (1 <= len(kernel) <= 3 and not any(target)
            and layout in ("None", "NCW", "NCHW", "NCDHW"))


def _pad(F, x, axis, before, after):
    """Zeros before and after ``x`` along ``axis`` (any rank)."""
    zero = F.zeros_like(F.slice_axis(x, axis=axis, begin=0, end=1))
    parts = ([F.repeat(zero, repeats=before, axis=axis)] if before else []) + [x]
    parts += [F.repeat(zero, repeats=after, axis=axis)] if after else []
    return F.concat(*parts, dim=axis) if len(parts) > 1 else x


def deconvolution_as_convolution(F, data, weight, attrs):
    """A no-bias Deconvolution computed by a Convolution (same output, same gradients).

    Parameters
    ----------
    F : module
        ``mx.sym`` or ``mx.nd``.
    data, weight : Symbol or NDArray
        Float32 operands, NC... layout; weight ``(C_in, C_out / num_group, *kernel)``.
    attrs : dict
        The Deconvolution's attributes (``kernel``, ``num_filter``, and optionally
        ``stride``, ``dilate``, ``pad``, ``adj``, ``num_group``); not ``target_shape``.

    Returns
    -------
    Symbol or NDArray
    """
    kernel = _ints(attrs["kernel"], 0, 0)
    n = len(kernel)
    stride, dilate = _ints(attrs.get("stride"), 1, n), _ints(attrs.get("dilate"), 1, n)
    pad, adj = _ints(attrs.get("pad"), 0, n), _ints(attrs.get("adj"), 0, n)
    group = int(attrs.get("num_group", 1))
    x = data
    for k in range(n):
        axis = 2 + k
        if stride[k] > 1:  # stride - 1 zeros after every element, none after the last
            wide = F.expand_dims(x, axis=axis + 1)
            zeros = F.repeat(F.zeros_like(wide), repeats=stride[k] - 1, axis=axis + 1)
            x = F.concat(wide, zeros, dim=axis + 1)
            x = F.reshape(x, shape=(0,) * axis + (-3,) + (0,) * (n - k - 1))
            x = F.slice_axis(x, axis=axis, begin=0, end=-(stride[k] - 1))
        before = dilate[k] * (kernel[k] - 1) - pad[k]
        after = before + adj[k]
        if before < 0 or after < 0:
            x = F.slice_axis(x, axis=axis, begin=max(-before, 0),
                             end=after if after < 0 else None)
        x = _pad(F, x, axis, max(before, 0), max(after, 0))
    w = F.reshape(weight, shape=(-4, group, -1) + (0,) * (n + 1))  # (g, Cin/g, Cout/g, k..)
    w = F.swapaxes(w, dim1=1, dim2=2)
    w = F.reshape(w, shape=(-3,) + (0,) * (n + 1))                  # (Cout, Cin/g, k..)
    w = F.flip(w, axis=tuple(range(2, 2 + n)))
    return F.Convolution(x, w, kernel=kernel, dilate=dilate, num_filter=int(attrs["num_filter"]),
                         num_group=group, no_bias=True, workspace=attrs.get("workspace", 512))


def deconvolution_nodes(node, first_id):
    """Graph nodes computing a no-bias Deconvolution node as a Convolution.

    Parameters
    ----------
    node : dict
        The Deconvolution node of a graph dict, its inputs already mapped (data, weight).
    first_id : int
        Index the first returned node will have.

    Returns
    -------
    list of dict
        The last one, named as ``node``, gives the output.
    """
    placeholders = [mx.sym.var("data"), mx.sym.var("weight")]
    sub = deconvolution_as_convolution(mx.sym, *placeholders, node.attrs)
    nodes = inline_nodes(sub, dict(zip(["data", "weight"], node.inputs)), first_id)
    for k, sub_node in enumerate(nodes):
        sub_node["name"] = emu_name(node.name, "deconv", k)
    nodes[-1]["name"] = node.name
    return nodes
