"""The gluoncv zoo exported to float16 ONNX and validated in onnxruntime: the table of docs/onnx.md.

Every model is built offline as in ``benchmarks/zoo.py`` (``pretrained=False``, fan-in init,
hybridized, exported to ``symbol.json`` + ``.params``); then, in a fresh process per model:

* ``symbolic.convert`` (defaults: float32 inputs and outputs, detection ops float32), then
  ``symbolic.export_onnx`` and ``validate_onnx`` in onnxruntime (CPU) against MXNet's float32
  model; where the export fails, the row keeps its one-line error (the op MXNet's exporter
  lacks);
* checks made here, apart from the code under test, on the file written: ``onnx.checker``
  with ``full_check=True``, no initializer among the graph inputs, and the size against the
  float32 model exported by ``mx.onnx.export_model`` itself;
* onnxruntime on the CPU, float16 file / float32 file (``mx.onnx.export_model``), inference
  time measured side by side (alternating, median of 5 after a warm-up): how slow float16 is
  on a CPU, never a speed-up.

Writes ``benchmarks/onnx_zoo.json`` (``--json``); ``tests/project/test_onnx_zoo_table.py`` checks that
the table in ``docs/onnx.md`` is the one :func:`table` makes from it (``--table`` prints it).

Usage: ``python benchmarks/onnx_zoo.py [--models a,b] [--json PATH] [--table]``
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "onnx_zoo.json")
sys.path.insert(0, ROOT)

# name, family, input shape (C, H, W), samples
MODELS = [
    ("resnet50_v1b", "classification", (3, 64, 64), 4),
    ("mobilenetv2_1.0", "classification", (3, 64, 64), 4),
    ("densenet121", "classification", (3, 224, 224), 2),
    ("inceptionv3", "classification", (3, 299, 299), 2),
    ("ssd_512_mobilenet1.0_voc", "detection (SSD)", (3, 128, 128), 2),
    ("yolo3_mobilenet1.0_voc", "detection (YOLOv3)", (3, 128, 128), 2),
]
TOLERANCE = 1e-2


def one(name, family, shape, samples):
    """One model, in this process: a row (dict)."""
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np

    import mxnet as mx
    import onnx
    import onnxruntime as ort

    from zoo import build

    from mxmixed import symbolic

    row = {"model": name, "family": family, "input": "x".join(map(str, shape)),
           "samples": samples}
    folder = tempfile.mkdtemp(prefix="onnx_zoo_")
    prefix = build(name, shape, "fan-in", folder)
    fp32 = symbolic.load_checkpoint(prefix, 0)
    X = np.random.RandomState(1).uniform(0, 1, (samples,) + tuple(shape)).astype(np.float32)
    start = time.perf_counter()
    try:
        model = symbolic.convert(*fp32)
        exported = symbolic.export_onnx(model, shape, float32_model=fp32)
    except symbolic.ConversionError as err:
        row.update(status="export fails", error=str(err))
        return row
    row["export_s"] = time.perf_counter() - start
    row["fp32_layers"] = len(model.report.fp32_layers)
    try:
        check = symbolic.validate_onnx(fp32, exported, X, batch_size=samples, progress=False)
    except symbolic.ConversionError as err:
        row.update(status="export fails", error=str(err))
        return row
    row.update(rule=check.rule.split(":")[0], error=check.error, tolerance=TOLERANCE,
               status="validated" if check.passes(TOLERANCE) else "validation fails")
    path16 = os.path.join(folder, "model16.onnx")
    exported.save(path16)
    # the checks below use onnx, onnxruntime and MXNet's exporter directly
    proto = onnx.load(path16)
    onnx.checker.check_model(proto, full_check=True)
    row["checker"] = "full check passes"
    inits = {i.name for i in proto.graph.initializer}
    row["params_as_inputs"] = sum(1 for i in proto.graph.input if i.name in inits)
    path32 = os.path.join(folder, "model32.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mx.onnx.export_model(fp32[0], [fp32[1], fp32[2]], [(samples,) + tuple(shape)],
                             np.float32, path32)
    row["size_ratio"] = os.path.getsize(path16) / os.path.getsize(path32)
    # the float32 model exported the same way (parameters as initializers, not as inputs, so
    # that onnxruntime may fold and pre-pack them as it does for float16): is the exporter
    # itself faithful to MXNet, before any float16?
    from mxmixed.symbolic._onnx_graph import to_proto

    proto32, _ = to_proto(fp32[0], dict(fp32[1], **fp32[2]), "data", np.dtype(np.float32),
                          shape)
    check32 = symbolic.validate_onnx(fp32, proto32.SerializeToString(), X,
                                     batch_size=samples, progress=False)
    row["float32_onnx_error"] = check32.error
    row["notes"] = exported.notes
    s16 = ort.InferenceSession(path16, providers=["CPUExecutionProvider"])
    s32 = ort.InferenceSession(proto32.SerializeToString(), providers=["CPUExecutionProvider"])
    feed16 = {s16.get_inputs()[0].name: X}
    feed32 = {s32.get_inputs()[0].name: X}
    # float16 against float32, both in onnxruntime: the float16 effect alone, without the
    # exporter's own differences from MXNet (its NMS, for the detectors)
    from mxmixed.symbolic._detections import compare_outputs

    got = [np.asarray(o, np.float32) for o in s16.run(None, feed16)]
    ref = [np.asarray(o, np.float32) for o in s32.run(None, feed32)]
    if [a.shape for a in ref] == [b.shape for b in got]:
        row["float16_vs_float32_onnx_error"] = max(c.error for c in compare_outputs(ref, got)[0])
    s16.run(None, feed16)
    s32.run(None, feed32)
    ratios = []
    for _ in range(5):
        t = time.perf_counter()
        s16.run(None, feed16)
        t16 = time.perf_counter() - t
        t = time.perf_counter()
        s32.run(None, feed32)
        ratios.append(t16 / (time.perf_counter() - t))
    row["ort_cpu_fp16_over_fp32_time"] = statistics.median(ratios)
    row["onnxruntime"] = ort.__version__
    return row


def _cell(row, key, fmt):
    return fmt % row[key] if key in row else "-"


def table(rows):
    """The Markdown table of docs/onnx.md, made from the rows of ``onnx_zoo.json`` (str)."""
    lines = ["| model | family | input | result | float16 ONNX vs MXNet float32 (rule) | "
             "float32 ONNX vs MXNet float32 | float16 ONNX vs float32 ONNX | "
             "float16 / float32 file | onnxruntime CPU time, float16 / float32 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["status"] == "export fails":
            result, error = "export fails: %s" % r["error"], "-"
        else:
            result = "%s (%s)" % (r["status"], r["checker"])
            error = "%.2g (%s)" % (r["error"], r["rule"])
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["family"], r["input"], result.replace("|", "/"), error,
            _cell(r, "float32_onnx_error", "%.2g"),
            _cell(r, "float16_vs_float32_onnx_error", "%.2g"), _cell(r, "size_ratio", "%.3fx"),
            _cell(r, "ort_cpu_fp16_over_fp32_time", "%.2fx")))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--json", default=OUT, help="where to write the rows (default: %s)"
                        % os.path.relpath(OUT, ROOT))
    parser.add_argument("--table", action="store_true", help="print the table of --json")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table:
        with open(args.json) as handle:
            print(table(json.load(handle)["rows"]))
        return 0
    if args.one:
        sys.path.insert(0, HERE)
        print("ROW " + json.dumps(one(*json.loads(args.one)), default=float))
        return 0
    wanted = set(args.models.split(",")) if args.models else None
    rows = []
    for spec in MODELS:
        if wanted and spec[0] not in wanted:
            continue
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                               json.dumps(spec)], capture_output=True, text=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=ROOT))
        lines = [l for l in proc.stdout.splitlines() if l.startswith("ROW ")]
        if lines:
            row = json.loads(lines[-1][4:])
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            row = {"model": spec[0], "family": spec[1], "input": "x".join(map(str, spec[2])),
                   "status": "export fails",
                   "error": "crashed (rc %d): %s" % (proc.returncode, tail[-1] if tail else "")}
        rows.append(row)
        print(json.dumps(row, default=float), flush=True)
    import onnx
    import onnxruntime

    import mxnet

    payload = {"note": "written by benchmarks/onnx_zoo.py; the table in docs/onnx.md is "
                       "made from these rows (tests/project/test_onnx_zoo_table.py)",
               "versions": {"mxnet": mxnet.__version__, "onnx": onnx.__version__,
                            "onnxruntime": onnxruntime.__version__},
               "machine": "%d CPU cores, shared; onnxruntime on the CPU" % os.cpu_count(),
               "tolerance": TOLERANCE, "rows": rows}
    if wanted and os.path.exists(args.json):  # a partial run updates its rows only
        with open(args.json) as handle:
            old = json.load(handle)["rows"]
        done = {r["model"] for r in rows}
        order = [m[0] for m in MODELS]
        payload["rows"] = sorted([r for r in old if r["model"] not in done] + rows,
                                 key=lambda r: order.index(r["model"]))
    with open(args.json, "w") as handle:
        json.dump(payload, handle, indent=1, default=float)
    print(table(payload["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
