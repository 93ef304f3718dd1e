"""SSD under ``mxmixed run``: emulated AMP training step / float32 step, and where the time goes.

The workload is gluoncv's ``ssd_300_mobilenet0.25_voc`` (no pretrained weights), hybridized,
batch 2 at 128x128, with gluoncv's ``SSDMultiBoxLoss`` on fixed random targets and one SGD step,
as gluon-cv's ``train_ssd.py --amp`` runs it. Goal for the emulation as a whole: <= 1.35x float32
(issue 36).

Side by side, in persistent worker processes (``_workers.compare``):

- emulated AMP / float32, oneDNN on (MXNet's default CPU build). The emulation checks for
  overflow with its extension library's ``_mxmixed_nonfinite`` (the per-element test of
  MXNet's ``multi_all_finite`` on the exponent bits, one vectorized pass), see
  ``mxmixed/emulation/_overflow.py``;
- emulated AMP with ``MXMIXED_EMULATION_KEEP_LAYOUTS=0`` / float32, oneDNN on: the rounding
  op hands on plain layouts, the route of results recorded before kept layouts became the
  default (BatchNorm's float32 bits differ; see docs/emulation.md);
- emulated AMP / float32, oneDNN off (``MXNET_MKLDNN_ENABLED=0`` in both workers): what
  oneDNN's layout conversions around the emulated float16 ops cost;
- emulated AMP with MXNet's own check (``multi_all_finite`` on every step, as before the
  emulation had its own) / float32. MXNet 1.9.1's CPU ``multi_all_finite`` is 20-100 times
  slower than a pass over the data;
- emulated AMP / the same without any overflow check (``has_overflow`` replaced by ``False``):
  what the emulation's check still costs.

Then, in one process (no cross-process noise), three emulated AMP nets with MXNet's overflow
check, the emulation's check and none, timed in alternating blocks; and one profiled pass
(``mx.profiler``, aggregate statistics) of the emulated AMP step splits the operator time into
casts (``amp_cast``, ``amp_multicast``, ``Cast``), the overflow check, and the rest. It says
nothing about GPU speed: on a CPU the emulation is always slower than float32.

Usage: ``python benchmarks/ssd_step.py [--rounds N] [--steps N] [--json PATH]``
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
from _workers import SETTLE, compare  # noqa: E402

SETUP = SETTLE + r"""
def setup(amp_on, onednn=True, check="emulation", keep_layouts=True, size=128, batch=2):
    import os
    if not onednn:  # read lazily by MXNet, at the first operator call
        os.environ["MXNET_MKLDNN_ENABLED"] = "0"
    if not keep_layouts:  # read when the emulation's rounding op is first loaded
        os.environ["MXMIXED_EMULATION_KEEP_LAYOUTS"] = "0"
    import numpy as np
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluoncv as gcv
    from gluoncv.model_zoo import get_model
    if amp_on:
        from mxnet.contrib import amp
        from mxmixed import emulation
        emulation.enable()
        amp.init()
    mx.random.seed(0)
    rng = np.random.RandomState(0)
    net = get_model("ssd_300_mobilenet0.25_voc", pretrained_base=False,
                    norm_layer=gluon.nn.BatchNorm)
    net.initialize()
    X = mx.nd.random.uniform(shape=(batch, 3, size, size))
    with autograd.train_mode():
        anchors = net(X[:1])[2]
    n = anchors.shape[1]
    cls_t = mx.nd.array(rng.randint(1, 21, (batch, n)) * (rng.uniform(size=(batch, n)) < 0.05))
    box_t = mx.nd.array(rng.normal(0, 0.5, (batch, n, 4)))
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.001, "momentum": 0.9, "wd": 5e-4},
                            update_on_kvstore=False)
    if amp_on:
        amp.init_trainer(trainer)
        scaler = trainer._amp_loss_scaler
        if check == "none":
            scaler.has_overflow = lambda params: False
        elif check == "mxnet":  # MXNet's multi_all_finite on every step
            import types
            from mxmixed.emulation._overflow import REAL_HAS_OVERFLOW
            scaler.has_overflow = types.MethodType(REAL_HAS_OVERFLOW, scaler)
    mbox_loss = gcv.loss.SSDMultiBoxLoss()

    def step():
        with autograd.record():
            cls_pred, box_pred, _ = net(X)
            sum_loss, _, _ = mbox_loss([cls_pred], [box_pred], [cls_t], [box_t])
            if amp_on:
                with amp.scale_loss(sum_loss, trainer) as scaled:
                    autograd.backward(scaled)
            else:
                autograd.backward(sum_loss)
        trainer.step(1)
    if amp_on and check != "none":
        settle(step, trainer)
    return step
