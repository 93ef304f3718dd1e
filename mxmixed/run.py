"""``python -m mxmixed.run ARGS``: the same as ``mxmixed run ARGS`` (see :mod:`mxmixed.cli._run`)."""
import sys

from .cli._run import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
