"""CPU float16 emulation: run float16 MXNet graphs on a CPU with GPU-faithful numerics.

MXNet 1.9.1's CPU build has no float16 GEMM, and some of its float16 kernels are far slower
than float32. While emulation is on, every op listed in :mod:`mxmixed.emulation._ops` that sees
float16 inputs on a CPU casts them to float32, computes in float32 and casts its float16
outputs back: float16 operands, float32 accumulation, a float16 result, as on a GPU with Tensor
Cores. The tensors between ops keep exactly the dtypes a GPU run would give them, so rounding,
underflow and overflow happen in the same places, in the forward and the backward pass.

Where it applies:

* imperative NDArray calls (``mx.nd.FullyConnected`` ...) and non-hybridized Gluon blocks;
* hybridized Gluon blocks and ``SymbolBlock``: the graph of each ``CachedOp`` is rewritten by
  :func:`emulate_symbol` once the dtypes of its inputs are known;
* Symbols bound with ``bind`` / ``simple_bind`` (and so the Module API) on a CPU context;
* any graph, loaded or built, through :func:`emulate_symbol` directly;
* AMP's own ``amp_multicast`` (its oneDNN kernel rejects float16), imperative and in graphs;
* ``mxnet.contrib.amp``'s imperative casts: MXNet 1.9.1 casts float16 to float32 for the ops on
  AMP's float32 list (softmax, norms, Gluon losses) only on GPU contexts, so while emulation
  is on, CPU arrays are cast as a GPU's would be;
* ``_contrib_ROIAlign`` (any dtype) and float16 CSR x dense ``dot``, whose CPU kernels answer
  differently from the GPU's: the emulation gives the GPU's answer (padding ROIs' rows
  zeroed; the GPU sparse kernels' arithmetic);
* ``mxnet.contrib.amp``'s overflow check: ``LossScaler.has_overflow`` runs MXNet's
  per-element test on the CPU gradients in one vectorized pass (the rounding library's
  ``_mxmixed_nonfinite``; without the library, float32 sums of squares first and MXNet's slow
  CPU ``multi_all_finite`` only when a sum is not finite), so its decision is MXNet's, several
  times faster.

A biased FullyConnected, Convolution or Deconvolution rounds twice, as MXNet's GPU kernels do:
its no-bias result is rounded to float16, then the bias is added in float16 arithmetic.

Float32 tensors never pass through a cast: an op whose inputs are float32 runs exactly as
without emulation, and a float32 graph is left unchanged. GPU contexts are never touched, so
the same code uses the real float16 kernels on a GPU.

.. note::
   Emulation reproduces float16 numerics, not float16 speed. It is slower than float32 on a
   CPU, and no CPU timing says anything about Tensor Cores.

.. note::
   With ``mxnet.contrib.amp``, either order works: AMP's casting wrappers stay outermost and
   the emulation sits beneath them. A hybridized block that already ran before emulation was
   switched on keeps its plain cached graph; call ``net.hybridize()`` again to rebuild it.

.. note::
   A float16 Deconvolution is computed as a Convolution of the zero-stuffed input: MXNet
   1.9.1's oneDNN Deconvolution cannot run its backward pass on a cast weight. One with
   ``target_shape`` keeps the native op, and training it with oneDNN on raises
   NotImplementedError (set ``MXNET_MKLDNN_ENABLED=0``). Inference is unaffected.

.. note::
   ``MXNET_FC_TRUE_FP16=1`` (float16 accumulation in cuBLAS GEMMs on a GPU) is not emulated:
   :func:`enable` logs one warning naming it, and the emulation keeps float32 accumulation
   (a value MXNet refuses is a ``ValueError``).

.. note::
   RNN: the fused op is emulated at its boundary, so inside one call the hidden and cell
   states stay float32 between time steps, where cuDNN keeps float16 states. The difference
   to a step-by-step float16 reference is measured in ``tests/emulation/test_rnn.py`` and
   reported in ``docs/emulation.md``.
"""
import contextlib
import logging
import os
from typing import Iterator

from .._core.env import check as check_environment
from .._core.mxbool import env_bool
from .._core.state import EMULATION, emulation_active, gpu_visible
from ._gpu_semantics import install_gpu_semantics
from ._graphpass import count_emulated, emulate_symbol, rewritten_op_types
from ._hooks import EmulatedCachedOp, install_graph_hooks
from ._names import is_emulation_name, user_name, user_tensor_name
from ._ops import EMULATED_OPS, NOT_EMULATED
from ._overflow import all_finite, install_overflow_check
from ._round16 import round_bf16_op
from ._wrappers import AMP_MODULE, amp_cast_as_on_gpu, install_nd_wrappers

# Imported above for mxmixed's other packages, not for users: all_finite (training's handle),
# round_bf16_op (symbolic's bfloat16 emulation), is_emulation_name, user_name and
# user_tensor_name (diagnostics)
__all__ = ["enable", "disable", "emulated", "emulation_active", "describe", "emulate_symbol",
           "count_emulated", "rewritten_op_types", "EmulatedCachedOp", "EMULATED_OPS",
           "NOT_EMULATED"]

