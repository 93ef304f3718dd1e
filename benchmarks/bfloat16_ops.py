"""bfloat16 against float32, op by op, for the ops mxmixed's bfloat16 AMP lets run in bfloat16
on a CPU without a bfloat16 list of its own deciding it.

MXNet 1.9.1's bfloat16 AMP runs two ops in bfloat16 by name (``BF16_FUNCS``: Convolution,
FullyConnected). The others that can run in bfloat16 take their inputs' dtype: the ops of
``BF16_FP32_FUNCS`` (clip, BatchNorm, Pooling, relu, ...), those of ``WIDEST_TYPE_CASTS`` when
every input is bfloat16 (elementwise arithmetic, ``broadcast_*``, ``add_n``, ``stack``, ...),
and the variants of the conditional ops not kept float32 (``Activation`` relu, ``LeakyReLU``
leaky, ...). mxmixed keeps float32 the ops without a CPU bfloat16 kernel
(``NO_BFLOAT16_CPU_OPS``, ``NO_BFLOAT16_CPU_VARIANTS``) and those in none of the lists
(``training._unlisted``), so they are not surveyed; nor are the sparse, random-density, DGL
and detection ops of ``WIDEST_TYPE_CASTS`` (no layer of a dense model: each is named in the
output as not surveyed).

For each op, on a convolution-like activation (8x64x56x56) and an NLP-like one (8x128x512):

* the time of forward + backward (``autograd``, a head gradient of the output's dtype; the
  forward alone for an op without a gradient), float32 against bfloat16 inputs, timed in
  alternating blocks per round after a warm-up; ratio bfloat16 time / float32 time per round
  (above 1: bfloat16 is slower), median and min-max over the rounds;
* which kernel ran in bfloat16, forward and backward: oneDNN's (its primitive and
  implementation, e.g. ``eltwise jit:avx512_core_bf16``) or MXNet's generic (mshadow) one,
  read from oneDNN's verbose log of one call in a child process (``DNNL_VERBOSE=1``). A generic
  kernel computes bfloat16 element by element with a conversion per element; an AMX CPU does
  not change it (AMX serves oneDNN's matrix products).

The ops measured slower in bfloat16 on a generic kernel are the evidence of
``mxmixed._core.convert.SLOW_BFLOAT16_CPU_OPS``, which mxmixed's bfloat16 AMP keeps float32:
the script prints whether the list and this run agree (an op of the list measured no slower,
or a generic op slower than ``--slow`` on both shapes and not in the list) and exits 1 on a
disagreement, so that ``make bench`` fails.

Usage: ``python benchmarks/bfloat16_ops.py [--quick] [--ops NAME ...] [--json PATH]``
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

SHAPES = {"conv 8x64x56x56": (8, 64, 56, 56), "NLP 8x128x512": (8, 128, 512)}
SLOW = 1.10  # bfloat16 / float32 time above which a generic kernel counts as slower
MARK = "@@bfloat16_ops@@"
HOW = ("each op alone, imperative, autograd forward + backward (forward alone without a "
       "gradient); float32 and bfloat16 inputs timed in alternating blocks per round after a "
       "warm-up; ratio bfloat16/float32 per round; median and min-max over the rounds; the "
       "kernel from oneDNN's verbose log of one bfloat16 call (DNNL_VERBOSE=1, child process)")

# Each surveyed op: name -> (inputs, attributes). Inputs: "x" an activation, "y" a second one,
# "c" a per-channel broadcast (1, C, 1, ...), "m" a 0/1 mask, "g"/"b" float32 per-channel
# params, "mean"/"var" float32 statistics. A name "op:variant" is the op with one attribute.
_ELEMWISE = ("elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "_maximum",
             "_minimum", "_mod", "_equal", "_not_equal", "_greater", "_greater_equal",
             "_lesser", "_lesser_equal", "_logical_and", "_logical_or", "_logical_xor")
_BROADCAST = ("broadcast_add", "broadcast_sub", "broadcast_div",
              "broadcast_maximum", "broadcast_minimum", "broadcast_mod", "broadcast_equal",
              "broadcast_not_equal", "broadcast_greater", "broadcast_greater_equal",
              "broadcast_lesser", "broadcast_lesser_equal", "broadcast_logical_and",
              "broadcast_logical_or", "broadcast_logical_xor")
OPS = {
    "clip": ("x", {"a_min": 0.0, "a_max": 6.0}),
    "relu": ("x", {}), "abs": ("x", {}), "sqrt": ("p", {}), "square": ("x", {}),
    "tanh": ("x", {}), "shuffle": ("x", {}),
    "Activation:relu": ("x", {"act_type": "relu"}),
    "Activation:sigmoid": ("x", {"act_type": "sigmoid"}),
    "Activation:tanh": ("x", {"act_type": "tanh"}),
    "LeakyReLU:leaky": ("x", {"act_type": "leaky", "slope": 0.1}),
    "LeakyReLU:gelu": ("x", {"act_type": "gelu"}),
    "BatchNorm": ("x g b mean var", {"fix_gamma": False}),
    "_contrib_BatchNormWithReLU": ("x g b mean var", {"fix_gamma": False}),
    "LRN": ("x", {"nsize": 5}),
    "Pooling:max": ("x", {"pool_type": "max", "kernel": 3, "stride": 2, "pad": 1}),
    "Pooling:avg": ("x", {"pool_type": "avg", "kernel": 3, "stride": 2, "pad": 1}),
    "Concat": ("x y", {"dim": 1}),
    "stack": ("x y", {"axis": 0}),
    "add_n": ("x y x", {}),
    "where": ("m x y", {}),
}
OPS.update({name: ("x y", {}) for name in _ELEMWISE})
OPS.update({name: ("x c", {}) for name in _BROADCAST})
# 4-d only: LRN, and BatchNormWithReLU ("only supports MKL-DNN Backend", which is 4-d)
FOUR_D_ONLY = ("LRN", "_contrib_BatchNormWithReLU")
# the ops of AMP's lists left out of the survey, and why
NOT_SURVEYED = (("_sparse", "sparse storage"), ("random_pdf", "a density, no layer"),
                ("_random_pdf", "a density, no layer"), ("_contrib_dgl", "graph sampling"),
                ("_contrib_edge_id", "graph sampling"),
                ("_contrib_Multi", "detection (float32 in a conversion)"),
                ("_contrib_Proposal", "detection"), ("_contrib_MultiProposal", "detection"),
                ("_contrib_PSROIPooling", "detection"), ("_scatter_elemwise_div", "sparse"))


def coverage():
    """The ops AMP's bfloat16 lists let run in bfloat16 by their inputs, each as surveyed (the
    survey's name), kept float32 by mxmixed, or not surveyed (why); aliases are one op."""
    from mxnet.contrib.amp.lists import symbol_bf16 as lists

    from mxmixed._core.convert import NO_BFLOAT16_CPU_OPS, op_names

    surveyed = {alias: op for op in {key.split(":")[0] for key in OPS}
                for alias in op_names((op,))}
    out = {}
    names = list(lists.BF16_FP32_FUNCS) + list(lists.WIDEST_TYPE_CASTS) + [
        entry[0] for entry in lists.CONDITIONAL_FP32_FUNCS] + ["Pooling"]
    for name in names:
        found = surveyed.get(name) or surveyed.get("_contrib_" + name)
        if found:
            out[name] = "surveyed as %s" % found
        elif name in NO_BFLOAT16_CPU_OPS:
            out[name] = "float32 (NO_BFLOAT16_CPU_OPS: no CPU bfloat16 kernel)"
        else:
            why = [w for prefix, w in NOT_SURVEYED if name.startswith(prefix)]
            out[name] = "not surveyed: %s" % (why[0] if why else "not a dense layer op")
    return out


