"""The one home of mxmixed's dtype facts: the float dtypes, how MXNet and NumPy name them, MXNet's
integer dtype codes and float16's range. It imports NumPy only, never MXNet, so that the command
line can use it before MXNet loads (``mxmixed --help``).

MXNet 1.9.1 has no NumPy bfloat16: it represents one as a 2-byte record whose NumPy name is
'void16', while MXNet (its ops' ``dtype`` attributes, its AMP lists) spells it 'bfloat16'.
Every module takes these constants and names from here, and :class:`LastArrays` keeps what
was read of the last arrays' dtypes and contexts.
"""
import operator

import numpy as np

__all__ = ["FLOAT16", "FLOAT32", "BFLOAT16", "MXNET_CODES", "FLOAT16_MAX", "FLOAT16_OVERFLOW",
           "FLOAT16_MIN_NORMAL", "FLOAT16_MIN_SUBNORMAL", "FLOAT16_ROUND_TO_ZERO", "FLOAT32_MAX",
           "FLOAT32_MIN_NORMAL", "dtype_name", "mxnet_code",
           "numpy_name", "is_floating", "amp_list_key", "LastArrays"]

FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)
# MXNet 1.9.1 represents bfloat16 in NumPy as a 2-byte record (its ``.name`` is 'void16'), as
# ``mxnet.ndarray.ndarray._DTYPE_MX_TO_NP[12]``
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])

MXNET_CODES = {0: FLOAT32, 1: np.dtype(np.float64), 2: FLOAT16, 3: np.dtype(np.uint8),
               4: np.dtype(np.int32), 5: np.dtype(np.int8), 6: np.dtype(np.int64),
               7: np.dtype(np.bool_), 12: BFLOAT16}
"""dict of int to numpy.dtype: the dtype of each integer code MXNet 1.9.1 knows (an array
file's type flag, a ``__dtype__`` attribute): 0 to 7 and 12 (bfloat16). MXNet's own table,
``mxnet.ndarray.ndarray._DTYPE_MX_TO_NP``, copied so that reading it loads no MXNet
(``tests/core/test_dtypes.py`` compares the two)."""
# MXNet looks a dtype's code up by its NumPy scalar type (bfloat16 aside)
_CODE_OF_TYPE = {dtype.type: code for code, dtype in MXNET_CODES.items() if code != 12}

FLOAT16_MAX = 65504.0
"""float: the largest finite float16."""
FLOAT16_OVERFLOW = 65520.0
"""float: the smallest magnitude that rounds to inf (halfway between 65504 and 2**16)."""
FLOAT16_MIN_NORMAL = 2.0 ** -14
"""float: the smallest normal float16."""
FLOAT16_MIN_SUBNORMAL = 2.0 ** -24
"""float: the smallest positive float16."""
FLOAT16_ROUND_TO_ZERO = 2.0 ** -25
"""float: magnitudes at or below this round to zero."""
FLOAT32_MAX = float(np.finfo(np.float32).max)
"""float: the largest finite float32 (MXNet's operators take their settings as float32)."""
FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)
"""float: the smallest normal float32."""


def dtype_name(dtype):
    """The name of a dtype as MXNet spells it ('float16', 'bfloat16', ...)."""
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype == BFLOAT16 else dtype.name


def mxnet_code(dtype):
    """MXNet's integer code of a dtype, found as MXNet 1.9.1 finds it (by the NumPy scalar type,
    so that ``'>f4'`` is float32's 0).

    Parameters
    ----------
    dtype : numpy.dtype or str or type

    Returns
    -------
    int

    Raises
    ------
    KeyError
        For a dtype MXNet has no code for (int16, float128, a record other than bfloat16).
    TypeError
        For what NumPy reads as no dtype.
    """
    dtype = np.dtype(dtype)
    return 12 if dtype == BFLOAT16 else _CODE_OF_TYPE[dtype.type]


def numpy_name(dtype):
    """The name of a dtype as NumPy spells it: 'void16' for MXNet's bfloat16.

    A checkpoint's manifest records this spelling (its on-disk format), unlike
    :func:`dtype_name`, which gives MXNet's 'bfloat16'.
    """
    return np.dtype(dtype).name


def amp_list_key(target):
    """What MXNet's ``amp.list_*_ops`` accept for ``target``: the bfloat16 dtype, not its name."""
    return BFLOAT16 if target == "bfloat16" else target


def is_floating(dtype):
    """Whether ``dtype`` is a floating type, bfloat16 included (None: False)."""
    return dtype is not None and (np.dtype(dtype) == BFLOAT16
                                  or np.issubdtype(np.dtype(dtype), np.floating))


class LastArrays:
    """What was found of the last list of arrays asked about, kept while the same arrays come.

    An NDArray object's dtype and context never change, and asking MXNet for them costs a C
    call each (plus a ``Context`` object). A training loop hands the same parameter and
    gradient arrays every step, so checks that read every array's dtype and context run once,
    not on every step. The arrays of the last call are held until the next one with others.
    """

    __slots__ = ("_last",)

    def __init__(self):
        self._last = ((), None)  # one attribute, so that threads see a pair that belongs together

    def get(self, arrays, find):
        """``find(arrays)``, or what it gave for the same objects last time.

        Parameters
        ----------
        arrays : sequence of mxnet.nd.NDArray
        find : callable
            Of the arrays' dtypes and contexts only.

        Returns
        -------
        object
        """
        last, found = self._last
        if len(arrays) == len(last) and all(map(operator.is_, arrays, last)):
            return found
        found = find(arrays)
        self._last = (tuple(arrays), found)
        return found
