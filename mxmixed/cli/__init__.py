"""The ``mxmixed`` command line (also ``python -m mxmixed``): one module per command.

Every bad input is one line on stderr, ``mxmixed COMMAND: error: ...``, and a non-zero exit:
argparse checks the types and choices of the options, and :func:`parse_shape` reads shapes.
Each command imports MXNet and the modules it drives only when it runs, by import statements
inside its functions (``from ..symbolic import convert``), so that ``--help`` and ``--version``
load no MXNet.
"""
import argparse
import sys

from .._core.env import environment_error
from .._version import __version__
from . import _convert, _demo, _info, _run
from ._args import DEFAULT_TOLERANCE, parse_shape
from ._preflight import (EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, EXIT_VALIDATION_FAILED,
                         EXIT_WRITE_FAILED, CLIError)
from ._streams import PipeSafe, Printable

__all__ = ["main", "build_parser", "parse_shape", "DEFAULT_TOLERANCE", "EXIT_OK",
           "EXIT_VALIDATION_FAILED", "EXIT_USAGE", "EXIT_WRITE_FAILED", "EXIT_INTERRUPTED"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block), exit code 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))


def build_parser():
    """Build the argument parser.

    Returns
    -------
    argparse.ArgumentParser
    """
    parser = _Parser(
        prog="mxmixed",
        description="Float16 mixed precision for Apache MXNet 1.9.1 (Gluon and Symbol APIs).")
    parser.add_argument("--version", action="version", version="mxmixed %s" % __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (_info, _demo, _convert, _run):
        command.add_parser(sub)
    return parser


def main(argv=None):
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        The exit status: 0 on success; for ``convert`` see its ``--help`` (1 validation
        failed, 2 bad command line or input, 3 write failed).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a one-line usage error
        return stop.code if isinstance(stop.code, int) else EXIT_OK
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    setting = environment_error()  # a bad MXMIXED_* value: one line, before any work
    if setting:
        print("mxmixed %s: error: %s" % (args.command, setting), file=sys.stderr)
        return EXIT_USAGE
    stdout, sys.stdout = sys.stdout, PipeSafe(sys.stdout)
    stderr, sys.stderr = sys.stderr, Printable(sys.stderr)
    try:
        return args.func(args)
    except CLIError as err:
        print("mxmixed %s: error: %s" % (args.command, err), file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print("mxmixed %s: interrupted (Ctrl-C); no file was left half-written" % args.command,
              file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        sys.stdout.flush()
        sys.stdout, sys.stderr = stdout, stderr


if __name__ == "__main__":
    sys.exit(main())
