"""AMX for MXNet 1.9.1's bfloat16: the tile kernels its oneDNN leaves off, switched on before
oneDNN's first op, whatever the user runs first.

MXNet 1.9.1 ships oneDNN v2.4.4, where AMX is a preview: oneDNN runs bfloat16 GEMMs on AMX
tiles only when ``DNNL_MAX_CPU_ISA=AVX512_CORE_AMX`` is in the environment at the moment it
first picks its instruction set (the process's first oneDNN primitive), and it does not ask
Linux (5.16 and newer) for the tile data state, so its first AMX instruction would kill the
process (SIGILL). Without AMX, oneDNN 2.4 runs a bfloat16 GEMM with its AVX512-BF16 kernels,
which on a Sapphire Rapids Xeon are slower than float32 (measured: 0.63x for 1024x512x1536;
with AMX 1.7x, on a loaded machine; ResNet-50 v1b 0.70-0.84x against 5.95-6.08x).

When it happens
    :func:`arm` runs at ``import mxmixed``, before anything of MXNet can run: where MXNet is not
    imported yet, the request runs right after ``import mxnet`` finishes (an import hook, so
    that ``import mxmixed`` itself still does not load MXNet); where it already is, at once.
    Only in the second case can oneDNN have run an op before, and then the first bfloat16 entry
    point (``mxmixed.init`` and ``amp_scope`` with bfloat16, ``symbolic.convert`` to bfloat16,
    ``load_bfloat16``, the bfloat16 probe: :func:`request_amx`) measures one bfloat16 GEMM
    against float32; slower means oneDNN kept the instruction set it had picked, and one warning
    names the fix (import mxmixed before running MXNet ops). :func:`amx_status` says ``on`` only
    where it is.

What it does
    It asks Linux for the tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM)``), sets
    ``DNNL_MAX_CPU_ISA``, makes oneDNN pick its instruction set with one tiny FullyConnected and
    puts the variable back as it was (a value of the user's, empty included, is restored exactly).
    It holds the interpreter throughout (the op is called through a ``PyDLL`` handle, and no
    other thread is switched in), so that no Python code of another thread can start a child
    process that inherits the variable: a child has no tile permission and would die on its
    first AMX instruction. A thread already inside a C call that forks without the interpreter
    (``os.system``, subprocess's fork) is not held: it can fork during that one op.

The user's say
    ``MXMIXED_BFLOAT16_AMX=0`` leaves oneDNN as it is (read at ``import mxmixed``). A
    non-empty ``DNNL_MAX_CPU_ISA`` is obeyed by oneDNN itself and never replaced (the tile
    permission is still asked for where it names AMX). oneDNN 2.4 no longer reads the older
    spelling ``MKLDNN_MAX_CPU_ISA`` (measured: ``MKLDNN_MAX_CPU_ISA=AVX2`` leaves it at
    AVX-512); mxmixed honours it like ``DNNL_MAX_CPU_ISA`` by handing its value to oneDNN's pick
    (with ``DNNL_MAX_CPU_ISA`` unset or empty), on any CPU.
"""
import ctypes
import errno
import json
import os
import platform
import sys
import time
import warnings

from . import devices, env

__all__ = ["arm", "request_amx", "amx_status", "to_bfloat16", "ISA_VARIABLES", "TOO_LATE_FIX"]

_AMX_ISA = "AVX512_CORE_AMX"
#: The variables that cap oneDNN's instruction set: the one oneDNN 2.4 reads, then the older
#: spelling that mxmixed passes on to it.
ISA_VARIABLES = ("DNNL_MAX_CPU_ISA", "MKLDNN_MAX_CPU_ISA")
_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
# the probe's GEMM: big enough that AMX's lead over float32 shows (several times), small enough
# to take milliseconds
_PROBE_SHAPE = (256, 1024, 1024)
TOO_LATE_FIX = ("import mxmixed before running any MXNet op (for example as the script's first "
                "import), or run the script with `mxmixed run`")


class _Amx:
    """What this process's request found: one process, one instruction set.

    Attributes
    ----------
    status : str or None
        :func:`amx_status`'s answer; None before :func:`arm`.
    to_confirm : bool
        Whether the request came after MXNet had been imported, so that oneDNN may have picked
        its instruction set before it; the first bfloat16 entry point then measures.
    hook : object or None
        The import hook that waits for MXNet.
    """

    def __init__(self):
        self.status = None
        self.to_confirm = False
        self.hook = None


_STATE = _Amx()


def _ask_linux():
    """'' when Linux lets this process use the AMX tile data, else why not."""
    if platform.machine() != "x86_64":
        return "not an x86_64 machine"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        code = libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    except (OSError, AttributeError) as err:
        return "arch_prctl could not be called: %s" % err
    if code != 0:
        number = ctypes.get_errno()
        return "Linux refused the AMX tile state (arch_prctl: %s; Linux 5.16 or newer needed)" \
            % errno.errorcode.get(number, number)
    return ""