def _function(name):
    import mxnet as mx

    op = name.split(":")[0]
    for module, bare in ((mx.nd, op), (mx.nd._internal, op),
                         (mx.nd.contrib, op.replace("_contrib_", "", 1))):
        if hasattr(module, bare):
            return getattr(module, bare)
    raise KeyError(op)


def _inputs(spec, shape, dtype, rng):
    """The op's arrays: activations in ``dtype``, params and statistics in float32."""
    import mxnet as mx
    import numpy as np

    from mxmixed._core.dtypes import BFLOAT16

    channels = shape[1]
    side = (1, channels) + (1,) * (len(shape) - 2)
    made = {"x": lambda: rng.standard_normal(shape), "y": lambda: rng.standard_normal(shape) + 3,
            "p": lambda: rng.uniform(0.1, 4, shape), "c": lambda: rng.uniform(1, 2, side),
            "m": lambda: rng.randint(0, 2, shape)}
    params = {"g": np.ones, "b": np.zeros, "mean": np.zeros, "var": np.ones}
    arrays = []
    for key in spec.split():
        if key in params:
            arrays.append(mx.nd.array(params[key]((channels,))))
            continue
        array = mx.nd.array(made[key]())
        if dtype != "float32":
            array = mx.nd.amp_cast(array, dtype=BFLOAT16)
        if key != "m":
            array.attach_grad()
        arrays.append(array)
    return arrays


