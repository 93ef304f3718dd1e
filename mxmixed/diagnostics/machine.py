"""This machine, as mixed precision sees it (what ``mxmixed info`` prints): the MXNet build, the
GPUs, float16 and bfloat16 support and the versions; :func:`probe_bfloat16` times bfloat16 here."""
import platform
import time
from importlib import metadata

import numpy as np

import mxnet as mx

from .. import emulation
from .._core import amx, devices
from .._core.amx import to_bfloat16
from .._version import __version__

__all__ = ["collect", "format_info", "probe_bfloat16", "format_probe", "to_bfloat16",
           "PINNED_PACKAGES"]

PINNED_PACKAGES = ("mxnet", "mxnet-cu112", "numpy", "gluoncv", "opencv-python", "scikit-learn",
                   "gluonnlp", "matplotlib", "tqdm", "onnx", "onnxruntime", "pytest", "nbval")


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _bfloat16():
    runs, reason = devices.bfloat16_support()
    if not runs:
        return "cannot run: " + reason
    native = devices.bfloat16_native()
    if native:
        status = amx.amx_status() or "not requested (see MXMIXED_BFLOAT16_AMX)"
        if status.startswith("on"):
            status += (" (asked for at `import mxmixed`; MXNet ops run before it would leave "
                       "oneDNN without AMX, slower than float32)")
        tiles = "; oneDNN's AMX kernels: %s" % status if native == "AMX-BF16" else ""
        return ("native: oneDNN runs bfloat16 with this CPU's %s instructions (`mxmixed info "
                "--probe` measures the speed-up)%s" % (native, tiles))
    return ("emulated by oneDNN: AVX-512 without AVX512-BF16 or AMX, so bfloat16 runs but is "
            "slower than float32 (`mxmixed info --probe` measures it)")


def probe_bfloat16(repeats=7):
    """Time a float32 and a bfloat16 GEMM and convolution here, interleaved.

    The GEMM is a FullyConnected of (256, 1024) by (1024, 1024); the convolution a 3x3 one
    of 64 to 64 channels on (8, 64, 56, 56), as in ResNet's first stage. Each runs once to
    warm up, then ``repeats`` times, float32 and bfloat16 alternating; the medians count.
    A few seconds in all.

    Parameters
    ----------
    repeats : int, default 7

    Returns
    -------
    dict
        ``{'gemm': (float32 s, bfloat16 s, speed-up), 'conv': (...)}``; a speed-up below 1
        means bfloat16 is slower here.

    Raises
    ------
    RuntimeError
        When bfloat16 cannot run here (the reason of :func:`mxmixed.bfloat16_support`).
    """
    runs, reason = devices.bfloat16_support()
    if not runs:
        raise RuntimeError("bfloat16 cannot run here: %s" % reason)
    amx.request_amx()
    rng = np.random.RandomState(0)

    def arrays(*shapes):
        return [mx.nd.array(rng.uniform(-1, 1, size=s)) for s in shapes]

    cases = {
        "gemm": (lambda a, b: mx.nd.FullyConnected(a, b, no_bias=True, num_hidden=1024),
                 arrays((256, 1024), (1024, 1024))),
        "conv": (lambda a, b: mx.nd.Convolution(a, b, kernel=(3, 3), pad=(1, 1), num_filter=64,
                                                no_bias=True),
                 arrays((8, 64, 56, 56), (64, 64, 3, 3))),
    }
    out = {}
    for name, (op, inputs) in cases.items():
        variants = (inputs, [to_bfloat16(a) for a in inputs])
        times = ([], [])
        for k in range(repeats + 1):
            for variant, spent in zip(variants, times):
                start = time.perf_counter()
                op(*variant).wait_to_read()
                if k:  # the first round warms up oneDNN's primitive caches
                    spent.append(time.perf_counter() - start)
        t32, t16 = float(np.median(times[0])), float(np.median(times[1]))
        out[name] = (t32, t16, t32 / t16)
    return out


def format_probe(result):
    """:func:`probe_bfloat16`'s timings as lines of text (str)."""
    names = {"gemm": "GEMM 256x1024x1024", "conv": "conv 3x3 64ch 8x56x56"}
    lines = ["bfloat16 probe (medians of interleaved runs on this machine):"]
    for name, (t32, t16, ratio) in result.items():
        lines.append("  %-22s float32 %7.2f ms  bfloat16 %7.2f ms  speed-up %.2fx%s"
                     % (names.get(name, name), 1e3 * t32, 1e3 * t16, ratio,
                        "  (slower)" if ratio < 1 else ""))
    return "\n".join(lines)


def collect():
    """Gather the facts ``mxmixed info`` prints.

    Returns
    -------
    dict
        Keys ``mxmixed``, ``python``, ``mxnet``, ``build``, ``features``, ``gpus``,
        ``float16_gemm``, ``emulation``, ``bfloat16`` and ``packages``.
    """
    features = mx.runtime.Features()
    enabled = sorted(name for name in features.keys() if features.is_enabled(name))
    cuda = features.is_enabled("CUDA")
    gpus = mx.context.num_gpus() if cuda else 0
    if gpus:
        gemm = "native: float16 GEMMs run on %d GPU(s) (Tensor Cores on Volta and newer)" % gpus
    else:
        gemm = ("none on this CPU build: float16 GEMMs fail here unless mxmixed.emulation runs "
                "them (float32 arithmetic, float16 rounding: numerics, not speed)")
    return {
        "mxmixed": __version__,
        "python": platform.python_version(),
        "mxnet": mx.__version__,
        "build": "CUDA" if cuda else "CPU",
        "features": enabled,
        "gpus": gpus,
        "float16_gemm": gemm,
        "emulation": emulation.describe(),
        "bfloat16": _bfloat16(),
        "packages": {name: _version(name) for name in PINNED_PACKAGES},
    }


def format_info(info):
    """Format :func:`collect`'s dict as aligned lines of text.

    Parameters
    ----------
    info : dict
        As returned by :func:`collect`.

    Returns
    -------
    str
    """
    lines = [
        ("mxmixed", info["mxmixed"]),
        ("python", info["python"]),
        ("mxnet", "%s (%s build)" % (info["mxnet"], info["build"])),
        ("build features", ", ".join(info["features"])),
        ("GPUs seen", str(info["gpus"])),
        ("float16 GEMM", info["float16_gemm"]),
        ("CPU emulation", info["emulation"]),
        ("bfloat16 AMP (MXNet)", info["bfloat16"]),
    ]
    lines += [("versions", "of the pinned packages installed")]
    lines += [("  " + name, version) for name, version in info["packages"].items()
              if version is not None]
    width = max(len(key) for key, _ in lines)
    return "\n".join("%s : %s" % (key.ljust(width), value) for key, value in lines)