def _users_isa():
    """``(variable, value)`` of the user's cap on oneDNN's instruction set, or ``(None, None)``.

    An empty value counts as unset, as oneDNN reads it."""
    for name in ISA_VARIABLES:
        if os.environ.get(name):
            return name, os.environ[name]
    return None, None


def _plan():
    """``(status, isa)``: what to answer, and the instruction set to hand to oneDNN's pick (None:
    no pick needed). Reads the CPU flags and the environment, not MXNet."""
    name, value = _users_isa()
    passed_on = value if name == "MKLDNN_MAX_CPU_ISA" else None
    names_amx = value is not None and "AMX" in value.upper()
    if not devices.has_amx_bf16():
        return "off: this CPU has no AMX-BF16", passed_on
    if env.switch("MXMIXED_BFLOAT16_AMX") is False:
        return "off: MXMIXED_BFLOAT16_AMX=0", None if names_amx else passed_on
    if value is not None and not names_amx:
        return "off: %s=%s, set outside mxmixed" % (name, value), passed_on
    why = _ask_linux()
    if why:  # a cap naming AMX is not handed on: without the permission AMX kills the process
        return "off: " + why, None
    if value is not None:
        return "on: %s=%s, set outside mxmixed" % (name, value), passed_on
    return "on", _AMX_ISA


def _call(lib, name, *args):
    if getattr(lib, name)(*args) != 0:
        import mxnet as mx
        raise mx.base.MXNetError(mx.base.py_str(mx.base._LIB.MXGetLastError()))


def _pick(isa):
    """Make oneDNN pick its instruction set now, with ``DNNL_MAX_CPU_ISA=isa``, and put the
    variable back as it was; no other thread runs meanwhile."""
    import mxnet as mx
    mx.nd.waitall()  # nothing pending that would want the interpreter while this one holds it
    ones = mx.nd.ones((1, 1), ctx=mx.cpu())
    ones.wait_to_read()
    # the same loaded library, through a handle whose calls keep the interpreter's lock
    lib = ctypes.PyDLL(mx.base._LIB._name)
    op = ctypes.c_void_p()
    _call(lib, "NNGetOpHandle", b"FullyConnected", ctypes.byref(op))
    inputs = (ctypes.c_void_p * 2)(ones.handle, ones.handle)
    keys = (ctypes.c_char_p * 2)(b"num_hidden", b"no_bias")
    values = (ctypes.c_char_p * 2)(b"1", b"True")
    count, outputs = ctypes.c_int(0), ctypes.POINTER(ctypes.c_void_p)()
    stypes = ctypes.POINTER(ctypes.c_int)()
    variable = ISA_VARIABLES[0]
    saved, interval = os.environ.get(variable), sys.getswitchinterval()
    # a thread waiting for the interpreter asks for it only after a second, far longer than the
    # pick; one that asked before has its turn now (sleep), not while the variable is set. Never
    # longer: a thread switched in would keep the interpreter for that long (a busy one hung the
    # process at 1e6 s)
    sys.setswitchinterval(max(interval, 1.0))
    time.sleep(0)
    try:
        os.environ[variable] = isa
        try:
            _call(lib, "MXImperativeInvokeEx", op, 2, inputs, ctypes.byref(count),
                  ctypes.byref(outputs), 2, keys, values, ctypes.byref(stypes))
            try:
                _call(lib, "MXNDArrayWaitToRead", ctypes.c_void_p(outputs[0]))
            finally:
                lib.MXNDArrayFree(ctypes.c_void_p(outputs[0]))
        finally:
            if saved is None:
                del os.environ[variable]
            else:
                os.environ[variable] = saved
    finally:
        sys.setswitchinterval(interval)


def _decide(to_confirm):
    """Make the request now; ``to_confirm``: MXNet was imported before it."""
    status, isa = _plan()
    if isa is not None:
        try:
            _pick(isa)
        except Exception as err:  # noqa: BLE001 - the reason is the status; MXNet goes on
            status = "off: oneDNN's instruction set could not be picked (%s)" % (
                str(err).strip().splitlines() or [type(err).__name__])[0]
    _STATE.status = status
    _STATE.to_confirm = to_confirm and status == "on"


class _AfterMXNet:
    """A meta path finder that finds nothing itself: it lets ``import mxnet`` run, then makes
    the request before any code can run an MXNet op."""

    def find_spec(self, name, path=None, target=None):
        if name != "mxnet":
            return None
        _unhook()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run_mxnet = loader.exec_module

        def exec_module(module):
            del loader.exec_module  # the loader's own again, should it load anything else
            run_mxnet(module)
            if _STATE.status is None:
                try:
                    _decide(to_confirm=False)
                except ValueError:  # a bad MXMIXED_BFLOAT16_AMX: the entry points raise it
                    pass
        loader.exec_module = exec_module
        return spec


