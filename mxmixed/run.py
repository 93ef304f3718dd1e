"""``python -m mxmixed.run ARGS``: the same as ``mxmixed run ARGS`` (see :mod:`mxmixed.cli._run`)."""
import sys

if __name__ == "__main__":
    from .cli._run import main

    sys.exit(main())
