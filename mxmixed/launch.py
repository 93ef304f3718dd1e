"""``python -m mxmixed.launch ARGS``: MXNet's own launcher, made to run on Python 3.9 and later
(see :mod:`mxmixed.cli._launch`)."""
import sys

from .cli._launch import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
