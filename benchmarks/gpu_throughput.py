"""GPU training throughput: float32 vs AMP vs ``cast('float16')`` + multi-precision SGD.

UNTESTED HERE: this project's machines have no GPU (and MXNet's CPU build has no float16
GEMM), so this script has never run on one. It is written for users with a GPU and
``mxnet-cu112``; please report what it prints. On a machine without a GPU it says so and
skips, because CPU timings of float16 would measure the emulation, not float16 speed.

Workload: gluoncv ``resnet50_v1`` (random init), synthetic data (uniform 3x224x224 images,
random labels, generated once on the GPU), one SGD-momentum training step, batch sizes 64 and
128. The three setups live in separate processes (``amp.init`` cannot be undone) and are timed
in alternating blocks (``_workers.Worker``), so they share the machine's state; the figures
are images/s per setup and the per-round ratio against float32 (median, min, max). Peak GPU
memory is the process's usage from ``nvidia-smi`` after the timed steps: MXNet's pooled
allocator keeps freed blocks, so that is its peak, CUDA context included.

Usage: ``python benchmarks/gpu_throughput.py [--batches 64 128] [--rounds N] [--steps N]``
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _workers import Worker  # noqa: E402

MODES = ("float32", "amp", "float16")

SETUP = r"""
def setup(mode, batch, model="resnet50_v1"):
    import mxnet as mx
    from mxnet import autograd, gluon
    from gluoncv.model_zoo import get_model
    import mxmixed
    ctx = mx.gpu(0)
    if mode == "amp":
        mxmixed.init(emulate=False)
    net = get_model(model, pretrained=False)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    dtype = "float16" if mode == "float16" else "float32"
    if mode == "float16":
        net.cast("float16")
    net.hybridize(static_alloc=True, static_shape=True)
    sgd = {"learning_rate": 0.01, "momentum": 0.9}
    if mode == "float16":
        trainer = mxmixed.multi_precision_trainer(net.collect_params(), "sgd", sgd)
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", sgd, update_on_kvstore=False)
    if mode != "float32":
        mxmixed.init_trainer(trainer, scaler="dynamic" if mode == "amp" else 128)
    X = mx.nd.random.uniform(shape=(batch, 3, 224, 224), ctx=ctx).astype(dtype)
    y = mx.nd.random.randint(0, 1000, shape=(batch,), ctx=ctx).astype(dtype)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(X), y)
            if mode == "float32":
                loss.backward()
            else:
                with mxmixed.scale_loss(loss, trainer) as scaled:
                    scaled.backward()
        if mode == "float32":
            trainer.step(batch)
        else:
            mxmixed.step(trainer, batch)
    return step
"""


def gpu_missing():
    """None when a GPU build of MXNet sees a GPU, else the reason to skip."""
    import mxnet as mx

    try:
        count = mx.context.num_gpus()
    except mx.base.MXNetError as err:
        count, why = 0, str(err).strip().splitlines()[0]
    else:
        why = "mx.context.num_gpus() == 0"
    if count == 0:
        return ("skipped: no GPU visible to MXNet (%s; installed build: mxnet %s). CPU float16 "
                "runs under mxmixed's emulation, which reproduces float16 numerics, not its "
                "speed, so a CPU figure would mean nothing here." % (why, mx.__version__))
    return None


def gpu_memory_mb(pid):
    """GPU memory (MiB) that nvidia-smi reports for one process, or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return float(fields[1])
    return None


def run(batches=(64, 128), rounds=5, steps=20):
    """Return a list of result dicts, or one dict with ``skipped`` on a machine without GPU."""
    reason = gpu_missing()
    if reason:
        return [{"figure": "GPU training throughput", "skipped": True, "reason": reason,
                 "tested": False}]
    results = []
    for batch in batches:
        workers = {m: Worker(SETUP, {"mode": m, "batch": batch}) for m in MODES}
        try:
            times = {m: [] for m in MODES}
            for _ in range(rounds):
                for m in MODES:
                    times[m].append(workers[m].time_block(steps))
            memory = {m: gpu_memory_mb(workers[m].proc.pid) for m in MODES}
        finally:
            for w in workers.values():
                w.close()
        for m in MODES:
            speedups = [t32 / t for t32, t in zip(times["float32"], times[m])]
            results.append({
                "figure": "images/s and speed-up over float32 (resnet50_v1, synthetic data)",
                "workload": "resnet50_v1, batch %d, %s" % (batch, m), "mode": m, "batch": batch,
                "images_per_s": batch / statistics.median(times[m]),
                "ratio_median": statistics.median(speedups), "ratio_min": min(speedups),
                "ratio_max": max(speedups), "peak_gpu_memory_mib": memory[m],
                "rounds": rounds, "steps_per_round": steps, "tested": False})
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    results = run(args.batches, args.rounds, args.steps)
    print("GPU training throughput (UNTESTED here: written for users with a GPU)")
    if results[0].get("skipped"):
        print(results[0]["reason"])
    for r in results:
        if not r.get("skipped"):
            print("%-34s %9.1f img/s  x%.2f vs float32 (%.2f-%.2f)  peak %s MiB" % (
                r["workload"], r["images_per_s"], r["ratio_median"], r["ratio_min"],
                r["ratio_max"], r["peak_gpu_memory_mib"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
