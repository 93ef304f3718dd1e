"""Wall time of the tutorial suite: every ``tutorials/*.ipynb`` run top to bottom, as nbval runs it.

Each notebook runs in a fresh ``python3`` kernel (nbclient, working directory ``tutorials/``,
``MPLBACKEND=Agg``); the outputs are discarded, so the notebook files do not change. Absolute
times depend on the machine and its load, so every notebook's time comes with a ratio to a
reference workload timed in the same run: 1000 float32 training steps of the digits CNN
(batch 64, ``benchmarks/emulation.py``'s float32 setup), in a worker process that times a
few blocks of steps before the first notebook and after each one. Each notebook is divided by
the reference measured right before and right after it, which follows the machine's load as
it changes; the suite's ratio is the sum. Its spread uses the slowest and the fastest of
those reference blocks.

The budgets are 3 minutes per notebook and 12 minutes for the suite on the 2-core CI
machine; ``--budget`` and ``--suite-budget`` report (and fail on) notebooks and suites over them.

Usage: ``python benchmarks/notebooks.py [--repeats N] [--timeout S] [--json PATH]
[--budget S] [--suite-budget S]``
"""
import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _workers import Worker  # noqa: E402

REFERENCE_STEPS = 1000  # the ratio's unit: the time of this many reference steps


def reference_setup():
    """Source of the reference workload: the float32 digits CNN step of emulation.py."""
    from emulation import SETUP

    return SETUP, {"model": "digits_cnn", "amp_on": False}


class Reference:
    """A persistent worker that times the reference step on request."""

    def __init__(self, blocks=3, steps=30):
        script, options = reference_setup()
        self.worker = Worker(script, options)
        self.blocks, self.steps = blocks, steps

    def measure(self):
        """Seconds per reference step, one value per block."""
        return [self.worker.time_block(self.steps) for _ in range(self.blocks)]

    def close(self):
        self.worker.close()


def run_notebook(path, timeout=900, log=None):
    """Execute one notebook in a fresh kernel; return (seconds, error or None)."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(path)}})
    start = time.perf_counter()
    error = None
    try:
        client.execute(**({"stderr": log} if log is not None else {}))
    except Exception as err:  # noqa: BLE001 - reported, the suite goes on
        lines = str(err).strip().splitlines() or [""]
        error = "%s: %s" % (type(err).__name__, lines[-1][:200])
    return time.perf_counter() - start, error


def run(repeats=1, timeout=900, pattern=None, echo=print):
    """Time the suite; return one result dict."""
    notebooks = sorted(glob.glob(pattern or os.path.join(ROOT, "tutorials", "*.ipynb")))
    if not notebooks:
        raise RuntimeError("no notebooks found under tutorials/")
    names = [os.path.basename(p) for p in notebooks]
    per_notebook = {n: [] for n in names}
    normalized = {n: [] for n in names}
    errors, suites, ratios, lows, highs, refs = {}, [], [], [], [], []
    reference = Reference()
    try:
        with tempfile.TemporaryFile("w+") as log:
            for _ in range(repeats):
                before = reference.measure()
                refs += before
                ratio = low = high = total = 0.0
                for path, name in zip(notebooks, names):
                    log.seek(0)
                    log.truncate()
                    seconds, error = run_notebook(path, timeout, log)
                    after = reference.measure()
                    refs += after
                    around = before + after
                    unit = REFERENCE_STEPS * statistics.median(around)
                    per_notebook[name].append(seconds)
                    normalized[name].append(seconds / unit)
                    total += seconds
                    ratio += seconds / unit
                    low += seconds / (REFERENCE_STEPS * max(around))
                    high += seconds / (REFERENCE_STEPS * min(around))
                    echo("  %-40s %7.1f s = %5.2f x reference%s" % (
                        name, seconds, seconds / unit, "  FAILED: " + error if error else ""))
                    if error:
                        log.seek(0)
                        errors[name] = error + " | kernel stderr: " + log.read()[-500:]
                    before = after
                suites.append(total)
                ratios.append(ratio)
                lows.append(low)
                highs.append(high)
    finally:
        reference.close()
    return {
        "figure": "tutorial suite wall time / time of %d reference steps" % REFERENCE_STEPS,
        "workload": "%d notebooks: %s" % (len(notebooks), ", ".join(names)),
        "suite_s": statistics.median(suites),
        "suite_runs_s": suites,
        "per_notebook_s": {k: statistics.median(v) for k, v in per_notebook.items()},
        "per_notebook_ratio": {k: statistics.median(v) for k, v in normalized.items()},
        "reference": "float32 digits CNN training step, batch 64 (emulation.py's setup), "
                     "%d blocks of %d steps before the first notebook and after each"
                     % (reference.blocks, reference.steps),
        "reference_s_per_step": statistics.median(refs),
        "reference_s_per_step_min": min(refs),
        "reference_s_per_step_max": max(refs),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(lows),
        "ratio_max": max(highs),
        "repeats": repeats,
        "failed": errors,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs of the whole suite")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds one notebook may take (180 on CI); report those over it")
    parser.add_argument("--suite-budget", type=float, default=None,
                        help="seconds the whole suite may take (720 on CI)")
    args = parser.parse_args(argv)
    r = run(args.repeats, args.timeout)
    print("Tutorial suite: %.1f s (median of %d), reference step %.2f ms -> %.1f x the time of "
          "%d reference steps (spread %.1f-%.1f)" % (
              r["suite_s"], r["repeats"], 1e3 * r["reference_s_per_step"], r["ratio_median"],
              REFERENCE_STEPS, r["ratio_min"], r["ratio_max"]))
    over = over_budget(r, args.budget, args.suite_budget)
    for line in over:
        print("over budget: " + line)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([r], handle, indent=2)
    return 1 if r["failed"] or over else 0


def over_budget(result, budget=None, suite_budget=None):
    """Lines naming each notebook (and the suite) whose median time exceeds its budget."""
    lines = []
    if budget is not None:
        lines += ["%s took %.0f s (budget %.0f s)" % (name, seconds, budget)
                  for name, seconds in sorted(result["per_notebook_s"].items())
                  if seconds > budget]
    if suite_budget is not None and result["suite_s"] > suite_budget:
        lines.append("the suite took %.0f s (budget %.0f s)" % (result["suite_s"], suite_budget))
    return lines


if __name__ == "__main__":
    sys.exit(main())
