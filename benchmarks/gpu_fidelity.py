"""Compare the CPU float16 emulation with real GPU kernels, op by op.

MXNet 1.9.1 itself cannot run on current GPUs (the ``mxnet-cu112`` wheel holds machine code up
to sm_86 and no PTX), so the GPU side recomputes each case with PyTorch, composing the kernels
as MXNet 1.9.1's GPU operators compose them:

* FullyConnected: a float16 cuBLAS GEMM with float32 accumulation into a float16 output, then
  the bias added in float16 arithmetic (``add_bias_kernel``): two roundings;
* Convolution / Deconvolution: cuDNN into a float16 output, then ``cudnnAddTensor`` for the
  bias: two roundings;
* batch_dot: cuBLAS batched GEMM, float32 accumulation;
* BatchNorm: cuDNN with float16 data and float32 parameters and statistics;
* pooling, activations, elemwise_add: cuDNN / elementwise kernels on float16 tensors.

It runs in three steps:

``python benchmarks/gpu_fidelity.py cpu [--cases FILE]``
    on any machine with MXNet (CPU): draws seeded float16 inputs, computes the emulated
    outputs with :mod:`mxmixed.emulation` and writes them with the inputs to an ``.npz`` file
    (default ``benchmarks/gpu-fidelity-cases.npz``).
``python benchmarks/gpu_fidelity.py gpu [--cases FILE] [--out FILE] [--gpu-outputs FILE]``
    on a machine with a CUDA GPU and PyTorch (not a dependency of mxmixed; MXNet is not
    needed there): recomputes every case on the GPU twice, the second time with other
    algorithms (``cudnn.benchmark`` on, non-deterministic) as the GPU's own noise floor, and
    in float64 on the CPU as the exact reference; writes the raw outputs
    (``benchmarks/gpu-fidelity-outputs.npz``, untracked) and
    ``benchmarks/results-gpu-fidelity.json``: per case the share of elements bit-identical
    between emulated and GPU, the relative L2 distances emulated-GPU, GPU-exact and
    GPU-GPU(other algorithms), and the largest distance in float16 ulps.
``python benchmarks/gpu_fidelity.py compare [--cases FILE] [--gpu-outputs FILE]``
    on a CPU again, after the emulation changed: a fresh ``cpu`` half compared with GPU
    outputs recorded earlier (the inputs' checksums must match), no GPU needed.

``results-gpu-fidelity.json`` holds the last GPU run (an NVIDIA H200, 2026-11-27).
"""
import argparse
import contextlib
import json
import os
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "gpu-fidelity-cases.npz")
RESULTS = os.path.join(HERE, "results-gpu-fidelity.json")
OUTPUTS = os.path.join(HERE, "gpu-fidelity-outputs.npz")
F16 = np.float16

