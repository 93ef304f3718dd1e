"""The argument types of the commands: each bad value is one line from argparse."""
import argparse
import re

__all__ = ["parse_shape", "int_at_least", "positive_float", "dtype", "DEFAULT_TOLERANCE",
           "MAX_TENSOR_ELEMENTS"]


# The most elements of one tensor in MXNet 1.9.1's wheels (built without USE_INT64_TENSOR_SIZE).
MAX_TENSOR_ELEMENTS = 2 ** 31 - 1


def parse_shape(text):
    """Read a shape written as comma-separated positive integers, e.g. ``"3,224,224"``.

    Parameters
    ----------
    text : str

    Returns
    -------
    tuple of int

    Raises
    ------
    argparse.ArgumentTypeError
        For anything else: ``""``, ``"3,x,224"``, ``"0,3"``, ``"-1,3"``, ``"3,,4"``, and for a
        shape of more than 2^31 - 1 elements (``"1000000000000"``).
    """
    if not isinstance(text, str) or not re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)*", text):
        raise argparse.ArgumentTypeError(
            "must be positive integers separated by commas, such as 3,224,224 (one sample, "
            "without the batch axis), got %r" % (text,))
    shape = tuple(int(part) for part in text.split(","))
    if min(shape) < 1:
        raise argparse.ArgumentTypeError("every size must be at least 1, got %r" % (text,))
    elements = 1
    for size in shape:
        elements *= size
    if elements > MAX_TENSOR_ELEMENTS:
        raise argparse.ArgumentTypeError(
            "%r is %d elements per sample, more than the %d (2^31 - 1) that MXNet 1.9.1 holds "
            "in one tensor" % (text, elements, MAX_TENSOR_ELEMENTS))
    return shape


def int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError("must be an integer, got %r" % (text,)) from None
        if value < minimum:
            raise argparse.ArgumentTypeError("must be at least %d, got %d" % (minimum, value))
        return value
    return parse


def positive_float(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number, got %r" % (text,))
    return value


# default --tolerance per target: float16 keeps 11 significant bits; bfloat16 keeps 8, so each
# rounding is 8x coarser (unit roundoff 2**-9 against 2**-12). Measured: 0.004 on a
# cifar_resnet20, 0.09-0.1 on an SSD (NMS picks other boxes among overlapping ones), against
# errors near 1 for a broken conversion
DEFAULT_TOLERANCE = {"float16": 0.01, "bfloat16": 0.1}


def dtype(text):
    if text not in DEFAULT_TOLERANCE:
        raise argparse.ArgumentTypeError("unsupported dtype %r: float16 or bfloat16" % (text,))
    return text
