"""Survey which MXNet operators need float32 emulation of float16 on the CPU.

MXNet 1.9.1's CPU build has no float16 GEMM: ``FullyConnected``, ``Convolution``,
``RNN`` and friends fail in float16, and the error only surfaces at the next
synchronisation (``wait_to_read``, ``asnumpy``). Other operators do have a float16
CPU kernel, but a naive one that can be far slower than the oneDNN float32 path
(``BatchNorm`` for instance). ``mxmixed`` emulates float16 on the CPU by casting
the float16 inputs of such operators to float32 and the result back. This script
decides, by measurement rather than by guess, which operators need that.

It works in three steps.

1. Collect the operator types used by a set of gluoncv classification models and
   by the project's tutorials (the digits CNN, an LSTM language model and the
   ``SoftmaxCrossEntropyLoss``), by building each network as a Symbol and reading
   the op names of its JSON graph. ``Activation``, ``Pooling`` and grouped
   ``Convolution`` are split into variants since those select different kernels.
2. For each operator (variant), take one real node from the graphs (the largest
   one up to about two million elements in total), get its input shapes from
   ``infer_shape`` on the graph internals, rebuild it as a single-op Symbol and
   bind it on the CPU once with float32 and once with float16 inputs.
   ``BatchNorm`` statistics stay float32 and index inputs (``pick`` indices,
   ``Embedding`` ids) keep their own dtype, as in a float16 network. The median
   time of forward and of forward + backward (forward only for non-differentiable
   ops) is taken after a warm-up, synchronising on every output and gradient, so
   that asynchronous errors surface. Real nodes under 0.25 ms (the loss ops on a
   batch of 8) only measure engine overhead, so they are timed again with their
   batch dimension scaled up to about a million elements, and classified by that.
3. Classify each operator as ``missing`` (float16 raises, at bind, forward or
   backward: no CPU float16 kernel), ``onednn`` (float16 raises a oneDNN dtype error,
   "unknown type for MKLDNN"), ``slow`` (float16 / float32 time > 2, for forward + backward or for
   forward alone) or ``ok``; print a table and write it as JSON (``--out``).
4. Check mxmixed's op table (``mxmixed/emulation/_ops.py``) against this survey: every op it
   emulates as slow, and every op it leaves out as ``"slow: ..."``, that the survey measured is
   slower than 2x (its slowest variant); every op the survey found failing in float16 is
   emulated; without ``--quick``, every op emulated as slow was measured. A disagreement is
   printed, written into the JSON (``op_table_problems``) and makes the script exit 1, so that
   ``make bench`` fails: the table's evidence is measured here, never read by a unit test.

Examples
--------
``python benchmarks/op_survey.py`` (under a minute on two cores);
``python benchmarks/op_survey.py --quick`` skips the ImageNet models;
``python benchmarks/op_survey.py --quick --zoo --out benchmarks/op_survey_zoo.json`` adds the
detection (SSD, YOLOv3 with its training loss, Faster R-CNN), segmentation (FCN, PSP,
DeepLab) and pose (simple_pose) families of the gluoncv model zoo, built without weights
(about two minutes).
"""
import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import gluon  # noqa: E402
from mxnet.gluon import nn, rnn  # noqa: E402

IMAGENET = ["resnet18_v1", "resnet50_v1", "resnet50_v2", "mobilenet1.0", "mobilenetv2_1.0",
            "vgg11_bn", "densenet121", "squeezenet1.0", "resnext50_32x4d"]
