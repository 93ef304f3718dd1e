"""The one home of what mxmixed reads about the CPU: its flags, and which MXNet contexts are its memory.

MXNet runs an op on ``cpu_pinned`` (page-locked for GPU copies) and ``cpu_shared`` (shared with
DataLoader workers) arrays with its CPU kernels, so those contexts are the CPU's as much as
``cpu`` is: a float16 GEMM fails on them as it does on ``cpu``, and the emulation serves them.
"""

__all__ = ["CPU_DEVICE_TYPES", "is_cpu", "cpu_flags"]

CPU_DEVICE_TYPES = frozenset(("cpu", "cpu_pinned", "cpu_shared"))
"""frozenset of str: the ``device_type`` of every MXNet context in the CPU's memory."""


def is_cpu(ctx):
    """Whether MXNet runs ``ctx``'s ops with its CPU kernels.

    Parameters
    ----------
    ctx : mxnet.Context or None
        None (no context given) and an object without a ``device_type`` count as the CPU,
        MXNet's default.

    Returns
    -------
    bool
    """
    return ctx is None or getattr(ctx, "device_type", "cpu") in CPU_DEVICE_TYPES


def cpu_flags():
    """The CPU's feature flags, as ``/proc/cpuinfo`` lists them (``'avx512f'``, ...).

    Returns
    -------
    set of str or None
        None where they cannot be read (no ``/proc/cpuinfo``, or no ``flags`` line).
    """
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None
