"""Time and memory of a conversion as the graph grows: linear time, memory a multiple of the file.

Three workloads, each built here (no download):

* **settling**: a graph of ``n`` Concats that MXNet's bfloat16 pass refuses one per run (each
  of a FullyConnected, bfloat16, and an exp, float32), converted to bfloat16 with
  ``symbolic.convert`` at ``n`` and at ``2n`` in one process, alternated, median of
  ``--rounds``: the figure is time(2n) / time(n), 2 when the settling is linear in the graph
  (one whole-graph run of MXNet's pass per refused node made it 4);
* **relu chain**: a ``-symbol.json`` of ``--nodes`` relu nodes in a chain (a few MB), converted
  by ``mxmixed convert`` in a process of its own, with and without ``--validate``: the figure
  is the process's peak resident memory less that of the same command on a 10-node chain,
  as a multiple of the symbol file's size;
* **MXNet alone**: what a plain ``mxmixed convert`` asks of MXNet, done with MXNet's own calls
  (its checkpoint loader, ``amp.convert_model``, the converted graph's JSON written), measured
  the same way on the same chain: MXNet's share of the conversion's memory;
* **ONNX export**: three 1024x1024 FullyConnected layers (12 MB of params), exported by
  ``mxmixed convert --format onnx``: the same peak memory less that of a 16x16 model, as a
  multiple of the params file's size.

Peak memory is ``ru_maxrss`` of the finished child (``os.wait4``), exact for one run. Linux
counts in it the memory of the process it was forked from (the mark survives ``exec``), so the
child is started by a small Python process of its own: started from this one, whose MXNet runs
made it 320 MB, every command's peak was at least that (the 10-node chains' bases among them).

Usage: ``python benchmarks/graph_cost.py [--nodes N] [--refused N] [--rounds N] [--json PATH]``
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
sys.path.insert(0, ROOT)

def _how():
    """How the figures are measured: run_all.HOW's words, their one home."""
    sys.path.insert(0, HERE)
    import run_all
    return run_all.HOW["graph_cost"]


def _many_refused(n):
    import mxnet as mx

    x = mx.sym.var("data")
    for i in range(n):
        both = mx.sym.concat(mx.sym.FullyConnected(x, num_hidden=4, name="fc%d" % i),
                             mx.sym.exp(x, name="exp%d" % i), dim=1, name="cat%d" % i)
        x = mx.sym.slice_axis(both, axis=1, begin=0, end=4, name="slice%d" % i)
    return x


def settling(n, rounds):
    """Seconds of a bfloat16 conversion at n and 2n refused nodes; ratio per round."""
    import mxnet as mx

    from mxmixed import symbolic

    models = {}
    for size in (n, 2 * n):
        sym = _many_refused(size)
        shapes, _, _ = sym.infer_shape(data=(2, 4))
        models[size] = (sym, {name: mx.nd.ones(shape) for name, shape in
                              zip(sym.list_arguments(), shapes) if name != "data"}, {})
    times = {n: [], 2 * n: []}
    for _ in range(rounds):
        for size in (n, 2 * n):
            start = time.perf_counter()
            symbolic.convert(*models[size], target_dtype="bfloat16")
            times[size].append(time.perf_counter() - start)
    ratios = [b / a for a, b in zip(times[n], times[2 * n])]
    return {"suite": "graph_cost", "workload": "%d and %d Concats refused by MXNet's "
            "bfloat16 pass" % (n, 2 * n), "figure": "bfloat16 conversion time, 2n / n "
            "refused nodes (2: linear)", "value": statistics.median(ratios), "unit": "x",
            "spread": [min(ratios), max(ratios)], "absolute": "%.2f s at n=%d, %.2f s at 2n" % (
                statistics.median(times[n]), n, statistics.median(times[2 * n])),
            "how": _how()}


