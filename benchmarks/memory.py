"""Training memory by precision, from ``mxmixed.diagnostics.memory_report``: AMP and
``cast('float16')`` + multi-precision against float32.

The report is arithmetic, not a measurement: element counts from MXNet's shape and type
inference times the dtype sizes (parameters, gradients, optimizer state, master weights,
auxiliary states, AMP's float16 weight copies, every op output once, the input batch). Nothing
runs, so the figures are exact and one repetition suffices; the activation term is an upper
estimate (MXNet's planner reuses buffers). See ``docs/diagnostics.md``. SGD with momentum
(one optimizer state per parameter) throughout.

Usage: ``python benchmarks/memory.py [--json PATH]``
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# (label, model, input shape): the tutorials' CNN, a CIFAR ResNet and ImageNet's ResNet-50.
WORKLOADS = [
    ("digits_cnn", "digits_cnn", (64, 1, 8, 8)),
    ("cifar_resnet20_v1", "cifar_resnet20_v1", (64, 3, 32, 32)),
    ("resnet50_v1", "resnet50_v1", (32, 3, 224, 224)),
    ("resnet50_v1", "resnet50_v1", (64, 3, 224, 224)),
]


def _model(name):
    if name == "digits_cnn":
        from mxmixed.tutorial import DigitsCNN

        return DigitsCNN()
    from gluoncv.model_zoo import get_model

    return get_model(name, pretrained=False, classes=10 if name.startswith("cifar") else 1000)


def run(workloads=WORKLOADS):
    """Return one result dict per workload."""
    from mxmixed.diagnostics import memory_report
    from mxmixed.diagnostics.memory import ITEMS

    results = []
    for label, model, shape in workloads:
        report = memory_report(_model(model), shape, optimizer_states=1)
        totals = report.totals
        items = {item: {c: report.bytes(c, item) for c in ("float32", "amp", "float16")}
                 for item in ITEMS}
        results.append({
            "figure": "training memory, AMP and cast('float16')+MP / float32",
            "workload": "%s, batch %d, %s" % (label, shape[0], "x".join(map(str, shape[1:]))),
            "float32_bytes": totals["float32"], "amp_bytes": totals["amp"],
            "float16_bytes": totals["float16"],
            "amp_ratio": totals["amp"] / totals["float32"],
            "float16_ratio": totals["float16"] / totals["float32"],
            "items_bytes": items,
        })
    return results


def _mb(n):
    return "%.1f MB" % (n / 1e6)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = run()
    print("Training memory (memory_report arithmetic, SGD momentum): AMP and float16 vs float32")
    print("%-34s %12s %12s %7s %12s %7s" % ("workload", "float32", "AMP", "ratio",
                                            "float16+MP", "ratio"))
    for r in results:
        print("%-34s %12s %12s %6.2fx %12s %6.2fx" % (
            r["workload"], _mb(r["float32_bytes"]), _mb(r["amp_bytes"]), r["amp_ratio"],
            _mb(r["float16_bytes"]), r["float16_ratio"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
