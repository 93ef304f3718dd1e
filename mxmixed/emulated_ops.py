"""The operators that mxmixed emulates in float16 on CPU, as data.

Each entry says why the op is emulated. An emulated op casts its float16 inputs to float32,
runs the float32 kernel and casts its float16 outputs back: float16 operands, float32
arithmetic, a float16 result, which is what a GPU with Tensor Cores (or cuDNN's float32
compute for BatchNorm and pooling) does.

Ops are added to the second group only from measurement: ``benchmarks/op_survey.py`` times
each op that gluoncv's classification models and the tutorials use, in float16 and float32,
on CPU. Reductions and softmax are deliberately absent even when slow: MXNet accumulates them
in float16 unless ``MXNET_SAFE_ACCUMULATION=1``, so running them in float32 would change the
numerics; they keep their native (slow but faithful) CPU float16 kernels.
"""
from collections import namedtuple

__all__ = ["OpSpec", "EMULATED_OPS", "GEMM_OPS", "SLOW_OPS", "NOT_EMULATED"]

OpSpec = namedtuple("OpSpec", ["reason", "keep_inputs", "float16_outputs", "same_dtype"])
OpSpec.__doc__ = """How one op is emulated.

Parameters
----------
reason : str
    Why it is emulated (missing CPU float16 kernel, or the measured slowdown).
keep_inputs : tuple of int
    Input positions never cast, because the op updates them in place (BatchNorm's moving
    mean and variance) or needs them in their own dtype.
float16_outputs : tuple of int or None
    For NDArray calls, the outputs that are float16 on a GPU (None: all of them). BatchNorm's
    optional mean and variance outputs stay float32. The graph pass needs no such entry: it
    reads every output's dtype from MXNet's type inference.
same_dtype : bool
    Whether MXNet requires all float inputs to share one dtype (as every GEMM does); a
    mixed call raises the error a GPU run would raise, instead of being quietly upcast.
"""

_BN_AUX = (3, 4)  # moving_mean, moving_var: updated in place, always float32

# Group 1: AMP's float16 list plus dot/batch_dot. No CPU float16 kernel exists in 1.9.1.
GEMM_OPS = {
    "FullyConnected": OpSpec("no CPU float16 kernel: 'only supported by CuDNN'", (), None, True),
    "Convolution": OpSpec("no CPU float16 kernel: 'FP16 gemm on cpu not implemented!'", (), None, True),
    "Deconvolution": OpSpec("no CPU float16 kernel: 'FP16 gemm on cpu not implemented!'", (), None, True),
    "RNN": OpSpec("no CPU float16 kernel; see the RNN note in mxmixed.emulation", (), None, True),
    "dot": OpSpec("no CPU float16 kernel: dtype check fails in dot", (), None, True),
    "batch_dot": OpSpec("no CPU float16 kernel: dtype check fails in batch_dot", (), None, True),
}

# Group 2: ops the tutorials and gluoncv classifiers use whose CPU float16 kernel is more than
# 2x slower than float32, measured by benchmarks/op_survey.py (forward+backward, 2-core CI
# machine; ratios in benchmarks/op_survey.json), and whose float32-then-round result equals
# what a GPU computes in float16.
SLOW_OPS = {
    # 27.6x slower in float16. cuDNN computes float16 BatchNorm in float32 with float32
    # gamma/beta/statistics, which is exactly the emulation. Moving stats are never cast.
    "BatchNorm": OpSpec("float16 CPU kernel 27.6x slower than float32", _BN_AUX, (0,), False),
    # avg 22.1x, global avg 21.0x, max 5.9x. cuDNN accumulates float16 averages in float32;
    # max pooling is exact in any precision.
    "Pooling": OpSpec("float16 CPU kernel 5.9-22.1x slower than float32", (), None, True),
    # relu 15.5x. Elementwise, one rounding of a float32 result either way.
    "Activation": OpSpec("float16 CPU kernel 15.5x slower (relu)", (), None, True),
    # 4.5x. float32 holds the sum of two float16 values well enough that rounding it to
    # float16 equals the correctly rounded float16 sum (24 >= 2*11 + 2 bits).
    "elemwise_add": OpSpec("float16 CPU kernel 4.5x slower than float32", (), None, True),
    # 2.3x (relu6 in mobilenetv2). Rounding is monotonic, so clipping a float16 value in
    # float32 and rounding gives the float16 clip against the rounded bounds.
    "clip": OpSpec("float16 CPU kernel 2.3x slower than float32", (), None, True),
}

# Measured slow but deliberately NOT emulated, because float32 arithmetic would change the
# numerics a GPU produces:
# - log_softmax (19.5x at scale): accumulates in float16 unless MXNET_SAFE_ACCUMULATION=1;
# - mean (7.5x): writes the float16 sum before dividing, so it overflows past 65504 whatever
#   MXNET_SAFE_ACCUMULATION says; float32 arithmetic would hide that;
# - _mul_scalar (5.7x): the GPU casts the scalar to float16 first (1e-8 becomes 0);
# - Dropout (5.5x): the mask holds round16(1/keep_prob), not 1/keep_prob;
# - Embedding (backward 5.4x): its weight gradient is accumulated in float16.
NOT_EMULATED = ("log_softmax", "mean", "_mul_scalar", "Dropout", "Embedding")

EMULATED_OPS = dict(GEMM_OPS, **SLOW_OPS)
