"""Whether bfloat16 AMP trains a block faster than float32 on this CPU, measured once per block.

bfloat16 is the only reduced precision whose CPU speed is real, and whether it pays for training
depends on the model and the CPU: on an AVX512-BF16 CPU without AMX, MobileNet v2's training
step is slower in bfloat16 than in float32 while ResNets are faster; with AMX, small
convolutions are slower. So it is measured, not assumed. Under bfloat16 AMP (``init`` /
``amp_scope``), the first training forward (autograd recording) of each hybridized block is
followed by one measurement: the block's cached bfloat16 graph and its float32 twin (the same
graph without AMP's casts and the parameter copies before them) each run forward and backward on
a copy of that call's inputs and of the block's parameters, in alternation. Where bfloat16 is
slower, one warning gives the figure; every result is kept for :func:`bfloat16_speed` (and
``mxmixed run``'s report).

The measurement never touches the block's parameters, gradients or running statistics (it works
on copies), and draws no random numbers: its graphs run Dropout with ``p=0`` (MXNet's random
state cannot be saved and restored), and a graph with any other random op is not measured.
For a few seconds it holds about twice the block's training memory more; where that would
exceed the memory available, it is skipped with a note. ``MXMIXED_BFLOAT16_SPEED_CHECK=0``
turns it off.
"""
import re
import time
import warnings
import weakref
from dataclasses import asdict, dataclass
from typing import Optional, Tuple

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon.block import _flatten

from .._core.devices import is_cpu
from .._core.dtypes import BFLOAT16
from .._core.env import switch
from .._core.errors import one_line
from .._core.graph import Graph
from .._core.ops import CAST_OPS
from .._core.progress import progress
from .._core.timing import median_round, repeats_for
from .._core.state import AMP

__all__ = ["TrainingSpeed", "bfloat16_speed", "watch_training_speed", "SPEED_CHECK"]

SPEED_CHECK = "MXMIXED_BFLOAT16_SPEED_CHECK"
WARM_UP = 1  # steps of each graph before timing: the first builds memory and oneDNN's primitives
ROUNDS = 3  # timed rounds, each one step of each graph (more for a small one: _core.timing)
MAX_REPEATS = 50
BAR_DELAY = 1.0  # seconds before the bar shows: a small model's check ends before
# a block slower in bfloat16 by less than this a step is recorded, not warned about: GluonNLP
# hybridizes its embeddings apart (0.83x there, 0.04 ms a step), and such a piece alone says
# nothing of the model's speed
NEGLIGIBLE_SECONDS = 0.001
# ops that draw random numbers (MXNet's random state cannot be saved); Dropout and RNN's
# dropout are measured with p=0 instead
_RANDOM = re.compile(r"^_?(random_(?!pdf)|sample_|npi_(bernoulli|choice|gamma|multinomial|normal|"
                     r"uniform|random|shuffle)|shuffle|image_random_|contrib_dgl_.*sample)")
_DROPOUT_OPS = ("Dropout", "RNN")
_STACK = 5  # warn -> _check -> _call_cached_op -> HybridBlock.forward -> Block.__call__ -> user

_MEASURED = weakref.WeakSet()  # the blocks whose first training forward was followed up
_RECORDS = []
# since which record the blocks count together, and whether this AMP warned already
_SCOPE = {"since": 0, "warned": False}


