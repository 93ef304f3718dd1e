"""``make bench``: run every benchmark, write ``results/bench/results.json`` and print a table.

Each benchmark script runs in a process of its own (``amp.init`` cannot be undone, so no
script may leave AMP or the emulation switched on for the next) and hands its figures back
through ``--json``. ``results.json`` records the machine, the versions, the date, and for every
figure its value, unit, spread and how it was measured, beside the script's raw output.

How figures are measured: these machines are noisy (2 shared cores), so each figure is a
ratio of two things measured side by side in the same run, over several repetitions: the
median, with the minimum and maximum as the spread. Absolute times appear only next to their
ratio. The memory figures are arithmetic (exact, one repetition), and the GPU figures are
skipped, saying why, where MXNet sees no GPU.

Where results go: outside the tracked tree, so a run changes no tracked file. By default
``results/bench/results.json`` (git ignores ``results/``), or ``results.json`` in the folder
``$MXMIXED_BENCH_OUT`` names, or ``--out PATH``; the suites with a full table of their own
write it beside, as ``results-op_survey.json`` and ``results-onnx_zoo.json``. The docs and the
tests read the committed copy ``benchmarks/recorded/<date>-results.json``; ``--record``
(``make bench-record``) merges a run into it (see ``benchmarks/_record.py``).

Usage: ``python benchmarks/run_all.py [--only NAME ...] [--skip NAME ...] [--quick]
[--out PATH]``; ``--quick`` uses fewer repetitions, for a smoke run (not for the README).
``python benchmarks/run_all.py --record [RUN.json ...]`` runs nothing: it records the runs
(default: the last ``make bench``) into ``benchmarks/recorded/``.
"""
import argparse
import datetime
import json
import os
import platform
import stat
import subprocess
import sys
import tempfile
import time