def _relu_chain(prefix, nodes):
    """A checkpoint of ``nodes`` relus in a chain, written as MXNet writes a symbol file."""
    import mxnet as mx

    first = [{"op": "null", "name": name, "inputs": []} for name in ("data", "fc_weight",
                                                                      "fc_bias")]
    first.append({"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "4"},
                  "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]})
    graph = {"nodes": first + [{"op": "relu", "name": "relu%d" % i, "inputs": [[i + 3, 0, 0]]}
                               for i in range(nodes)],
             "arg_nodes": [0, 1, 2], "node_row_ptr": list(range(nodes + 5)),
             "heads": [[nodes + 3, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}
    with open(prefix + "-symbol.json", "w") as handle:
        json.dump(graph, handle, indent=2)
    mx.nd.save(prefix + "-0000.params", {"arg:fc_weight": mx.nd.ones((4, 4)),
                                         "arg:fc_bias": mx.nd.zeros((4,))})
    return os.path.getsize(prefix + "-symbol.json")


def _dense(prefix, width):
    import mxnet as mx
    from mxnet import gluon

    net = gluon.nn.HybridSequential()
    for _ in range(3):
        net.add(gluon.nn.Dense(width, activation="relu"))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1, width)))
    net.export(prefix)
    return os.path.getsize(prefix + "-0000.params")


# Runs the command given after it and prints its ru_maxrss (KiB), exit status and seconds.
_MEASURE = ("import os, subprocess, sys, time; start = time.perf_counter(); "
            "proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "_, status, usage = os.wait4(proc.pid, 0); "
            "print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), "
            "time.perf_counter() - start)")


def peak_rss(argv):
    """Peak resident memory (bytes) and seconds of a command run to its end."""
    proc = subprocess.run([sys.executable, "-c", _MEASURE] + list(argv), capture_output=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    err = proc.stderr.decode(errors="replace")
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 3 or fields[1] != b"0":
        raise RuntimeError("%s failed (%s): %s" % (" ".join(argv[3:]), fields[1:2] or
                                                   proc.returncode, err.strip().splitlines()[-1:]))
    return int(fields[0]) * 1024, float(fields[2])


def _convert(prefix, out, *extra):
    return [sys.executable, "-m", "mxmixed", "convert", prefix, "0", "--out", out] + list(extra)


# MXNet's own calls for what a plain `mxmixed convert` asks of it: load, AMP pass, JSON written
_MXNET_ALONE = ("import sys, mxnet as mx; from mxnet.contrib import amp; "
                "sym, args, auxs = mx.model.load_checkpoint(sys.argv[1], 0); "
                "sym = amp.convert_model(sym, args, auxs, target_dtype='float16', "
                "cast_optional_params=True)[0]; "
                "open(sys.argv[2], 'w').write(sym.tojson(remove_amp_cast=False))")


def memory(nodes, folder):
    """Peak memory of conversions as multiples of their input file."""
    records = []
    small, big = os.path.join(folder, "chain10"), os.path.join(folder, "chain")
    _relu_chain(small, 10)
    size = _relu_chain(big, nodes)
    alone = lambda prefix, out: [sys.executable, "-c", _MXNET_ALONE, prefix, out]  # noqa: E731
    for label, command in (
            ("mxmixed convert", lambda prefix, out: _convert(prefix, out)),
            ("MXNet alone (load, AMP pass, JSON written)", alone),
            ("mxmixed convert --validate 2", lambda prefix, out: _convert(
                prefix, out, "--validate", "2", "--input-shape", "4"))):
        base, _ = peak_rss(command(small, small + "-out"))
        peak, seconds = peak_rss(command(big, big + "-out"))
        records.append({"suite": "graph_cost", "workload": "relu chain of %d nodes, %.1f MB "
                        "symbol file" % (nodes, size / 1e6), "figure": "%s: peak "
                        "memory above a 10-node chain / symbol file size" % label,
                        "value": (peak - base) / size, "unit": "x", "spread": None,
                        "absolute": "peak %.0f MB, 10-node chain %.0f MB; %.1f s" % (
                            peak / 1e6, base / 1e6, seconds), "how": _how()})
    small, big = os.path.join(folder, "dense16"), os.path.join(folder, "dense")
    _dense(small, 16)
    size = _dense(big, 1024)
    base, _ = peak_rss(_convert(small, small + "-out", "--format", "onnx", "--input-shape", "16"))
    peak, seconds = peak_rss(_convert(big, big + "-out", "--format", "onnx", "--input-shape",
                                      "1024"))
    records.append({"suite": "graph_cost", "workload": "3 FullyConnected 1024x1024, %.1f MB "
                    "params file" % (size / 1e6), "figure": "mxmixed convert --format onnx: "
                    "peak memory above a 16x16 model / params file size",
                    "value": (peak - base) / size, "unit": "x", "spread": None,
                    "absolute": "peak %.0f MB, 16x16 model %.0f MB; %.1f s" % (
                        peak / 1e6, base / 1e6, seconds), "how": _how()})
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=60000, help="relu chain length")
    parser.add_argument("--refused", type=int, default=100, help="n, refused Concats")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = [settling(args.refused, args.rounds)]
    with tempfile.TemporaryDirectory() as folder:
        results += memory(args.nodes, folder)
    for r in results:
        print("%-100s %8.2f %s  (%s)" % (r["figure"] + ", " + r["workload"], r["value"],
                                         r["unit"], r["absolute"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