@dataclass(frozen=True)
class TrainingSpeed:
    """One block's training step (forward and backward) in bfloat16 AMP against float32.

    Attributes
    ----------
    block : str
        The block's name (``mobilenetv20``).
    batch_size : int or None
        The first input's first dimension.
    float32_seconds, bfloat16_seconds : float or None
        Time of one forward and backward of the block's graph, in the round whose ratio is
        the median.
    speedup : float or None
        float32 time / bfloat16 time, the median over the rounds: above 1, bfloat16 is faster.
    spread : tuple of float or None
        The smallest and largest ratio over the rounds.
    rounds : int
        Rounds timed, each one step of each graph (as many as fill about 50 ms for a small
        graph), after one warm-up step each.
    check_seconds : float
        How long the whole check took (binding and warm-up included).
    skipped : str or None
        Why the block was not measured (the other fields are then None), or None.
    backward : bool
        Whether its step has a backward: False for a block no gradient flows through (a label
        smoothing of the targets), whose forward alone is timed.
    """

    block: str
    batch_size: Optional[int]
    float32_seconds: Optional[float]
    bfloat16_seconds: Optional[float]
    speedup: Optional[float]
    spread: Optional[Tuple[float, float]]
    rounds: int
    check_seconds: float
    skipped: Optional[str] = None
    backward: bool = True

    @property
    def slower(self) -> bool:
        """Whether bfloat16 trained this block slower than float32 here."""
        return self.speedup is not None and self.speedup < 1.0

    def as_dict(self) -> dict:
        """The record as plain data (a run report's entry)."""
        return asdict(self)

    def __str__(self):
        if self.skipped:
            return "%s: not measured (%s)" % (self.block, self.skipped)
        return ("%s: bfloat16 %.2fx float32 (%.2f-%.2f; %s, batch %s: bfloat16 "
                "%.3g s, float32 %.3g s)" % (self.block, self.speedup, self.spread[0],
                                              self.spread[1], self._timed(), self.batch_size,
                                              self.bfloat16_seconds, self.float32_seconds))

    def _timed(self):
        return "forward+backward" if self.backward else "forward only: no gradient flows through it"

    def warning(self) -> Optional[str]:
        """One line for a user: that bfloat16 is slower here, with the figure, or why the block
        was not measured; None when bfloat16 is faster, or slower by under a millisecond a
        step (a small piece of a model: the record keeps its figure)."""
        if self.skipped:
            return ("bfloat16 training speed of block '%s' not measured: %s"
                    % (self.block, self.skipped))
        if not self.slower or self.bfloat16_seconds - self.float32_seconds < NEGLIGIBLE_SECONDS:
            return None
        return ("bfloat16 training of block '%s' is slower than float32 on this CPU: %.2fx "
                "(%s, batch %s: bfloat16 %.3g s, float32 %.3g s); train in "
                "float32 here, or keep the slow ops float32 (fp32_ops=...)"
                % (self.block, self.speedup, self._timed(), self.batch_size,
                   self.bfloat16_seconds, self.float32_seconds))


def bfloat16_speed() -> Tuple[TrainingSpeed, ...]:
    """The bfloat16 training speed of each block measured in this process, in order.

    Under bfloat16 AMP, each hybridized block's first training forward is followed by one
    measurement of its forward and backward in bfloat16 against float32 (off with
    ``MXMIXED_BFLOAT16_SPEED_CHECK=0``).

    Returns
    -------
    tuple of TrainingSpeed
    """
    return tuple(_RECORDS)


def watch_training_speed() -> None:
    """Follow the first training forward of each hybridized block with the measurement, for as
    long as AMP's helpers' patches last (``amp_scope`` undoes it on exit).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        For a value of ``MXMIXED_BFLOAT16_SPEED_CHECK`` other than 0 or 1, in one line.
    """
    switch(SPEED_CHECK)  # a bad value is one line now, before any training
    _SCOPE.update(since=len(_RECORDS), warned=False)
    original = gluon.HybridBlock._call_cached_op

    def _call_cached_op(block, *args):
        out = original(block, *args)
        if autograd.is_recording() and autograd.is_training() and block not in _MEASURED \
                and switch(SPEED_CHECK):
            _MEASURED.add(block)
            _check(block, args)
        return out

    AMP.patches.patch(gluon.HybridBlock, "_call_cached_op", _call_cached_op)


def _check(block, args):
    """Measure ``block`` on the inputs of its call; warn where bfloat16 is slower or the
    measurement could not run. Never raises: the user's training goes on."""
    start = time.perf_counter()
    try:
        record = _measure(block, args, start)
    except Exception as err:  # whatever fails here must not stop the user's training
        why = one_line(err) if isinstance(err, mx.base.MXNetError) else "%s: %s" % (
            type(err).__name__, (str(err).strip().splitlines() or [""])[0])
        record = _skipped(block, args, start, "the measurement failed: %s" % why)
    if record is None:
        return
    _RECORDS.append(record)
    line = record.warning()
    if line:
        _SCOPE["warned"] = True
    elif not _SCOPE["warned"]:
        line = _together(_RECORDS[_SCOPE["since"]:])
        _SCOPE["warned"] = line is not None
    if line:
        warnings.warn(line, stacklevel=_STACK)


def _together(records):
    """One line where the blocks measured under this AMP, none slower by a millisecond a step
    alone, are together (a model hybridized in pieces, as GluonNLP's Transformer); or None."""
    measured = [r for r in records if r.speedup is not None]
    float32 = sum(r.float32_seconds for r in measured)
    bfloat16 = sum(r.bfloat16_seconds for r in measured)
    if len(measured) < 2 or bfloat16 - float32 < NEGLIGIBLE_SECONDS:
        return None
    slower = [r.block for r in measured if r.slower]
    return ("bfloat16 training of blocks %s is slower than float32 on this CPU, together with "
            "the %d blocks measured with them: %.2fx (forward+backward a step: bfloat16 %.3g s, "
            "float32 %.3g s); train in float32 here, or keep the slow ops float32 "
            "(fp32_ops=...)" % (", ".join("'%s'" % b for b in slower[:5])
                                + (", ..." if len(slower) > 5 else ""), len(measured),
                                float32 / bfloat16, bfloat16, float32))


