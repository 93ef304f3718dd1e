"""Conversion of the gluoncv model zoo: one row per model, with onnxconverter-common beside it.

Every model is built offline (``pretrained=False, pretrained_base=False``) with a
scale-preserving random init (fan-in Xavier on every weight, identity BatchNorm, zero biases),
hybridized, run once on a small input and exported; then, in a fresh process per model:

* ``symbolic.convert`` with defaults: time, params size ratio, float32 layers and notes (with
  ``calibration=`` the float16 underflow warning);
* ``symbolic.validate`` against the float32 model: the rule (relative, or detections matched
  by IoU and class), the error and the verdict at ``--tolerance``;
* inference time of the float16 model under CPU emulation, next to float32 (emulation gives
  float16 numerics, not speed);
* for a few models ``symbolic.search_fp32_layers`` at ``--search-tolerance``: evaluations
  against the bound ``2k + ceil(log2 n) + 4``, time, layers kept;
* the peer: ``mx.onnx.export_model`` and onnxconverter-common's
  ``auto_convert_mixed_precision`` on onnxruntime, with the same samples and the same
  relative-error test, where the ``bench`` extra is installed (``--onnx-path`` adds a folder
  to ``sys.path`` for it); when the export or the peer fails, the row says why.

Usage: ``python benchmarks/zoo.py [--models a,b] [--quick] [--json PATH] [--onnx-path DIR]``
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

# name, family, input shape (C, H, W), samples, search?, init
MODELS = [
    ("resnet50_v1b", "classification", (3, 32, 32), 2, True, "fan-in"),
    ("mobilenetv2_1.0", "classification", (3, 64, 64), 4, False, "fan-in"),
    ("mobilenetv2_1.0", "classification", (3, 64, 64), 4, False, "default"),
    ("densenet121", "classification", (3, 224, 224), 1, True, "fan-in"),
    ("inceptionv3", "classification", (3, 299, 299), 1, False, "fan-in"),
    ("ssd_512_mobilenet1.0_voc", "detection", (3, 128, 128), 2, False, "fan-in"),
    ("yolo3_mobilenet1.0_voc", "detection", (3, 128, 128), 2, False, "fan-in"),
    ("faster_rcnn_resnet50_v1b_voc", "detection", (3, 128, 128), 1, False, "fan-in"),
    ("fcn_resnet50_voc", "segmentation", (3, 128, 128), 1, False, "fan-in"),
    ("simple_pose_resnet18_v1b", "pose", (3, 128, 96), 2, False, "fan-in"),
]
QUICK = ("resnet50_v1b", "ssd_512_mobilenet1.0_voc")


# ----------------------------------------------------------------------------- building
def fan_in_init(net, x):
    """Fan-in Xavier weights, identity BatchNorm and zero biases, by parameter name.

    gluoncv's symbol-built blocks (SSD's feature expander) otherwise get the default uniform
    init on their BatchNorm statistics, which makes activations grow ~40x per layer.
    """
    import mxnet as mx
    import numpy as np

    net.initialize()
    net(x)
    rng = np.random.RandomState(0)
    for name, param in net.collect_params().items():
        if name.endswith("weight") and len(param.shape) >= 2:
            fan_in = int(np.prod(param.shape[1:]))
            param.set_data(mx.nd.array(rng.normal(0, math.sqrt(2.0 / fan_in), param.shape)))
        elif name.endswith(("gamma", "moving_var", "running_var")):
            param.set_data(mx.nd.ones(param.shape))
        elif name.endswith(("beta", "moving_mean", "running_mean", "bias")):
            param.set_data(mx.nd.zeros(param.shape))


def build(name, shape, init, folder):
    import warnings

    import mxnet as mx
    import numpy as np
    from gluoncv.model_zoo import get_model

    warnings.filterwarnings("ignore")
    mx.random.seed(0)
    kwargs = {"pretrained": False}
    if any(k in name for k in ("ssd", "yolo", "rcnn", "fcn", "deeplab", "psp", "pose")):
        kwargs["pretrained_base"] = False
    net = get_model(name, **kwargs)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(1,) + tuple(shape)))
    if init == "fan-in":
        fan_in_init(net, x)
    else:  # gluoncv's usual default: Xavier (uniform, avg of fan-in and fan-out, magnitude 3)
        net.initialize(mx.init.Xavier())
    net.hybridize()
    net(x)
    prefix = os.path.join(folder, name)
    net.export(prefix)
    return prefix


# ----------------------------------------------------------------------------- one model
def _time(func, repeats=3):
    func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rel_error(ref, got):
    import numpy as np

    worst = 0.0
    for a, b in zip(ref, got):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if not np.isfinite(b).all():
            return math.inf
        scale = np.abs(a).max()
        worst = max(worst, float(np.abs(a - b).max() / scale) if scale > 0 else 0.0)
    return worst


def onnx_peer(prefix, X, tolerance, shape):
    """mx.onnx export + onnxconverter-common's search, with our relative-error test."""
    out = {}
    try:
        import mxnet as mx
        import onnx
        import onnxruntime as ort
        from onnxconverter_common import auto_mixed_precision
    except ImportError as err:
        return {"onnx_status": "not run: %s (install the 'bench' extra)" % err}
    path = prefix + ".onnx"
    start = time.perf_counter()
    try:
        mx.onnx.export_model(prefix + "-symbol.json", prefix + "-0000.params",
                             [(len(X),) + tuple(shape)], [X.dtype], path)
    except Exception as err:  # any export failure is a result to record
        text = str(err).strip().splitlines()
        return {"onnx_status": "export failed: %s: %s" % (type(err).__name__,
                                                           text[-1][:200] if text else "")}
    out["onnx_export_s"] = time.perf_counter() - start
    model = onnx.load(path)
    feed = {model.graph.input[0].name: X}
    calls = [0]

    def validate(res1, res2):
        calls[0] += 1
        return _rel_error(res1, res2) <= tolerance

    start = time.perf_counter()
    try:
        converted = auto_mixed_precision.auto_convert_mixed_precision(
            model, feed, validate_fn=validate, keep_io_types=True)
    except Exception as err:
        text = str(err).strip().splitlines()
        out.update(onnx_status="peer failed: %s: %s" % (type(err).__name__,
                                                        text[-1][:200] if text else ""),
                   onnx_search_s=time.perf_counter() - start, onnx_evaluations=calls[0])
        return out
    out["onnx_search_s"] = time.perf_counter() - start
    out["onnx_evaluations"] = calls[0]
    nodes = [n for n in converted.graph.node if n.op_type not in ("Cast",)]
    out["onnx_nodes"] = len(nodes)
    out["onnx_status"] = "ok"
    try:
        sess = ort.InferenceSession(converted.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        ref = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feed)
        out["onnx_error"] = _rel_error(ref, sess.run(None, feed))
    except Exception as err:
        out["onnx_error_note"] = str(err).strip().splitlines()[-1][:200]
    return out


