"""Progress bars that stay out of logs: the one place mxmixed decides whether to draw tqdm bars.

A bar is drawn only where someone watches it: when ``sys.stderr`` is a terminal or a Jupyter
kernel's stream. Redirected to a file or a CI log, bars would flood it with carriage returns, so
they are off. The environment variable ``MXMIXED_PROGRESS`` overrides the guess: ``1`` always
draws them, ``0`` never does.
"""
import sys

from .env import switch

__all__ = ["progress", "bars_wanted", "bar"]

ENV = "MXMIXED_PROGRESS"


def _interactive(stream):
    if type(stream).__module__.split(".")[0] == "ipykernel":
        return True  # a notebook cell: the bar renders in place
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def bars_wanted(enabled=True):
    """Whether a bar should be drawn.

    Parameters
    ----------
    enabled : bool, default True
        The caller's wish (e.g. a ``progress=`` argument); False always wins.

    Returns
    -------
    bool
        False when ``enabled`` is False or ``MXMIXED_PROGRESS=0``; True when
        ``MXMIXED_PROGRESS=1``; otherwise whether ``sys.stderr`` is a terminal or a Jupyter
        kernel's stream.

    Raises
    ------
    ValueError
        When ``MXMIXED_PROGRESS`` is set to anything but 0 or 1 (one line).
    """
    if not enabled:
        return False
    setting = switch(ENV)
    return _interactive(sys.stderr) if setting is None else setting


def progress(iterable=None, enabled=True, widget=True, **kwargs):
    """A tqdm bar that is disabled where nobody watches it (see :func:`bars_wanted`).

    Parameters
    ----------
    iterable : iterable, optional
        What to iterate over; omit it and call ``update`` on the result instead.
    enabled : bool, default True
        The caller's wish; the bar is drawn only if :func:`bars_wanted` agrees.
    widget : bool, default True
        ``tqdm.auto`` (a widget in notebooks) or, with False, a text bar (which renders in
        executed notebooks inside the docs).
    **kwargs
        Passed to ``tqdm`` (``desc``, ``total``, ``leave`` ...).

    Returns
    -------
    tqdm.tqdm
        A disabled bar still iterates and accepts ``update`` and ``close``.
    """
    return bar(iterable, widget=widget, disable=not bars_wanted(enabled), **kwargs)


def bar(iterable=None, widget=True, **kwargs):
    """A tqdm bar, drawn as the caller says: for callers that decided already (``progress=True``).

    The one place mxmixed imports tqdm (``ruff``'s banned-api rule keeps it so).

    Parameters
    ----------
    iterable : iterable, optional
    widget : bool, default True
        ``tqdm.auto`` (a widget in notebooks) or, with False, a text bar.
    **kwargs
        Passed to ``tqdm`` (``desc``, ``total``, ``leave``, ``disable`` ...).

    Returns
    -------
    tqdm.tqdm
    """
    if widget:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    return tqdm(iterable, **kwargs)
