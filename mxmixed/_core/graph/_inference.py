"""What MXNet's C API says of a graph: its dtypes and shapes, inferred by MXNet, and the Symbol
that carries its :class:`~.Graph` (:class:`GraphSymbol`), MXNet's own JSON of a Symbol."""
import array
import contextlib
import ctypes
import io

import numpy as np

import mxnet as mx

from ..dtypes import MXNET_CODES, mxnet_code
from ..errors import one_line

__all__ = ["GraphTypeError", "GraphShapeError", "GraphSymbol", "linked_symbol", "symbol_json", "np_dtype",
           "infer_types", "infer_shapes"]


class GraphTypeError(TypeError):
    """MXNet's type inference rejects a graph for the given input dtypes.

    Attributes
    ----------
    reason : str
        The informative last line of MXNet's message.
    """

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class GraphShapeError(ValueError):
    """MXNet's shape inference rejects a graph for the given input shapes.

    Attributes
    ----------
    error : mxnet.base.MXNetError
        MXNet's error, for callers that word their own message.
    """

    def __init__(self, error):
        super().__init__(one_line(error))
        self.error = error


class GraphSymbol(mx.sym.Symbol):
    """A Symbol made from a :class:`Graph`, which :func:`as_graph` gives back unparsed.

    It holds its Graph; the Graph holds it weakly, so that the two are freed as soon as the
    Symbol is unused, not at the next collection of reference cycles (a long graph's records
    are many times its file).
    """

    __slots__ = ("_graph", "__weakref__")

    def __repr__(self):
        return super().__repr__().replace("<GraphSymbol", "<Symbol", 1)


def linked_symbol(handle_of, graph):
    """A :class:`GraphSymbol` on a new handle to the Symbol ``handle_of`` (no JSON)."""
    handle = mx.base.SymbolHandle()
    mx.base.check_call(mx.base._LIB.MXShallowCopySymbol(handle_of.handle, ctypes.byref(handle)))
    sym = GraphSymbol(handle)
    sym._graph = graph
    return sym


def symbol_json(sym):
    """``sym.tojson(remove_amp_cast=False)`` as MXNet writes it, in bytes (UTF-8): the text
    written to a file without a decoded copy of a long graph's JSON beside MXNet's.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol

    Returns
    -------
    bytes
    """
    text = ctypes.c_char_p()
    mx.base.check_call(mx.base._LIB.MXSymbolSaveToJSON(sym.handle, ctypes.byref(text)))
    return text.value


def np_dtype(dtype):
    """``dtype`` as a NumPy dtype (None stays None)."""
    return None if dtype is None else np.dtype(dtype)


def infer_types(sym, known):
    """``sym.infer_type_partial`` with NumPy dtypes and names, for the inputs the graph has.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    known : dict of str to dtype
        Input dtypes; names the graph does not have are ignored.

    Returns
    -------
    (dict, list, dict)
        Argument dtypes by name, output dtypes, auxiliary dtypes by name (None: unknown).

    Raises
    ------
    GraphTypeError
        When MXNet's type inference rejects the graph.
    """
    names = set(sym.list_inputs())
    try:
        arg_types, out_types, aux_types = _infer_type_partial(
            sym, {n: t for n, t in known.items() if n in names and t is not None})
    except mx.base.MXNetError as err:
        raise GraphTypeError(one_line(err)) from None
    return ({n: np_dtype(t) for n, t in zip(sym.list_arguments(), arg_types)},
            [np_dtype(t) for t in out_types],
            {n: np_dtype(t) for n, t in zip(sym.list_auxiliary_states(), aux_types)})


def _infer_type_partial(sym, known):
    """``sym.infer_type_partial(**known)``, bfloat16 included: MXNet's own method looks dtypes
    up by their NumPy scalar type, which bfloat16 (a structured dtype) does not have, and so
    silently drops a bfloat16 input from what it knows. A dtype MXNet has no code for stays
    unknown, as there."""
    keys, codes = [], []
    for name, dtype in known.items():
        try:
            codes.append(mxnet_code(dtype))
        except (KeyError, TypeError):  # no MXNet dtype (int16): unknown, as MXNet's method has it
            continue
        keys.append(name)
    sizes = [mx.base.mx_uint() for _ in range(3)]
    data = [ctypes.POINTER(ctypes.c_int)() for _ in range(3)]
    complete = ctypes.c_int()
    mx.base.check_call(mx.base._LIB.MXSymbolInferTypePartial(
        sym.handle, mx.base.mx_uint(len(keys)), mx.base.c_str_array(keys),
        mx.base.c_array_buf(ctypes.c_int, array.array("i", codes)),
        ctypes.byref(sizes[0]), ctypes.byref(data[0]), ctypes.byref(sizes[1]),
        ctypes.byref(data[1]), ctypes.byref(sizes[2]), ctypes.byref(data[2]),
        ctypes.byref(complete)))
    return tuple([_dtype_of(data[k][i]) for i in range(sizes[k].value)] for k in range(3))


def _dtype_of(code):
    """The dtype of MXNet's code (-1: unknown, None)."""
    return None if code == -1 else MXNET_CODES[code]


def infer_shapes(sym, shapes, partial=False):
    """``sym.infer_shape`` (or its partial form) with the arguments and aux states by name.

    Parameters
    ----------
    sym : mxnet.symbol.Symbol
    shapes : dict of str to tuple
    partial : bool, default False

    Returns
    -------
    (dict, list, dict) or None
        Argument shapes by name, output shapes, auxiliary shapes by name; None when the
        shapes given are not enough (full inference only).

    Raises
    ------
    GraphShapeError
        When MXNet's shape inference rejects the shapes.
    """
    try:
        # MXNet prints the arguments to stdout before raising; the error says it all
        with contextlib.redirect_stdout(io.StringIO()):
            infer = sym.infer_shape_partial if partial else sym.infer_shape
            arg, out, aux = infer(**shapes)
    except mx.base.MXNetError as err:
        raise GraphShapeError(err) from None
    if arg is None:
        return None
    return (dict(zip(sym.list_arguments(), arg)), out,
            dict(zip(sym.list_auxiliary_states(), aux)))
