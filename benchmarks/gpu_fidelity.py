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

It runs in two halves:

``python benchmarks/gpu_fidelity.py cpu [--cases FILE]``
    on any machine with MXNet (CPU): draws seeded float16 inputs, computes the emulated
    outputs with :mod:`mxmixed.emulation` and writes them with the inputs to an ``.npz`` file
    (default ``benchmarks/gpu-fidelity-cases.npz``).
``python benchmarks/gpu_fidelity.py gpu [--cases FILE] [--out FILE]``
    on a machine with a CUDA GPU and PyTorch (not a dependency of mxmixed; MXNet is not
    needed there): recomputes every case on the GPU twice, the second time with other
    algorithms (``cudnn.benchmark`` on, non-deterministic) as the GPU's own noise floor, and
    in float64 on the CPU as the exact reference; writes
    ``benchmarks/results-gpu-fidelity.json``: per case the share of elements bit-identical
    between emulated and GPU, the relative L2 distances emulated-GPU, GPU-exact and
    GPU-GPU(other algorithms), and the largest distance in float16 ulps.

Until the GPU half has run, ``results-gpu-fidelity.json`` says ``"status": "not yet run"`` and
the figures measured earlier on an H100 (PyTorch 2.11, cuDNN 9.19) stand.
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
}
GRADS = ("fc", "fc_bias", "conv3x3_bias", "batchnorm_train")  # backward compared too


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
            out = mx.nd.elemwise_add(ins[0], ins[1])
    result = {"out": out.asnumpy()}
    if recording:
        rng = np.random.RandomState(zlib.crc32(name.encode()))
        dy = (rng.standard_normal(out.shape) * 0.1).astype(F16)
        out.backward(mx.nd.array(dy, dtype=F16))
        result["dy"] = dy
        for k, a in enumerate(ins):
            result["grad%d" % k] = a.grad.asnumpy()
    return result


def cpu_half(path, names=None):
    """Write the cases and their emulated outputs to ``path``; return the case names."""
    from mxmixed import emulation

    rng = np.random.RandomState(15)
    payload, names = {}, list(names or SPECS)
    with emulation.emulated():
        for name in names:
            arrays = draw(name, SPECS[name], rng)
            arrays.update({"emu_" + k: v for k, v in emulate(name, SPECS[name], arrays).items()})
            payload.update({"%s/%s" % (name, k): v for k, v in arrays.items()})
    payload["__specs__"] = np.frombuffer(json.dumps({n: SPECS[n] for n in names}).encode(),
                                         dtype=np.uint8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez_compressed(path, **payload)
    return names


# ---------------------------------------------------------------- GPU half: PyTorch
def _torch_case(torch, kind, attrs, t, device, dtype):
    """One forward (and backward) as MXNet 1.9.1's GPU kernels compose it."""
    import torch.nn.functional as F

    ins = [t["in%d" % k].to(device=device, dtype=dtype).requires_grad_(True)
           for k in range(sum(1 for key in t if key.startswith("in")))]
    bias = ins[2] if len(ins) > 2 else None
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
    else:
        y = ins[0] + ins[1]
    if bias is not None:  # the GPU's second rounding: add_bias_kernel / cudnnAddTensor
        shape = [1] * y.dim()
        shape[1 if kind != "fc" else -1] = -1
        y = y + bias.reshape(shape)
    return ins, y


def _to16(a):
    return a.detach().cpu().numpy().astype(F16)


def gpu_run(torch, specs, cases, name, device, dtype):
    """One case on ``device`` in ``dtype`` (float16 on the GPU, float64 for the reference)."""
    kind, attrs, _ = specs[name]
    t = {k.split("/", 1)[1]: torch.from_numpy(np.asarray(v)) for k, v in cases.items()
         if k.startswith(name + "/") and "/emu_" not in k}
    ins, y = _torch_case(torch, kind, attrs, t, device, dtype)
    result = {"out": _to16(y)}
    if name + "/emu_dy" in cases:
        y.backward(torch.from_numpy(cases[name + "/emu_dy"]).to(device=device, dtype=dtype))
        for k, a in enumerate(ins):
            result["grad%d" % k] = _to16(a.grad)
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


def gpu_half(cases_path, out_path):
    import torch

    if not torch.cuda.is_available():
        sys.exit("the GPU half needs a CUDA GPU visible to PyTorch")
    cases = dict(np.load(cases_path))
    specs = json.loads(bytes(cases.pop("__specs__")).decode())
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = {}
    for name in specs:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
        gpu = gpu_run(torch, specs, cases, name, "cuda", torch.float16)
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, False
        other = gpu_run(torch, specs, cases, name, "cuda", torch.float16)
        exact = gpu_run(torch, specs, cases, name, "cpu", torch.float64)
        for key in gpu:
            emu = cases["%s/emu_%s" % (name, key)]
            rows["%s:%s" % (name, key)] = {
                "emulated_vs_gpu": compare(emu, gpu[key]),
                "gpu_vs_exact": compare(gpu[key], exact[key]),
                "emulated_vs_exact": compare(emu, exact[key]),
                "gpu_vs_gpu_other_algorithms": compare(other[key], gpu[key]),
            }
    result = {"status": "measured", "mxnet_on_gpu": False, "date": time.strftime("%Y-%m-%d"),
              "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version(), "cases_file": os.path.basename(cases_path),
              "method": __doc__.split("\n\n")[1].strip(), "cases": rows}
    with open(out_path, "w") as handle:
        json.dump(result, handle, indent=1)
    for key, row in rows.items():
        e = row["emulated_vs_gpu"]
        print("%-28s bit-identical %6.2f%%  rel L2 %.1e  max %d ulp  (GPU noise %.1e)"
              % (key, 100 * e["bit_identical"], e["rel_l2"], e["max_ulp"],
                 row["gpu_vs_gpu_other_algorithms"]["rel_l2"]))
    print("wrote", out_path)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("half", choices=["cpu", "gpu"])
    parser.add_argument("--cases", default=CASES, help="the .npz of cases (default %(default)s)")
    parser.add_argument("--out", default=RESULTS, help="results JSON (GPU half)")
    parser.add_argument("--only", nargs="*", choices=sorted(SPECS), help="a subset of cases")
    args = parser.parse_args(argv)
    if args.half == "cpu":
        names = cpu_half(args.cases, args.only)
        print("wrote %d cases to %s; run the gpu half on a GPU machine" % (len(names), args.cases))
    else:
        gpu_half(args.cases, args.out)


if __name__ == "__main__":
    main()
