"""Plain data in a checkpoint: Python values as JSON plus NDArrays, and back, with no pickle.

JSON values stand for themselves; a few tagged one-key objects stand for the rest (``$tuple``,
``$dict`` with keys of any of these types, ``$float`` for inf and NaN, ``$np`` for NumPy arrays
and scalars of numbers in base64, ``$nd`` for an NDArray stored beside the JSON, ``$object``
for a learning-rate schedule, whose attributes are only ever applied onto a schedule of the
same class that the caller built). Decoding builds nothing else, so a crafted file can at worst
be refused.
"""
import base64
import math
import re

import numpy as np

import mxnet as mx

__all__ = ["encode_plain", "decode_plain", "quoted"]


# ----------------------------------------------------------------------------- plain data
# Optimizer states and the user's ``extra`` are stored as JSON plus arrays, never pickled:
# JSON values stand for themselves; a few tagged one-key objects stand for the rest.


_NUMPY_DTYPE = re.compile(r"^[<>|=]?[biufc][0-9]{1,2}$|^\|b1$")


_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class SavedSchedule:
    """A saved learning-rate schedule: its class name and attributes, applied onto the trainer's
    own schedule of the same class (never built from the file)."""

    def __init__(self, name, attrs):
        self.name, self.attrs = name, attrs


def encode_plain(value, arrays, where, objects=False):
    """``value`` as JSON data; each NDArray goes into ``arrays`` and is referenced by its key.

    Raises
    ------
    ValueError
        For anything but None, bool, int, float, str, list, tuple, dict, NumPy arrays and
        scalars of numbers, and NDArrays (and, with ``objects``, MXNet learning-rate schedules).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)  # 0-d for a scalar (ascontiguousarray would make it 1-d)
        if array.dtype.kind not in "biufc" or array.dtype.fields is not None:
            raise ValueError("%s is a NumPy array of dtype %s; a checkpoint stores arrays of "
                             "numbers only" % (where, array.dtype))
        return {"$np": {"dtype": array.dtype.str, "shape": list(array.shape),
                        "scalar": isinstance(value, np.generic),
                        "data": base64.b64encode(array.tobytes(order="C")).decode("ascii")}}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
    if isinstance(value, mx.nd.NDArray):
        key = str(len(arrays))
        arrays[key] = value
        return {"$nd": key}
    if isinstance(value, list):
        return [encode_plain(v, arrays, "%s[%d]" % (where, k), objects)
                for k, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [encode_plain(v, arrays, "%s[%d]" % (where, k), objects)
                           for k, v in enumerate(value)]}
    if isinstance(value, dict):
        return {"$dict": [[encode_plain(k, arrays, "a key of %s" % where, objects),
                           encode_plain(v, arrays, "%s[%r]" % (where, k), objects)]
                          for k, v in value.items()]}
    if objects and isinstance(value, mx.lr_scheduler.LRScheduler):
        return {"$object": {"class": type(value).__name__,
                            "attrs": encode_plain(vars(value), arrays, where, False)}}
    raise ValueError("%s is a %s.%s; a checkpoint stores, without pickle, only None, bool, int, "
                     "float, str, list, tuple, dict, NumPy arrays of numbers and NDArrays"
                     % (where, type(value).__module__, type(value).__qualname__))


def quoted(value, limit=40):
    """``repr(value)`` cut at ``limit`` characters, for a message; an array by its kind only."""
    if isinstance(value, (mx.nd.NDArray, np.ndarray)):
        return "<%s of shape %s>" % (type(value).__name__, tuple(value.shape))
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def decode_plain(data, arrays, copy=False, objects=False, where="the value"):
    """The value :func:`encode_plain` encoded; NDArrays are taken from ``arrays``.

    Parameters
    ----------
    where : str
        How to name ``data`` in a message (``extra``); inner values are named from it
        (``extra['state'][1]``).

    Raises
    ------
    ValueError
        For anything :func:`encode_plain` does not write, naming where it is and what it is.
    """
    if data is None or isinstance(data, (bool, str, int, float)):
        return data
    if isinstance(data, list):
        return [decode_plain(v, arrays, copy, objects, "%s[%d]" % (where, k))
                for k, v in enumerate(data)]
    if not (isinstance(data, dict) and len(data) == 1):
        raise ValueError("%s is an unknown value %.60r" % (where, data))
    (tag, body), = data.items()
    if tag == "$tuple" and isinstance(body, list):
        return tuple(decode_plain(v, arrays, copy, objects, "%s[%d]" % (where, k))
                     for k, v in enumerate(body))
    if tag == "$dict" and isinstance(body, list):
        out = {}
        for k, pair in enumerate(body):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError("%s has a dict entry that is not a pair (entry %d)" % (where, k))
            key = decode_plain(pair[0], arrays, copy, objects, "a key of %s" % where)
            try:
                hash(key)
            except TypeError:
                raise ValueError("%s has a dict key of type %s" % (where, type(key).__name__)) \
                    from None
            out[key] = decode_plain(pair[1], arrays, copy, objects,
                                    "%s[%s]" % (where, quoted(key)))
        return out
    if tag == "$float" and isinstance(body, str) and body in _FLOATS:
        return _FLOATS[body]
    if tag == "$nd" and isinstance(body, str):
        if body not in arrays:
            raise ValueError("%s is a reference to the missing array %.20r" % (where, body))
        return arrays[body].copy() if copy else arrays[body]
    if tag == "$np" and isinstance(body, dict):
        return _decode_numpy(body, where)
    if tag == "$object" and objects and isinstance(body, dict) \
            and isinstance(body.get("class"), str):
        attrs = decode_plain(body.get("attrs"), arrays, copy, False, "%s's attributes" % where)
        if not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
            raise ValueError("%s is a schedule whose attributes are not named" % where)
        return SavedSchedule(body["class"], attrs)
    raise ValueError("%s is an unknown value tagged %.40r" % (where, tag))


def _numpy_dtype(text):
    """The NumPy dtype a ``$np`` value names, or None: only numbers NumPy really has."""
    if not (isinstance(text, str) and _NUMPY_DTYPE.match(text)):
        return None
    try:
        dtype = np.dtype(text)
    except TypeError:  # '<f3', '<u16', '<i0': NumPy has no such type
        return None
    return dtype if dtype.kind in "biufc" and dtype.fields is None else None


def _decode_numpy(body, where):
    dtype, shape, data = _numpy_dtype(body.get("dtype")), body.get("shape"), body.get("data")
    if dtype is None:
        raise ValueError("%s is a NumPy array of dtype %.20r, which is not a NumPy number type"
                         % (where, body.get("dtype")))
    if not (isinstance(shape, list) and len(shape) <= 32
            and all(type(d) is int and d >= 0 for d in shape)):
        raise ValueError("%s is a NumPy array of shape %.60r, which is not a list of sizes"
                         % (where, shape))
    if not isinstance(data, str):
        raise ValueError("%s is a NumPy array whose data is not base64 text" % where)
    size = math.prod(shape) * dtype.itemsize
    if size > len(data):  # base64 takes 4 characters for every 3 bytes
        raise ValueError("%s is a NumPy array of shape %s in %d characters"
                         % (where, tuple(shape), len(data)))
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:  # binascii.Error
        raise ValueError("%s is a NumPy array whose data is not base64" % where) from None
    if len(raw) != size:
        raise ValueError("%s is a NumPy array of shape %s with %d bytes"
                         % (where, tuple(shape), len(raw)))
    array = np.frombuffer(raw, dtype).reshape(shape).copy()
    return array[()] if body.get("scalar") is True else array
