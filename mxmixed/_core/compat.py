"""Import-time checks of the pinned stack, run before MXNet itself is imported.

MXNet 1.9.1 fails deep inside its own import on numpy >= 1.24 (``np.bool`` was removed),
and a missing MXNet is easy to confuse with a broken one. These checks turn both into a
one-line message that says what to install.
"""
import importlib.util
import sys

NUMPY_PIN = "1.23.5"
NUMPY_LIMIT = (1, 24)


class StackError(ImportError):
    """Raised when the installed stack cannot run MXNet 1.9.1."""


def _version_tuple(version):
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_numpy(numpy_module=None):
    """Refuse numpy versions that MXNet 1.9.1 cannot import with.

    Parameters
    ----------
    numpy_module : module, optional
        The numpy module to check; the installed one by default.

    Raises
    ------
    StackError
        If numpy is 1.24 or later.
    """
    if numpy_module is None:
        import numpy as numpy_module
    if _version_tuple(numpy_module.__version__) >= NUMPY_LIMIT:
        raise StackError(
            "mxmixed needs numpy<1.24 (pinned numpy==%s in constraints.txt) but found numpy %s, "
            "which MXNet 1.9.1 cannot import with; run: pip install -c constraints.txt numpy==%s"
            % (NUMPY_PIN, numpy_module.__version__, NUMPY_PIN))


def check_mxnet_installed():
    """Refuse to go on when no MXNet build is installed.

    Raises
    ------
    StackError
        If neither ``mxnet`` nor ``mxnet-cu112`` is importable.
    """
    try:
        missing = sys.modules.get("mxnet", False) is None or importlib.util.find_spec("mxnet") is None
    except ValueError:
        missing = True
    if missing:
        raise StackError(
            "MXNet is not installed: in the mxmixed clone, pip install -c constraints.txt -e '.[cpu]' "
            "for the CPU build, or -e '.[cu112]' for the CUDA 11.2 GPU build (mxnet-cu112==1.9.1)")