import _record

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name, script, arguments (full run), arguments (--quick), what the suite measures
SUITES = [
    ("emulation", "emulation.py", ["--rounds", "7", "--steps", "5"], ["--rounds", "3", "--steps", "2"],
     "CPU float16 emulation cost: emulated AMP step / float32 step"),
    ("overhead", "overhead.py", ["--rounds", "10", "--steps", "25"], ["--rounds", "3", "--steps", "10"],
     "helper overhead: mxmixed step / raw mxnet.contrib.amp step"),
    ("convert", "convert.py", ["--rounds", "5"], ["--rounds", "1"],
     "Symbol conversion of resnet50_v1: time and parameter size ratio"),
    ("op_survey", "op_survey.py", [], ["--quick"],
     "float16 / float32 time of every operator the models use, on the CPU"),
    ("memory", "memory.py", [], [],
     "training memory of AMP and cast('float16') relative to float32"),
    ("notebooks", "notebooks.py", [], [],
     "wall time of the tutorial suite, relative to a reference workload"),
    ("zoo", "zoo.py", [], ["--quick"],
     "gluoncv zoo: convert, validate (detections by IoU), search evaluations, onnx peer"),
    ("onnx_zoo", "onnx_zoo.py", [], ["--models", "resnet50_v1b"],
     "gluoncv zoo to float16 ONNX: checked, validated in onnxruntime; file size, ORT CPU time"),
    ("ssd_step", "ssd_step.py", ["--rounds", "7", "--steps", "10"], ["--rounds", "2", "--steps", "2"],
     "SSD (mxmixed run workload): emulated AMP step / float32 step, and where the time goes"),
    ("bert_step", "bert_step.py", ["--rounds", "7", "--steps", "5"],
     ["--rounds", "2", "--steps", "2"],
     "gluonnlp BERT classifier, 2x128 and 4x512: emulated AMP step / float32 step (needs "
     "gluonnlp)"),
    ("bfloat16", "bfloat16.py", [], ["--quick"],
     "bfloat16 / float32 on this CPU: inference via mxmixed convert, training (ResNet, BERT), "
     "digits accuracy"),
    ("bfloat16_ops", "bfloat16_ops.py", [], ["--quick"],
     "bfloat16 / float32 time of each op bfloat16 AMP leaves to its inputs' dtype, and its "
     "kernel (oneDNN's or MXNet's generic one); checks SLOW_BFLOAT16_CPU_OPS"),
    ("bfloat16_order", "bfloat16_order.py", [], ["--quick"],
     "bfloat16 / float32 with the float32 model run first in the same process (the natural "
     "order), by import order: ResNet-50 v1b and BERT 4x512 (needs gluonnlp), AMX status"),
    ("graph_cost", "graph_cost.py", [], ["--nodes", "10000", "--refused", "40", "--rounds", "1"],
     "conversion time and memory as the graph grows: settling 2n / n, peak memory / file size"),
    ("gpu_throughput", "gpu_throughput.py", [], ["--rounds", "2", "--steps", "5"],
     "GPU images/s: float32 vs AMP vs cast('float16') + multi-precision (untested here)"),
]
HOW = {
    "emulation": "two persistent worker processes (float32, emulated AMP) time blocks of "
                 "steps in alternation; ratio per round; median and min-max over the rounds",
    "overhead": "two persistent worker processes (raw amp, mxmixed) time blocks of steps in "
                "alternation; ratio per round; median and min-max over the rounds",
    "convert": "median and min-max over the rounds of each step, in one process; the size "
               "ratio is float16 params bytes / float32 params bytes (exact)",
    "op_survey": "each op bound alone on the CPU in float32 and in float16, timed one after "
                 "the other (median of repeated runs after a warm-up); ratio float16/float32",
    "memory": "mxmixed.diagnostics.memory_report: element counts from shape/type inference "
              "times dtype sizes; nothing runs (exact, one repetition)",
    "notebooks": "each notebook executed once in a fresh kernel; a reference worker times 3 "
                 "blocks of 30 float32 digits CNN steps before the first notebook and after "
                 "each; ratio = notebook time / (1000 x the adjacent reference step time), "
                 "summed over the notebooks",
    "zoo": "one fresh process per model; convert and search timed once, inference the median "
           "of 3 after a warm-up; random fan-in init; CPU emulation of float16",
    "onnx_zoo": "one fresh process per model; sizes exact; onnxruntime CPU time of the "
                "float16 and the float32 file alternated, median of 5 after a warm-up",
    "ssd_step": "two persistent worker processes per comparison time blocks of steps in "
                "alternation; ratio per round; median and min-max over the rounds; the time "
                "split from one mx.profiler pass (aggregate stats, bulk execution off)",
    "bert_step": "two persistent worker processes (float32, emulated AMP) time blocks of "
                 "steps in alternation; ratio per round; median and min-max over the rounds",
    "bfloat16": "one process; float32 and bfloat16 timed in alternating blocks per round; "
                "ratio float32/bfloat16 per round; median and min-max over the rounds",
    "bfloat16_ops": "each op alone, imperative, forward + backward; float32 and bfloat16 "
                    "inputs timed in alternating blocks per round; ratio bfloat16/float32 per "
                    "round; median and min-max over the rounds; the kernel from oneDNN's "
                    "verbose log of one bfloat16 call in a child process",
    "bfloat16_order": "one fresh process per import order and model; the float32 model runs "
                      "first; float32 and bfloat16 timed in alternation per round; ratio "
                      "float32/bfloat16 per round; median and min-max over the rounds",
    "graph_cost": "one fresh process per conversion, started by a small process of its own "
                  "(Linux counts the forking process's memory in the child's peak); peak RSS "
                  "(ru_maxrss of the child, os.wait4) less that of the same command on a tiny "
                  "graph, over the file's size; settling timed at n and 2n alternated in one "
                  "process, median and min-max over the rounds",
    "gpu_throughput": "three persistent worker processes (float32, AMP, cast+MP) time blocks "
                      "of steps in alternation per batch size; images/s and speed-up over "
                      "float32 per round; peak memory from nvidia-smi per process",
}


