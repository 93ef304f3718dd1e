"""Attribute values of a graph's nodes read and written as MXNet's parser does: numbers
(``'0.001f'``), tuples (``'(3L, 3L)'``), a variable's declared ``__dtype__``; and a node name
not yet taken."""
import math

from ..dtypes import FLOAT32, MXNET_CODES, mxnet_code

__all__ = ["attr_float", "attr_ints", "var_dtype", "dtype_code", "unused_name"]


def unused_name(base, taken):
    """``base``, or ``base`` with the first number that makes it a name not in ``taken``.

    Parameters
    ----------
    base : str
    taken : container of str

    Returns
    -------
    str
    """
    name, k = base, 0
    while name in taken:
        k += 1
        name = "%s%d" % (base, k)
    return name


def attr_float(value, default):
    """A float attribute as MXNet's parser reads it (dmlc's ``stod``): ``'0.001f'`` is 0.001,
    ``'nan(1)'`` NaN, ``'1e'`` 1; ``'0.5 '`` and ``'1_0'`` are refused.

    Parameters
    ----------
    value : str or float or None
        The attribute's text (None: not given).
    default : float

    Returns
    -------
    float

    Raises
    ------
    ValueError
        When MXNet refuses the text too (no number, characters after it, out of range), as it
        does when it loads the graph.
    """
    if value is None:
        return float(default)
    text = value if isinstance(value, str) else repr(float(value))
    number, end = _parse_float(text)
    if end == 0:
        raise ValueError("%r is not a number" % text[:40])
    if end < len(text):
        raise ValueError("%r: the characters after the number, %r, are not one"
                         % (text[:40], text[end:end + 20]))
    return number


_SPACES = " \t\r\n\f"
_DIGITS = "0123456789"
_MAX_DIGITS = 19  # decimals read after the point; the rest are ignored
_MAX_EXPONENT = 308


def _ascii_lower(text):
    return "".join(c.lower() if c.isascii() else c for c in text)


def _parse_float(text):
    """``(value, end)`` as dmlc-core's ``ParseFloat<double, true>`` (MXNet 1.9.1's ``stod``)
    reads ``text``: the value and the index after what it read (0: nothing read).

    Raises
    ------
    ValueError
        Where MXNet raises: a ``nan(`` that does not close, an exponent out of range.
    """
    p, n = 0, len(text)
    while p < n and text[p] in _SPACES:
        p += 1
    positive = True
    if p < n and text[p] in "+-":
        positive, p = text[p] == "+", p + 1
    word = _ascii_lower(text[p:p + 8])
    matched = next((i for i, (a, b) in enumerate(zip(word + "\0", "infinity\0")) if a != b), 8)
    if matched in (3, 8):
        return (math.inf if positive else -math.inf), p + matched
    if word[:3] == "nan":
        p += 3
        if p < n and text[p] == "(":
            p += 1
            while p < n and text[p].isascii() and (text[p].isalnum() or text[p] == "_"):
                p += 1
            if p >= n or text[p] != ")":
                raise ValueError("%r is an invalid NAN literal" % text[:40])
            p += 1
        return math.nan, p
    predec = 0
    while p < n and text[p] in _DIGITS:
        predec = (predec * 10 + ord(text[p]) - 48) % 2 ** 64
        p += 1
    number = float(predec)
    if p < n and text[p] == ".":
        p += 1
        fraction, power, count = 0, 1, 0
        while p < n and text[p] in _DIGITS:
            if count < _MAX_DIGITS:
                fraction, power = fraction * 10 + ord(text[p]) - 48, power * 10
            p, count = p + 1, count + 1
        number += float(fraction) / float(power)
    if p < n and text[p] in "eE":
        p += 1
        negative = p < n and text[p] == "-"
        if p < n and text[p] in "+-":
            p += 1
        exponent = 0
        while p < n and text[p] in _DIGITS:
            exponent = (exponent * 10 + ord(text[p]) - 48) % 2 ** 32
            p += 1
        if exponent > _MAX_EXPONENT or exponent == _MAX_EXPONENT and (
                number < 2.22507385850720139 if negative else number > 1.79769313486231570):
            raise ValueError("%r is out of the range of a double" % text[:40])
        scale = 1.0
        while exponent >= 8:
            scale, exponent = scale * 1e8, exponent - 8
        while exponent > 0:
            scale, exponent = scale * 10.0, exponent - 1
        number = number / scale if negative else number * scale
    if p < n and text[p] in "fF":
        p += 1
    return (number if positive else -number), p


def attr_ints(value):
    """A tuple attribute as MXNet's parser reads it: ``'(3L, 3L)'``, ``'[3,3]'``, ``'(3,)'``.

    Parameters
    ----------
    value : str or tuple or None
        The attribute's text (None: not given).

    Returns
    -------
    tuple of (int or None), or None
        None for ``'None'`` or an empty text; an element written ``None`` is None. A single
        number (``'3'``) is a tuple of one, as MXNet reads it.

    Raises
    ------
    ValueError
        When an element is no integer (MXNet refuses it too, when it loads the graph).
    """
    if value is None or isinstance(value, (tuple, list)):
        return None if value is None else tuple(value)
    text = str(value).strip()
    if text in ("", "None"):
        return None
    if text[:1] in "([" and text[-1:] in ")]":
        text = text[1:-1]
    items = [item.strip() for item in text.split(",")]
    if items and not items[-1]:
        items.pop()  # '(3,)'
    return tuple(None if item == "None" else int(item[:-1] if item[-1:] == "L" else item)
                 for item in items)


def var_dtype(node, default=FLOAT32):
    """The dtype a variable node declares with ``__dtype__``, or ``default``."""
    code = node.get("attrs", {}).get("__dtype__")  # a Node or a record being built
    if code is None or code == "-1":
        return default
    return MXNET_CODES[int(code)]


def dtype_code(dtype):
    """MXNet's integer code of a dtype, as the string a ``__dtype__`` attribute holds."""
    return str(mxnet_code(dtype))
