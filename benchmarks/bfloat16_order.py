"""bfloat16 against float32 in the order a user works: the float32 model first, in the same process.

``benchmarks/bfloat16.py`` asks for oneDNN's instruction set before anything runs. A user
rather builds or loads the float32 model, runs it, then converts it and loads the bfloat16
pair in the same process, to compare. MXNet 1.9.1's oneDNN picks its instruction set at the
process's first oneDNN op, so on an AMX CPU the order once decided the speed (bfloat16 0.70-0.84x
float32 in that order, against 5.95-6.08x with nothing run first, issue 56); mxmixed now asks
for AMX at ``import mxmixed``. Here the float32 model is always built and run first, then
``symbolic.convert(..., target_dtype='bfloat16')`` and ``load_bfloat16``; each import order
runs in a fresh process:

* ``mxmixed-imported-first``: ``import mxmixed`` before MXNet;
* ``mxnet-imported-first``: ``import mxnet``, then ``import mxmixed`` (a script's usual order);
* ``ops-before-import``: an MXNet op runs before ``import mxmixed``: on an AMX CPU oneDNN keeps
  its first pick (too late, which mxmixed measures and says in one warning, recorded here).

Models: gluoncv ``resnet50_v1b`` at batch 8 (224 px, random fan-in init) and gluonnlp's BERT
classifier 4x512, sequence 128, batch 8 (``benchmarks/bfloat16.py``'s). float32 is a hybridized
Gluon model with static memory, as a user runs it. Each figure: float32 time / bfloat16 time,
timed in alternation per round, median and min-max over the rounds, with the max relative error
of bfloat16 against float32 and oneDNN's AMX status (``mxmixed._core.amx.amx_status``). Goals
(issue 56): in the natural order ResNet-50 >= 4x and BERT >= 2.5x on an AMX CPU, >= 1.5x each
with AVX512-BF16 without AMX, error <= 0.01.

Usage: ``python benchmarks/bfloat16_order.py [--quick] [--json PATH]``
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ORDERS = ("mxmixed-imported-first", "mxnet-imported-first", "ops-before-import")
MODELS = ("resnet50_v1b", "BERT 4x512")
GOALS = {("resnet50_v1b", True): 4.0, ("BERT 4x512", True): 2.5,
         ("resnet50_v1b", False): 1.5, ("BERT 4x512", False): 1.5}
MAX_ERROR = 0.01
HOW = ("one fresh process per order and model; float32 and bfloat16 timed in alternation per "
       "round after a warm-up; ratio float32/bfloat16 per round; median and min-max over the "
       "rounds; shared 2-core machine")


def _float32_model(name):
    """The float32 model and its inputs, hybridized with static memory and run once."""
    import mxnet as mx
    import numpy as np
    sys.path.insert(0, HERE)
    import bfloat16 as suite
    if name == "resnet50_v1b":
        from gluoncv.model_zoo import get_model
        net = get_model("resnet50_v1b", pretrained=False)
        x = (mx.nd.array(np.random.RandomState(0).uniform(size=(8, 3, 224, 224))),)
        suite._fan_in_init(net, x[0][:1])
    else:
        net, x = suite.bert_classifier()
    net.hybridize(static_alloc=True, static_shape=True)
    _first(net(*x)).wait_to_read()
    return net, x


def _bfloat16_block(net, x, folder):
    import mxnet as mx

    from mxmixed import symbolic
    prefix = os.path.join(folder, "model")
    net.export(prefix)
    model = symbolic.convert(*mx.model.load_checkpoint(prefix, 0), target_dtype="bfloat16")
    model.save(prefix + "-bf16", 0)
    return symbolic.load_bfloat16(prefix + "-bf16", 0)


def _first(out):
    return out[0] if isinstance(out, (list, tuple)) else out


def child(order, name, rounds):
    """One order, one model, in this (fresh) process; returns the record."""
    import warnings
    if order == "ops-before-import":
        import mxnet as mx
        mx.nd.FullyConnected(mx.nd.ones((2, 4)), mx.nd.ones((3, 4)), num_hidden=3,
                             no_bias=True).wait_to_read()
    elif order == "mxnet-imported-first":
        import mxnet as mx  # noqa: F401 - a script's usual first import
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import mxmixed  # noqa: F401
        from mxmixed._core import amx
        with tempfile.TemporaryDirectory() as folder:
            net, x = _float32_model(name)
            bf16 = _bfloat16_block(net, x, folder)
            sys.path.insert(0, HERE)
            import bfloat16 as suite
            ref = _first(net(*x)).asnumpy()
            out = _first(bf16(*x)).astype("float32").asnumpy()
            error = float(abs(out - ref).max() / abs(ref).max())

            def call(block):
                return lambda: _first(block(*x)).wait_to_read()
            med, lo, hi, t32, t16 = suite.interleaved(call(net), call(bf16), rounds, 1)
    said = [str(w.message) for w in caught if "AMX" in str(w.message)]
    return {"order": order, "model": name, "speedup": med, "spread": [lo, hi],
            "float32_s": t32, "bfloat16_s": t16, "error": error, "amx": amx.amx_status(),
            "warnings": said}


def run(rounds):
    from mxmixed._core import devices
    amx_cpu = devices.has_amx_bf16()
    records = []
    for name in MODELS:
        if name.startswith("BERT"):
            import importlib.util
            if importlib.util.find_spec("gluonnlp") is None:
                records.append({"suite": "bfloat16_order", "workload": name, "value": None,
                                "skipped": True, "absolute": "skipped: gluonnlp is not "
                                "installed", "figure": "natural order", "unit": "x",
                                "spread": None, "how": HOW})
                continue
        for order in ORDERS:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", order,
                                   name, str(rounds)], capture_output=True, text=True,
                                  cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RECORD ")]
            if proc.returncode != 0 or not lines:
                records.append({"suite": "bfloat16_order", "workload": name, "figure": order,
                                "value": None, "unit": "x", "spread": None, "how": HOW,
                                "absolute": "failed: %s" % proc.stderr.strip()[-300:]})
                continue
            r = json.loads(lines[-1][7:])
            goal = GOALS[(name, amx_cpu)] if order != "ops-before-import" else None
            records.append({
                "suite": "bfloat16_order", "workload": name,
                "figure": "inference speed-up, float32 run first, %s: float32 (Gluon, "
                          "static) / bfloat16 (symbolic.convert + load_bfloat16)" % order,
                "value": r["speedup"], "unit": "x", "spread": r["spread"], "how": HOW,
                "absolute": "float32 %.3f s, bfloat16 %.3f s per batch; error %.4f; AMX: %s%s"
                            % (r["float32_s"], r["bfloat16_s"], r["error"], r["amx"],
                               "; warned: " + r["warnings"][0] if r["warnings"] else ""),
                "error_bfloat16": r["error"], "amx": r["amx"], "warnings": r["warnings"],
                "goal": goal, "max_error": MAX_ERROR if goal else None,
                "met": None if goal is None else bool(r["speedup"] >= goal
                                                      and r["error"] <= MAX_ERROR)})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, for a smoke run")
    parser.add_argument("--json", help="also write the records here")
    parser.add_argument("--child", nargs=3, metavar=("ORDER", "MODEL", "ROUNDS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        order, name, rounds = args.child
        print("RECORD " + json.dumps(child(order, name, int(rounds))))
        return 0
    start = time.perf_counter()
    records = run(2 if args.quick else 4)
    print("bfloat16 / float32 by the order of a user's calls (%.0f s)"
          % (time.perf_counter() - start))
    sys.path.insert(0, HERE)
    import bfloat16 as suite
    suite.print_records(records, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
