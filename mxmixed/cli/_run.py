"""``mxmixed run``: any MXNet script, unmodified, with the CPU float16 emulation (or bfloat16 AMP)."""
import argparse

from ._preflight import load


def add_parser(sub):
    run = sub.add_parser(
        "run", help="run any MXNet training script with the CPU float16 emulation",
        description="Run SCRIPT as __main__ with ARGS, as 'python SCRIPT ARGS' would, with the "
                    "CPU float16 emulation switched on when no GPU is visible. Returns the "
                    "script's exit code. The script is never modified.")
    run.add_argument("--report", metavar="FILE",
                     help="write the float16 story as JSON: AMP loss scale per step, skipped "
                          "steps, the first non-finite gradient, step times")
    run.add_argument("--no-emulation", action="store_true",
                     help="run as plain MXNet, as a baseline")
    run.add_argument("--amp", choices=["bfloat16"], default=None,
                     help="switch MXNet's bfloat16 AMP on before the script starts (CPUs with "
                          "AVX-512; fast with AVX512-BF16 or AMX; no loss scaling needed) and "
                          "print the median step time")
    run.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="the script's arguments (all of them, options included)")
    run.set_defaults(func=command)


def command(args):
    return load("run").run_script(args.script, args.args, report=args.report,
                                         emulation=not args.no_emulation,
                                         amp=getattr(args, "amp", None))
