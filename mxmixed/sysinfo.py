"""What ``mxmixed info`` reports: the MXNet build, the GPUs, float16 and bfloat16 support and
the versions."""
import platform
from importlib import metadata

import mxnet as mx

from . import _state, emulation
from ._version import __version__

__all__ = ["collect", "format_info", "PINNED_PACKAGES"]

PINNED_PACKAGES = ("mxnet", "mxnet-cu112", "numpy", "gluoncv", "opencv-python", "scikit-learn",
                   "matplotlib", "tqdm", "pytest", "nbval")


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_has_avx512_bf16():
    """Whether the CPU advertises AVX512-BF16 (read from /proc/cpuinfo; False elsewhere).

    Returns
    -------
    bool
    """
    try:
        with open("/proc/cpuinfo") as handle:
            return "avx512_bf16" in handle.read()
    except OSError:
        return False


def _bfloat16():
    runs, reason = _state.bfloat16_support()
    if not runs:
        return "no: " + reason
    return ("runs (oneDNN, AVX-512 F/BW/VL/DQ); AVX512-BF16 instructions: %s"
            % ("yes, native speed" if cpu_has_avx512_bf16() else "no, emulated by oneDNN"))


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
