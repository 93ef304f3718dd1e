"""``mxmixed demo``: the whole story on the offline digits."""
import os

from .._core.progress import bars_wanted
from ._args import int_at_least
from ._preflight import EXIT_OK, prepare_out_dir


def add_parser(sub):
    demo = sub.add_parser("demo", help="the whole story on the offline digits: float32 vs AMP, "
                                       "conversion to float16, validation, plots")
    demo.add_argument("--epochs", type=int_at_least(1), default=5,
                      help="training epochs of each run on the digits (default: 5)")
    demo.add_argument("--seed", type=int_at_least(0), default=0,
                      help="seed of the weights and the data order (default: 0)")
    demo.add_argument("--out", default=os.path.join("results", "demo"),
                      help="results folder, created if missing (default: results/demo)")
    demo.set_defaults(func=command)


def command(args):
    prepare_out_dir(args.out)
    from ..tutorial.demo import run_demo

    run_demo(out_dir=args.out, epochs=args.epochs, seed=args.seed, progress=bars_wanted())
    return EXIT_OK
