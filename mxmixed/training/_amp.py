"""AMP for the whole process (:func:`init`) or for a ``with`` block (:func:`amp_scope`), with the
CPU float16 emulation where no GPU is present. :mod:`mxmixed.training` re-exports both.

.. note::
   ``mxnet.contrib.amp.init`` patches MXNet's operator functions for the whole process and cannot
   be undone. :func:`init` keeps that behaviour (it is what users of ``amp.init`` expect), and
   the patches that ``init_trainer`` then makes (``amp.scale_loss``, the class of AMP's global
   scaler) stay too; :func:`mxmixed.emulation.disable` undoes the emulation's. :func:`amp_scope`
   is the undoable form: it undoes all of them on exit.
"""
import contextlib
import gc
import logging
import warnings
from typing import Iterator, Optional, Sequence, Union

import numpy as np

import mxnet as mx
from mxnet import gluon
from mxnet.contrib import amp

from .. import emulation
from .._core.amx import request_amx
from .._core.convert import NO_BFLOAT16_CPU_OPS, NO_BFLOAT16_CPU_VARIANTS
from .._core.convert import SLOW_BFLOAT16_CPU_OPS, op_names
from .._core.devices import BFLOAT16_EMULATED, bfloat16_native, bfloat16_support
from .._core.state import AMP, amp_initialized
from ._accumulate import keeping_accumulation
from ._speedcheck import watch_training_speed
from ._unlisted import announce, reads_arrays, unlisted_ops
from ._unlisted import resolves

__all__ = ["init", "amp_scope", "amp_target", "EMULATION_HINT"]

_LOG = logging.getLogger("mxmixed")
_PATCHED_SUBMODULES = ("op", "_internal", "contrib", "linalg", "sparse", "image", "random")
#: How every message names the fix for float16 ops that MXNet's CPU build lacks.
EMULATION_HINT = "mxmixed.emulation.enable()"


def _check_target(target_dtype):
    name = np.dtype(target_dtype).name if target_dtype != "bfloat16" else "bfloat16"
    if name not in ("float16", "bfloat16"):
        raise ValueError("target_dtype must be 'float16' or 'bfloat16', got %r" % (target_dtype,))
    if name == "bfloat16":
        ok, why = bfloat16_support()
        if not ok:
            raise RuntimeError("target_dtype='bfloat16' cannot run here: %s (see `mxmixed "
                               "info`); use target_dtype='float16' (emulated on CPU, native on "
                               "a GPU)" % why)
        if bfloat16_native() is None:
            warnings.warn(BFLOAT16_EMULATED, stacklevel=3)
        request_amx()
    if mx.util.is_np_array() or mx.util.is_np_shape():
        raise RuntimeError("NumPy mode (npx.set_np) is on: MXNet 1.9's AMP patches nothing "
                           "there and the net would silently stay float32; call "
                           "mxmixed.init before npx.set_np, or run without NumPy mode")
    return name


def _fp32_ops(target, fp32_ops, target_precision_ops=None):
    """The float32 list ``amp.init`` gets: for bfloat16, the given one (or AMP's) plus the ops
    whose CPU kernels are float32 only, which AMP's bfloat16 lists leave to their inputs'
    dtype, and the ops whose CPU bfloat16 kernels are slower than float32 (each under all its
    names), unless ``target_precision_ops`` names them."""
    if target != "bfloat16":
        return fp32_ops
    ops = list(fp32_ops if fp32_ops is not None else amp.lists.symbol_bf16.FP32_FUNCS)
    ops += [op for op in NO_BFLOAT16_CPU_OPS if op not in ops]
    return ops + [op for op in _slow_ops(target_precision_ops) if op not in ops]


def _slow_ops(target_precision_ops):
    """``SLOW_BFLOAT16_CPU_OPS`` by every name AMP can wrap, less the caller's bfloat16 ops."""
    kept = op_names(tuple(target_precision_ops or ()))
    return [op for op in op_names(SLOW_BFLOAT16_CPU_OPS) if op not in kept and resolves(op)]