def _call(name, arrays, attrs, backward):
    """One forward (+ backward) of the op, synchronised; returns whether it had a backward."""
    import mxnet as mx
    from mxnet import autograd

    fun = _function(name)
    if not backward:
        out = fun(*arrays, **attrs)
        mx.nd.waitall()
        return False
    with autograd.record():
        out = fun(*arrays, **attrs)
    out = out[0] if isinstance(out, (list, tuple)) else out
    out.backward(mx.nd.ones_like(out))
    mx.nd.waitall()
    return True


def _runner(name, shape, dtype, rng):
    """A callable timing one call, and whether it includes a backward."""
    from mxnet.base import MXNetError

    spec, attrs = OPS[name]
    # a window per spatial axis (Pooling over the NLP shape is 1-d)
    attrs = {k: ((v,) * (len(shape) - 2) if k in ("kernel", "stride", "pad") else v)
             for k, v in attrs.items()}
    arrays = _inputs(spec, shape, dtype, rng)
    try:
        _call(name, arrays, attrs, True)
        backward = True
    except MXNetError:  # no gradient (shuffle): the forward alone
        backward = False
        _call(name, arrays, attrs, False)
    return (lambda: _call(name, arrays, attrs, backward)), backward


def measure(name, shape, rounds):
    """bfloat16 / float32 time of one op on one shape: median, min, max, and the times."""
    import numpy as np

    rng = np.random.RandomState(0)
    f32, back32 = _runner(name, shape, "float32", rng)
    b16, back16 = _runner(name, shape, "bfloat16", rng)
    for fun in (f32, b16, f32, b16):
        fun()
    start = time.perf_counter()
    f32()
    block = max(1, min(50, int(0.05 / max(time.perf_counter() - start, 1e-6))))
    ratios, t32, t16 = [], [], []
    for _ in range(rounds):
        for fun, spent in ((f32, t32), (b16, t16)):
            start = time.perf_counter()
            for _ in range(block):
                fun()
            spent.append((time.perf_counter() - start) / block)
        ratios.append(t16[-1] / t32[-1])
    return {"ratio": statistics.median(ratios), "spread": [min(ratios), max(ratios)],
            "float32_ms": 1e3 * statistics.median(t32),
            "bfloat16_ms": 1e3 * statistics.median(t16),
            "backward": back32 and back16}


def kernels_child(names):
    """In a process started with DNNL_VERBOSE=1: one bfloat16 forward and backward per op and
    shape, oneDNN's log of each printed between marks (``read_kernels`` reads it)."""
    import numpy as np

    libc = ctypes.CDLL(None)

    def mark(text):
        libc.fflush(None)
        print(MARK + text, flush=True)

    for name in names:
        for label, shape in SHAPES.items():
            if name in FOUR_D_ONLY and len(shape) != 4:
                continue
            fun, _ = _runner(name, shape, "bfloat16", np.random.RandomState(0))
            mark("start %s|%s" % (name, label))
            fun()
            mark("end")
    libc.fflush(None)


def read_kernels(log):
    """{op: {shape: [oneDNN primitives other than reorders]}} from a verbose child's log."""
    found, current = {}, None
    for line in log.splitlines():
        if line.startswith(MARK + "start "):
            name, label = line[len(MARK) + 6:].split("|")
            current = found.setdefault(name, {}).setdefault(label, [])
        elif line.startswith(MARK + "end"):
            current = None
        elif current is not None and line.startswith(("dnnl_verbose,exec", "mkldnn_verbose,exec")):
            parts = line.split(",")
            kind, impl, prop = parts[3], parts[4], parts[5]
            if kind != "reorder":
                entry = "%s %s %s" % (kind, prop, impl)
                if entry not in current:
                    current.append(entry)
    return found


def kernels(names):
    """Which bfloat16 kernels each op runs, from a child process with oneDNN's verbose log."""
    env = dict(os.environ, DNNL_VERBOSE="1", MKLDNN_VERBOSE="1",
               PYTHONPATH=os.path.dirname(HERE))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--kernels-child"]
                          + list(names), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError("the verbose child failed: %s" % proc.stderr.strip()[-500:])
    return read_kernels(proc.stdout)


