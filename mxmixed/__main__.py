"""``python -m mxmixed``."""
import sys

from .cli import main

sys.exit(main())