# ----------------------------------------------------------------------------- machine facts
def _cpu_model():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_flags():
    """The CPU flags the float16 emulation and bfloat16 speed depend on."""
    wanted = ("f16c", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [f for f in wanted if f in have]
    except OSError:
        pass
    return None


def _memory_gb():
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 ** 2, 1)
    except OSError:
        pass
    return None


def machine_and_versions():
    """What the numbers depend on: CPU, cores, memory, GPUs, MXNet build, package versions."""
    code = ("import json, mxmixed.diagnostics.machine as s; i = s.collect(); "
            "print(json.dumps({k: i[k] for k in ('mxmixed', 'python', 'mxnet', 'build', "
            "'features', 'gpus', 'float16_gemm', 'packages')}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    machine = {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gb": _memory_gb(),
        "platform": platform.platform(), "gpus": info.get("gpus"),
        "mxnet_build": info.get("build"), "float16_gemm": info.get("float16_gemm"),
        "load_average_at_start": load, "cpu_flags": _cpu_flags(),
    }
    versions = {"python": platform.python_version(), "mxmixed": info.get("mxmixed"),
                "mxnet": info.get("mxnet"), "mxnet_features": info.get("features")}
    versions.update({k: v for k, v in (info.get("packages") or {}).items() if v})
    return machine, versions


# ----------------------------------------------------------------------------- figures
def _fig(suite, workload, figure, value, unit, lo=None, hi=None, absolute="", **extra):
    out = {"suite": suite, "workload": workload, "figure": figure, "value": value, "unit": unit,
           "spread": None if lo is None else [lo, hi], "absolute": absolute, "how": HOW[suite]}
    out.update(extra)
    return out


# Scripts built on _workers.compare: (figure, baseline label, variant label).
_SIDE_BY_SIDE = {
    "emulation": ("emulated AMP step / float32 step (CPU)", "float32", "emulated"),
    "overhead": ("mxmixed step / raw mxnet.contrib.amp step", "raw amp", "mxmixed"),
    "bert_step": ("emulated AMP step / float32 step (CPU)", "float32", "emulated"),
}


