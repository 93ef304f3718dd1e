"""What ``mxmixed info`` reports: the MXNet build, the GPUs, float16 and bfloat16 support, the
package's layers and the versions."""
import os
import pkgutil
import platform
from importlib import metadata

import mxnet as mx

from . import _state, emulation
from ._version import __version__

__all__ = ["collect", "format_info", "layout", "LAYERS", "PINNED_PACKAGES"]

LAYERS = (
    ("aside", ("tutorial", "testing")),
    ("faces", ("cli", "launch", "sysinfo", "run", "_preflight")),
    ("upper", ("symbolic", "diagnostics")),
    ("training", ("training", "optim", "checkpoint", "distributed", "_amp", "_handle", "_master",
                  "_ckpt_format", "_ckpt_plain", "_ckpt_trainer")),
    ("numerics", ("emulation", "scaler")),
    ("bottom", ("_state", "_io", "_graph", "_kvstore", "_finite", "_compat", "_version",
                "_progress", "_signals", "_untrusted")),
)
"""The layers of the package, top first: a module imports only from its layer and those below
(``.importlinter`` enforces the same layers; ``import mxmixed`` loads nothing of 'aside')."""

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


def layout():
    """The package's layers with the modules that exist in this install.

    Returns
    -------
    list of (str, list of str)
        ``(layer, modules)`` top first, as in :data:`LAYERS`; modules found in the package but
        in no layer come last, under ``'unplaced'``.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    present = {m.name for m in pkgutil.iter_modules([here])} - {"__main__"}
    rows = [(layer, [m for m in modules if m in present]) for layer, modules in LAYERS]
    placed = {m for _, modules in LAYERS for m in modules}
    if present - placed:
        rows.append(("unplaced", sorted(present - placed)))
    return rows


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
        ``float16_gemm``, ``emulation``, ``bfloat16``, ``layout`` and ``packages``.
    """
    features = mx.runtime.Features()
    enabled = sorted(name for name in features.keys() if features.is_enabled(name))
    cuda = features.is_enabled("CUDA")
    gpus = mx.context.num_gpus() if cuda else 0
    if gpus:
        gemm = "native: float16 GEMMs run on %d GPU(s) (Tensor Cores on Volta and newer)" % gpus
    else:
        gemm = ("emulated: MXNet's CPU build has no float16 GEMM, so mxmixed.emulation runs "
                "float16 graphs on CPU with GPU-faithful numerics (numerics, not speed)")
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
        "layout": layout(),
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
        ("layers", "top first; each imports only its own layer and those below"),
    ]
    lines += [("  " + layer, ", ".join(modules) or "-") for layer, modules in info["layout"]]
    lines += [("versions", "of the pinned packages installed")]
    lines += [("  " + name, version) for name, version in info["packages"].items()
              if version is not None]
    width = max(len(key) for key, _ in lines)
    return "\n".join("%s : %s" % (key.ljust(width), value) for key, value in lines)