"""

WORKLOAD = "SSD mobilenet0.25"  # ssd_300_mobilenet0.25_voc, batch 2, 128x128
COMPARISONS = [
    ("oneDNN on", "emulated AMP step / float32 step (CPU)",
     {"amp_on": False}, {"amp_on": True}, "<= 1.35"),
    ("oneDNN on, KEEP_LAYOUTS=0", "emulated AMP step / float32 step (CPU)",
     {"amp_on": False}, {"amp_on": True, "keep_layouts": False}, None),
    ("oneDNN off", "emulated AMP step / float32 step (CPU)",
     {"amp_on": False, "onednn": False}, {"amp_on": True, "onednn": False}, None),
    ("MXNet's multi_all_finite", "emulated AMP step / float32 step (CPU)",
     {"amp_on": False}, {"amp_on": True, "check": "mxnet"}, None),
    ("oneDNN on", "emulated AMP step / same without an overflow check",
     {"amp_on": True, "check": "none"}, {"amp_on": True}, None),
]

CASTS = ("amp_cast", "amp_multicast", "Cast", "_backward_amp_cast", "_backward_amp_multicast",
         "_backward_Cast")
CHECK = ("multi_all_finite", "all_finite", "multi_sum_sq", "_mxmixed_nonfinite")
_ROW = re.compile(r"^\s*(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def profile(steps=5):
    """Profile ``steps`` emulated AMP steps; return the operator time split (in this process)."""
    import mxnet as mx

    namespace = {}
    exec(SETUP, namespace)  # noqa: S102 - our own setup code, shared with the workers
    step = namespace["setup"](amp_on=True)
    for _ in range(3):
        step()
    mx.nd.waitall()
    # The profiler writes its trace by creating its file anew: given os.devnull, a root process
    # replaced /dev/null with a regular file. Its trace goes to a folder of its own instead.
    with tempfile.TemporaryDirectory(prefix="mxmixed-profile-") as folder:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True, continuous_dump=False,
                               filename=os.path.join(folder, "profile.json"))
        mx.profiler.set_state("run")
        for _ in range(steps):
            step()
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        text = mx.profiler.dumps(reset=True)  # the trace was written at "stop", in the folder
    ops, section = {}, None
    for line in text.splitlines():
        if line.startswith("====="):
            continue
        match = _ROW.match(line)
        if match is None:
            if line.strip() and not line.startswith(("Name", "----", " ", "\t")):
                section = line.strip()
            continue
        if section == "operator" and match.group(1) not in ("WaitForVar", "DeleteVariable"):
            ops[match.group(1)] = ops.get(match.group(1), 0.0) + float(match.group(3))
    total = sum(ops.values()) or 1.0
    casts = sum(v for k, v in ops.items() if k in CASTS)
    check = sum(v for k, v in ops.items() if k in CHECK)
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:8]
    return {"workload": WORKLOAD, "figure": "operator time shares of the emulated AMP step "
            "(mx.profiler)", "steps": steps, "op_ms_per_step": total / steps,
            "cast_share": casts / total, "overflow_check_share": check / total,
            "top_ops": [{"op": k, "ms_per_step": v / steps, "share": v / total} for k, v in top]}


def check_ab(rounds=5, steps=3):
    """In one process, three emulated AMP nets with MXNet's overflow check, the emulation's
    check and none, timed in alternating blocks: ratios to MXNet's check (no cross-process
    noise)."""
    import statistics
    import time

    import mxnet as mx

    namespace = {}
    exec(SETUP, namespace)  # noqa: S102 - our own setup code, shared with the workers
    variants = {"mxnet": namespace["setup"](amp_on=True, check="mxnet"),
                "emulation": namespace["setup"](amp_on=True),
                "none": namespace["setup"](amp_on=True, check="none")}
    for step in variants.values():
        for _ in range(3):
            step()
    mx.nd.waitall()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, step in variants.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            mx.nd.waitall()
            times[name].append((time.perf_counter() - start) / steps)
    out = []
    for name, label in (("emulation", "the emulation's check"),
                        ("none", "no overflow check")):
        ratios = [v / b for v, b in zip(times[name], times["mxnet"])]
        out.append({"workload": "%s (oneDNN on, one process)" % WORKLOAD,
                    "figure": "emulated AMP step, %s / MXNet's check" % label, "goal": None,
                    "baseline_s_per_step": statistics.median(times["mxnet"]),
                    "variant_s_per_step": statistics.median(times[name]),
                    "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                    "ratio_max": max(ratios), "rounds": rounds, "steps_per_round": steps})
    return out


def _in_child(flags, env=None):
    """Run this script with ``flags`` in a fresh process; return its results or an error."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)] + flags,
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE), **(env or {})))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1][len("RESULT "):])
    return [{"workload": WORKLOAD, "figure": " ".join(flags), "error": proc.stderr[-2000:]}]


