"""Attribute values of a graph's nodes read and written as MXNet's parser does: numbers
(``'0.001f'``), tuples (``'(3L, 3L)'``), a variable's declared ``__dtype__``; and a node name
not yet taken."""
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
    """A float attribute as MXNet's parser reads it: ``'0.001f'`` is 0.001.

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
        When the text is no number (MXNet refuses it too, when it loads the graph).
    """
    if value is None:
        return float(default)
    text = str(value)
    try:
        return float(text)
    except ValueError:
        if text[-1:] not in ("f", "F"):
            raise
        return float(text[:-1])


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
