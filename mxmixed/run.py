"""``python -m mxmixed.run ARGS``: the same as ``mxmixed run ARGS`` (see :mod:`mxmixed.cli._run`)."""
import sys

from .cli import main as cli_main

__all__ = ["main"]


def main(argv=None):
    """``python -m mxmixed.run ARGS``: the same as ``mxmixed run ARGS``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after ``run``; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        The exit status of ``mxmixed run``.
    """
    return cli_main(["run"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