def _name(block):
    """The block's name, or its class where it has none (gluoncv's MobileNetV3: '')."""
    return block.name or type(block).__name__


def _batch_size(arrays):
    shapes = [a.shape for a in arrays if isinstance(a, mx.nd.NDArray) and a.shape]
    return int(shapes[0][0]) if shapes else None


def _skipped(block, arrays, start, why):
    return TrainingSpeed(_name(block), _batch_size(arrays), None, None, None, None, 0,
                         time.perf_counter() - start, why)


def _measure(block, args, start):
    """The record of ``block``: both graphs timed, or why not; None for a graph without
    bfloat16 (a block cached before AMP: ``init`` warned about it already)."""
    flat, _ = _flatten(args, "input")
    data = [a for a in flat if a is not None]
    graph, why = _measured_graph(block)
    if graph is None:
        return None if why is None else _skipped(block, data, start, why)
    inputs = _inputs(block, data)
    why = _unmeasurable(inputs)
    float32 = None if why else _float32_twin(graph)
    why = why or _memory_short(float32, inputs)
    if why:
        return _skipped(block, data, start, why)
    twins = [_Twin("float32", float32, block, inputs),
             _Twin("bfloat16", graph.to_symbol(), block, inputs)]
    try:
        times = _time(twins, _name(block))
        backward = bool(twins[1].grads)
    finally:
        for twin in twins:
            twin.release()
    seconds32, seconds16, speedup, spread = median_round(*times)
    return TrainingSpeed(_name(block), _batch_size(data), seconds32, seconds16, speedup, spread,
                         len(times[0]), time.perf_counter() - start, backward=backward)


def _measured_graph(block):
    """The block's cached graph with its dropout at p=0, and None; or None and why it is not
    measured (None too for a graph without bfloat16)."""
    graph = Graph(block._cached_graph[1])
    ops = {node.op for node in graph.nodes}
    if not ops & set(CAST_OPS):
        return None, None
    drawing = sorted(op for op in ops if _RANDOM.match(op))
    if drawing:
        return None, ("its graph draws random numbers (%s), and MXNet's random state cannot be "
                      "saved and restored" % ", ".join(drawing))
    if "Custom" in ops:
        return None, "its graph has a Custom op, whose Python code the check would run again"
    changes = {i: {"p": "0"} for i, node in enumerate(graph.nodes) if node.op in _DROPOUT_OPS
               and node.attrs.get("p", "0") not in ("0", "0.0")}
    return graph.with_attrs(changes), None


def _float32_twin(graph):
    """The graph float32 training runs: without AMP's casts (MXNet's ``remove_amp_cast``) and
    without the copies of parameters that ``training/_accumulate`` puts before them (a
    ``_copy`` of a variable read only by casts), which float32 would not make either."""
    rebuild = graph.rebuild()
    for i, node in enumerate(graph.nodes):
        src = node.inputs[0][0] if node.op == "_copy" else None
        readers = graph.consumers(i) if src is not None else ()
        if readers and graph.nodes[src].is_variable \
                and all(graph.nodes[j].op in CAST_OPS for j in readers):
            rebuild.redirect((i, 0), rebuild.entry([src, 0]))
        else:
            rebuild.place(i, rebuild.add(rebuild.mapped(node)))
    symbol = rebuild.graph().to_symbol()
    return mx.sym.load_json(symbol.tojson(remove_amp_cast=True))


def _inputs(block, data):
    """The cached op's inputs of this call, in its order: the data arrays and the Parameters."""
    return [(name, data[ref] if is_arg else ref) for name, (is_arg, ref)
            in zip(block._cached_graph[1].list_inputs(), block._cached_op_args)]


def _unmeasurable(inputs):
    """Why these inputs cannot be measured on the CPU, or None."""
    for name, value in inputs:
        if isinstance(value, mx.nd.NDArray):
            if not is_cpu(value.context):
                return "input '%s' is on %s; the check measures the CPU" % (name, value.context)
            if value.stype != "default":
                return "input '%s' is %s" % (name, value.stype)
        elif value._stype != "default" or value._grad_stype != "default":
            return "parameter '%s' is sparse" % name
    return None


