"""MXNet's booleans, read as MXNet 1.9.1 reads them: an operator's attribute, an environment
variable.

dmlc-core's parameter parser (``FieldEntry<bool>::Set``, ``dmlc/parameter.h`` among the headers
in MXNet's wheel) lower-cases the text (ASCII) and takes ``true`` or ``1`` as True and ``false``
or ``0`` as False; any other text, spaces or ``yes`` included, is an error ("Invalid Parameter
format"), so a graph MXNet loaded holds only those four words, in any case. An
``optional<bool>`` attribute (softmax's ``use_length``; ``dmlc/optional.h``) also takes
``none``, with spaces around the word. ``dmlc::GetEnv<bool>`` takes an unset or empty variable
as its default and parses any other value as an attribute, failing on the same texts.

Nothing here imports MXNet.
"""
import os

__all__ = ["read_bool", "read_optional_bool", "attr_bool", "env_bool"]

_TRUE = ("true", "1")
_FALSE = ("false", "0")
_C_SPACE = " \t\n\v\f\r"   # C's isspace, which dmlc's optional<bool> skips


def _lowered(text):
    """``text`` lower-cased as C's ``tolower`` does it: ASCII letters only (a text with other
    characters can match no word)."""
    return text.lower() if text.isascii() else text


def read_bool(value, name):
    """A boolean attribute's value (a string, or a Python value as MXNet's frontend passes it:
    ``str(value)``), as ``FieldEntry<bool>`` reads it.

    Parameters
    ----------
    value : str, bool or int
    name : str
        The attribute or variable, for the error.

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        For a text MXNet refuses, in one line.
    """
    text = _lowered(str(value))
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("%s=%r: MXNet reads it as a boolean (0, 1, true or false)" % (name, str(value)))


def read_optional_bool(value, name):
    """An ``optional<bool>`` attribute's value as dmlc reads it: ``None`` for ``none`` (any
    case), spaces around the word skipped.

    Parameters
    ----------
    value : str, bool, int or None
        None (the attribute not given) reads as None.
    name : str

    Returns
    -------
    bool or None

    Raises
    ------
    ValueError
        For a text MXNet refuses, in one line.
    """
    if value is None:
        return None
    text = _lowered(str(value).strip(_C_SPACE))
    if text == "none":
        return None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError("%s=%r: MXNet reads it as a boolean or None (0, 1, true, false or none)"
                     % (name, str(value)))


def attr_bool(attrs, key, default):
    """The boolean attribute ``key`` of a node's or a call's ``attrs``; ``default`` (the
    operator's own) when it is not given.

    Parameters
    ----------
    attrs : mapping
    key : str
    default : bool

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        For a value MXNet refuses.
    """
    value = attrs.get(key)
    return default if value is None else read_bool(value, key)


def env_bool(name, default, environ=None):
    """A boolean environment variable as ``dmlc::GetEnv<bool>`` reads it: unset or empty is
    ``default``.

    Parameters
    ----------
    name : str
    default : bool
    environ : mapping, optional
        ``os.environ`` by default.

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        For a value MXNet refuses too.
    """
    value = (os.environ if environ is None else environ).get(name)
    return default if not value else read_bool(value, name)
