"""Gluon blocks in float16: a converted checkpoint as a ``SymbolBlock``, and HybridBlock conversion.

:func:`load_float16` and :func:`convert_hybrid_block`, emulated on a CPU and native on a GPU.
Re-exported by :mod:`mxmixed.symbolic`.
"""
import contextlib
import warnings
from typing import Any, Optional, Tuple, Union

import numpy as np

import mxnet as mx
from mxnet import gluon

from .. import emulation
from .._core.convert import ConversionError
from .._core.devices import BFLOAT16_EMULATED, bfloat16_native, bfloat16_support, is_cpu
from .._core.dtypes import FLOAT16
from .._core.errors import one_line
from .._core.graph import as_graph, dtype_code, var_dtype
from ._checkpoints import load_checkpoint
from ._conversion import convert_with
from ._report import ConversionReport
from ._inference import block_facts, default_ctx, symbol_block
from ._options import ConvertOptions, option_keywords, options_from

__all__ = ["load_float16", "load_bfloat16", "convert_hybrid_block"]


# ------------------------------------------------------------------ loading and Gluon blocks
def load_float16(prefix: str, epoch: int = 0,
                 ctx: Optional[mx.Context] = None) -> gluon.SymbolBlock:
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

    Examples
    --------
    >>> import tempfile
    >>> import mxnet as mx
    >>> from mxmixed.tutorial import exported_digits_mlp
    >>> import mxmixed
    >>> from mxmixed import symbolic
    >>> prefix = exported_digits_mlp(tempfile.mkdtemp())  # a float32 checkpoint
    >>> _ = symbolic.convert(*mx.model.load_checkpoint(prefix, 0)).save(prefix + "-fp16", 0)
    >>> block = symbolic.load_float16(prefix + "-fp16", 0)   # emulated on a CPU already
    >>> out = block(mx.nd.ones((2, 64)))
    >>> out.shape, out.dtype.__name__                  # the output stays float32
    ((2, 10), 'float32')
    """
    sym, arg_params, aux_params = load_checkpoint(prefix, epoch)
    return symbol_block(sym, arg_params, aux_params, default_ctx(ctx))


def load_bfloat16(prefix: str, epoch: int = 0) -> gluon.SymbolBlock:
    """Load a checkpoint converted to bfloat16 as a fast ``SymbolBlock`` for CPU inference.

    The pair is checked (params against graph, a bfloat16 graph), each param gets its stored
    dtype (a plain ``SymbolBlock.imports`` of a pair from MXNet's own ``amp.convert_model``
    can fail type inference: "This layer requires uniform type"), the graph stays as it is
    (oneDNN runs the bfloat16 ops; no float16 emulation) and the block is hybridized with
    ``static_alloc=True, static_shape=True``. Module API loss outputs are replaced by their
    inference form.

    Parameters
    ----------
    prefix : str
        Path prefix of ``prefix-symbol.json`` and ``prefix-%04d.params``, as written by
        ``mxmixed convert --dtype bfloat16`` or ``convert(..., target_dtype='bfloat16').save``.
    epoch : int, default 0
        The epoch number of the params file.

    Returns
    -------
    mxnet.gluon.SymbolBlock
        On the CPU; call it with float32 data, it returns float32.

    Raises
    ------
    ConversionError
        When the checkpoint holds no bfloat16 graph, or this machine cannot run bfloat16
        (no oneDNN, or a CPU without AVX-512; see :func:`mxmixed.bfloat16_support`).

    .. note::
       Without AVX512-BF16 (or AMX) oneDNN emulates the bfloat16 arithmetic and the block
       is slower than float32; ``mxmixed info --probe`` measures it.

    Examples
    --------
    >>> import tempfile
    >>> import mxnet as mx
    >>> from mxmixed.tutorial import exported_digits_mlp
    >>> from mxmixed import symbolic, bfloat16_support
    >>> prefix = exported_digits_mlp(tempfile.mkdtemp())  # a float32 checkpoint
    >>> model = symbolic.convert(*mx.model.load_checkpoint(prefix, 0), target_dtype="bfloat16")
    >>> _ = model.save(prefix + "-bf16", 0)
    >>> if bfloat16_support()[0]:
    ...     out = symbolic.load_bfloat16(prefix + "-bf16", 0)(mx.nd.ones((2, 64)))
    ...     assert out.shape == (2, 10) and out.dtype == np.float32
    """
    runs, why = bfloat16_support()
    if not runs:
        raise ConversionError("cannot run a bfloat16 model here: %s" % why)
    if bfloat16_native() is None:
        warnings.warn(BFLOAT16_EMULATED, stacklevel=2)
    sym, arg_params, aux_params = load_checkpoint(prefix, epoch)
    block = symbol_block(sym, arg_params, aux_params, mx.cpu())
    if not block_facts(block).bfloat16:
        if _is_float16(sym, arg_params, aux_params):
            raise ConversionError("%s-symbol.json is a float16 model, not a bfloat16 one (float16 "
                                  "casts or params): load it with load_float16" % prefix)
        raise ConversionError("%s-symbol.json is a float32 model, not a bfloat16 one (no "
                              "bfloat16 or float16 casts or params): load it with "
                              "mxnet.gluon.SymbolBlock.imports, or convert it first"
                              % prefix)
    return block


def _is_float16(sym, arg_params, aux_params):
    """Whether a checkpoint computes in float16: float16 casts or params."""
    params = list(arg_params.values()) + list(aux_params.values())
    return (any(np.dtype(p.dtype) == FLOAT16 for p in params)
            or any(n.op == "amp_cast" and n.attrs.get("dtype") == "float16"
                   for n in as_graph(sym).nodes))


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
                with emulation.emulated() if is_cpu(ctx) else contextlib.nullcontext():
                    block(*data)
                    mx.nd.waitall()
            except mx.base.MXNetError as err:
                raise ConversionError("block %s failed on the example inputs: %s"
                                      % (block.name, one_line(err))) from None
        else:  # trace the graph without running it: a cast block may not run (#17164)
            block._get_graph(*data)
    data_vars, sym = block._cached_graph
    graph = as_graph(sym)
    graph = graph.with_attrs({  # a float32 graph: forget dtypes of a cast block (#17164)
        i: {"__dtype__": dtype_code(np.float32)} for i, node in enumerate(graph.nodes)
        if node.is_variable and var_dtype(node, None) == FLOAT16})
    return [v.name for v in data_vars], graph.to_symbol()


@option_keywords
def convert_hybrid_block(block: gluon.HybridBlock, inputs: Any = None,
                         ctx: Optional[mx.Context] = None, *, return_report: bool = False,
                         options: Optional[ConvertOptions] = None, **fields: Any
                         ) -> Union[gluon.SymbolBlock, Tuple[gluon.SymbolBlock, ConversionReport]]:
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
    return_report : bool, default False
        Also return the :class:`ConversionReport`.
    options : ConvertOptions, optional
        The conversion options in one object, as in :func:`convert`, or else:
    **fields
        Each field of :class:`ConvertOptions` as a keyword; not with ``options``.

    Returns
    -------
    mxnet.gluon.SymbolBlock or (SymbolBlock, ConversionReport)
        Emulated on a CPU, native on a GPU.

    Examples
    --------
    >>> import mxnet as mx
    >>> from mxnet import gluon
    >>> import mxmixed
    >>> from mxmixed import symbolic
    >>> net = gluon.nn.HybridSequential()
    >>> net.add(gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(10))
    >>> net.initialize()
    >>> block = symbolic.convert_hybrid_block(net, inputs=mx.nd.ones((1, 64)))
    >>> with mxmixed.emulation.emulated():
    ...     out = block(mx.nd.ones((2, 64)))
    >>> out.shape
    (2, 10)
    """
    options = options_from(options, **fields)
    if not isinstance(block, gluon.HybridBlock):
        raise ConversionError("block must be a HybridBlock, got %s" % type(block).__name__)
    ctx = default_ctx(ctx)
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
    model = convert_with(sym, arg_params, aux_params, options)
    converted = model.to_block(ctx)
    return (converted, model.report) if return_report else converted