def _memory_short(float32, inputs):
    """Why the two graphs would not fit in the memory available now, or None: each holds its
    copies of the parameters and their gradients, and its activations, estimated as twice the
    float32 twin's (every output once: resnet18_v1 batch 8, 0.69 GB for 0.61 GB measured)."""
    available = _available_bytes()
    if available is None:
        return None
    shapes = {name: value.shape for name, value in inputs}
    internals = float32.get_internals()
    _, outs, _ = internals.infer_shape_partial(**shapes)
    activations = sum(int(np.prod(shape)) for name, shape in zip(internals.list_outputs(), outs)
                      if shape and name not in shapes)
    params = sum(int(np.prod(shape)) for name, shape in shapes.items()
                 if not isinstance(dict(inputs)[name], mx.nd.NDArray))
    need = 2 * 4 * (activations + 2 * params)
    if need <= available:
        return None
    return ("it would need about %s of memory for a few seconds, and %s is available"
            % (_size(need), _size(available)))


def _size(count):
    return "%.1f GB" % (count / 2.0 ** 30) if count >= 2 ** 30 else "%.0f MB" % (count / 2.0 ** 20)


def _available_bytes():
    """The memory available to a new allocation (Linux's MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class _Twin:
    """One graph of the pair with its own copies of the inputs, parameters and gradients."""

    def __init__(self, name, symbol, block, inputs):
        self.name = name
        ctx = next(v.context for _, v in inputs if isinstance(v, mx.nd.NDArray))
        aux = set(symbol.list_auxiliary_states())
        self.op = mx.nd.CachedOp(symbol, list(block._flags or ()))  # the block's own settings
        self.arrays, self.grads = [], []
        given = dict(inputs)
        with autograd.pause():
            for name_ in symbol.list_inputs():
                value = given[name_]
                array = (value if isinstance(value, mx.nd.NDArray) else value.data(ctx)).copy()
                if isinstance(value, mx.nd.NDArray):
                    req = "write" if _reached_by_backward(value) else "null"
                else:
                    req = "null" if name_ in aux else value.grad_req
                if req != "null":
                    array.attach_grad(grad_req=req)
                    self.grads.append(array.grad)
                self.arrays.append(array)
        self.heads = None

    def step(self):
        """One forward (training mode, recorded) and backward, waited for; the forward alone
        where no gradient flows through the block."""
        if not self.grads:
            with autograd.pause(train_mode=True):
                out = self.op(*self.arrays)
            for array in out if isinstance(out, (list, tuple)) else [out]:
                array.wait_to_read()
            return
        with autograd.record(train_mode=True):
            out = self.op(*self.arrays)
        outs = out if isinstance(out, (list, tuple)) else [out]
        if self.heads is None:
            self.heads = [_ones(o) for o in outs]
        autograd.backward(outs, self.heads)
        for array in self.grads + outs:
            array.wait_to_read()

    def release(self):
        self.op = self.arrays = self.grads = self.heads = None


def _reached_by_backward(array):
    """Whether the user's backward flows into this input of the block: a floating array
    recorded from parameters (an embedding's output fed to an encoder hybridized apart), as
    autograd's own graph of it says."""
    dtype = np.dtype(array.dtype)
    if dtype.kind != "f" and dtype != BFLOAT16:
        return False
    try:
        autograd.get_symbol(array)
    except mx.base.MXNetError:  # not recorded, or recorded from arrays without gradients
        return False
    return True


def _ones(out):
    """Ones like ``out``, as the head gradient; a bfloat16 one is cast from float32, as a loss
    computed in float32 sends it (MXNet 1.9.1's ``ones_like`` of a bfloat16 output makes
    oneDNN's backward fail: "could not create a primitive descriptor iterator")."""
    with autograd.pause():
        if out.dtype in (np.float32, np.float64, np.float16) or out.dtype.kind in "iub":
            return mx.nd.ones(out.shape, ctx=out.context, dtype=out.dtype)
        return mx.nd.amp_cast(mx.nd.ones(out.shape, ctx=out.context), dtype=out.dtype)


def _step_seconds(twin):
    """Seconds of one step of ``twin`` (tests replace this to inject times)."""
    start = time.perf_counter()
    twin.step()
    return time.perf_counter() - start


def _time(twins, block_name):
    """Each twin's step times over the rounds, float32 first, after the warm-up; a bar that
    goes away when done, where someone watches and the check takes over a second."""
    mx.nd.waitall()  # the user's forward, pending, is not timed
    fastest = float("inf")
    steps = progress(total=WARM_UP + ROUNDS, leave=False, widget=False, delay=BAR_DELAY,
                     desc="bfloat16 against float32, once (%s)" % block_name)
    with steps:
        for _ in range(WARM_UP):
            for twin in twins:
                start = time.perf_counter()
                twin.step()
                fastest = min(fastest, time.perf_counter() - start)
            steps.update()
        repeats = repeats_for(fastest, most=MAX_REPEATS)
        times = ([], [])
        for _ in range(ROUNDS):
            for twin, spent in zip(twins, times):
                spent.append(sum(_step_seconds(twin) for _ in range(repeats)) / repeats)
            steps.update()
    return times
