"""Side-by-side timing: persistent worker processes timed in alternating blocks.

``amp.init`` cannot be undone in MXNet 1.9.1, so a float32 baseline and an AMP run cannot
share a process. Each variant lives in its own worker; the parent asks them in turn to time a
block of steps, so both see the same machine load, and reports per-round ratios.
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


SETTLE = r'''
def settle(step, trainer):
    """Step until AMP's dynamic loss scale has settled: it starts at 2**16 and halves on each
    overflow, and until then AMP skips the update that a float32 step always does. Setups
    call it so that only settled steps are timed."""
    scaler = trainer._amp_loss_scaler
    for _ in range(60):
        step()
        if scaler._unskipped >= 2:
            return
    raise RuntimeError("the loss scale did not settle in 60 steps")
'''


class Worker:
    """A child process that builds one training setup and times blocks of steps on request.

    Parameters
    ----------
    script : str
        Python source defining ``setup(**options)`` that returns a zero-argument ``step``
        function; it runs in the child.
    options : dict
        JSON-serialisable keyword arguments for ``setup``.
    """

    def __init__(self, script, options):
        code = script + "\n" + _LOOP
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(options)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env, cwd=ROOT)
        self._expect("READY")

    def _expect(self, prefix):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("benchmark worker exited early (see its stderr above)")
            if line.startswith(prefix):
                return line[len(prefix):].strip()

    def time_block(self, steps):
        """Seconds per step over ``steps`` steps (synchronised)."""
        self.proc.stdin.write("%d\n" % steps)
        self.proc.stdin.flush()
        return float(self._expect("TIME"))

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


_LOOP = r"""
import gc, json, sys, time
import mxnet as mx
step = setup(**json.loads(sys.argv[1]))
for _ in range(3):
    step()
mx.nd.waitall()
# The objects the setup left (a model, a rewritten graph) would make Python's first full
# collection (about 0.1 s for the ~170,000 objects of an MXNet + gluoncv process) land in a
# timed block of whichever worker allocated more; collect them now, in every worker alike.
gc.collect()
print("READY", flush=True)
for line in sys.stdin:
    n = int(line)
    start = time.perf_counter()
    for _ in range(n):
        step()
    mx.nd.waitall()
    print("TIME %.6f" % ((time.perf_counter() - start) / n), flush=True)
"""


def compare(script, baseline, variant, rounds=5, steps=5):
    """Time two setups side by side and summarise the per-round ratio variant/baseline.

    Parameters
    ----------
    script : str
        Source of ``setup`` (see :class:`Worker`).
    baseline, variant : dict
        Options of the two workers.
    rounds : int
        Alternating measurement rounds.
    steps : int
        Steps per block.

    Returns
    -------
    dict
        Median seconds per step of each side, the median ratio and its min/max spread.
    """
    a, b = Worker(script, baseline), Worker(script, variant)
    try:
        base_t, var_t = [], []
        for _ in range(rounds):
            base_t.append(a.time_block(steps))
            var_t.append(b.time_block(steps))
    finally:
        a.close()
        b.close()
    ratios = [v / t for v, t in zip(var_t, base_t)]
    return {"baseline_s_per_step": statistics.median(base_t),
            "variant_s_per_step": statistics.median(var_t),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "rounds": rounds, "steps_per_round": steps}


def print_ratios(results, path=None):
    """Print emulated / float32 step results as a table (and write them to ``path``)."""
    print("CPU float16 emulation cost (numerics, not speed): emulated AMP step / float32 step")
    print("%-50s %10s %11s %8s %15s" % ("workload", "float32 s", "emulated s", "ratio", "spread"))
    for r in results:
        if "skipped" in r:
            print("%-50s skipped: %s" % (r["workload"], r["skipped"]))
            continue
        print("%-50s %10.4f %11.4f %7.2fx %7.2f-%.2fx" % (
            r["workload"], r["baseline_s_per_step"], r["variant_s_per_step"], r["ratio_median"],
            r["ratio_min"], r["ratio_max"]))
    if path:
        with open(path, "w") as handle:
            json.dump(results, handle, indent=2)
