"""Where the emulated AMP step spends its operator time, per op category (``mx.profiler``).

For each workload of ``benchmarks/emulation.py`` (digits CNN, cifar_resnet20_v1),
``benchmarks/ssd_step.py`` (SSD mobilenet0.25) and ``benchmarks/bert_step.py`` (gluonnlp's BERT
classifier, both sizes: ``bert``, ``bert_4x512``), a fresh process profiles a few emulated AMP
training steps (bulk execution off, so that every operator is named) and splits the operator
time into:

- casts: ``amp_cast``, ``Cast``, ``amp_multicast`` and their backward ops;
- the float32 carry's rounding op (``_mxmixed_round16`` and its backward), when present;
- emulated ops: the ops of :data:`mxmixed.emulation.EMULATED_OPS` (and their backward), with
  the rounding library's computes of them (gelu, the bias add);
- oneDNN reorders: operators named ``*reorder*`` (MXNet 1.9.1 runs most layout reorders inside
  the op that needs them, so they show up in that op's time, not here);
- the overflow check (``_mxmixed_nonfinite``; ``multi_sum_sq`` and ``multi_all_finite``
  without the extension library);
- everything else.

The same workload's float32 step is profiled too, for the floor the emulation can reach: the
float32 operator time plus one rounding pass per float16 tensor (the rounding op's own time).
The last column says how far the emulated step's operator time is above that floor.

It says nothing about GPU speed. The profiler writes only into a temporary directory.

Usage: ``python benchmarks/emulation_profile.py [--steps N] [--repeats N] [--workloads NAME ...]
[--json PATH]``
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORKLOADS = ("digits_cnn", "cifar_resnet20_v1", "ssd", "bert", "bert_4x512")
_ROW = re.compile(r"^\s*(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
CASTS = {"amp_cast", "amp_multicast", "Cast"}
ROUND = {"_mxmixed_round16"}
CHECK = {"multi_all_finite", "all_finite", "multi_sum_sq", "_mxmixed_nonfinite"}
LIBRARY_COMPUTES = {"_mxmixed_act16", "_mxmixed_bias_add"}


def category(op, emulated):
    """The category of one profiler operator name."""
    base = op[len("_backward_"):] if op.startswith("_backward_") else op
    if base in CASTS:
        return "casts"
    if base in ROUND or base.startswith("_mxmixed_round16"):
        return "rounding"
    if "reorder" in op.lower():
        return "reorders"
    if base in CHECK:
        return "overflow check"
    if (base in emulated or base in LIBRARY_COMPUTES
            or base.lstrip("_").replace("mkldnn_", "") in emulated):
        return "emulated ops"
    return "other"


def profile(workload, steps, amp_on=True):
    """Profile ``steps`` emulated AMP steps (float32 ones without ``amp_on``) of one workload
    in this process."""
    import mxnet as mx
    from mxmixed.emulation import EMULATED_OPS

    namespace = {}
    if workload.startswith("bert"):
        import bert_step
        exec(bert_step.SETUP, namespace)  # noqa: S102 - our own setup code
        options = bert_step.SIZES[workload != "bert"][1]
        step = namespace["setup"](amp_on, **options)
    elif workload == "ssd":
        import ssd_step
        exec(ssd_step.SETUP, namespace)  # noqa: S102 - our own setup code
        step = namespace["setup"](amp_on=amp_on)
    else:
        import emulation as bench
        exec(bench.SETUP, namespace)  # noqa: S102 - our own setup code
        step = namespace["setup"](workload, amp_on=amp_on)
    for _ in range(3):
        step()
    mx.nd.waitall()
    with tempfile.TemporaryDirectory() as tmp:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True, continuous_dump=False,
                               filename=os.path.join(tmp, "profile.json"))
        mx.profiler.set_state("run")
        for _ in range(steps):
            step()
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        text = mx.profiler.dumps(reset=True)
    ops, calls, section = {}, {}, None
    for line in text.splitlines():
        match = _ROW.match(line)
        if match is None:
            if line.strip() and not line.startswith(("Name", "----", " ", "\t", "=")):
                section = line.strip()
            continue
        if section == "operator" and match.group(1) not in ("WaitForVar", "DeleteVariable"):
            ops[match.group(1)] = ops.get(match.group(1), 0.0) + float(match.group(3))
            calls[match.group(1)] = calls.get(match.group(1), 0) + int(match.group(2))
    total = sum(ops.values()) or 1.0
    shares, counts = {}, {}
    for op, ms in ops.items():
        key = category(op, EMULATED_OPS)
        shares[key] = shares.get(key, 0.0) + ms / total
        counts[key] = counts.get(key, 0) + calls[op] / steps
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:20]
    return {"workload": workload, "op_ms_per_step": total / steps, "shares": shares,
            "calls_per_step": counts,
            "top_ops": [{"op": k, "ms_per_step": v / steps, "share": v / total} for k, v in top]}


def _profile_in_child(workload, mode, steps, env):
    """One profile in a fresh process: its result dict, or ``{"error": stderr}``."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", workload,
                           "--steps", str(steps), "--mode", mode],
                          capture_output=True, text=True, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"error": proc.stderr[-2000:]}
    return json.loads(lines[-1][len("RESULT "):])


