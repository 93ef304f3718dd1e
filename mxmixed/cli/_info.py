"""``mxmixed info``: MXNet's build, the GPUs, float16 and bfloat16 support, the pinned versions."""
from ._preflight import EXIT_OK


def add_parser(sub):
    info = sub.add_parser("info", help="MXNet build, GPUs, float16 and bfloat16 support and "
                                       "pinned versions")
    info.add_argument("--probe", action="store_true",
                      help="also time a float32 and a bfloat16 GEMM and convolution here "
                           "(a few seconds) and print the bfloat16 speed-up, or say that "
                           "bfloat16 cannot run here (exit 0 either way)")
    info.set_defaults(func=command)


def command(args):
    from ..diagnostics import machine

    print(machine.format_info(machine.collect()))
    if getattr(args, "probe", False):
        print()
        try:
            result = machine.probe_bfloat16()
        except RuntimeError as err:  # an answer about this machine, not a failed command
            print("bfloat16 probe: %s" % err)
            return EXIT_OK
        print(machine.format_probe(result))
    return EXIT_OK
