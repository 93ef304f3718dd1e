"""bfloat16 against float32 on this CPU, side by side in one process: inference, training,
accuracy.

Every speed figure is a ratio float32 time / bfloat16 time (a speed-up: above 1 is faster in
bfloat16), taken per round with the two variants timed in alternation, block after block, in
one process; the median and the min-max over the rounds are reported. The machines are shared,
so absolute times drift; the ratios of neighbouring blocks do not drift as much.

* probe: ``mxmixed.diagnostics.machine.probe_bfloat16`` (a GEMM and a 3x3 convolution);
* inference through ``mxmixed convert --dtype bfloat16`` and ``mxmixed.load_bfloat16``:
  gluoncv ``resnet50_v1`` at batch 16 (224 px) and ``ssd_512_mobilenet1.0_voc`` at batch 4
  (512 px), random fan-in init; float32 is the exported pair in a ``SymbolBlock`` with
  static memory and oneDNN's subgraph backend (``optimize_for(backend='MKLDNN')``, MXNet's
  best float32 CPU setting). The conversion folds each BatchNorm into its Convolution in
  float32 (``--fold-bn``, the default for bfloat16). Goal for ResNet-50 on AVX512-BF16:
  >= 1.7x with a max relative error against float32 <= 0.01. Beside it: the same against
  float32 without the subgraph backend; the unfolded conversion (``--no-fold-bn``); and the
  folded bfloat16 block with the subgraph backend too. Each row with its error against
  float32 (oneDNN's own Convolution+BatchNorm fusion of an unfolded bfloat16 graph costs
  accuracy, which is why ``load_bfloat16`` does not switch the subgraph backend on);
* training: one SGD-momentum step (forward, backward, update) of ``resnet50_v1`` at batch 16,
  224 px, of ``cifar_resnet20_v1`` at batch 64 and of ``mobilenetv2_1.0`` at batch 8 (its
  ReLU6 is ``clip``, kept float32: ``SLOW_BFLOAT16_CPU_OPS``), with ``mxmixed.amp_scope(
  target_dtype='bfloat16')`` and no loss scaling against float32. Goal for ResNet-50: >= 1.5x;
* BERT: gluonnlp's ``BERTClassifier`` (4 layers, 512 units, 8 heads, sequence 128, batch 8,
  random weights): inference through ``symbolic.convert(..., target_dtype='bfloat16')`` and
  ``load_bfloat16`` against the exported float32 pair with static memory and oneDNN's
  subgraph backend (goal >= 1.8x, max relative error <= 0.01), beside float32 without the
  subgraph backend and float32 with the conversion's own float32 rewrites (params folded,
  masked softmax for oneDNN), which tells what of the speed-up is bfloat16's; and one Adam
  step with ``amp_scope(target_dtype='bfloat16')`` against float32 (goal >= 1.3x);
* accuracy: the digits CNN, 4 epochs, float32 and bfloat16 (``train_precision``), seeds 0-2.

oneDNN's AMX kernels are requested at ``import mxmixed``, before any oneDNN op, so that float32
and bfloat16 run under the same instruction set (``benchmarks/bfloat16_order.py`` measures
the orders a user's script may take), and the load average is recorded at the start and the
end.

The CPU model, its bfloat16-related flags and how bfloat16 runs here are recorded. Where
bfloat16 cannot run, the script records that reason and measures nothing.

Usage: ``python benchmarks/bfloat16.py [--quick] [--bert-only] [--json PATH]``
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

GOALS = {"resnet50_v1 inference": 1.7, "resnet50_v1 training": 1.5,
         "BERT 4x512 inference": 1.8, "BERT 4x512 training": 1.3}
BERT = dict(layers=4, units=512, heads=8, length=128, batch=8, vocab=1000)
MAX_ERROR = 0.01  # the inference goal's max relative error against float32
FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16",
         "amx_tile", "amx_bf16", "amx_int8")
HOW = ("one process; float32 and bfloat16 timed in alternating blocks per round (after a "
       "warm-up); ratio float32/bfloat16 per round; median and min-max over the rounds; "
       "shared 2-core machine")


def cpu_facts():
    from mxmixed._core import devices
    from mxmixed.diagnostics import machine

    flags = devices.cpu_flags() or set()
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(),
            "flags": sorted(f for f in FLAGS if f in flags),
            "bfloat16": machine.collect()["bfloat16"]}


def _rec(workload, figure, value, unit, spread=None, absolute="", **extra):
    out = {"suite": "bfloat16", "workload": workload, "figure": figure, "value": value,
           "unit": unit, "spread": spread, "absolute": absolute, "how": HOW}
    out.update(extra)
    return out


def interleaved(base, variant, rounds, block):
    """Time ``block`` calls of each callable per round, alternating; ratios base/variant."""
    ratios, times = [], ([], [])
    for _ in range(rounds):
        for func, spent in ((base, times[0]), (variant, times[1])):
            start = time.perf_counter()
            for _ in range(block):
                func()
            spent.append((time.perf_counter() - start) / block)
        ratios.append(times[0][-1] / times[1][-1])
    return (statistics.median(ratios), min(ratios), max(ratios),
            statistics.median(times[0]), statistics.median(times[1]))


def _fan_in_init(net, x):
    """Scale-preserving random init (nothing downloads), identity BatchNorm, zero biases."""
    import mxnet as mx
    import numpy as np

    net.initialize()
    net(x)
    rng = np.random.RandomState(0)
    for name, param in net.collect_params().items():
        if name.endswith("weight") and len(param.shape) >= 2:
            fan_in = int(np.prod(param.shape[1:]))
            param.set_data(mx.nd.array(rng.normal(0, np.sqrt(2.0 / fan_in), size=param.shape)))
        elif name.endswith(("gamma", "moving_var", "running_var")):
            param.set_data(mx.nd.ones(param.shape))
        elif name.endswith(("beta", "moving_mean", "running_mean", "bias")):
            param.set_data(mx.nd.zeros(param.shape))


def inference(model, batch, size, folder, rounds, **kwargs):
    """Export, ``mxmixed convert --dtype bfloat16 --validate``, load both, time side by side."""
    import mxnet as mx
    import numpy as np
    from gluoncv.model_zoo import get_model
    from mxnet import gluon

    from mxmixed import cli, symbolic

    with mx.name.NameManager():
        net = get_model(model, pretrained=False, **kwargs)
    x = mx.nd.array(np.random.RandomState(0).uniform(size=(batch, 3, size, size)))
    _fan_in_init(net, x[:1])
    net.hybridize()
    net(x[:1])
    prefix = os.path.join(folder, model)
    net.export(prefix)
    np.save(prefix + "-x.npy", x.asnumpy()[:4])
    start = time.perf_counter()
    # --keep-failed: a detector with random weights can fail the match of its detections
    # (NMS picks another of two near-equal boxes); the exit code is recorded, the speed is
    # measured all the same
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["convert", prefix, "0", "--out", prefix + "-bf16", "--dtype", "bfloat16",
                         "--validate", "4", "--inputs", prefix + "-x.npy", "--batch-size",
                         "2", "--keep-failed"])
    convert_s = time.perf_counter() - start
    with contextlib.redirect_stdout(io.StringIO()):
        unfolded_code = cli.main(["convert", prefix, "0", "--out", prefix + "-bf16-unfolded",
                                  "--dtype", "bfloat16", "--no-fold-bn"])
    if code not in (0, 1) or unfolded_code != 0:
        return [_rec(model, "mxmixed convert --dtype bfloat16", None, "exit code",
                     absolute="exit code %d (--no-fold-bn: %d)" % (code, unfolded_code))]
    fp32 = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    fp32.optimize_for(x, backend="MKLDNN", static_alloc=True, static_shape=True)
    bf16 = symbolic.load_bfloat16(prefix + "-bf16", 0)
    unfolded = symbolic.load_bfloat16(prefix + "-bf16-unfolded", 0)
    # not what load_bfloat16 gives: oneDNN's subgraph backend on the folded bfloat16 graph too
    fused = symbolic.load_bfloat16(prefix + "-bf16", 0)
    fused.hybridize(backend="MKLDNN", static_alloc=True, static_shape=True)
    fp32_static = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"],
                                            prefix + "-0000.params")
    fp32_static.hybridize(static_alloc=True, static_shape=True)
    for block in (fp32, bf16, unfolded, fused, fp32_static):
        mx.nd.waitall()
        block(x)
    mx.nd.waitall()
    errors = _errors(fp32_static(x), {"bfloat16": bf16(x), "unfolded": unfolded(x),
                                      "fused": fused(x)})

    def call(block):
        return lambda: [o.wait_to_read() for o in _outputs(block(x))]

    med, lo, hi, t32, t16 = interleaved(call(fp32), call(bf16), rounds, 1)
    smed, slo, shi, s32, _ = interleaved(call(fp32_static), call(bf16), max(2, rounds - 1), 1)
    umed, ulo, uhi, _, u16 = interleaved(call(fp32), call(unfolded), max(2, rounds - 1), 1)
    fmed, flo, fhi, _, f16 = interleaved(call(fp32), call(fused), max(2, rounds - 1), 1)
    name = "%s inference" % model
    error = errors.get("bfloat16")
    met = None if name not in GOALS else bool(med >= GOALS[name] and error is not None
                                               and error <= MAX_ERROR)
    return [
        _rec(model, "inference speed-up, batch %d, %d px: float32 (static, oneDNN subgraph) / "
             "bfloat16 (mxmixed convert, BatchNorm folded, + load_bfloat16)" % (batch, size),
             med, "x", [lo, hi],
             "float32 %.3f s, bfloat16 %.3f s per batch; convert + validate %.1f s, exit "
             "code %d (%s); %s" % (t32, t16, convert_s, code, "validated" if code == 0 else
                                   "validation failed, files kept", errors["text"]),
             convert_exit_code=code, goal=GOALS.get(name), max_error=MAX_ERROR, met=met,
             error_bfloat16=error),
        _rec(model, "inference speed-up, batch %d: float32 (static, no subgraph) / bfloat16"
             % batch, smed, "x", [slo, shi], "float32 %.3f s per batch" % s32),
        _rec(model, "inference speed-up, batch %d: float32 (static, oneDNN subgraph) / bfloat16 "
             "unfolded (--no-fold-bn)" % batch, umed, "x", [ulo, uhi],
             "bfloat16 unfolded %.3f s per batch" % u16, error_unfolded=errors.get("unfolded")),
        _rec(model, "inference speed-up, batch %d: float32 (static, oneDNN subgraph) / bfloat16 "
             "folded, with the oneDNN subgraph too (not load_bfloat16)" % batch, fmed, "x",
             [flo, fhi], "bfloat16 fused %.3f s per batch" % f16,
             error_fused=errors.get("fused")),
    ]


def _errors(reference, outputs):
    """Max relative error against float32 of single-output models (detectors: not compared)."""
    reference = _outputs(reference)
    if len(reference) != 1:
        return {"text": "errors not compared (several outputs: detections)"}
    ref = reference[0].asnumpy()
    scale = float(abs(ref).max())
    errors = {name: float(abs(_outputs(out)[0].asnumpy() - ref).max()) / scale
              for name, out in outputs.items()}
    errors["text"] = ("max relative error against float32: folded %.4f, unfolded %.4f, "
                      "folded with the subgraph %.4f" % (errors["bfloat16"], errors["unfolded"],
                                                        errors["fused"]))
    return errors


def _outputs(out):
    return out if isinstance(out, (list, tuple)) else [out]


def training(model, batch, size, rounds, block, classes=1000):
    """One SGD step of float32 and of bfloat16 AMP (no loss scaling), alternating."""
    import mxnet as mx
    import numpy as np
    from gluoncv.model_zoo import get_model
    from mxnet import autograd, gluon

    import mxmixed

    rng = np.random.RandomState(0)
    X = mx.nd.array(rng.uniform(size=(batch, 3, size, size)))
    y = mx.nd.array(rng.randint(0, classes, size=batch))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def build():
        mx.random.seed(0)
        net = get_model(model, pretrained=False)
        net.initialize(mx.init.Xavier())
        net.hybridize(static_alloc=True, static_shape=True)
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": 0.01, "momentum": 0.9},
                                update_on_kvstore=False)
        return net, trainer

    net32, trainer32 = build()
    losses = []

    def step32():
        with autograd.record():
            loss = loss_fn(net32(X), y)
        loss.backward()
        trainer32.step(batch)
        mx.nd.waitall()  # the update too: work left pending would be timed in the next block

    def step16():
        with autograd.record():
            loss = loss_fn(net16(X), y)
            with mxmixed.scale_loss(loss, trainer16) as scaled:
                scaled.backward()
        mxmixed.step(trainer16, batch)
        losses.append(float(loss.astype("float32").mean().asscalar()))
        mx.nd.waitall()

    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net16, trainer16 = build()
        scaler = mxmixed.init_trainer(trainer16)
        step16()  # the block caches its bfloat16 training graph inside the scope
    step32(), step16()  # warm-up: oneDNN primitives, static memory
    med, lo, hi, t32, t16 = interleaved(step32, step16, rounds, block)
    name = "%s training" % model
    return [_rec(model, "training step speed-up, batch %d, %d px: float32 / bfloat16 AMP "
                 "(loss scale %g)" % (batch, size, scaler.loss_scale), med, "x", [lo, hi],
                 "float32 %.3f s, bfloat16 %.3f s per step" % (t32, t16),
                 goal=GOALS.get(name), finite_losses=bool(np.isfinite(losses).all()),
                 met=None if name not in GOALS else bool(med >= GOALS[name]))]


def bert_classifier(seed=0):
    """gluonnlp's BERTClassifier (``BERT`` sizes, random weights) and one batch of inputs."""
    import gluonnlp as nlp
    import mxnet as mx
    import numpy as np

    mx.random.seed(seed)
    units, length, batch = BERT["units"], BERT["length"], BERT["batch"]
    encoder = nlp.model.BERTEncoder(num_layers=BERT["layers"], units=units,
                                    hidden_size=4 * units, max_length=length,
                                    num_heads=BERT["heads"], dropout=0.0)
    bert = nlp.model.BERTModel(encoder, vocab_size=BERT["vocab"], token_type_vocab_size=2,
                               units=units, embed_size=units, use_pooler=True,
                               use_decoder=False, use_classifier=False)
    net = nlp.model.BERTClassifier(bert, num_classes=2, dropout=0.0)
    net.initialize(mx.init.Normal(0.02))
    rng = np.random.RandomState(seed)
    inputs = (mx.nd.array(rng.randint(0, BERT["vocab"], size=(batch, length))),
              mx.nd.zeros((batch, length)),
              mx.nd.array(rng.randint(length // 2, length + 1, size=batch)))
    return net, inputs


def _bert_blocks(folder):
    """The BERT classifier's inference blocks, by name, its inputs and the conversion's time.

    float32: the exported pair with static memory and oneDNN's subgraph backend (``fp32``),
    without the backend (``fp32 static``), and with the conversion's float32 rewrites
    (``fp32 rewritten``: what of the speed-up is not bfloat16's); bfloat16: the pair
    ``symbolic.convert`` made, loaded by ``load_bfloat16``.
    """
    import mxnet as mx
    from mxnet import gluon

    from mxmixed import symbolic
    from mxmixed.symbolic._rewrite import fold_constants, mask_softmax

    net, x = bert_classifier()
    net.hybridize()
    net(*x)
    prefix = os.path.join(folder, "bert")
    net.export(prefix)
    names = ["data0", "data1", "data2"]
    sym, args, auxs = symbolic.load_checkpoint(prefix, 0)
    start = time.perf_counter()
    model = symbolic.convert(sym, args, auxs, target_dtype="bfloat16")
    convert_s = time.perf_counter() - start
    model.save(prefix + "-bf16", 0)
    graph, rargs, rauxs, _ = fold_constants(sym, args, auxs)
    graph, _ = mask_softmax(graph)
    mx.model.save_checkpoint(prefix + "-rewritten", 0, graph.to_symbol(), rargs, rauxs)

    def float32(name, backend):
        block = gluon.SymbolBlock.imports(name + "-symbol.json", names, name + "-0000.params")
        if backend:
            block.optimize_for(*x, backend=backend, static_alloc=True, static_shape=True)
        else:
            block.hybridize(static_alloc=True, static_shape=True)
        return block

    blocks = {"fp32": float32(prefix, "MKLDNN"),
              "bfloat16": symbolic.load_bfloat16(prefix + "-bf16", 0),
              "fp32 static": float32(prefix, None),
              "fp32 rewritten": float32(prefix + "-rewritten", "MKLDNN")}
    for block in blocks.values():
        mx.nd.waitall()
        block(*x)
    return blocks, x, convert_s


def bert_inference(folder, rounds):
    """The BERT classifier exported, converted to bfloat16, loaded; timed against float32."""
    blocks, x, convert_s = _bert_blocks(folder)
    ref = blocks["fp32 static"](*x).asnumpy()
    out = blocks["bfloat16"](*x).astype("float32").asnumpy()
    error = float(abs(out - ref).max() / abs(ref).max())

    def call(name):
        return lambda: blocks[name](*x).wait_to_read()

    med, lo, hi, t32, t16 = interleaved(call("fp32"), call("bfloat16"), rounds, 2)
    smed, slo, shi, s32, _ = interleaved(call("fp32 static"), call("bfloat16"),
                                         max(2, rounds - 1), 2)
    rmed, rlo, rhi, r32, _ = interleaved(call("fp32 rewritten"), call("bfloat16"),
                                         max(2, rounds - 1), 2)
    name = "BERT 4x512 inference"
    size = "%(layers)dx%(units)d, %(heads)d heads, seq %(length)d, batch %(batch)d" % BERT
    return [
        _rec(name, "inference speed-up, %s: float32 (static, oneDNN subgraph) / bfloat16 "
             "(symbolic.convert + load_bfloat16)" % size, med, "x", [lo, hi],
             "float32 %.3f s, bfloat16 %.3f s per batch; convert %.1f s; max relative error "
             "against float32 %.4f" % (t32, t16, convert_s, error), goal=GOALS[name],
             max_error=MAX_ERROR, met=bool(med >= GOALS[name] and error <= MAX_ERROR),
             error_bfloat16=error),
        _rec(name, "inference speed-up: float32 (static, no subgraph) / bfloat16", smed, "x",
             [slo, shi], "float32 %.3f s per batch" % s32),
        _rec(name, "inference speed-up: float32 with the conversion's float32 rewrites (params "
             "folded, masked softmax for oneDNN; static, oneDNN subgraph) / bfloat16", rmed,
             "x", [rlo, rhi], "float32 rewritten %.3f s per batch" % r32),
    ]


def _bert_steps():
    """One Adam step of the BERT classifier in float32 and in bfloat16 AMP (no loss scaling),
    each a callable; the bfloat16 one records its loss in the list returned third."""
    import mxnet as mx
    from mxnet import autograd, gluon

    import mxmixed

    batch = BERT["batch"]
    y = mx.nd.array([k % 2 for k in range(batch)])
    loss_fn = gluon.loss.SoftmaxCELoss()

    def build():
        net, x = bert_classifier()
        net.hybridize(static_alloc=True, static_shape=True)
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-4},
                                update_on_kvstore=False)
        return net, x, trainer

    net32, x, trainer32 = build()
    losses = []

    def step32():
        with autograd.record():
            loss = loss_fn(net32(*x), y)
        loss.backward()
        trainer32.step(batch)
        mx.nd.waitall()

    def step16():
        with autograd.record():
            loss = loss_fn(net16(*x), y)
            with mxmixed.scale_loss(loss, trainer16) as scaled:
                scaled.backward()
        mxmixed.step(trainer16, batch)
        losses.append(float(loss.astype("float32").mean().asscalar()))
        mx.nd.waitall()

    with mxmixed.amp_scope(target_dtype="bfloat16"):
        net16, _, trainer16 = build()
        mxmixed.init_trainer(trainer16)
        step16()  # the block caches its bfloat16 training graph inside the scope
    step32(), step16()
    return step32, step16, losses


def bert_training(rounds):
    """One Adam step of the BERT classifier: float32 against bfloat16 AMP (no loss scaling)."""
    step32, step16, losses = _bert_steps()
    med, lo, hi, t32, t16 = interleaved(step32, step16, rounds, 1)
    name = "BERT 4x512 training"
    return [_rec(name, "training step speed-up (Adam), seq %(length)d, batch %(batch)d: "
                 "float32 / bfloat16 AMP (amp_scope, no loss scaling)" % BERT, med, "x",
                 [lo, hi], "float32 %.3f s, bfloat16 %.3f s per step" % (t32, t16),
                 goal=GOALS[name], met=bool(med >= GOALS[name]),
                 finite_losses=bool(all(abs(v) < float("inf") for v in losses)))]


def bert_profile(steps=3, top=12):
    """Per-op time of the BERT classifier, float32 against bfloat16, inference and training.

    MXNet's profiler (aggregate statistics) over ``steps`` calls of each, in one process, the
    ops not bulked (``--profile`` sets ``MXNET_EXEC_BULK_EXEC_*=0`` before MXNet loads).
    Returns lines of text: per variant the summed op time per call and the ``top`` ops.
    """
    import mxnet as mx

    lines = []

    def measure(tag, call):
        call()
        mx.nd.waitall()
        mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                               filename=os.path.join(tempfile.gettempdir(), "bf16-profile.json"))
        mx.profiler.set_state("run")
        for _ in range(steps):
            call()
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        ops = json.loads(mx.profiler.dumps(format="json", reset=True))["Time"]["operator"]
        total = sum(v["Total"] for v in ops.values())
        lines.append("%s: %.0f ms of op time per call" % (tag, total / steps))
        for name, v in sorted(ops.items(), key=lambda kv: -kv[1]["Total"])[:top]:
            lines.append("  %-46s %8.1f ms %5.1f%%  x%d" % (
                name, v["Total"] / steps, 100 * v["Total"] / total, v["Count"] // steps))

    with tempfile.TemporaryDirectory() as folder:
        blocks, x, _ = _bert_blocks(folder)
        for tag in ("fp32", "bfloat16"):
            measure("inference, " + tag, lambda: blocks[tag](*x).wait_to_read())
    step32, step16, _ = _bert_steps()
    measure("training step, float32", step32)
    measure("training step, bfloat16 AMP", step16)
    return lines


def accuracy(seeds, epochs):
    import mxnet as mx
    import numpy as np

    from mxmixed.tutorial import digits_cnn, digits_loaders, train_precision

    acc = {"float32": [], "bfloat16": []}
    for seed in seeds:
        loaders = digits_loaders(batch_size=64, seed=seed)
        for precision in acc:
            mx.random.seed(seed)
            run = train_precision(precision, lambda: digits_cnn(seed=seed), loaders,
                                  epochs=epochs, progress=False)
            acc[precision].append(run["accuracy"])
    f32, b16 = np.array(acc["float32"]), np.array(acc["bfloat16"])
    spread = float(f32.max() - f32.min())
    diff = float(b16.mean() - f32.mean())
    return [_rec("digits CNN, %d epochs, seeds %s" % (epochs, list(seeds)),
                 "test accuracy: bfloat16 mean - float32 mean", diff, "points (share)",
                 absolute="float32 %s, bfloat16 %s" % (np.round(f32, 4).tolist(),
                                                       np.round(b16, 4).tolist()),
                 float32=f32.tolist(), bfloat16=b16.tolist(), float32_spread=spread,
                 goal="within the float32 spread over the seeds (or 0.01)",
                 met=bool(abs(diff) <= max(spread, 0.01)))]


def run(quick=False, bert_only=False):
    from mxmixed._core import devices
    from mxmixed._core.amx import request_amx
    from mxmixed.diagnostics import machine

    amx = request_amx()  # made at import mxmixed, before any oneDNN op: the status
    facts = cpu_facts()
    records = [_rec("CPU", "model, flags, how bfloat16 runs here", facts["cpu"], "text",
                    absolute="%s; %s; load average %s" % (" ".join(facts["flags"]),
                                                         facts["bfloat16"], _load()),
                    cpu=facts, amx=amx)]
    runs, why = devices.bfloat16_support()
    if not runs:
        records.append(_rec("all", "bfloat16", None, "x", absolute="skipped: " + why,
                            skipped=True))
        return records
    rounds = 2 if quick else 4
    if bert_only:
        return records + _bert(rounds)
    probe = machine.probe_bfloat16()
    for name, (t32, t16, ratio) in probe.items():
        records.append(_rec("probe " + name, "op speed-up: float32 / bfloat16", ratio, "x",
                            absolute="float32 %.2f ms, bfloat16 %.2f ms" % (1e3 * t32,
                                                                            1e3 * t16)))
    with tempfile.TemporaryDirectory() as folder:
        records += inference("resnet50_v1", 16, 224, folder, rounds + 1)
        records += inference("ssd_512_mobilenet1.0_voc", 4, 512, folder, rounds,
                             pretrained_base=False)
    records += training("resnet50_v1", 16, 224, rounds - 1, 1)
    records += training("cifar_resnet20_v1", 64, 32, rounds + 1, 4, classes=10)
    records += training("mobilenetv2_1.0", 8, 224, rounds - 1, 2)
    records += _bert(rounds)
    records += accuracy((0, 1, 2), 2 if quick else 4)
    records.append(_rec("machine load", "load average after the run", _load(), "text"))
    return records


def _bert(rounds):
    if importlib.util.find_spec("gluonnlp") is None:
        return [_rec("BERT 4x512", "bfloat16", None, "x", skipped=True,
                     absolute="skipped: gluonnlp is not installed (the nlp extra)")]
    with tempfile.TemporaryDirectory() as folder:
        records = bert_inference(folder, rounds + 1)
    return records + bert_training(rounds)


def _load():
    """The 1, 5 and 15 minute load averages, as text (the machines are shared)."""
    return "%.1f %.1f %.1f" % os.getloadavg()


def print_records(records, json_path=None):
    """Print each record on two lines (figure, spread, goal; absolute times), and write them all
    to ``json_path`` where given (``bfloat16_order.py`` prints its records the same way)."""
    for r in records:
        value = r["value"]
        text = ("%.3f" % value) if isinstance(value, float) else str(value)
        spread = "" if not r["spread"] else " (%.2f-%.2f)" % tuple(r["spread"])
        met = "" if r.get("met") is None else ("  goal %s: %s" % (
            r["goal"], "met" if r["met"] else "NOT met"))
        print("- %s | %s: %s %s%s%s\n    %s" % (r["workload"], r["figure"], text, r["unit"],
                                               spread, met, r["absolute"]))
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(records, handle, indent=2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, for a smoke run")
    parser.add_argument("--json", help="also write the records here")
    parser.add_argument("--bert-only", action="store_true",
                        help="only the BERT classifier's inference and training")
    parser.add_argument("--profile", action="store_true",
                        help="only the BERT classifier's per-op profile, float32 and bfloat16")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.profile:
        from mxmixed._core.amx import request_amx

        print("oneDNN's AMX kernels: %s; load average %s" % (request_amx(), _load()))
        print("\n".join(bert_profile()))
        print("load average %s" % _load())
        return 0
    records = run(args.quick, args.bert_only)
    print("bfloat16 / float32 on this CPU (%.0f s)" % (time.perf_counter() - start))
    print_records(records, args.json)
    return 0


if __name__ == "__main__":
    if "--profile" in sys.argv:  # ops one at a time; read when MXNet builds its executors
        os.environ.setdefault("MXNET_EXEC_BULK_EXEC_INFERENCE", "0")
        os.environ.setdefault("MXNET_EXEC_BULK_EXEC_TRAIN", "0")
    sys.exit(main())