def _conditional_fp32_ops(target, conditional_fp32_ops):
    """The conditional float32 list ``amp.init`` gets: for bfloat16, the given one (or AMP's)
    plus the op variants whose CPU kernels refuse bfloat16 (``Pooling`` with ``pool_type='lp'``
    ...)."""
    if target != "bfloat16":
        return conditional_fp32_ops
    ops = list(conditional_fp32_ops if conditional_fp32_ops is not None
               else amp.lists.symbol_bf16.CONDITIONAL_FP32_FUNCS)
    return ops + [entry for entry in NO_BFLOAT16_CPU_VARIANTS if entry not in ops]


def _amp_init(target, target_precision_ops, conditional_fp32_ops, fp32_ops):
    """``amp.init`` with mxmixed's lists; for bfloat16 the ops none of the lists names are
    float32 too, each announced once when it meets bfloat16 (``training._unlisted``)."""
    unlisted = (unlisted_ops(target_precision_ops, conditional_fp32_ops, fp32_ops)
                if target == "bfloat16" else [])
    fp32 = _fp32_ops(target, fp32_ops, target_precision_ops)
    if fp32 is not None:  # AMP's wrapper fails on ops without inputs (_unlisted.reads_arrays)
        fp32 = [op for op in fp32 + unlisted if reads_arrays(op)]
    amp.init(target_dtype=target, target_precision_ops=target_precision_ops,
             conditional_fp32_ops=_conditional_fp32_ops(target, conditional_fp32_ops),
             fp32_ops=fp32)
    if target == "bfloat16":  # MXNet 1.9.1's oneDNN amp_cast drops grad_req='add' (_accumulate)
        AMP.patches.patch(amp.amp, "_cast_symbol_NDArray",
                          keeping_accumulation(amp.amp._cast_symbol_NDArray))
        watch_training_speed()  # training/_speedcheck: measured once per block, said if slower
    announce(unlisted)


def _warn_hybridized_blocks():
    for obj in gc.get_objects():
        if isinstance(obj, gluon.HybridBlock) and getattr(obj, "_cached_op", None) is not None:
            warnings.warn("HybridBlock '%s' was hybridized and run before AMP was initialized: "
                          "its cached graph stays float32. Call its hybridize() again (or build "
                          "it after mxmixed.init)." % obj.name, stacklevel=3)


def _emulation_mode(emulate, target):
    if emulate not in ("auto", True, False):
        raise ValueError("emulate must be 'auto', True or False, got %r" % (emulate,))
    if target != "float16" or emulate is False:
        return None
    return "auto" if emulate == "auto" else "on"


def amp_target():
    """The target dtype of the AMP in place: what :func:`init` was given, or else what a direct
    ``amp.init`` gave AMP's FullyConnected wrapper.

    Returns
    -------
    str or None
        'float16', 'bfloat16', or None when AMP is not initialized (or it cannot be told).
    """
    if not amp_initialized():
        return None
    if AMP.settings is not None:
        return AMP.settings[0]
    for cell in getattr(mx.nd.FullyConnected, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, np.dtype) or getattr(value, "names", None) == ("bfloat16",):
            return "bfloat16" if getattr(value, "names", None) else value.name
    return None