def kernel_name(primitives):
    """'oneDNN: <primitives>' or 'generic (MXNet)'."""
    return ("oneDNN: " + "; ".join(primitives)) if primitives else "generic (MXNet)"


def survey(names, rounds):
    """Rows of the survey, one per op and shape."""
    found = kernels(names)
    rows = []
    for name in names:
        for label, shape in SHAPES.items():
            if name in FOUR_D_ONLY and len(shape) != 4:
                continue
            row = {"op": name, "shape": label}
            row.update(measure(name, shape, rounds))
            primitives = found.get(name, {}).get(label, [])
            row["onednn"] = bool(primitives)
            row["kernel"] = kernel_name(primitives)
            rows.append(row)
            print("%-28s %-16s %6.2fx (%.2f-%.2f)  f32 %7.2f ms  bf16 %7.2f ms  %s%s" % (
                name, label, row["ratio"], row["spread"][0], row["spread"][1],
                row["float32_ms"], row["bfloat16_ms"], row["kernel"],
                "" if row["backward"] else "  [forward only]"), flush=True)
    return rows


def check_list(rows, slow):
    """Disagreements between the measured rows and ``SLOW_BFLOAT16_CPU_OPS``."""
    from mxmixed._core.convert import SLOW_BFLOAT16_CPU_OPS

    listed = set(SLOW_BFLOAT16_CPU_OPS)
    by_op = {}
    for row in rows:
        by_op.setdefault(row["op"], []).append(row)
    problems = []
    for op, measured in by_op.items():
        generic_slow = all(not r["onednn"] and r["ratio"] > slow for r in measured)
        if op in listed and not any(r["ratio"] > slow for r in measured):
            problems.append("%s is in SLOW_BFLOAT16_CPU_OPS but measured no slower than %.2fx "
                            "in bfloat16 on any shape" % (op, slow))
        if generic_slow and op not in listed:
            problems.append("%s runs a generic bfloat16 kernel measured slower than %.2fx on "
                            "every shape, and is not in SLOW_BFLOAT16_CPU_OPS" % (op, slow))
    return problems


def records(rows, problems, cover):
    """The common records of ``make bench`` (``run_all.py`` reads them as they are)."""
    out = []
    for row in rows:
        out.append({"suite": "bfloat16_ops", "workload": "%s, %s" % (row["op"], row["shape"]),
                    "figure": "bfloat16 / float32 op time (%s)" % (
                        "fwd+bwd" if row["backward"] else "forward"),
                    "value": row["ratio"], "unit": "x", "spread": row["spread"],
                    "absolute": "float32 %.2f ms, bfloat16 %.2f ms; %s" % (
                        row["float32_ms"], row["bfloat16_ms"], row["kernel"]),
                    "how": HOW, "onednn": row["onednn"]})
    out.append({"suite": "bfloat16_ops", "workload": "SLOW_BFLOAT16_CPU_OPS",
                "figure": "disagreements with this run", "value": len(problems), "unit": "count",
                "spread": None, "absolute": "; ".join(problems) or "none", "how": HOW,
                "coverage": cover})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, for a smoke run")
    parser.add_argument("--ops", nargs="+", choices=sorted(OPS), help="only these ops")
    parser.add_argument("--slow", type=float, default=SLOW,
                        help="bfloat16/float32 time above which an op is slower (%(default)s)")
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--kernels-child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.kernels_child is not None:
        kernels_child(args.kernels_child)
        return 0
    from mxmixed._core.devices import bfloat16_support

    runs, why = bfloat16_support()
    if not runs:
        print("bfloat16 cannot run here: %s" % why)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump([{"suite": "bfloat16_ops", "workload": "all", "figure": "bfloat16",
                            "value": None, "unit": "x", "spread": None, "skipped": True,
                            "absolute": "skipped: " + why, "how": HOW}], handle, indent=2)
        return 0
    cover = coverage()
    for name, what in sorted(cover.items()):
        if not what.startswith("surveyed"):
            print("%-40s %s" % (name, what))
    names = args.ops or sorted(OPS)
    rows = survey(names, 3 if args.quick else 5)
    problems = check_list(rows, args.slow) if not args.ops else []
    for problem in problems:
        print("DISAGREEMENT: " + problem)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(records(rows, problems, cover), handle, indent=2)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