def run(rounds=5, steps=3):
    """Every comparison, then the profile; return a list of result dicts."""
    results = []
    for label, figure, baseline, variant, goal in COMPARISONS:
        r = compare(SETUP, baseline, variant, rounds=rounds, steps=steps)
        r.update({"workload": "%s (%s)" % (WORKLOAD, label), "figure": figure, "goal": goal})
        results.append(r)
    results += _in_child(["--check-ab-only", "--rounds", str(rounds), "--steps", str(steps)])
    # bulk execution off, so that the profiler names every operator on its own
    results += _in_child(["--profile-only"], {"MXNET_EXEC_BULK_EXEC_TRAIN": "0",
                                            "MXNET_EXEC_BULK_EXEC_INFERENCE": "0"})
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--profile-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--check-ab-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.profile_only:
        print("RESULT " + json.dumps([profile()]))
        return 0
    if args.check_ab_only:
        print("RESULT " + json.dumps(check_ab(args.rounds, args.steps)))
        return 0
    results = run(args.rounds, args.steps)
    print("SSD step under CPU float16 emulation (numerics, not speed)")
    print("%-58s %10s %10s %8s %13s" % ("comparison", "base s", "variant s", "ratio", "spread"))
    for r in results:
        if "ratio_median" in r:
            print("%-58s %10.4f %10.4f %7.2fx %6.2f-%.2fx" % (
                (r["workload"].split("(")[-1].rstrip(")") + ": " + r["figure"])[:58],
                r["baseline_s_per_step"], r["variant_s_per_step"], r["ratio_median"],
                r["ratio_min"], r["ratio_max"]))
        elif "cast_share" in r:
            print("profile of the emulated AMP step: %.0f ms of operator time per step; casts "
                  "%.0f%%, overflow check %.0f%%; top: %s" % (
                      r["op_ms_per_step"], 100 * r["cast_share"],
                      100 * r["overflow_check_share"],
                      ", ".join("%s %.0f%%" % (t["op"], 100 * t["share"]) for t in r["top_ops"])))
        else:
            print("%s failed: %s" % (r["figure"], r.get("error", "")[-300:]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