def init(target_dtype: str = "float16", target_precision_ops: Optional[Sequence[str]] = None,
         conditional_fp32_ops: Optional[Sequence[tuple]] = None,
         fp32_ops: Optional[Sequence[str]] = None,
         emulate: Union[str, bool] = "auto") -> None:
    """Initialize AMP for the whole process, with CPU float16 emulation where needed.

    A thin wrapper of ``mxnet.contrib.amp.init`` that also switches on the emulation (when no
    GPU is visible, by default), warns about blocks hybridized too early, and refuses settings
    that would silently do nothing.

    Parameters
    ----------
    target_dtype : {'float16', 'bfloat16'}, default 'float16'
        The low precision type.
    target_precision_ops, conditional_fp32_ops, fp32_ops : list, optional
        Op-list overrides, exactly as ``amp.init`` takes them: each list *replaces* AMP's own
        (``fp32_ops=['FullyConnected']`` drops softmax and the rest from the float32 list).
        :func:`mxmixed.diagnostics.keep_in_float32` builds lists that extend AMP's instead.
        For bfloat16 the ops without a CPU bfloat16 kernel (gluonnlp's fused attention GEMMs,
        ``batch_dot``, ``dot``, ...: ``NO_BFLOAT16_CPU_OPS``) are added to the float32 list,
        AMP's or the one given, and their variants (``Pooling`` with ``pool_type='lp'``, ...)
        to the conditional float32 list. So are the ops whose CPU bfloat16 kernel is MXNet's
        generic one, measured slower than float32 (``clip``, ``relu``, elementwise arithmetic,
        comparisons: ``SLOW_BFLOAT16_CPU_OPS``), unless ``target_precision_ops`` names them.
        The ops that none of the lists names (``im2col``,
        ...; :func:`~mxmixed.training._unlisted.unlisted_ops`) are float32 too, each named in
        one warning when it first meets bfloat16.
    emulate : {'auto', True, False}, default 'auto'
        CPU float16 emulation: ``'auto'`` when no GPU is visible, True always (on CPU
        contexts), False never.

    Returns
    -------
    None

    Raises
    ------
    RuntimeError
        For bfloat16 where MXNet cannot run it, in NumPy mode, or when AMP was already
        initialized with other settings (MXNet cannot redo it).

    .. note::
       Call it before the net is hybridized and run. A second call with the same settings is a
       no-op; with other settings it raises, where MXNet would silently ignore it. After a
       direct ``amp.init()``, ``mxmixed.init()`` with the same target dtype and no op lists is
       accepted and only adds the emulation (mxmixed can read the target AMP was given, not its
       op lists); with op lists or another target it raises.

       What it patches stays for the process, as ``amp.init``'s own patches do: the emulation's
       until :func:`mxmixed.emulation.disable`, and those :func:`mxmixed.init_trainer` adds
       (``amp.scale_loss`` serving mxmixed Trainers, the class of AMP's global scaler) for
       good. Use :func:`amp_scope` for AMP that is undone.

    Examples
    --------
    >>> import mxmixed
    >>> mxmixed.init()                # once per process, before any net is built
    >>> mxmixed.amp_initialized()
    True
    >>> mxmixed.init()                # the same settings again: a no-op
    >>> mxmixed.init(target_dtype="bfloat16")
    Traceback (most recent call last):
        ...
    RuntimeError: ...
    """
    target = _check_target(target_dtype)
    settings = (target, target_precision_ops, conditional_fp32_ops, fp32_ops)
    mode = _emulation_mode(emulate, target)
    if AMP.scoped:
        raise RuntimeError("mxmixed.init inside an amp_scope block: the scope undoes AMP when it "
                           "ends; call mxmixed.init outside any scope (or use only the scope)")
    if amp_initialized():
        already = " with other settings %r" % (AMP.settings,)
        if AMP.settings is None:  # a direct amp.init(): its target can be read, its lists not
            direct = amp_target()
            if direct not in (None, target):
                already = " by amp.init(target_dtype=%r)" % direct
            elif settings[1:] != (None, None, None):
                already = " by amp.init(), whose op lists mxmixed cannot see"
            else:
                AMP.settings = settings
                _LOG.info("mxmixed.init: accepting the amp.init() that already ran")
        if AMP.settings != settings:
            raise RuntimeError(
                "AMP is already initialized%s and MXNet 1.9.1 cannot undo or redo it; call "
                "mxmixed.init with the same settings (or alone, instead of amp.init), restart "
                "the process, or use mxmixed.amp_scope for runs side by side. On a CPU, "
                "%s makes float16 nets run under the AMP already in place"
                % (already, EMULATION_HINT))
        if mode:
            emulation.enable(mode)
        return
    _warn_hybridized_blocks()
    if mode:
        emulation.enable(mode)
    _amp_init(target, target_precision_ops, conditional_fp32_ops, fp32_ops)
    AMP.settings = settings