def figures(suite, raw):
    """Turn one script's JSON into the common figure records."""
    out = []
    if suite in _SIDE_BY_SIDE:
        title, base, variant = _SIDE_BY_SIDE[suite]
        for r in raw:
            if r.get("skipped"):
                out.append(_fig(suite, r["workload"], title, None, "x", absolute=r["skipped"],
                                skipped=True))
                continue
            out.append(_fig(suite, r["workload"], title,
                            r["ratio_median"], "x", r["ratio_min"], r["ratio_max"],
                            "%s %.4f s/step, %s %.4f s/step" % (
                                base, r["baseline_s_per_step"], variant, r["variant_s_per_step"]),
                            goal=r.get("goal"), repetitions="%d rounds x %d steps" % (
                                r["rounds"], r["steps_per_round"])))
    elif suite == "ssd_step":
        for r in raw:
            if "ratio_median" in r:
                out.append(_fig(suite, r["workload"], r["figure"], r["ratio_median"], "x",
                                r["ratio_min"], r["ratio_max"], "%.4f s/step vs %.4f s/step" % (
                                    r["variant_s_per_step"], r["baseline_s_per_step"]),
                                goal=r.get("goal"), repetitions="%d rounds x %d steps" % (
                                    r["rounds"], r["steps_per_round"])))
            elif "cast_share" in r:
                out.append(_fig(suite, r["workload"], "share of operator time: AMP overflow "
                                "check / casts", "%.0f%% / %.0f%%" % (
                                    100 * r["overflow_check_share"], 100 * r["cast_share"]),
                                "share", absolute="%.0f ms of operator time per step; top: %s" % (
                                    r["op_ms_per_step"], ", ".join(
                                        "%s %.0f%%" % (t["op"], 100 * t["share"])
                                        for t in r["top_ops"][:4]))))
    elif suite == "convert":
        # convert.py times no baseline side by side, so its times are given next to the
        # size ratio (exact) and the validation's top-1 agreement, not as figures of their own.
        steps = {r["figure"].split(" (")[0].split(",")[0]: r for r in raw}
        load, conv = steps.get("load_checkpoint"), steps.get("convert + report")
        for r in raw:
            if "size_ratio" in r:
                out.append(_fig(suite, r["workload"], "float16 params size / float32 params "
                                "size", r["size_ratio"], "x",
                                absolute="convert + report %.3f s (%.3f-%.3f; goal %s), "
                                "load_checkpoint %.3f s" % (
                                    conv["median_s"], conv["min_s"], conv["max_s"],
                                    conv.get("goal") or "-", load["median_s"]),
                                convert_s=conv["median_s"], convert_spread_s=[
                                    conv["min_s"], conv["max_s"]],
                                load_checkpoint_s=load["median_s"]))
            if "top1_agreement" in r:
                out.append(_fig(suite, r["workload"], "validate: top-1 agreement, float16 vs "
                                "float32", r["top1_agreement"], "share",
                                absolute="max rel error %.2g; %.2f s (%.2f-%.2f) for %s" % (
                                    r["max_rel_error"], r["median_s"], r["min_s"], r["max_s"],
                                    r["figure"].split(", ", 1)[-1]),
                                max_rel_error=r["max_rel_error"]))
    elif suite == "op_survey":
        ops = raw["ops"]
        by_class = {}
        for row in ops:
            by_class.setdefault(row["cls"], []).append(row["key"])
        out.append(_fig(suite, "%d op variants in the tutorials and gluoncv models" % len(ops),
                        "ops without a CPU float16 kernel / ops slower than %.0fx in float16"
                        % raw["slow_ratio"], "%d / %d" % (len(by_class.get("missing", [])),
                                                          len(by_class.get("slow", []))),
                        "count", absolute="missing: %s; slow: %s" % (
                            ", ".join(by_class.get("missing", [])),
                            ", ".join(by_class.get("slow", [])))))
        for row in ops:
            if row["cls"] == "slow" and row.get("ratio"):
                scaled = row.get("scaled") or row
                out.append(_fig(suite, row["key"], "float16 / float32 op time (fwd+bwd)",
                                scaled["ratio"], "x", absolute="%.2f ms vs %.2f ms" % (
                                    scaled["f16_ms"], scaled["f32_ms"]),
                                forward_ratio=scaled.get("fwd_ratio")))
    elif suite in ("zoo", "bfloat16", "bfloat16_ops", "graph_cost"):
        out.extend(raw)  # these scripts write the common records themselves
    elif suite == "onnx_zoo":
        for r in raw["rows"]:
            if "size_ratio" not in r:
                out.append(_fig(suite, r["model"], "float16 ONNX export", None, "",
                                absolute=r["status"] + ": " + str(r.get("error", ""))))
                continue
            out.append(_fig(suite, r["model"], "float16 ONNX file / float32 ONNX file",
                            r["size_ratio"], "x", absolute="%s, error %.3g (%s)" % (
                                r["status"], r["error"], r["rule"])))
            out.append(_fig(suite, r["model"], "onnxruntime CPU time, float16 / float32",
                            r["ort_cpu_fp16_over_fp32_time"], "x",
                            absolute="median of 5 alternated runs; not a speed-up"))
    elif suite == "memory":
        for r in raw:
            out.append(_fig(suite, r["workload"], "AMP bytes / float32 bytes", r["amp_ratio"],
                            "x", absolute="%.1f MB vs %.1f MB" % (r["amp_bytes"] / 1e6,
                                                                  r["float32_bytes"] / 1e6)))
            out.append(_fig(suite, r["workload"], "cast('float16')+MP bytes / float32 bytes",
                            r["float16_ratio"], "x", absolute="%.1f MB vs %.1f MB" % (
                                r["float16_bytes"] / 1e6, r["float32_bytes"] / 1e6)))
    elif suite == "notebooks":
        for r in raw:
            out.append(_fig(suite, r["workload"], r["figure"], r["ratio_median"], "x",
                            r["ratio_min"], r["ratio_max"],
                            "suite %.1f s; reference %.2f ms/step (%.2f-%.2f)" % (
                                r["suite_s"], 1e3 * r["reference_s_per_step"],
                                1e3 * r["reference_s_per_step_min"],
                                1e3 * r["reference_s_per_step_max"]),
                            per_notebook_s=r["per_notebook_s"],
                            per_notebook_ratio=r["per_notebook_ratio"], failed=r["failed"]))
    elif suite == "gpu_throughput":
        for r in raw:
            if r.get("skipped"):
                out.append(_fig(suite, "resnet50_v1, batch 64 and 128", "GPU training "
                                "throughput", None, "images/s", absolute=r["reason"],
                                skipped=True, tested=False))
            else:
                out.append(_fig(suite, r["workload"], "speed-up over float32 (images/s)",
                                r["ratio_median"], "x", r["ratio_min"], r["ratio_max"],
                                "%.1f images/s, peak %s MiB" % (r["images_per_s"],
                                                                r["peak_gpu_memory_mib"]),
                                images_per_s=r["images_per_s"], tested=False,
                                peak_gpu_memory_mib=r["peak_gpu_memory_mib"]))
    return out


