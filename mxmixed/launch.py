"""``python -m mxmixed.launch ARGS``: the same as ``mxmixed launch ARGS`` (see :mod:`mxmixed.cli._launch`)."""
import sys

if __name__ == "__main__":
    from .cli._launch import main

    sys.exit(main())