def _patched_modules():
    modules = []
    for root in (mx.ndarray, mx.symbol):
        modules.append(root)
        modules += [getattr(root, name) for name in _PATCHED_SUBMODULES if hasattr(root, name)]
    return modules


@contextlib.contextmanager
def amp_scope(enabled: bool = True, target_dtype: str = "float16",
              target_precision_ops: Optional[Sequence[str]] = None,
              conditional_fp32_ops: Optional[Sequence[tuple]] = None,
              fp32_ops: Optional[Sequence[str]] = None,
              emulate: Union[str, bool] = "auto") -> Iterator[bool]:
    """Apply AMP inside a ``with`` block and restore MXNet's functions on exit.

    With ``enabled=False`` the same code runs in plain float32. A float32 run and an AMP run
    can then sit side by side in one process, which ``amp.init`` alone does not allow.

    On exit every patch made inside is undone: ``amp.init``'s wrappers of the operator functions
    and its global state, mxmixed's own (``amp.scale_loss`` serving mxmixed Trainers, the class
    of AMP's global scaler, through ``mxmixed._core.state.AMP.patches``) and, when the scope switched
    it on, the emulation's.

    Parameters
    ----------
    enabled : bool, default True
        Whether to apply AMP at all.
    target_dtype, target_precision_ops, conditional_fp32_ops, fp32_ops, emulate
        As in :func:`init`.

    Yields
    ------
    bool
        Whether AMP is active inside the block.

    .. note::
       Build and hybridize the nets of an AMP run inside the scope: a block keeps the graph it
       cached, so a block hybridized inside stays mixed precision afterwards, and one cached
       before stays float32. Scopes cannot be used after a process-wide :func:`init`.

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> for enabled in (False, True):
    ...     with mxmixed.amp_scope(enabled=enabled):
    ...         net = gluon.nn.Dense(4)
    ...         net.initialize()
    ...         net.hybridize()
    ...         print(enabled, net(mx.nd.ones((2, 8))).dtype.__name__)
    False float32
    True float16
    >>> mxmixed.amp_initialized()     # undone on exit
    False
    """
    if not enabled:
        yield False
        return
    target = _check_target(target_dtype)
    if amp_initialized():
        raise RuntimeError("AMP is already initialized for the whole process (mxmixed.init or "
                           "amp.init), so amp_scope cannot apply and undo it; use one or the "
                           "other")
    mode = _emulation_mode(emulate, target)
    # the snapshot comes first, so that it holds MXNet's functions as they were before the
    # scope, whatever the emulation does inside it (even a disable() in the block)
    snapshot = [(m, dict(vars(m))) for m in _patched_modules()]
    saved = (amp.amp._amp_initialized, amp.amp._amp_loss_scale_initialized,
             amp.amp._loss_scaler, AMP.settings, AMP.loss_output_scaler)
    mark = AMP.patches.mark()
    AMP.scoped += 1
    try:
        with emulation.emulated(mode) if mode else contextlib.nullcontext():
            try:
                _amp_init(target, target_precision_ops, conditional_fp32_ops, fp32_ops)
                AMP.settings = (target, target_precision_ops, conditional_fp32_ops, fp32_ops)
                yield True
            finally:
                AMP.patches.undo(since=mark)
    finally:
        _restore_modules(snapshot)
        (amp.amp._amp_initialized, amp.amp._amp_loss_scale_initialized,
         amp.amp._loss_scaler, AMP.settings, AMP.loss_output_scaler) = saved
        AMP.scoped -= 1


def _restore_modules(snapshot):
    """Put each module's names back as ``snapshot`` holds them; drop the names added since."""
    for module, before in snapshot:
        now = vars(module)
        for name in [n for n in now if n not in before]:
            delattr(module, name)
        for name, value in before.items():
            if now.get(name) is not value:
                setattr(module, name, value)
