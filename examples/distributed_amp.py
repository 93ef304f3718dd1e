"""Train the digits CNN with AMP across workers: MXNet's dist_sync kvstore, mxmixed's loss scaling.

Run it under MXNet's launcher, through mxmixed's entry point (MXNet's own launcher, made to run
on Python 3.9+)::

    OMP_NUM_THREADS=1 python -m mxmixed.launch --launcher local -n 2 -s 1 \\
        python examples/distributed_amp.py --steps 40 --checkpoint digits-dist.ckpt

or let the script launch itself, bounded in time (a dead worker or a hang ends the job and
names the culprit instead of blocking forever, as MXNet's local launcher does)::

    python examples/distributed_amp.py --launch-local 2 --servers 1 --timeout 300 --steps 40

Under Horovod (``pip install "mxmixed[horovod]"``; the Makefile builds it with gloo), each
rank runs this script with ``--kvstore horovod``; ``hvd.DistributedTrainer`` averages the
gradients with an allreduce instead of a kvstore::

    OMP_NUM_THREADS=1 horovodrun --gloo -np 2 -H localhost:2 \\
        python examples/distributed_amp.py --kvstore horovod --steps 40

The same global batch in a single process, split over N CPU contexts as N workers would split
it (the reference the distributed run must equal)::

    python examples/distributed_amp.py --kvstore device --shards 2 --steps 40

Each step draws one global batch (``--batch-size`` per worker times the number of workers)
from a seeded generator that every worker shares; worker r trains on the r-th slice. The
gradients are summed over the workers by the kvstore, the overflow check runs on that sum (so
all workers skip the same steps) and ``step`` divides by the global batch size, so the update
is the one a single process would make on the whole global batch. Rank 0 writes the
checkpoint, atomically.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WRAPPER_FLAGS = {"--launch-local": 1, "--servers": 1, "--timeout": 1}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kvstore", default="dist_sync",
                        choices=("dist_sync", "dist_device_sync", "horovod", "device", "local"),
                        help="dist_*: under a launcher; horovod: under horovodrun; device/local: "
                             "one process (see --shards)")
    parser.add_argument("--shards", type=int, default=1,
                        help="single process only: split the global batch over this many CPU "
                             "contexts, as that many workers would")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker (or shard)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init-scale", type=float, default=2.0 ** 16,
                        help="first loss scale of the dynamic scaler")
    parser.add_argument("--clip", type=float, default=None,
                        help="clip the global norm of the true gradients, summed over workers")
    parser.add_argument("--checkpoint", default=None, help="rank 0 writes it at the end")
    parser.add_argument("--checkpoint-at", type=int, default=None, metavar="STEP",
                        help="write --checkpoint after STEP steps instead of at the end")
    parser.add_argument("--resume", default=None, metavar="CHECKPOINT",
                        help="every rank loads it and goes on from its step, to --steps")
    parser.add_argument("--compression", default="none", choices=("none", "fp16"),
                        help="horovod: hvd.Compression for the allreduce")
    parser.add_argument("--report", default=None,
                        help="folder: each rank writes rank<r>.json and rank<r>.params there")
    parser.add_argument("--plant-overflow", default=None, metavar="RANK:STEP",
                        help="test hook: put an inf into one gradient on worker RANK at STEP")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--launch-local", type=int, default=None, metavar="N",
                        help="run this script under the local launcher with N workers, "
                             "bounded by --timeout")
    parser.add_argument("--servers", type=int, default=1, help="with --launch-local")
    parser.add_argument("--timeout", type=float, default=600, help="with --launch-local")
    return parser


def _strip_wrapper_flags(argv):
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in WRAPPER_FLAGS:
            skip = 0 if "=" in arg else WRAPPER_FLAGS[name]
            continue
        out.append(arg)
    return out


def launch(args, argv):
    from mxmixed.distributed import is_distributed
    from mxmixed.tutorial.local_job import DistributedRunError, run_local

    if not is_distributed(args.kvstore):
        raise ValueError("--launch-local needs a dist_* --kvstore")
    command = [sys.executable, os.path.abspath(__file__)] + _strip_wrapper_flags(argv)
    try:
        result = run_local(command, num_workers=args.launch_local, num_servers=args.servers,
                           timeout=args.timeout, echo=sys.stdout)
    except DistributedRunError as err:
        print("distributed_amp.py: error: %s" % str(err).split("\n--- last output")[0],
              file=sys.stderr)
        return 1
    print("distributed job finished in %.1f s" % result.elapsed)
    return 0


def global_batches(n_samples, global_batch, seed):
    """Index arrays of the global batches, epoch after epoch, from one seeded generator."""
    import numpy as np

    rng = np.random.RandomState(seed)
    while True:
        order = rng.permutation(n_samples)
        for start in range(0, n_samples - global_batch + 1, global_batch):
            yield order[start:start + global_batch]


def train(args):
    import numpy as np

    import mxnet as mx
    from mxnet import autograd, gluon

    import mxmixed
    from mxmixed import distributed
    from mxmixed.tutorial import digits_arrays, digits_cnn

    hvd = None
    if args.kvstore == "horovod":
        import horovod.mxnet as hvd  # after MXNet; it puts libmxnet.so in the global namespace

        hvd.init()
    elif args.compression != "none":
        raise ValueError("--compression is for --kvstore horovod")
    else:
        distributed.check_launched(args.kvstore)
    dist = hvd is not None or distributed.is_distributed(args.kvstore)
    if dist and args.shards != 1:
        raise ValueError("--shards is for a single process; under the launcher, -n sets the "
                         "number of workers")
    if args.steps < 1 or args.batch_size < 1 or args.shards < 1:
        raise ValueError("--steps, --batch-size and --shards must be at least 1")
    if hvd is not None:
        kv = None
        my_rank, workers = hvd.rank(), hvd.size()
        print("[rank %d/%d] pid %d" % (my_rank, workers, os.getpid()), flush=True)
    else:
        kv = mx.kv.create(args.kvstore)
        if dist:
            distributed.announce(kv)
        my_rank, workers = distributed.rank(kv), distributed.num_workers(kv)
    parts = workers if dist else args.shards
    ctxs = [mx.cpu()] if dist else [mx.cpu(i) for i in range(parts)]
    mine = [my_rank] if dist else list(range(parts))  # the slices of each global batch here
    planted = None
    if args.plant_overflow:
        who, when = args.plant_overflow.split(":")
        planted = (int(who), int(when))

    mxmixed.init()  # AMP before the net is built; float16 is emulated on CPU
    net = digits_cnn(seed=args.seed, ctx=ctxs)
    net.hybridize()
    optimizer_params = {"learning_rate": args.lr, "momentum": args.momentum}
    if hvd is not None:
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", optimizer_params,
                                         compression=getattr(hvd.Compression,
                                                             args.compression))
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", optimizer_params, kvstore=kv,
                                update_on_kvstore=False)
    # after DistributedTrainer, which divides the Trainer's scale by the number of ranks
    scaler = mxmixed.init_trainer(trainer, mxmixed.LossScaler(init_scale=args.init_scale))
    if hvd is None:
        # Broadcast rank 0's initial weights now and wait: Gluon would do it inside the first
        # step, unordered with the first gradient push, which can corrupt a worker's weights.
        distributed.init_kvstore(trainer)
    start = 0
    if args.resume:
        start = int(mxmixed.checkpoint.load(args.resume, net, trainer)["step"])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    X_all, y_all, _, _ = digits_arrays(seed=args.seed)
    global_batch = args.batch_size * parts
    # the kvstore sums the gradients (divide by the global batch); Horovod averages (the local)
    step_batch = args.batch_size if hvd is not None else global_batch
    batches = global_batches(len(y_all), global_batch, args.seed)
    for _ in range(start):  # the batches the checkpoint's steps took
        next(batches)
    log = {"rank": my_rank, "task_id": distributed.launcher_env()["task_id"],
           "num_workers": workers, "kvstore": args.kvstore, "shards": parts,
           "applied": [], "scales": [], "losses": [], "start": start,
           "emulation": mxmixed.emulation.describe()}
    # whom save_checkpoint asks for the rank: the kvstore, Horovod's rank, or none
    ckpt_kvstore = (kv if hvd is None else my_rank) if dist else None
    tag = "[rank %d/%d]" % (my_rank, workers) if dist else "[single process, %d shards]" % parts
    for step_no in range(start, args.steps):
        idx = next(batches)
        shards = [(mx.nd.array(X_all[idx[r * args.batch_size:(r + 1) * args.batch_size]],
                               ctx=ctx),
                   mx.nd.array(y_all[idx[r * args.batch_size:(r + 1) * args.batch_size]],
                               ctx=ctx)) for r, ctx in zip(mine, ctxs)]
        log["scales"].append(scaler.loss_scale)
        with autograd.record():
            losses = [loss_fn(net(X), y) for X, y in shards]
            with mxmixed.scale_loss(losses, trainer) as scaled:
                autograd.backward(scaled)
        if planted is not None and planted[1] == step_no:
            for r, ctx in zip(mine, ctxs):
                if r == planted[0]:
                    net.output.weight.grad(ctx)[0, 0] = float("inf")
        if args.clip:
            # Clip the summed gradients: reduce first, then clip, then update. Clipping before
            # the reduction would clip each worker's own gradients by its own factor.
            trainer.allreduce_grads()
            mxmixed.clip_global_norm(trainer, args.clip)
            trainer.update(step_batch)
            applied = not scaler.last_step_skipped
        else:
            applied = mxmixed.step(trainer, step_batch)
        loss = float(np.mean([l.mean().asscalar() for l in losses]))
        log["applied"].append(bool(applied))
        log["losses"].append(loss)
        if not applied or step_no % args.log_every == 0 or step_no == args.steps - 1:
            print("%s step %d loss %.4f loss scale %g%s" % (
                tag, step_no, loss, log["scales"][-1], "" if applied else " SKIPPED (overflow)"),
                flush=True)
        if args.checkpoint and step_no + 1 == args.checkpoint_at:
            save(args, net, trainer, ckpt_kvstore, step_no + 1, tag)

    log["scaler"] = scaler.state_dict()
    if args.report:
        os.makedirs(args.report, exist_ok=True)
        named = net._collect_params_with_prefix()  # the names net.save_parameters uses
        for r, ctx in zip(mine, ctxs):  # one file per worker, or per shard of a single process
            mx.nd.save(os.path.join(args.report, "rank%d.params" % r),
                       {name: param.data(ctx) for name, param in named.items()})
        with open(os.path.join(args.report, "rank%d.json" % my_rank), "w") as fileobj:
            json.dump(log, fileobj)
    if args.checkpoint and args.checkpoint_at is None:
        save(args, net, trainer, ckpt_kvstore, args.steps, tag)
    print("%s done: %d steps, %d skipped, loss scale %g" % (
        tag, scaler.steps, scaler.skipped_steps, scaler.loss_scale), flush=True)
    return 0


def save(args, net, trainer, kvstore, steps, tag):
    """Rank 0 writes the checkpoint, atomically; every rank waits for it."""
    from mxmixed import distributed

    if distributed.save_checkpoint(args.checkpoint, net, trainer, extra={"step": steps},
                                   kvstore=kvstore):
        print("%s wrote checkpoint %s" % (tag, args.checkpoint), flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        if args.launch_local is not None:
            return launch(args, argv)
        return train(args)
    except (ValueError, RuntimeError) as err:
        print("distributed_amp.py: error: %s" % err, file=sys.stderr)
        return 2


if __name__ == "__main__":
    # A scheduler or server started by the launcher runs this same file: importing MXNet turns
    # it into one (it serves until the job ends, then exits) before any training code runs.
    import mxnet  # noqa: F401

    sys.exit(main())