CIFAR = ["cifar_resnet20_v1", "cifar_wideresnet16_10"]
# The other model-zoo families (--zoo): (name, extra get_model kwargs, input shape, family).
# Built with pretrained=False, pretrained_base=False; the socket is cut first, so nothing is
# ever downloaded. YOLOv3 is traced twice: inference, and training with its loss and targets.
ZOO = [
    ("ssd_512_mobilenet1.0_voc", {}, (1, 3, 256, 256), "detection: SSD"),
    ("ssd_300_vgg16_atrous_voc", {}, (1, 3, 300, 300), "detection: SSD"),
    ("yolo3_mobilenet1.0_voc", {}, (1, 3, 256, 256), "detection: YOLOv3"),
    ("faster_rcnn_resnet50_v1b_voc", {}, (1, 3, 256, 256), "detection: Faster R-CNN"),
    ("fcn_resnet50_voc", {"crop_size": 128, "base_size": 128}, (1, 3, 128, 128),
     "segmentation: FCN"),
    ("psp_resnet50_ade", {"crop_size": 128, "base_size": 128}, (1, 3, 128, 128),
     "segmentation: PSP"),
    ("deeplab_resnet50_ade", {"crop_size": 128, "base_size": 128}, (1, 3, 128, 128),
     "segmentation: DeepLab"),
    ("simple_pose_resnet18_v1b", {}, (1, 3, 256, 192), "pose: simple_pose"),
]
INDEX_INPUTS = {"pick": (1,), "Embedding": (0,), "take": (1,), "one_hot": (0,),
                "SoftmaxOutput": (1,)}
ROI_OPS = ("_contrib_ROIAlign", "ROIPooling")
FLOAT32_INPUTS = {"BatchNorm": (1, 2, 3, 4)}  # gamma, beta, moving mean / var
TINY_MS = 0.25  # below this the real node is overhead-bound: also time it scaled up
MAX_SIZE = 2 ** 21  # elements of inputs + outputs of the representative node
SLOW_RATIO = 2.0