# ----------------------------------------------------------------------------- running
def run_suite(name, script, args, out):
    """Run one script with ``--json`` (op_survey: ``--out``); return (rc, raw JSON, seconds).

    The suites of ``_record.SIDE_FILES`` keep their full table beside ``out``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "out.json")
        if name == "op_survey":
            target = _record.side_file(out, name)
            args = args + ["--out", target]
        elif name == "onnx_zoo":  # the source of docs/onnx.md's table, once recorded
            target = _record.side_file(out, name)
            args = args + ["--json", target]
        else:
            args = args + ["--json", target]
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.join(HERE, script)] + args, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=ROOT, MPLBACKEND="Agg"))
        seconds = time.perf_counter() - start
        raw = None
        if os.path.exists(target):
            with open(target) as handle:
                raw = json.load(handle)
    return proc.returncode, raw, seconds


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.3g" % value if abs(value) < 100 else "%.0f" % value
    return str(value)


def table(results):
    """The summary table, as text."""
    rows = [("suite", "workload", "figure", "value", "spread", "absolute / note")]
    for f in results["figures"]:
        spread = "" if not f["spread"] else "%s-%s" % (_fmt(f["spread"][0]), _fmt(f["spread"][1]))
        value = _fmt(f["value"]) + ("" if f["value"] is None or f["unit"] == "count"
                                    else " " + f["unit"])
        note = f["absolute"] if len(f["absolute"]) < 70 else f["absolute"][:67] + "..."
        rows.append((f["suite"], f["workload"][:40], f["figure"][:46], value, spread, note))
    for name, s in results["suites"].items():
        if s["status"] != "ok":
            rows.append((name, "", "FAILED (exit %s)" % s["returncode"], "", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5])
        if k == 0:
            lines.append("-" * (sum(widths) + 2 * len(widths) + 15))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    names = [s[0] for s in SUITES]
    parser.add_argument("--only", nargs="+", choices=names, help="run just these")
    parser.add_argument("--skip", nargs="+", choices=names, default=[], help="leave these out")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--out", default=None,
                        help="where to write the results (default: %s)"
                        % os.path.relpath(_record.default_out(), ROOT))
    parser.add_argument("--record", nargs="*", metavar="RUN",
                        help="run nothing; merge these results files (default: the last run's) "
                             "into benchmarks/recorded/")
    args = parser.parse_args(argv)
    if args.record is not None:
        return record(args.record or [args.out or _record.default_out()])
    args.out = os.path.abspath(args.out or _record.default_out())
    os.makedirs(os.path.dirname(args.out), exist_ok=True)

    start = time.perf_counter()
    machine, versions = machine_and_versions()
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/run_all.py " + " ".join(argv if argv is not None
                                                               else sys.argv[1:]),
        "quick": args.quick,
        "machine": machine,
        "versions": versions,
        "method": "Each figure is a ratio of two measurements taken side by side in the same "
                  "run (several repetitions: median, spread = min-max), because these machines "
                  "are noisy; absolute times are given only next to their ratio. CPU float16 "
                  "runs under mxmixed's emulation: float16 numerics, not float16 speed.",
        "suites": {},
        "figures": [],
    }
    for name, script, full, quick, what in SUITES:
        if (args.only and name not in args.only) or name in args.skip:
            continue
        print("\n== %s (benchmarks/%s): %s" % (name, script, what), flush=True)
        rc, raw, seconds = run_suite(name, script, quick if args.quick else full, args.out)
        entry = {"script": "benchmarks/" + script, "what": what, "how": HOW[name],
                 "arguments": quick if args.quick else full, "wall_s": round(seconds, 1),
                 "returncode": rc, "status": "ok" if rc == 0 and raw is not None else "failed"}
        if raw is not None:
            try:
                results["figures"] += figures(name, raw)
            except (KeyError, TypeError, ValueError) as err:
                entry["status"] = "failed"
                entry["error"] = "could not read its results: %r" % (err,)
            entry["raw"] = raw if name != "op_survey" else "see " + _record.side_file(args.out, name)
        results["suites"][name] = entry
    results["wall_s"] = round(time.perf_counter() - start, 1)
    # gpu_fidelity.py is a two-machine harness (cases on a CPU, PyTorch on a GPU), run by hand;
    # gluonnlp_scripts.py and gluonnlp_lm_scripts.py need GluonNLP's scripts, fetched by a
    # person (docs/run.md); gluonnlp_lm.py measures the figures of docs/gluon.md's LSTM section
    # (minutes of runs); gluonnlp_families.py gives docs/symbolic.md's per-family conversion
    # table (every GluonNLP family through three formats: minutes), which
    # tests/symbolic/test_gluonnlp_families.py checks family by family
    known = {s[1] for s in SUITES} | {os.path.basename(__file__), "gpu_fidelity.py",
                                      "gluonnlp_scripts.py", "gluonnlp_lm_scripts.py",
                                      "gluonnlp_lm.py", "gluonnlp_families.py"}
    results["not_run"] = sorted(f for f in os.listdir(HERE) if f.endswith(".py")
                                and not f.startswith("_") and f not in known)

    _record.write_json(args.out, results)
    print("\nmxmixed benchmarks, %s; %s, %d cores; mxnet %s (%s build); %.0f s in all"
          % (results["date"], machine["cpu"], machine["cores"] or 0, versions.get("mxnet"),
             machine.get("mxnet_build"), results["wall_s"]))
    print(table(results))
    print("\nwrote %s (not tracked; `make bench-record` records it for the docs)"
          % os.path.relpath(args.out, ROOT))
    if results["not_run"]:
        print("NOTE: benchmarks/%s not run: add them to SUITES in benchmarks/run_all.py"
              % ", ".join(results["not_run"]), file=sys.stderr)
    failed = [n for n, s in results["suites"].items() if s["status"] != "ok"]
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):  # a benchmark wrote over it (as root)
        failed.append("%s is no longer a character device" % os.devnull)
    if failed:
        print("FAILED: %s" % ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def record(paths):
    """``--record``: merge the runs at ``paths`` into benchmarks/recorded/; exit status."""
    try:
        target, removed, sides = _record.record(paths)
    except _record.RecordError as err:
        print("run_all.py --record: %s" % err, file=sys.stderr)
        return 2
    rel = lambda p: os.path.relpath(p, ROOT)  # noqa: E731
    print("recorded %s into %s%s%s; commit it: git add -A benchmarks/" % (
        ", ".join(paths), rel(target),
        "; replaces " + ", ".join(map(rel, removed)) if removed else "",
        "; copied " + ", ".join(map(rel, sides)) if sides else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
