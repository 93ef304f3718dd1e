"""How fast a converted bfloat16 model serves on this CPU against the float32 model it came
from, measured side by side: the figure behind "bfloat16 is faster here", or the warning that
it is not.

bfloat16 is the only reduced precision whose CPU speed is real (float16 on a CPU is emulated:
numerics, not speed), and whether it pays depends on the CPU (AMX-BF16, AVX512-BF16, neither)
and on the model (small convolutions, ops without a oneDNN bfloat16 kernel). So the speed is
measured, not assumed: the bfloat16 block as it serves (:func:`symbol_block`, as
:func:`load_bfloat16` builds it) against the float32 graph in MXNet's best float32 CPU
setting (static memory and oneDNN's subgraph backend), one batch, in alternation.
"""
import time
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import mxnet as mx

from .._core.amx import amx_status
from .._core.convert import ConversionError
from .._core.devices import bfloat16_native, is_cpu
from .._core.errors import one_line
from .._core.timing import median_round, repeats_for
from ._inference import block_facts
from ._validation import Runner, batch_size_of, batch_types, split_batches

WARM_UP = 2  # calls before timing: the first builds static memory and oneDNN's primitives


@dataclass(frozen=True)
class SpeedReport:
    """bfloat16 against float32 on one batch, timed in alternation on this CPU.

    Attributes
    ----------
    batch_size : int
        Samples in the timed batch.
    float32_seconds, bfloat16_seconds : float
        Time of one call per model, in the round whose ratio is the median.
    speedup : float
        Median over the rounds of float32 time / bfloat16 time: above 1 is faster in bfloat16.
    spread : tuple of float
        The smallest and largest ratio over the rounds.
    rounds : int
        Rounds timed; each calls both models, as often as it takes a fast model to fill about
        50 ms.
    float32_setting : str
        How the float32 model ran: ``'static memory, oneDNN subgraph'`` (MXNet's best float32
        CPU setting), or static memory alone and why the subgraph backend was not used.
    cpu : str
        The instructions that ran bfloat16 here, and oneDNN's AMX status.
    """

    batch_size: int
    float32_seconds: float
    bfloat16_seconds: float
    speedup: float
    spread: Tuple[float, float]
    rounds: int
    float32_setting: str
    cpu: str

    @property
    def slower(self) -> bool:
        """Whether bfloat16 is slower than float32 here (median ratio below 1)."""
        return self.speedup < 1.0

    def __str__(self):
        return ("speed on this CPU (%s): bfloat16 %.4g s, float32 %.4g s per batch of %d: "
                "%.2fx%s (%.2f-%.2f over %d rounds; float32 with %s)"
                % (self.cpu, self.bfloat16_seconds, self.float32_seconds, self.batch_size,
                   self.speedup, ", slower than float32" if self.slower else "",
                   self.spread[0], self.spread[1], self.rounds, self.float32_setting))

    def warning(self) -> Optional[str]:
        """One line for a user when bfloat16 is slower here, with the figure; None if not."""
        if not self.slower:
            return None
        return ("bfloat16 is slower than float32 on this CPU for this model: %.2fx (bfloat16 "
                "%.4g s, float32 %.4g s per batch of %d): serve the float32 model here, or keep "
                "the slow layers float32 (--exclude / --exclude-op) and measure again"
                % (self.speedup, self.bfloat16_seconds, self.float32_seconds, self.batch_size))


def compare_speed(fp32_model: Any, bf16_model: Any, inputs: Any, batch_size: int = 8,
                  rounds: int = 3, ctx: Optional[mx.Context] = None) -> SpeedReport:
    """Time the bfloat16 model against the float32 one on this CPU, one batch, alternating.

    Parameters
    ----------
    fp32_model : mxnet.gluon.Block, ConvertedModel or tuple
        The float32 model, as :func:`validate` takes it. A ``(sym, arg_params, aux_params)``
        tuple runs with static memory and oneDNN's subgraph backend (MXNet's best float32
        CPU setting); a Gluon block runs as it is.
    bf16_model : ConvertedModel or tuple
        The bfloat16 model: it runs as :func:`load_bfloat16` serves it.
    inputs : array-like or dict
        Samples, as :func:`validate` takes them; the first batch is timed.
    batch_size : int, default 8
        Samples in the timed batch.
    rounds : int, default 3
        Rounds, each calling one model then the other (as often as it takes a fast model to
        fill about 50 ms), after two warm-up calls each.
    ctx : mxnet.Context, optional
        The CPU (the default); bfloat16 speed is a CPU measure here.

    Returns
    -------
    SpeedReport

    Raises
    ------
    ConversionError
        When ``bf16_model`` is not a bfloat16 model, runs under the bfloat16 emulation
        (float32 arithmetic: no speed to measure), or ``ctx`` is not a CPU.
    """
    if batch_size < 1 or rounds < 1:
        raise ConversionError("batch_size and rounds must be at least 1, got %r and %r"
                              % (batch_size, rounds))
    ctx = mx.cpu() if ctx is None else ctx
    if not is_cpu(ctx):
        raise ConversionError("compare_speed measures bfloat16 on a CPU, got %s" % (ctx,))
    batches = split_batches(inputs, batch_size, bf16_model)
    batch, samples = batches[0], batch_size_of(batches[0], batches.axes)
    types = batch_types([batch])
    reduced = Runner(bf16_model, ctx, input_types=types)
    facts = block_facts(reduced.block)
    if not facts.bfloat16:
        raise ConversionError("the converted model does not compute in bfloat16: "
                              "compare_speed measures bfloat16 (float16 on a CPU is "
                              "emulated: numerics, not speed)")
    if facts.bfloat16_emulated:
        raise ConversionError("bfloat16 runs under the emulation here (%s): no speed to "
                              "measure" % facts.bfloat16_emulated)
    reference = Runner(fp32_model, ctx, input_types=types)
    calls = [_timed_call(runner, batch) for runner in (reference, reduced)]
    setting = _best_float32(reference, calls[0])
    for call in calls:
        for _ in range(WARM_UP):
            call()
    repeats = repeats_for(min(call() for call in calls))
    times = ([], [])
    for _ in range(rounds):
        for call, spent in zip(calls, times):
            spent.append(sum(call() for _ in range(repeats)) / repeats)
    reference.release()
    reduced.release()
    float32, bfloat16, speedup, spread = median_round(*times)
    return SpeedReport(batch_size=samples, float32_seconds=float32, bfloat16_seconds=bfloat16,
                       speedup=speedup, spread=spread, rounds=rounds, float32_setting=setting,
                       cpu="%s, oneDNN's AMX kernels: %s" % (
                           bfloat16_native() or "no native bfloat16", amx_status() or "not asked"))


def _best_float32(runner, call):
    """Hybridize a float32 block built from a graph as MXNet serves float32 best on a CPU
    and run it once (the backend partitions the graph then); how it runs, in words. A Gluon
    block given by the user runs as it is."""
    if not runner.owned:
        return "the block as given"
    runner.block.hybridize(backend="MKLDNN", static_alloc=True, static_shape=True)
    try:
        call()
        return "static memory, oneDNN subgraph"
    except mx.base.MXNetError as err:
        runner.block.hybridize(static_alloc=True, static_shape=True)
        return "static memory (oneDNN's subgraph backend refused the graph: %s)" % one_line(err)


def _timed_call(runner, batch):
    arrays = runner.arrays(batch)

    def call():
        start = time.perf_counter()
        out = runner.block(*arrays)
        for array in out if isinstance(out, (list, tuple)) else [out]:
            array.wait_to_read()
        return time.perf_counter() - start
    return call