# name: (kind, attrs, input shapes). Inputs are x[, w[, b]]; "grad" cases also give dy.
SPECS = {
    "fc": ("fc", {}, [(64, 256), (128, 256)]),
    "fc_bias": ("fc", {}, [(64, 256), (128, 256), (128,)]),
    "conv3x3": ("conv", {"pad": 1}, [(4, 32, 14, 14), (48, 32, 3, 3)]),
    "conv3x3_bias": ("conv", {"pad": 1}, [(4, 32, 14, 14), (48, 32, 3, 3), (48,)]),
    "conv1x1_bias": ("conv", {}, [(4, 64, 8, 8), (32, 64, 1, 1), (32,)]),
    "conv7x7_s2": ("conv", {"pad": 3, "stride": 2}, [(2, 3, 32, 32), (16, 3, 7, 7)]),
    "conv_depthwise": ("conv", {"pad": 1, "groups": 32}, [(4, 32, 14, 14), (32, 1, 3, 3)]),
    "deconv_bias": ("deconv", {"stride": 2, "pad": 1}, [(2, 16, 8, 8), (16, 8, 4, 4), (8,)]),
    "batch_dot": ("batch_dot", {}, [(8, 32, 64), (8, 64, 48)]),
    "batchnorm_train": ("bn", {"train": True}, [(8, 16, 10, 10)]),
    "batchnorm_infer": ("bn", {"train": False}, [(8, 16, 10, 10)]),
    "avg_pool": ("pool", {"type": "avg"}, [(4, 16, 12, 12)]),
    "max_pool": ("pool", {"type": "max"}, [(4, 16, 12, 12)]),
    "global_avg_pool": ("pool", {"type": "global"}, [(4, 64, 7, 7)]),
    "relu": ("act", {"type": "relu"}, [(4096,)]),
    "sigmoid": ("act", {"type": "sigmoid"}, [(4096,)]),
    "tanh": ("act", {"type": "tanh"}, [(4096,)]),
    "elemwise_add": ("add", {}, [(4096,), (4096,)]),
    # the NLP ops: BERT's float16 ops under AMP, and softmax/LayerNorm in a float16 model
    "gelu": ("gelu", {}, [(8192,)]),
    "elemwise_mul": ("mul", {}, [(4096,), (4096,)]),
    "mul_scalar": ("scalar", {"op": "mul", "scalar": 0.3}, [(4096,)]),
    "exp": ("unary", {"op": "exp"}, [(4096,)]),
    "erf": ("unary", {"op": "erf"}, [(4096,)]),
    "softmax_safe_acc": ("softmax", {}, [(64, 128)]),
    "layernorm_safe_acc": ("ln", {}, [(64, 512), (512,), (512,)]),
    "selfatt_qk": ("qk", {"heads": 4}, [(32, 2, 192)]),
    "selfatt_valatt": ("valatt", {"heads": 4}, [(32, 2, 192), (8, 32, 32)]),
}
# backward compared too
GRADS = ("fc", "fc_bias", "conv3x3_bias", "batchnorm_train", "gelu", "softmax_safe_acc",
         "layernorm_safe_acc", "selfatt_qk", "selfatt_valatt")
# run with MXNET_SAFE_ACCUMULATION=1 on the CPU: the GPU side accumulates in float32
SAFE_ACCUMULATION = ("softmax_safe_acc", "layernorm_safe_acc")
SQRT2 = 2.0 ** 0.5


