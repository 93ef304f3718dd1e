"""Speed of Symbol conversion: ``mxmixed.symbolic.convert`` (with its report) and ``validate``.

Workload: gluoncv's ``resnet50_v1`` (random init, seed 0, exported to a temporary folder),
on the CPU. Three figures, each the median of ``--rounds`` runs:

* loading the exported checkpoint with its checks (``symbolic.load_checkpoint``);
* the conversion plus its report (``symbolic.convert``). Goal: under 3 s;
* validation on 8 images of 3x224x224 (``symbolic.validate``): the float32 model and the
  float16 model, the latter through CPU emulation (float16 numerics, not float16 speed).

Usage: ``python benchmarks/convert.py [--rounds N] [--model NAME] [--json PATH]``
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

GOAL_CONVERT_S = 3.0


def _export(model, folder):
    import mxnet as mx
    from gluoncv.model_zoo import get_model

    mx.random.seed(0)
    net = get_model(model, pretrained=False)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    prefix = os.path.join(folder, model)
    net.export(prefix)
    return prefix


def _median_time(func, rounds):
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times), result


def run(rounds=3, model="resnet50_v1", images=8):
    """Measure; return a list of result dicts."""
    import numpy as np

    from mxmixed import symbolic

    with tempfile.TemporaryDirectory() as folder:
        prefix = _export(model, folder)
        load = _median_time(lambda: symbolic.load_checkpoint(prefix, 0), rounds)
        sym, arg_params, aux_params = load[3]
        conv = _median_time(lambda: symbolic.convert(sym, arg_params, aux_params), rounds)
        converted = conv[3]
        X = np.random.RandomState(0).uniform(size=(images, 3, 224, 224)).astype(np.float32)
        check = _median_time(lambda: symbolic.validate((sym, arg_params, aux_params), converted,
                                                       X, batch_size=images, progress=False),
                             rounds)
    report, validation = converted.report, check[3]
    common = {"workload": model, "device": "cpu"}
    return [
        dict(common, figure="load_checkpoint (with checks)", median_s=load[0], min_s=load[1],
             max_s=load[2], goal=""),
        dict(common, figure="convert + report", median_s=conv[0], min_s=conv[1],
             max_s=conv[2], goal="< %.1f s" % GOAL_CONVERT_S,
             met=conv[0] < GOAL_CONVERT_S, size_ratio=report.size_ratio),
        dict(common, figure="validate, %d images (fp16 emulated)" % images,
             median_s=check[0], min_s=check[1], max_s=check[2], goal="",
             max_rel_error=validation.max_rel_error,
             top1_agreement=validation.top1_agreement),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="resnet50_v1", help="a gluoncv model name")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = run(args.rounds, args.model, args.images)
    print("Symbol conversion on CPU: %s, median of %d rounds" % (args.model, args.rounds))
    print("%-38s %10s %17s %10s %5s" % ("step", "median s", "spread s", "goal", "met"))
    for r in results:
        met = "" if "met" not in r else ("yes" if r["met"] else "NO")
        print("%-38s %10.3f %8.3f-%-8.3f %10s %5s" % (r["figure"], r["median_s"], r["min_s"],
                                                      r["max_s"], r["goal"], met))
    conv, check = results[1], results[2]
    print("params after/before: %.1f%%   validation max rel error: %.2g   top-1 agreement: "
          "%.0f%%" % (100 * conv["size_ratio"], check["max_rel_error"],
                      100 * check["top1_agreement"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