def run(steps=5, root=None, workloads=WORKLOADS, repeats=1):
    """Profile ``workloads``, each in a fresh process (AMP cannot be undone); ``root`` is
    the mxmixed tree to import (this one by default), to profile another version. With
    ``repeats``, the emulated and float32 profiles alternate that many times and the one with
    the median operator time of each is kept (a loaded machine's noise)."""
    results = []
    env = dict(os.environ, PYTHONPATH=root or os.path.dirname(HERE),
               MXNET_EXEC_BULK_EXEC_TRAIN="0", MXNET_EXEC_BULK_EXEC_INFERENCE="0")
    for workload in workloads:
        runs = {"amp": [], "float32": []}
        load = os.getloadavg()[0]
        for _ in range(repeats):
            for mode in runs:
                runs[mode].append(_profile_in_child(workload, mode, steps, env))
        errors = [r["error"] for rs in runs.values() for r in rs if "error" in r]
        if errors:
            results.append({"workload": workload, "error": errors[0]})
            continue
        found = {mode: sorted(rs, key=lambda r: r["op_ms_per_step"])[(len(rs) - 1) // 2]
                 for mode, rs in runs.items()}
        result = found["amp"]
        floor = (found["float32"]["op_ms_per_step"]
                 + result["op_ms_per_step"] * result["shares"].get("rounding", 0.0))
        result.update(float32_op_ms_per_step=found["float32"]["op_ms_per_step"],
                      float32_top_ops=found["float32"]["top_ops"],
                      floor_op_ms_per_step=floor,
                      above_floor=result["op_ms_per_step"] / floor,
                      repeats=repeats, load_average=[load, os.getloadavg()[0]])
        results.append(result)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--root", help="the mxmixed tree to profile (default: this one)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=1,
                        help="alternate the two profiles this many times; keep the medians")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("amp", "float32"), default="amp",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(profile(args.one, args.steps, args.mode == "amp")))
        return 0
    results = run(args.steps, args.root, args.workloads, args.repeats)
    cats = ("casts", "rounding", "emulated ops", "reorders", "overflow check", "other")
    print("Operator time of the emulated AMP step, shares per category (mx.profiler)")
    print("%-18s %9s " % ("workload", "op ms") + " ".join("%14s" % c for c in cats))
    for r in results:
        if "error" in r:
            print("%-18s error: %s" % (r["workload"], r["error"].splitlines()[-1:]))
            continue
        print("%-18s %9.1f " % (r["workload"], r["op_ms_per_step"])
              + " ".join("%13.1f%%" % (100 * r["shares"].get(c, 0.0)) for c in cats))
        print("    float32 step %.1f ms; floor (float32 + rounding) %.1f ms; emulated step "
              "%.2fx the floor; load average %.1f-%.1f" % (
                  r["float32_op_ms_per_step"], r["floor_op_ms_per_step"], r["above_floor"],
                  *r["load_average"]))
        print("    calls per step: " + ", ".join(
            "%s %d" % (c, r["calls_per_step"].get(c, 0)) for c in cats if c in r["calls_per_step"]))
        print("    top: " + ", ".join("%s %.0f%%" % (t["op"], 100 * t["share"])
                                      for t in r["top_ops"][:6]))
        print("    float32 top: " + ", ".join("%s %.0f%%" % (t["op"], 100 * t["share"])
                                              for t in r["float32_top_ops"][:6]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