_LOG = logging.getLogger("mxmixed.emulation")

FC_TRUE_FP16_NOT_EMULATED = (
    "mxmixed.emulation: MXNET_FC_TRUE_FP16=%s is not emulated: on a GPU it makes the cuBLAS GEMMs "
    "of FullyConnected, the interleaved attention ops, bilinear UpSampling and non-cuDNN "
    "convolutions accumulate in float16; the emulation accumulates them in float32 and rounds "
    "once, as a GPU does without the variable, so it does not show that setting's extra "
    "rounding error (docs/emulation.md)")


def _refuse_fc_true_fp16():
    """Log :data:`FC_TRUE_FP16_NOT_EMULATED` once per process when the variable is set
    (MXNet reads it as a bool: ``1`` or ``true``); a value MXNet refuses is a ``ValueError``."""
    if EMULATION.fc_true_fp16_warned or not env_bool("MXNET_FC_TRUE_FP16", False):
        return
    value = os.environ["MXNET_FC_TRUE_FP16"]
    EMULATION.fc_true_fp16_warned = True
    _LOG.warning(FC_TRUE_FP16_NOT_EMULATED, value)


def _apply(patches):
    """Every patch of MXNet the emulation makes, each through ``patches`` (:func:`disable`
    undoes them)."""
    install_nd_wrappers(patches)
    install_graph_hooks(patches)
    patches.patch(AMP_MODULE, "_cast_symbol_NDArray", amp_cast_as_on_gpu)
    install_overflow_check(patches)
    install_gpu_semantics(patches)


def enable(mode: str = "on") -> bool:
    """Switch CPU float16 emulation on.

    Parameters
    ----------
    mode : {'on', 'auto'}, default 'on'
        ``'on'`` emulates float16 on CPU contexts whatever else the machine has. ``'auto'``
        emulates only when no GPU is visible, and then logs once that float16 runs emulated,
        for numerics and not speed; it is meant for higher-level helpers.

    Returns
    -------
    bool
        Whether emulation is now active.

    Raises
    ------
    ValueError
        In one line: a bad ``mode``, a bad ``MXMIXED_*`` value, or an ``MXNET_FC_TRUE_FP16``
        that MXNet refuses (`` 1``, ``yes``).
    """
    if mode not in ("on", "auto"):
        raise ValueError("mode must be 'on' or 'auto', got %r" % (mode,))
    check_environment()  # a bad MXMIXED_* value is one line now, not a traceback mid-run
    if mode == "auto" and gpu_visible():
        if not EMULATION.active:
            EMULATION.mode = "auto"
            EMULATION.reason = "a GPU is visible: real float16 kernels are used"
        return EMULATION.active
    if mode == "auto" and not EMULATION.announced:
        _LOG.warning("No GPU is visible, so mxmixed emulates float16 on the CPU: float16 "
                     "rounding with float32 arithmetic, for numerics and not speed.")
        EMULATION.announced = True
    _refuse_fc_true_fp16()
    if not EMULATION.active:
        _apply(EMULATION.patches)
        EMULATION.active = True
    EMULATION.mode = mode
    EMULATION.reason = "no GPU visible" if mode == "auto" else "switched on explicitly"
    return True


def disable() -> None:
    """Switch CPU float16 emulation off and undo every patch it made of MXNet.

    Each patched attribute is the object it was before :func:`enable` again: the ``mx.nd``
    operator functions, ``mx.ndarray.CachedOp``, ``Symbol.bind`` / ``simple_bind``, AMP's
    NDArray cast, ``LossScaler.has_overflow``, ``mx.nd.contrib.ROIAlign`` and
    ``mx.nd.sparse.dot``. AMP's wrappers, if ``amp.init`` ran in between, stay in place, with
    MXNet's original function beneath them.
    """
    EMULATION.patches.undo()
    EMULATION.active = False
    EMULATION.mode, EMULATION.reason = None, ""


@contextlib.contextmanager
def emulated(mode: str = "on") -> Iterator[bool]:
    """Context manager form of :func:`enable`; restores the previous state on exit.

    Parameters
    ----------
    mode : {'on', 'auto'}, default 'on'
        As in :func:`enable`.

    Yields
    ------
    bool
        Whether emulation is active inside the block.
    """
    was_active, was_mode, was_reason = EMULATION.active, EMULATION.mode, EMULATION.reason
    try:
        yield enable(mode)
    finally:
        if not was_active:
            disable()
        EMULATION.mode, EMULATION.reason = was_mode, was_reason


def describe() -> str:
    """One line for ``mxmixed info``: whether emulation is active, and why.

    Returns
    -------
    str
    """
    if EMULATION.active:
        return "active (%s): %d ops emulated" % (EMULATION.reason, len(EMULATED_OPS))
    if EMULATION.reason:
        return "inactive (%s)" % EMULATION.reason
    return ("inactive (switch it on with mxmixed.emulation.enable(); mode='auto' emulates "
            "only when no GPU is visible)")