def draw(name, spec, rng):
    """Seeded float16 inputs (and a head gradient) for one case."""
    kind, _, shapes = spec
    arrays = {}
    for k, shape in enumerate(shapes):
        scale = 1.0 if k == 0 else (0.1 if k == 1 else 1.0)
        arrays["in%d" % k] = (rng.standard_normal(shape) * scale).astype(F16)
    if kind == "bn":
        c = shapes[0][1]
        arrays["gamma"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        arrays["beta"] = rng.uniform(-0.5, 0.5, c).astype(np.float32)
        arrays["mean"] = rng.uniform(-0.2, 0.2, c).astype(np.float32)
        arrays["var"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    if kind == "ln":
        arrays["in1"] = rng.uniform(0.5, 1.5, shapes[1]).astype(F16)
        arrays["in2"] = rng.uniform(-0.5, 0.5, shapes[2]).astype(F16)
    if kind == "gelu":
        arrays["in0"] = (rng.standard_normal(shapes[0]) * 3).astype(F16)
    return arrays


# ---------------------------------------------------------------- CPU half: the emulation
def emulate(name, spec, arrays):
    """The emulated float16 outputs (and gradients) with mxmixed on the CPU."""
    import mxnet as mx
    from mxnet import autograd

    kind, attrs, _ = spec
    nd = {k: mx.nd.array(v, dtype=v.dtype) for k, v in arrays.items()}
    ins = [nd["in%d" % k] for k in range(len(spec[2]))]
    recording = name in GRADS
    for a in ins if recording else ():
        a.attach_grad()
    scope = autograd.record(train_mode=attrs.get("train", True)) if recording else \
        contextlib.nullcontext()
    with scope:
        if kind == "fc":
            out = mx.nd.FullyConnected(ins[0], ins[1], ins[2] if len(ins) > 2 else None,
                                       num_hidden=ins[1].shape[0], no_bias=len(ins) < 3)
        elif kind in ("conv", "deconv"):
            k = ins[1].shape[2:]
            common = dict(kernel=k, stride=(attrs.get("stride", 1),) * 2,
                          pad=(attrs.get("pad", 0),) * 2, num_group=attrs.get("groups", 1),
                          no_bias=len(ins) < 3)
            bias = ins[2] if len(ins) > 2 else None
            if kind == "conv":
                out = mx.nd.Convolution(ins[0], ins[1], bias, num_filter=ins[1].shape[0],
                                        **common)
            else:
                out = mx.nd.Deconvolution(ins[0], ins[1], bias, num_filter=ins[1].shape[1],
                                          **common)
        elif kind == "batch_dot":
            out = mx.nd.batch_dot(ins[0], ins[1])
        elif kind == "bn":
            out = mx.nd.BatchNorm(ins[0], nd["gamma"], nd["beta"], nd["mean"], nd["var"],
                                  fix_gamma=False, use_global_stats=not attrs["train"],
                                  eps=1e-5)
        elif kind == "pool":
            if attrs["type"] == "global":
                out = mx.nd.Pooling(ins[0], pool_type="avg", global_pool=True, kernel=(1, 1))
            else:
                out = mx.nd.Pooling(ins[0], pool_type=attrs["type"], kernel=(3, 3),
                                    stride=(2, 2), pad=(1, 1),
                                    count_include_pad=True)
        elif kind == "act":
            out = mx.nd.Activation(ins[0], act_type=attrs["type"])
        else:
            out = _emulate_nlp(mx, kind, attrs, ins)
    result = {"out": out.asnumpy()}
    if recording:
        rng = np.random.RandomState(zlib.crc32(name.encode()))
        dy = (rng.standard_normal(out.shape) * 0.1).astype(F16)
        out.backward(mx.nd.array(dy, dtype=F16))
        result["dy"] = dy
        for k, a in enumerate(ins):
            result["grad%d" % k] = a.grad.asnumpy()
    return result


def _emulate_nlp(mx, kind, attrs, ins):
    """The elementwise and NLP cases (``elemwise_add`` included) through MXNet's own ops."""
    if kind == "add":
        return mx.nd.elemwise_add(ins[0], ins[1])
    if kind == "mul":
        return mx.nd.elemwise_mul(ins[0], ins[1])
    if kind == "gelu":
        return mx.nd.LeakyReLU(ins[0], act_type="gelu")
    if kind == "scalar":
        return ins[0] * attrs["scalar"]
    if kind == "unary":
        return getattr(mx.nd, attrs["op"])(ins[0])
    if kind == "softmax":
        return mx.nd.softmax(ins[0], axis=-1)
    if kind == "ln":
        return mx.nd.LayerNorm(ins[0], ins[1], ins[2], axis=-1, eps=1e-5)
    if kind == "qk":
        return mx.nd.contrib.interleaved_matmul_selfatt_qk(ins[0], heads=attrs["heads"])
    return mx.nd.contrib.interleaved_matmul_selfatt_valatt(ins[0], ins[1], heads=attrs["heads"])


@contextlib.contextmanager
def _safe_accumulation(on):
    """MXNET_SAFE_ACCUMULATION=1 for one case (MXNet reads it at each call)."""
    before = os.environ.get("MXNET_SAFE_ACCUMULATION")
    if on:
        os.environ["MXNET_SAFE_ACCUMULATION"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MXNET_SAFE_ACCUMULATION", None)
        else:
            os.environ["MXNET_SAFE_ACCUMULATION"] = before


def cpu_half(path, names=None):
    """Write the cases and their emulated outputs to ``path``; return the case names."""
    from mxmixed import emulation

    rng = np.random.RandomState(15)
    payload, names = {}, list(names or SPECS)
    with emulation.emulated():
        for name in names:
            arrays = draw(name, SPECS[name], rng)
            with _safe_accumulation(name in SAFE_ACCUMULATION):
                emulated_outputs = emulate(name, SPECS[name], arrays)
            arrays.update({"emu_" + k: v for k, v in emulated_outputs.items()})
            payload.update({"%s/%s" % (name, k): v for k, v in arrays.items()})
    payload["__specs__"] = np.frombuffer(json.dumps({n: SPECS[n] for n in names}).encode(),
                                         dtype=np.uint8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez_compressed(path, **payload)
    return names


# ---------------------------------------------------------------- GPU half: PyTorch
def _torch_case(torch, kind, attrs, t, device, dtype):
    """One forward as MXNet 1.9.1's GPU kernels compose it: ``(inputs, output, backward)``.

    ``backward`` is None where autograd composes the backward as MXNet does; otherwise it maps
    the head gradient to the input gradients, composed by hand.
    """
    import torch.nn.functional as F

    ins = [t["in%d" % k].to(device=device, dtype=dtype).requires_grad_(True)
           for k in range(sum(1 for key in t if key.startswith("in")))]
    bias = ins[2] if len(ins) > 2 and kind != "ln" else None
    backward = None
    if kind == "fc":
        y = F.linear(ins[0], ins[1])
    elif kind == "conv":
        y = F.conv2d(ins[0], ins[1], stride=attrs.get("stride", 1), padding=attrs.get("pad", 0),
                     groups=attrs.get("groups", 1))
    elif kind == "deconv":
        y = F.conv_transpose2d(ins[0], ins[1], stride=attrs.get("stride", 1),
                               padding=attrs.get("pad", 0))
    elif kind == "batch_dot":
        y = torch.bmm(ins[0], ins[1])
    elif kind == "bn":
        f32 = torch.float64 if dtype == torch.float64 else torch.float32
        p = {k: t[k].to(device=device, dtype=f32) for k in ("gamma", "beta", "mean", "var")}
        y = F.batch_norm(ins[0], p["mean"], p["var"], p["gamma"], p["beta"],
                         training=attrs["train"], eps=1e-5)
    elif kind == "pool":
        if attrs["type"] == "global":
            y = F.adaptive_avg_pool2d(ins[0], 1)
        elif attrs["type"] == "avg":
            y = F.avg_pool2d(ins[0], 3, 2, 1, count_include_pad=True)
        else:
            y = F.max_pool2d(ins[0], 3, 2, 1)
    elif kind == "act":
        y = getattr(torch, attrs["type"])(ins[0])
    elif kind == "add":
        y = ins[0] + ins[1]
    else:
        y, backward = _torch_nlp(torch, kind, attrs, [a.detach() for a in ins], dtype)
    if bias is not None:  # the GPU's second rounding: add_bias_kernel / cudnnAddTensor
        shape = [1] * y.dim()
        shape[1 if kind != "fc" else -1] = -1
        y = y + bias.reshape(shape)
    return ins, y, backward


def _torch_nlp(torch, kind, attrs, ins, dtype):
    """The NLP cases: float32 arithmetic rounded to float16 where MXNet's GPU kernel rounds
    (``mshadow_op`` on ``half_t`` promotes to float; cuBLAS GEMMs accumulate in float32 with
    the scale as alpha); on the float64 reference path nothing rounds."""
    half = dtype == torch.float16
    work = (lambda a: a.float()) if half else (lambda a: a)
    rnd = (lambda a: a.half()) if half else (lambda a: a)
    x = ins[0]
    if kind == "gelu":  # mshadow_op::gelu / gelu_grad, and backward_grad_tuned: dy * DType(g)
        xf = work(x)
        y = rnd(0.5 * xf * (1.0 + torch.erf(xf / SQRT2)))
        g = rnd(0.5 * (1.0 + torch.erf(xf / SQRT2)
                       + xf * (2.0 / np.pi ** 0.5) * torch.exp(-(xf / SQRT2) ** 2) / SQRT2))
        return y, lambda dy: [rnd(work(dy) * work(g))]
    if kind == "mul":
        return rnd(work(x) * work(ins[1])), None
    if kind == "scalar":  # the scalar is cast to DType first (DType(scalar) in mshadow_op)
        s = torch.tensor(attrs["scalar"], dtype=x.dtype, device=x.device)
        return rnd(work(x) * work(s)), None
    if kind == "unary":
        return rnd(getattr(torch, attrs["op"])(work(x))), None
    if kind == "softmax":  # softmax-inl.h with AType float: x - max rounds in half_t first
        d = rnd(work(x) - work(x.max(-1, keepdim=True).values))
        y = rnd(torch.exp(work(d)) / torch.exp(work(d)).sum(-1, keepdim=True))

        def backward(dy):  # sum of half_t products (mshadow_op::mul, each rounded); then
            # softmax_bwd's out * (ograd - sum): half_t - float is half_t, so two roundings
            total = work(rnd(work(dy) * work(y))).sum(-1, keepdim=True)
            return [rnd(work(y) * work(rnd(work(dy) - total)))]
        return y, backward
    if kind == "ln":
        return _torch_layernorm(torch, ins, work, rnd)
    return _torch_attention(torch, kind, attrs, ins, work, rnd)


def _torch_layernorm(torch, ins, work, rnd):
    """LayerNorm on the last axis as layer_norm.cu's kernels compute it with AType float
    (MXNET_SAFE_ACCUMULATION=1): ``invstd_eps = DType(1.0) / std_eps`` is half_t / float, a
    float16 value; the normalised value, ``gamma *`` it and ``+ beta`` each round (half_t).
    The backward reads the float16 ``mean`` and ``std`` outputs and rounds once."""
    x, gamma, beta = (work(a) for a in ins)
    mean = x.mean(-1, keepdim=True)
    std = torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 1e-5)
    n = rnd(work(rnd(1.0 / std)) * (x - mean))
    y = rnd(work(rnd(gamma * work(n))) + beta)
    mean16, std16 = work(rnd(mean)), work(rnd(std))

    def backward(dy):  # LayerNormFusedBackwardKernel_Data and _PartGammaBeta/_GammaBeta
        g, inv, centred = work(dy), 1.0 / std16, x - mean16
        s0 = (g * gamma * inv).mean(-1, keepdim=True)
        s1 = (g * gamma * centred * inv * inv).mean(-1, keepdim=True)
        rows = (-1, x.shape[-1])
        return [rnd(g * gamma * inv - s0 - centred * inv * s1),
                rnd((centred / std16 * g).reshape(rows).sum(0)), rnd(g.reshape(rows).sum(0))]
    return y, backward


def _interleaved(qkv, heads):
    """(seq, batch, heads*3*dim) -> q, k, v as (batch*heads, seq, dim)."""
    seq, batch, width = qkv.shape
    parts = qkv.reshape(seq, batch * heads, 3, width // (3 * heads))
    return [parts[:, :, i].transpose(0, 1) for i in range(3)]


def _gather(qkv_shape, heads, grads, slots, torch):
    """Write per-slot (batch*heads, seq, dim) gradients back into the interleaved layout."""
    seq, batch, width = qkv_shape
    out = torch.zeros(seq, batch * heads, 3, width // (3 * heads), dtype=grads[0].dtype,
                      device=grads[0].device)
    for slot, g in zip(slots, grads):
        out[:, :, slot] = g.transpose(0, 1)
    return out.reshape(seq, batch, width)


def _torch_attention(torch, kind, attrs, ins, work, rnd):
    """interleaved_matmul_selfatt_qk / _valatt: one cuBLAS GEMM per output, float32
    accumulation, the 1/sqrt(dim) scale as alpha, one rounding (contrib/transformer.cu)."""
    heads = attrs["heads"]
    q, k, v = _interleaved(ins[0], heads)
    if kind == "qk":
        scale = 1.0 / float(q.shape[-1]) ** 0.5
        y = rnd(scale * torch.bmm(work(q), work(k).transpose(1, 2)))

        def backward(dy):
            dq = rnd(scale * torch.bmm(work(dy), work(k)))
            dk = rnd(scale * torch.bmm(work(dy).transpose(1, 2), work(q)))
            return [_gather(ins[0].shape, heads, [dq, dk], (0, 1), torch)]
        return y, backward
    att = ins[1]
    seq, batch, width = ins[0].shape
    o = rnd(torch.bmm(work(att), work(v)))
    y = o.reshape(batch, heads, seq, -1).permute(2, 0, 1, 3).reshape(seq, batch, width // 3)

    def backward(dy):
        dyb = dy.reshape(seq, batch * heads, -1).transpose(0, 1)
        datt = rnd(torch.bmm(work(dyb), work(v).transpose(1, 2)))
        dv = rnd(torch.bmm(work(att).transpose(1, 2), work(dyb)))
        return [_gather(ins[0].shape, heads, [dv], (2,), torch), datt]
    return y, backward


def _plain(a):
    """A tensor as a NumPy array of its own dtype (float16 on the GPU, float64 exact)."""
    return a.detach().cpu().numpy()


def gpu_run(torch, specs, cases, name, device, dtype):
    """One case on ``device`` in ``dtype`` (float16 on the GPU, float64 for the reference)."""
    kind, attrs, _ = specs[name]
    t = {k.split("/", 1)[1]: torch.from_numpy(np.asarray(v)) for k, v in cases.items()
         if k.startswith(name + "/") and "/emu_" not in k}
    ins, y, backward = _torch_case(torch, kind, attrs, t, device, dtype)
    result = {"out": _plain(y)}
    if name + "/emu_dy" in cases:
        dy = torch.from_numpy(cases[name + "/emu_dy"]).to(device=device, dtype=dtype)
        if backward is None:
            y.backward(dy)
            grads = [a.grad for a in ins]
        else:
            grads = backward(dy)
        for k, g in enumerate(grads):
            result["grad%d" % k] = _plain(g)
    return result


def compare(a, b):
    """Share bit-identical, relative L2 and max ulp distance between two float16 arrays."""
    a, b = np.asarray(a, F16), np.asarray(b, F16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    norm = np.linalg.norm(b64) or 1.0

    def ordinal(x):
        bits = x.view(np.int16).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFF), bits)

    return {"bit_identical": float(np.mean(a.view(np.uint16) == b.view(np.uint16))),
            "rel_l2": float(np.linalg.norm(a64 - b64) / norm),
            "max_ulp": int(np.abs(ordinal(a) - ordinal(b)).max())}


def _fingerprint(cases, name):
    """crc32 of a case's inputs, so GPU outputs are only ever compared for the same inputs."""
    return "%08x" % zlib.crc32(b"".join(np.ascontiguousarray(cases[k]).tobytes()
                                        for k in sorted(cases) if k.startswith(name + "/")
                                        and "/emu_" not in k))


def gpu_half(cases_path, out_path, outputs_path):
    """Recompute every case on the GPU; write the raw outputs and the comparison."""
    import torch

    if not torch.cuda.is_available():
        sys.exit("the GPU half needs a CUDA GPU visible to PyTorch")
    cases = dict(np.load(cases_path))
    specs = json.loads(bytes(cases.pop("__specs__")).decode())
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    raw, failed = {}, {}
    for name in specs:
        try:
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
            gpu = gpu_run(torch, specs, cases, name, "cuda", torch.float16)
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, False
            other = gpu_run(torch, specs, cases, name, "cuda", torch.float16)
            exact = gpu_run(torch, specs, cases, name, "cpu", torch.float64)
        except Exception as error:  # one broken case must not cost the others their GPU time
            failed[name] = "%s: %s" % (type(error).__name__, error)
            print("case %s failed: %s" % (name, failed[name]))
            continue
        for key in gpu:
            raw.update({"%s/%s/gpu" % (name, key): gpu[key], "%s/%s/other" % (name, key): other[key],
                        "%s/%s/exact" % (name, key): exact[key]})
    about = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
             "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d"),
             "specs": {n: v for n, v in specs.items() if n not in failed}, "failed": failed,
             "inputs": {name: _fingerprint(cases, name) for name in specs}}
    raw["__about__"] = np.frombuffer(json.dumps(about).encode(), dtype=np.uint8)
    np.savez_compressed(outputs_path, **raw)
    print("wrote", outputs_path)
    return compare_half(cases_path, outputs_path, out_path)


def compare_half(cases_path, outputs_path, out_path):
    """Compare the emulated outputs in ``cases_path`` with GPU outputs recorded earlier."""
    cases = dict(np.load(cases_path))
    cases.pop("__specs__")
    raw = dict(np.load(outputs_path))
    about = json.loads(bytes(raw.pop("__about__")).decode())
    rows = {}
    for name in about["specs"]:
        if _fingerprint(cases, name) != about["inputs"][name]:
            sys.exit("case %s: the inputs differ from those the GPU ran; run the cpu half with "
                     "the same cases" % name)
        for key in sorted(k.split("/")[1] for k in raw if k.startswith(name + "/")
                          and k.endswith("/gpu")):
            got = {w: raw["%s/%s/%s" % (name, key, w)] for w in ("gpu", "other", "exact")}
            emu = cases["%s/emu_%s" % (name, key)]
            rows["%s:%s" % (name, key)] = {
                "emulated_vs_gpu": compare(emu, got["gpu"]),
                "gpu_vs_exact": compare(got["gpu"], got["exact"]),
                "emulated_vs_exact": compare(emu, got["exact"]),
                "gpu_vs_gpu_other_algorithms": compare(got["other"], got["gpu"]),
            }
    result = {"status": "measured", "mxnet_on_gpu": False, "date": about["date"],
              "device": about["device"], "torch": about["torch"], "cudnn": about["cudnn"],
              "cases_file": os.path.basename(cases_path),
              "gpu_outputs_file": os.path.basename(outputs_path),
              "emulation_compared": time.strftime("%Y-%m-%d"),
              "failed_on_gpu": about.get("failed", {}),
              "method": __doc__.split("\n\n")[1].strip(), "cases": rows}
    with open(out_path, "w") as handle:
        json.dump(result, handle, indent=1)
    for key, row in rows.items():
        e = row["emulated_vs_gpu"]
        print("%-32s bit-identical %6.2f%%  rel L2 %.1e  max %d ulp  (GPU noise %.1e)"
              % (key, 100 * e["bit_identical"], e["rel_l2"], e["max_ulp"],
                 row["gpu_vs_gpu_other_algorithms"]["rel_l2"]))
    print("wrote", out_path)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("half", choices=["cpu", "gpu", "compare"])
    parser.add_argument("--cases", default=CASES, help="the .npz of cases (default %(default)s)")
    parser.add_argument("--out", default=RESULTS, help="results JSON (gpu and compare)")
    parser.add_argument("--gpu-outputs", default=OUTPUTS,
                        help="the GPU's raw outputs: written by gpu, read by compare")
    parser.add_argument("--only", nargs="*", choices=sorted(SPECS), help="a subset of cases")
    args = parser.parse_args(argv)
    if args.half == "cpu":
        names = cpu_half(args.cases, args.only)
        print("wrote %d cases to %s; run the gpu half on a GPU machine" % (len(names), args.cases))
    elif args.half == "gpu":
        gpu_half(args.cases, args.out, args.gpu_outputs)
    else:
        compare_half(args.cases, args.gpu_outputs, args.out)


if __name__ == "__main__":
    main()