def one(name, family, shape, samples, search, init, tolerance, search_tolerance, onnx):
    import warnings

    import mxnet as mx
    import numpy as np

    from mxmixed import symbolic
    from mxmixed.symbolic._validation import Runner

    warnings.filterwarnings("ignore")
    row = {"workload": name + ("" if init == "fan-in" else " (%s init)" % init),
           "family": family, "input": "%dx%s" % (samples, "x".join(map(str, shape))),
           "init": init}
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        try:
            prefix = build(name, shape, init, folder)
        except Exception as err:
            text = str(err).strip().splitlines()
            row["status"] = "build failed offline: %s: %s" % (type(err).__name__,
                                                               text[-1][:200] if text else "")
            return row
        row["build_s"] = time.perf_counter() - start
        sym, args, auxs = symbolic.load_checkpoint(prefix, 0)
        X = np.random.RandomState(1).uniform(size=(samples,) + tuple(shape)).astype(np.float32)
        try:
            start = time.perf_counter()
            model = symbolic.convert(sym, args, auxs)
            row["convert_s"] = time.perf_counter() - start
            calibrated = symbolic.convert(sym, args, auxs, calibration=X, batch_size=samples)
        except symbolic.ConversionError as err:
            row["status"] = "convert failed: %s" % err
            return row
        report = calibrated.report
        row["size_ratio"] = report.size_ratio
        row["fp32_layers"] = len(report.fp32_layers)
        reasons = {}
        for _, _, reason in report.fp32_layers:
            reasons[reason] = reasons.get(reason, 0) + 1
        row["fp32_reasons"] = reasons
        row["notes"] = report.notes
        row["underflow_warning"] = any("underflow" in n for n in report.notes)
        try:
            check = symbolic.validate((sym, args, auxs), model, X, batch_size=samples,
                                      ctx=mx.cpu(), progress=False)
        except symbolic.ConversionError as err:
            row["status"] = "validate failed: %s" % err
            return row
        row.update(rule=check.rule.split(":")[0], error=check.error,
                   max_rel_error=check.max_rel_error, passes=check.passes(tolerance),
                   tolerance=tolerance, checks=[[c.name, c.error, c.detail]
                                                for c in check.checks])
        block16 = model.to_block(mx.cpu())
        block32 = Runner((sym, args, auxs), mx.cpu()).block
        data = mx.nd.array(X)

        def run(block):
            out = block(data)
            outs = out if isinstance(out, (list, tuple)) else [out]
            mx.nd.waitall()
            return outs

        row["fp32_infer_s"] = _time(lambda: run(block32))
        row["fp16_infer_s"] = _time(lambda: run(block16))
        row["status"] = "ok"
        if search:
            try:
                result = symbolic.search_fp32_layers(sym, args, auxs, X,
                                                     tolerance=search_tolerance,
                                                     batch_size=samples, ctx=mx.cpu(),
                                                     progress=False)
                row.update(search_tolerance=search_tolerance,
                           search_evaluations=result.evaluations,
                           search_bound=result.bound, search_s=result.seconds,
                           search_candidates=len(result.ranking),
                           search_layers=len(result.layers), search_error=result.error,
                           search_initial_error=result.initial_error,
                           search_skipped=len(result.skipped),
                           search_met_bound=result.evaluations <= result.bound)
            except symbolic.ConversionError as err:
                row["search_status"] = "failed: %s" % err
        if onnx and search:  # the peer beside the rows that run the search
            row.update(onnx_peer(prefix, X, search_tolerance, shape))
    return row


