"""The ``MXMIXED_*`` environment variables that mxmixed reads, each checked here and only here.

A bad value is one line, before any work: :func:`environment_error` gives it (the command line
prints it and exits 2 before its command runs), :func:`check` raises it as ``ValueError``
(:func:`mxmixed.emulation.enable` calls it), and each reader below raises it for its own
variable. An unset or empty variable means its default. Other ``MXMIXED_*`` names (those of
the test suite and the benchmarks) are not the package's and are left alone.

This module imports neither MXNet nor any other part of mxmixed, so that the command line can
check the environment before MXNet loads.
"""
import os

__all__ = ["SWITCHES", "CACHE_DIR", "switch", "cache_dir", "environment_error", "check"]

#: The 0/1 switches: name -> (default, what 1 means).
SWITCHES = {
    "MXMIXED_EMULATION_KEEP_LAYOUTS": (
        "1", "the float16 rounding op keeps oneDNN's blocked layouts; 0 reproduces results "
             "recorded before this became the default"),
    "MXMIXED_EMULATION_CARRY": (
        "1", "float16 values between two emulated ops are carried as float32 and rounded by "
             "one op; 0 keeps the cast pairs"),
    "MXMIXED_BFLOAT16_AMX": (
        "1", "the bfloat16 entry points switch on oneDNN's AMX kernels where the CPU has AMX "
             "(MXNet 1.9.1's oneDNN leaves them off); 0 leaves oneDNN as it is"),
    "MXMIXED_BFLOAT16_SPEED_CHECK": (
        "1", "under bfloat16 AMP, each hybridized block's first training step is followed by "
             "one measurement of bfloat16 against float32, with a warning where bfloat16 is "
             "slower; 0 skips it"),
    "MXMIXED_PROGRESS": (
        "", "progress bars are always drawn; 0 never; unset: only on a terminal or in Jupyter"),
}
#: Where the float16 rounding library is built and cached (an absolute path).
CACHE_DIR = "MXMIXED_CACHE_DIR"


def _switch_error(name):
    value = os.environ.get(name, "")
    if value in ("", "0", "1"):
        return None
    default = SWITCHES[name][0]
    return "%s must be 0 or 1 (%s), not %r" % (
        name, "unset means %s" % default if default else "or unset", value)


def _cache_dir_error():
    value = os.environ.get(CACHE_DIR, "")
    if value and (not os.path.isabs(value) or "\0" in value):
        return "%s must be an absolute path, not %r" % (CACHE_DIR, value)
    return None


def switch(name):
    """The value of one 0/1 switch.

    Parameters
    ----------
    name : str
        One of :data:`SWITCHES`.

    Returns
    -------
    bool or None
        True for 1, False for 0; unset or empty, its default (None where the default is to
        guess, as for ``MXMIXED_PROGRESS``).

    Raises
    ------
    ValueError
        For any other value, in one line.
    """
    error = _switch_error(name)
    if error:
        raise ValueError(error)
    value = os.environ.get(name, "") or SWITCHES[name][0]
    return None if value == "" else value == "1"


def cache_dir():
    """The rounding library's cache folder: ``$MXMIXED_CACHE_DIR`` or ``~/.cache/mxmixed``.

    Raises
    ------
    ValueError
        When ``MXMIXED_CACHE_DIR`` is not an absolute path, in one line.
    """
    error = _cache_dir_error()
    if error:
        raise ValueError(error)
    return os.environ.get(CACHE_DIR) or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "mxmixed")


def environment_error():
    """The first bad ``MXMIXED_*`` value, in one line, or None when all are good.

    Returns
    -------
    str or None
    """
    for name in sorted(SWITCHES):
        error = _switch_error(name)
        if error:
            return error
    return _cache_dir_error()


def check():
    """Raise the first bad ``MXMIXED_*`` value as a one-line ``ValueError``.

    Raises
    ------
    ValueError
    """
    error = environment_error()
    if error:
        raise ValueError(error)
