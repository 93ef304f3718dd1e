"""The names the emulation gives the nodes it adds, and the user's layer name behind each.

Every node the emulation inserts is named after the node it rewrites, ``<layer>_emu_<kind>``:

- ``<layer>_emu_in<k>``: the float32 cast of input ``k`` (``<layer>_emu_in0``);
- ``<layer>_emu_out<k>``: the float16 rounding of output ``k``;
- ``<layer>_emu_round0``, ``<layer>_emu_widen0``, ``<layer>_emu_bias``,
  ``<layer>_emu_biasadd0``: the bias added after the op's rounding, as a GPU adds it;
- ``<layer>_emu_deconv<k>``: the nodes that compute an emulated Deconvolution;
- ``<layer>_emu_gpu`` and ``<layer>_emu_gpu<k>``: a ``_contrib_ROIAlign`` as the GPU computes it.

The tests and the recorded digests depend on these strings: they are spelled here only.
"""
import re

__all__ = ["emu_name", "is_emulation_name", "is_input_cast", "is_output_cast", "user_name",
           "user_tensor_name", "MARK"]

MARK = "_emu_"
# The kinds whose nodes stand for the layer's own values (casts and bias adds): a diagnostic
# reports them under the layer's name.
_CAST_KINDS = r"in\d+|out\d+|round0|widen0|bias|biasadd0"
_SUFFIX = re.compile(r"%s(%s)$" % (MARK, _CAST_KINDS))
_INSIDE = re.compile(r"%s(?:%s)(?=_|$)" % (MARK, _CAST_KINDS))


def emu_name(layer, kind, k=None):
    """The name of a node the emulation adds for ``layer``.

    Parameters
    ----------
    layer : str
        The name of the node rewritten.
    kind : str
        'in', 'out', 'round', 'widen', 'bias', 'biasadd', 'deconv' or 'gpu'.
    k : int, optional
        The input or output number ('in', 'out'), or the node's place ('deconv', 'gpu').
        'round', 'widen' and 'biasadd' are numbered 0 always; 'bias' and a single 'gpu'
        node are not numbered.

    Returns
    -------
    str
        For example ``emu_name('conv0_fwd', 'in', 1)`` is ``'conv0_fwd_emu_in1'``.
    """
    if kind in ("round", "widen", "biasadd"):
        k = 0
    if kind not in ("in", "out", "round", "widen", "bias", "biasadd", "deconv", "gpu"):
        raise ValueError("no emulation node kind %r" % kind)
    return "%s%s%s%s" % (layer, MARK, kind, "" if k is None else "%d" % k)


def is_emulation_name(name, layer=None):
    """Whether ``name`` is a node the emulation added (for ``layer``, if given)."""
    return name.startswith(layer + MARK) if layer is not None else MARK in name


def is_input_cast(name, layer=None):
    """Whether ``name`` is an emulation's float32 cast of an input (of ``layer``, if given)."""
    mark = MARK + "in"
    return name.startswith(layer + mark) if layer is not None else mark in name


def is_output_cast(name):
    """Whether ``name`` holds an emulation's float16 rounding of an output."""
    return MARK + "out" in name


def user_name(name):
    """The user's layer name behind an emulation cast or bias node; other names as they are.

    ``conv0_fwd_emu_in0`` and ``conv0_fwd_emu_biasadd0`` are ``conv0_fwd``.
    """
    return _SUFFIX.sub("", name)


def user_tensor_name(name):
    """A tensor name as the user's graph has it: the emulation's parts left out
    (``conv0_fwd_emu_out0_output`` is ``conv0_fwd_output``)."""
    return _INSIDE.sub("", name)