# ----------------------------------------------------------------------------- driver
def _records(rows):
    """The common figure records of run_all.py, one per measured figure."""
    how = ("one fresh process per model; convert and search timed once, inference the "
           "median of 3 after a warm-up; random fan-in init, CPU emulation of float16")
    out = []
    for r in rows:
        base = {"suite": "zoo", "workload": r["workload"], "how": how, "spread": None,
                "row": r}
        if r.get("status") != "ok":
            out.append(dict(base, figure="convert + validate", value=None, unit="",
                            absolute=r.get("status", "")))
            continue
        out.append(dict(base, figure="float16 params size / float32 params size",
                        value=r["size_ratio"], unit="x",
                        absolute="convert %.2f s; validation %s error %.3g (%s at %g)" % (
                            r["convert_s"], r["rule"], r["error"],
                            "pass" if r["passes"] else "FAIL", r["tolerance"])))
        if "search_evaluations" in r:
            out.append(dict(base, figure="search evaluations / bound 2k+ceil(log2 n)+4",
                            value=r["search_evaluations"] / r["search_bound"], unit="x",
                            absolute="%d of %d evaluations, %.1f s, %d of %d layers kept "
                                     "float32, error %.3g at %g" % (
                                         r["search_evaluations"], r["search_bound"],
                                         r["search_s"], r["search_layers"],
                                         r["search_candidates"], r["search_error"],
                                         r["search_tolerance"]),
                            goal="evaluations <= bound; resnet50_v1b <= 60 s",
                            met=bool(r["search_met_bound"])))
        if "onnx_status" in r:
            out.append(dict(base, figure="onnxconverter-common auto_convert_mixed_precision",
                            value=r.get("onnx_evaluations"), unit="evaluations",
                            absolute="%s; %s" % (r["onnx_status"], (
                                "%.1f s" % r["onnx_search_s"]) if "onnx_search_s" in r
                                else "")))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--quick", action="store_true", help="only %s" % ", ".join(QUICK))
    parser.add_argument("--tolerance", type=float, default=1e-2)
    parser.add_argument("--search-tolerance", type=float, default=2e-4)
    parser.add_argument("--no-onnx", action="store_true")
    parser.add_argument("--onnx-path", default=os.environ.get("MXMIXED_ONNX_PATH"),
                        help="a folder with onnx, onnxruntime, onnxconverter-common")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.onnx_path:
        sys.path.insert(0, args.onnx_path)
    if args.one:
        spec = json.loads(args.one)
        row = one(*spec, tolerance=args.tolerance, search_tolerance=args.search_tolerance,
                  onnx=not args.no_onnx)
        print("ROW " + json.dumps(row, default=float))
        return 0
    wanted = set(args.models.split(",")) if args.models else (set(QUICK) if args.quick
                                                                else None)
    rows = []
    for spec in MODELS:
        if wanted and spec[0] not in wanted:
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(spec),
               "--tolerance", str(args.tolerance), "--search-tolerance",
               str(args.search_tolerance)] + (["--no-onnx"] if args.no_onnx else []) + (
                   ["--onnx-path", args.onnx_path] if args.onnx_path else [])
        start = time.perf_counter()
        env = dict(os.environ, PYTHONPATH=ROOT)
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        mkldnn = "unknown type for MKLDNN" in proc.stderr
        if mkldnn:
            # the emulation of amp_multicast in MXNet 1.9.1's oneDNN path ("unknown type for
            # MKLDNN :2"); without oneDNN the same graph runs
            env["MXNET_MKLDNN_ENABLED"] = "0"
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("ROW ")]
        if lines:
            row = json.loads(lines[-1][4:])
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            row = {"workload": spec[0], "family": spec[1],
                   "status": "crashed (rc %d): %s" % (proc.returncode, tail[-1] if tail else "")}
        row["wall_s"] = time.perf_counter() - start
        if mkldnn:
            row["mkldnn"] = "oneDNN off (MXNET_MKLDNN_ENABLED=0): with it on, the emulated " \
                            "amp_multicast fails with 'unknown type for MKLDNN :2'"
        rows.append(row)
        print(_line(row), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(_records(rows), handle, indent=1, default=str)
    return 0


def _line(r):
    if r.get("status") != "ok":
        return "%-34s %s" % (r["workload"], r.get("status"))
    text = ("%-34s convert %.2fs size %.3f fp32-layers %d | %s err %.3g %s | fp16 %.2fs "
            "fp32 %.2fs" % (r["workload"], r["convert_s"], r["size_ratio"], r["fp32_layers"],
                            r["rule"], r["error"], "pass" if r["passes"] else "FAIL",
                            r["fp16_infer_s"], r["fp32_infer_s"]))
    if r.get("underflow_warning"):
        text += " | underflow warning"
    if r.get("mkldnn"):
        text += " | oneDNN off"
    if "search_evaluations" in r:
        text += " | search %d/%d evals %.1fs kept %d/%d err %.2g" % (
            r["search_evaluations"], r["search_bound"], r["search_s"], r["search_layers"],
            r["search_candidates"], r["search_error"])
    if "onnx_status" in r:
        text += " | onnx: %s" % r["onnx_status"]
        if "onnx_evaluations" in r:
            text += " %s evals %.1fs" % (r["onnx_evaluations"], r.get("onnx_search_s", 0))
    return text


if __name__ == "__main__":
    sys.exit(main())