def _unhook():
    if _STATE.hook is not None and _STATE.hook in sys.meta_path:
        sys.meta_path.remove(_STATE.hook)
    _STATE.hook = None


def arm():
    """Make the request before MXNet's first op: at once where MXNet is imported, else right
    after ``import mxnet``. Called by ``import mxmixed``; a second call does nothing."""
    if _STATE.status is not None or _STATE.hook is not None:
        return
    try:
        status, isa = _plan()
    except ValueError:  # a bad MXMIXED_BFLOAT16_AMX: the entry points raise it
        return
    if isa is None:
        _STATE.status = status
    elif "mxnet" in sys.modules:
        _decide(to_confirm=True)
    else:
        _STATE.hook = _AfterMXNet()
        sys.meta_path.insert(0, _STATE.hook)


def to_bfloat16(array):
    """``array`` cast to bfloat16 by MXNet's ``amp_cast`` (its Python wrappers refuse the name).

    Parameters
    ----------
    array : mxnet.nd.NDArray
        On the CPU.

    Returns
    -------
    mxnet.nd.NDArray
    """
    import mxnet as mx
    graph = {"nodes": [{"op": "null", "name": "x", "inputs": []},
                       {"op": "amp_cast", "name": "x_bf16", "attrs": {"dtype": "bfloat16"},
                        "inputs": [[0, 0, 0]]}],
             "arg_nodes": [0], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}
    symbol = mx.sym.load_json(json.dumps(graph))
    return symbol.bind(mx.cpu(), {"x": array}).forward()[0]


def _gemm_ratio(repeats=5):
    """How many times faster a bfloat16 GEMM runs than a float32 one here (median of
    interleaved runs)."""
    import time

    import numpy as np

    import mxnet as mx
    m, k, n = _PROBE_SHAPE
    rng = np.random.RandomState(0)
    a = mx.nd.array(rng.uniform(-1, 1, (m, k)))
    w = mx.nd.array(rng.uniform(-1, 1, (n, k)))
    a16, w16 = (to_bfloat16(x) for x in (a, w))
    times = ([], [])
    for k_run in range(repeats + 1):
        for (x, y), spent in zip(((a, w), (a16, w16)), times):
            start = time.perf_counter()
            mx.nd.FullyConnected(x, y, no_bias=True, num_hidden=n).wait_to_read()
            if k_run:
                spent.append(time.perf_counter() - start)
    return float(np.median(times[0]) / np.median(times[1]))


def request_amx():
    """Where the request may have come too late, find out; once per process.

    Called by every bfloat16 entry point. Where MXNet was imported before mxmixed, oneDNN
    may have picked its instruction set before the request: one bfloat16 GEMM is timed
    against float32 (milliseconds), and where bfloat16 is slower, oneDNN kept its pick, the
    status says so and one warning names the fix.

    Returns
    -------
    str
        :func:`amx_status`'s answer.

    Raises
    ------
    ValueError
        When ``MXMIXED_BFLOAT16_AMX`` is neither 0, 1 nor empty.
    """
    if _STATE.status is None:
        _unhook()
        _decide(to_confirm="mxnet" in sys.modules)
    if _STATE.to_confirm:
        _STATE.to_confirm = False
        ratio = _gemm_ratio()
        if ratio < 1.0:
            _STATE.status = ("off: requested after MXNet had run oneDNN ops, which keep the "
                             "instruction set they picked (a bfloat16 GEMM ran %.2fx float32 "
                             "here)" % ratio)
            warnings.warn("oneDNN's AMX kernels are off: MXNet ran oneDNN ops before mxmixed "
                          "was imported, and a bfloat16 GEMM ran %.2fx float32 here; %s"
                          % (ratio, TOO_LATE_FIX), stacklevel=3)
        else:
            _STATE.status = "on (a bfloat16 GEMM ran %.2fx float32 here)" % ratio
    return _STATE.status


def amx_status():
    """What the request answered in this process, or None before it.

    Returns
    -------
    str or None
        ``'on'`` (oneDNN picked AMX: asked for before its first op, or measured), or
        ``'off: '`` and why (no AMX on this CPU, ``MXMIXED_BFLOAT16_AMX=0``, Linux refused,
        an instruction set set by the user, or asked for too late). Where the request came
        after MXNet had been imported and nothing has measured it yet, the answer says so.
    """
    if _STATE.status is not None and _STATE.to_confirm:
        return ("requested after MXNet had been imported: on only if MXNet ran no oneDNN op "
                "before; the first bfloat16 entry point measures it")
    return _STATE.status