class LanguageModel(gluon.HybridBlock):
    """Embedding(256, 64) -> LSTM(64, layout TNC) -> Dense(256), as in the tutorial."""

    def __init__(self, vocab=256, hidden=64, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = nn.Embedding(vocab, hidden)
            self.lstm = rnn.LSTM(hidden, 1, layout="TNC", input_size=hidden)
            self.out = nn.Dense(vocab, flatten=False, in_units=hidden)

    def hybrid_forward(self, F, x):
        return self.out(self.lstm(self.embed(x)))


def digits_net():
    """The project's DigitsCNN, or an equivalent inline net if mxmixed is mid-edit."""
    try:
        from mxmixed.tutorial import DigitsCNN
        return DigitsCNN(), "mxmixed.tutorial.DigitsCNN"
    except Exception as err:  # noqa: BLE001 - the package may be broken while edited
        net = nn.HybridSequential()
        net.add(nn.Conv2D(16, 3, padding=1, use_bias=False), nn.BatchNorm(),
                nn.Activation("relu"), nn.Conv2D(32, 3, padding=1, use_bias=False),
                nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(2),
                nn.Dense(64, activation="relu"), nn.Dense(10))
        return net, "inline fallback ({}: {})".format(type(err).__name__, err)


def to_symbol(block, *names):
    block.initialize()
    block.hybridize()
    return block(*[mx.sym.var(n) for n in names])


def _offline():
    """Cut the network: a model that tried to download weights would fail loudly."""
    import socket

    def refuse(*args, **kwargs):
        raise RuntimeError("the op survey tried to reach the network")

    socket.socket.connect = refuse


def yolo_training_symbol(net, shape):
    """YOLOv3's training graph: the net with its targets and its loss, as train_yolo3 runs it."""
    names = ["data", "gt_boxes", "obj_t", "centers_t", "scales_t", "weights_t", "clas_t"]
    with mx.autograd.record():
        losses = net(*[mx.sym.var(n) for n in names])
    n = 3 * sum((shape[2] // s) * (shape[3] // s) for s in (32, 16, 8))
    c = len(net.classes)
    shapes = {"data": shape, "gt_boxes": (shape[0], 2, 4), "obj_t": (shape[0], n, 1),
              "centers_t": (shape[0], n, 2), "scales_t": (shape[0], n, 2),
              "weights_t": (shape[0], n, 2), "clas_t": (shape[0], n, c)}
    return mx.sym.Group(list(losses)), [shapes]


def zoo_graphs():
    """Yield the detection, segmentation and pose graphs of the gluoncv model zoo."""
    _offline()
    from gluoncv import model_zoo
    for name, kwargs, shape, family in ZOO:
        net = model_zoo.get_model(name, pretrained=False, pretrained_base=False, **kwargs)
        net.initialize()
        net.hybridize()
        out = net(mx.sym.var("data"))
        out = mx.sym.Group(list(out)) if isinstance(out, (list, tuple)) else out
        yield name, out, [{"data": shape}]
        if name.startswith("yolo3"):
            net = model_zoo.get_model(name, pretrained=False, pretrained_base=False, **kwargs)
            net.initialize()
            sym, shapes = yolo_training_symbol(net, shape)
            yield name + ":train", sym, shapes


def graphs(quick, zoo=False):
    """Yield ``(model, symbol, input shapes)``; tutorials first, then gluoncv."""
    net, origin = digits_net()
    print("digits CNN:", origin)
    yield "digits_cnn", to_symbol(net, "data"), [{"data": (8, 1, 8, 8)}]
    yield "lstm_lm", to_symbol(LanguageModel(), "data"), [{"data": (16, 8)}]
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    yield "softmax_ce_loss", loss(mx.sym.var("pred"), mx.sym.var("label")), \
        [{"pred": (8, 10), "label": (8,)}]
    from gluoncv import model_zoo
    known = set(model_zoo.get_model_list())
    for name in CIFAR + ([] if quick else IMAGENET):
        if name not in known:
            print("skipped {}: not in the gluoncv model zoo".format(name))
            continue
        classes = 10 if name.startswith("cifar") else 1000
        net = model_zoo.get_model(name, pretrained=False, classes=classes)
        sizes = [32] if name.startswith("cifar") else [64, 224]  # global pools need 224
        yield name, to_symbol(net, "data"), [{"data": (8, 3, s, s)} for s in sizes]
    if zoo:
        yield from zoo_graphs()


def variant(op, attrs):
    """Suffix telling apart attrs that select different kernels."""
    if op == "Activation":
        return ":" + attrs["act_type"]
    if op == "Pooling":
        pool_global = attrs.get("global_pool") == "True"
        return ":" + attrs["pool_type"] + ("(global)" if pool_global else "")
    if op == "Convolution" and attrs.get("num_group", "1") != "1":
        return ":grouped"
    return ""


def scaled(rec):
    """Copy of ``rec`` whose batch-like leading dim (the output's) is scaled to ~MAX_SIZE / 2.

    Inputs whose leading dim differs from the output's (weights) keep their shape.
    """
    if not rec["in_shapes"] or not rec["out_shapes"][0]:
        return None
    lead, factor = rec["out_shapes"][0][0], max(2, MAX_SIZE // 2 // rec["size"])
    shapes = [(s[0] * factor,) + tuple(s[1:]) if s and s[0] == lead else s
              for s in rec["in_shapes"]]
    return dict(rec, in_shapes=shapes, factor=factor) if shapes != rec["in_shapes"] else None


def instances(model, sym, shape_options):
    """Return one record per op node of ``sym``, with its input/output shapes and dtypes."""
    internals = sym.get_internals()
    for shapes in shape_options:
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # MXNet prints on failure
                _, out_shapes, _ = internals.infer_shape(**shapes)
            break
        except mx.MXNetError:
            continue
    else:
        raise RuntimeError("no input size works for " + model)
    _, out_types, _ = internals.infer_type_partial(**{k: "float32" for k in shapes})
    out_types = [t if t is not None else np.float32 for t in out_types]
    graph = json.loads(internals.tojson(remove_amp_cast=False))
    entry = {(nid, idx): k for k, (nid, idx, _) in enumerate(graph["heads"])}
    records = []
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] == "null":
            continue
        outs = [k for (n, _), k in sorted(entry.items()) if n == nid]
        ins = [entry[(n, i)] for n, i, _ in node["inputs"]]
        attrs = dict(node.get("attrs", {}))
        key = node["op"] + variant(node["op"], attrs)
        rec = dict(op=node["op"], key=key, model=model, node=node["name"], attrs=attrs,
                   in_shapes=[out_shapes[k] for k in ins],
                   in_types=[np.dtype(out_types[k]).name for k in ins],
                   out_shapes=[out_shapes[k] for k in outs])
        rec["size"] = sum(int(np.prod(s)) for s in rec["in_shapes"] + rec["out_shapes"])
        records.append(rec)
    return records


def single_op(rec, dtype):
    """Rebuild the node as a one-op Symbol; return it, its input types and grad_req."""
    attrs = dict(rec["attrs"])
    if not rec["in_shapes"] and "shape" in attrs:  # _zeros etc.: fill the inferred shape
        attrs["shape"] = str(tuple(rec["out_shapes"][0]))
    if dtype == "float16" and attrs.get("dtype") == "float32":
        attrs["dtype"] = "float16"
    n = len(rec["in_shapes"])
    nodes = [{"op": "null", "name": "in%d" % i, "inputs": []} for i in range(n)]
    nodes.append({"op": rec["op"], "name": "op", "attrs": attrs,
                  "inputs": [[i, 0, 0] for i in range(n)]})
    graph = {"nodes": nodes, "arg_nodes": list(range(n)),
             "heads": [[n, k, 0] for k in range(len(rec["out_shapes"]))],
             "attrs": {"mxnet_version": ["int", 10901]}}
    sym = mx.sym.load_json(json.dumps(graph))
    types, grad_req = {}, {}
    for i, t in enumerate(rec["in_types"]):
        index = i in INDEX_INPUTS.get(rec["op"], ())
        keep32 = i in FLOAT32_INPUTS.get(rec["op"], ())
        types["in%d" % i] = t if index or keep32 or t != "float32" else dtype
        grad_req["in%d" % i] = "null" if index or t != "float32" else "write"
    return sym, types, grad_req


def fill(rec, exe):
    """Random inputs; integer-valued ids for index inputs, positive aux (variances)."""
    rng = np.random.RandomState(0)
    for i, shape in enumerate(rec["in_shapes"]):
        name = "in%d" % i
        arr = exe.arg_dict.get(name, exe.aux_dict.get(name))
        if i in INDEX_INPUTS.get(rec["op"], ()):
            high = int(rec["attrs"].get("input_dim", rec["in_shapes"][0][-1] if i else 2))
            arr[:] = rng.randint(0, high, size=shape)
        elif name in exe.aux_dict:
            arr[:] = rng.uniform(0.5, 1.5, size=shape)
        elif i == 1 and rec["op"] in ROI_OPS:  # rois: batch 0, corners inside the image
            h, w = rec["in_shapes"][0][2:]
            scale = 1.0 / float(rec["attrs"].get("spatial_scale", 1.0))
            corners = np.sort(rng.uniform(0, min(h, w) * scale, size=(shape[0], 2, 2)), axis=1)
            arr[:] = np.concatenate([np.zeros((shape[0], 1)), corners[:, 0], corners[:, 1]], 1)
        else:
            arr[:] = rng.uniform(-1, 1, size=shape)


def timed(fn, budget=1.0, max_reps=200):
    first = fn()  # warm-up; raises the op's (asynchronous) error if any
    reps = int(min(max_reps, max(3, budget / max(first, 1e-6))))
    return statistics.median(fn() for _ in range(reps))


def measure(rec, dtype):
    """Time one dtype. Returns a dict with fwd/fb ms and output, or the failing stage."""
    res = {"stage": "bind"}
    try:
        sym, types, grad_req = single_op(rec, dtype)
        shapes = {"in%d" % i: s for i, s in enumerate(rec["in_shapes"])}
        try:
            if "write" not in grad_req.values():
                grad_req = "null"
            exe = sym.simple_bind(mx.cpu(), grad_req=grad_req, type_dict=types, **shapes)
        except mx.MXNetError as err:  # not differentiable: forward only
            if "FGradient" not in str(err) and "differentiable" not in str(err):
                raise
            exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=types, **shapes)
        fill(rec, exe)
        has_grad = any(g is not None for g in exe.grad_arrays)
        heads = [mx.nd.ones(o.shape, dtype=o.dtype) for o in exe.outputs]

        def fwd():
            tic = time.perf_counter()
            exe.forward(is_train=True)
            for o in exe.outputs:
                o.wait_to_read()
            return time.perf_counter() - tic

        def fwd_bwd():
            tic = time.perf_counter()
            exe.forward(is_train=True)
            exe.backward(heads)
            for a in exe.outputs + [g for g in exe.grad_arrays if g is not None]:
                a.wait_to_read()
            return time.perf_counter() - tic

        res["stage"] = "forward"
        res["fwd_ms"] = 1e3 * timed(fwd)
        res["out"] = exe.outputs[0].asnumpy().astype(np.float64)
        res["stage"] = "backward"
        res["fb_ms"] = 1e3 * timed(fwd_bwd) if has_grad else res["fwd_ms"]
        res["backward"] = has_grad
        res["stage"] = None
    except Exception as err:  # noqa: BLE001 - any failure of the float16 kernel counts
        msg = str(err).strip().splitlines()
        msgs = [m for m in msg if "Check failed" in m or "Error" in m or "error" in m]
        res["error"] = (msgs or msg or [type(err).__name__])[0].strip()[:150]
    return res


def survey(rec, rescale=True):
    """Measure ``rec`` in both dtypes and classify it (see the module docstring)."""
    f32, f16 = measure(rec, "float32"), measure(rec, "float16")
    row = {k: rec[k] for k in ("key", "op", "model", "node", "attrs", "in_shapes")}
    row.update(f32_ms=f32.get("fb_ms"), f16_ms=f16.get("fb_ms"), ratio=None, fwd_ratio=None,
               backward=f32.get("backward"), note="")
    if f32["stage"]:
        row.update(cls="error", note="float32 fails at {}: {}".format(f32["stage"], f32["error"]))
    elif f16["stage"] and "MKLDNN" in f16["error"]:
        row.update(cls="onednn",
                   note="float16 fails at {}: {}".format(f16["stage"], f16["error"]))
    elif f16["stage"]:
        row.update(cls="missing",
                   note="float16 fails at {}: {}".format(f16["stage"], f16["error"]))
        if f16["stage"] == "backward":
            row["fwd_ratio"] = f16["fwd_ms"] / f32["fwd_ms"]
    else:
        row["ratio"] = f16["fb_ms"] / f32["fb_ms"]
        row["fwd_ratio"] = f16["fwd_ms"] / f32["fwd_ms"]
        row["cls"] = "slow" if max(row["ratio"], row["fwd_ratio"]) > SLOW_RATIO else "ok"
        if row["ratio"] <= SLOW_RATIO < row["fwd_ratio"]:
            row["note"] = "slow in forward only"
        if rec["op"] != "Dropout":  # random mask differs between runs
            scale = max(np.abs(f32["out"]).max(), 1e-6)
            err = np.abs(f16["out"] - f32["out"]).max() / scale
            if err > 0.05:
                row["note"] = "float16 output differs, rel. err {:.2g}".format(err)
    big = scaled(rec) if rescale and row["ratio"] and row["f32_ms"] < TINY_MS else None
    if big is not None:  # classify overhead-bound nodes by a larger batch
        row["scaled"] = res = survey(big, rescale=False)
        if res["cls"] != "error":  # a shape the op refuses even in float32: keep the real one
            row["cls"] = res["cls"]
        if res["ratio"] is None:
            row["note"] = "tiny; batch x{}: {} {}".format(big["factor"], res["cls"],
                                                          res["note"]).rstrip()
        else:
            row["note"] = "tiny; batch x{}: {:.2f}/{:.2f} ms, ratio {:.1f}, fwd {:.1f} {}".format(
                big["factor"], res["f32_ms"], res["f16_ms"], res["ratio"], res["fwd_ratio"],
                res["note"]).rstrip()
    if row["f32_ms"] is not None and not row["backward"]:
        row["note"] = ("forward only; " + row["note"]).rstrip("; ")
    return row


def check_op_table(rows, complete):
    """Disagreements, one line each, between mxmixed's op table and the survey ``rows``.

    ``complete``: the survey covered the ImageNet models too (no ``--quick``), so every op the
    table emulates as slow must be among its rows.
    """
    from mxmixed.emulation._ops import EMULATED_OPS, NOT_EMULATED, SLOW_OPS

    worst = {}  # op -> its slowest variant's float16 / float32 ratio, the scaled runs included
    for row in rows:
        ratios = [r for run in (row, row.get("scaled") or {})
                  for r in (run.get("ratio"), run.get("fwd_ratio")) if r is not None]
        if ratios:
            worst[row["op"]] = max([worst.get(row["op"], 0.0)] + ratios)
    problems = []
    claimed_slow = list(SLOW_OPS) + [n for n, why in NOT_EMULATED.items()
                                     if why.startswith("slow: ")]
    for name in claimed_slow:
        if name in worst and worst[name] <= SLOW_RATIO:
            problems.append("%s is listed as slow, but measured %.2fx here (not over %.0fx)"
                            % (name, worst[name], SLOW_RATIO))
    measured = {row["op"] for row in rows}
    for name in SLOW_OPS:
        if complete and name not in measured:
            problems.append("%s is emulated as slow, but no surveyed model uses it" % name)
    failing = sorted({row["op"] for row in rows if row["cls"] in ("missing", "onednn")}
                     - set(EMULATED_OPS))
    for name in failing:
        problems.append("%s fails in float16 on this CPU, but is not emulated" % name)
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("benchmarks", "op_survey.json"))
    parser.add_argument("--quick", action="store_true", help="skip the ImageNet models")
    parser.add_argument("--zoo", action="store_true",
                        help="add gluoncv's detection, segmentation and pose families")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    by_key = {}
    for model, sym, shapes in graphs(args.quick, args.zoo):
        for rec in instances(model, sym, shapes):
            by_key.setdefault(rec["key"], []).append(rec)
    rows = []
    for key in sorted(by_key, key=str.lower):
        recs = by_key[key]
        small = [r for r in recs if r["size"] <= MAX_SIZE]
        rep = max(small or [min(recs, key=lambda r: r["size"])], key=lambda r: r["size"])
        if rep["op"] in ROI_OPS and rep["size"] > MAX_SIZE:  # 300 rois: keep 8 of them
            rep = dict(rep, in_shapes=[rep["in_shapes"][0], (8,) + tuple(rep["in_shapes"][1][1:])],
                       out_shapes=[(8,) + tuple(o[1:]) for o in rep["out_shapes"]])
        row = survey(rep)
        row["used_by"] = sorted({r["model"] for r in recs})
        rows.append(row)
        print("  measured {:<28} ({:.1f}s)".format(key, time.perf_counter() - start),
              file=sys.stderr)

    fmt = "{:<26} {:>7} {:>7} {:>6} {:>6} {:<8} {}"
    print("\n" + fmt.format("op", "f32 ms", "f16 ms", "ratio", "fwd r", "class", "note / used by"))
    ms = lambda v: "-" if v is None else "{:.2f}".format(v)  # noqa: E731
    rt = lambda v: "-" if v is None else "{:.1f}".format(v)  # noqa: E731
    for r in rows:
        users = r["used_by"] if len(r["used_by"]) < 6 else ["%d models" % len(r["used_by"])]
        print(fmt.format(r["key"], ms(r["f32_ms"]), ms(r["f16_ms"]), rt(r["ratio"]),
                         rt(r["fwd_ratio"]), r["cls"], r["note"]))
        print(fmt.format("", "", "", "", "", "", "  used by: " + ", ".join(users)
                         + "; measured {} {}".format(r["node"], r["in_shapes"])))
    for cls in ("missing", "onednn", "slow"):
        ops = sorted({r["op"] for r in rows if r["cls"] == cls})
        print("{:<8} ops: {}".format(cls, ", ".join(ops) or "none"))
    wall = time.perf_counter() - start
    print("wall time {:.1f}s, mxnet {}, {} CPU cores".format(wall, mx.__version__, os.cpu_count()))
    problems = check_op_table(rows, complete=not args.quick)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"mxnet": mx.__version__, "quick": args.quick, "zoo": args.zoo, "wall_s": wall,
                   "slow_ratio": SLOW_RATIO, "op_table_problems": problems, "ops": rows}, fh,
                  indent=1, default=str)
    print("wrote", args.out)
    for problem in problems:
        print("op table: " + problem, file=sys.stderr)
    print("op table (mxmixed/emulation/_ops.py): %s" % (
        "%d disagreement(s) with this survey" % len(problems) if problems
        else "agrees with this survey"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
