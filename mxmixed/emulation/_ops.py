"""The operators that mxmixed emulates in float16 on CPU, as data.

Each entry says why the op is emulated and what a GPU computes, so that the emulation computes
the same thing. An emulated op casts its float16 inputs to float32, runs the float32 kernel
and casts its float16 outputs back: float16 operands, float32 arithmetic, one rounding to a
float16 result. That is what a GPU does for a Tensor Core GEMM (float32 accumulation) and for
cuDNN's BatchNorm and pooling (float32 compute), and it equals float16 arithmetic for an
elementwise op whose float32 result rounds once (float32 holds the exact result of one
operation on float16 values closely enough: 24 >= 2 * 11 + 2 bits).

An op the GPU runs as several float16 steps is composed of the same steps (``gpu`` says
which): a biased FullyConnected, Convolution or Deconvolution rounds its no-bias result to
float16 and then adds the bias in float16 arithmetic, two roundings, as MXNet 1.9.1's GPU
kernels do (FCForward's ``AddBias`` / ``add_bias_kernel``; ``cudnnAddTensor`` after
``cudnnConvolutionForward`` and ``cudnnConvolutionBackwardData``).

Ops are added to the second group only from measurement: ``benchmarks/op_survey.py`` times
each op that gluoncv's model zoo and the tutorials use, in float16 and float32, on CPU.
Reductions are deliberately absent even when slow: MXNet accumulates them in float16 unless
``MXNET_SAFE_ACCUMULATION=1``, so running them in float32 would change the numerics; they keep
their native (slow but faithful) CPU float16 kernels. softmax and LayerNorm, whose GPU
arithmetic depends on that variable (:attr:`OpSpec.setting`), are computed by the rounding
library in the GPU kernels' own order, whichever way the variable is set at the op's run.
"""
from collections import namedtuple

from .._core.mxbool import env_bool, read_optional_bool

__all__ = ["OpSpec", "EMULATED_OPS", "GEMM_OPS", "SLOW_OPS", "AMP_OPS", "ZOO_OPS", "NLP_OPS",
           "NOT_EMULATED", "ONE_ROUNDING", "BIAS_TWICE", "FLOAT16_STEPS", "LIBRARY_OP",
           "SAFE_ACCUMULATION", "applies", "library_compute", "gpu_arithmetic"]

OpSpec = namedtuple("OpSpec", ["reason", "keep_inputs", "float16_outputs", "same_dtype",
                               "gpu", "bias_input", "when", "library", "kernel", "setting"])
OpSpec.__new__.__defaults__ = (None, None, None, None, None, None)
OpSpec.__doc__ = """How one op is emulated.

Parameters
----------
reason : str
    Why it is emulated (missing CPU float16 kernel, a oneDNN dtype error, or the measured
    slowdown).
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
gpu : str or dict of bool to str
    What MXNet 1.9.1 computes on a GPU for float16 inputs: one of :data:`ONE_ROUNDING`,
    :data:`BIAS_TWICE`, or a sentence for anything else; for an op whose GPU arithmetic
    depends on :attr:`setting`, a sentence for each value of the setting.
bias_input : int or None
    For :data:`BIAS_TWICE` ops, the position of the bias input (present unless
    ``no_bias=True``).
when : dict of str to str, tuple of str or callable, or None
    Attribute values the op must have to be emulated (``{'act_type': 'gelu'}``; a tuple lists
    the values allowed, ``'None'`` standing for an attribute not given; a function takes the
    value, None when not given, and says whether it fits); a call or node with other values
    keeps its native kernel. None: always.
library : tuple of str, or None
    The ``act_type`` values that the rounding library's ``_mxmixed_act16`` computes on the
    widened float16 values (:data:`LIBRARY_OP`), where the GPU runs MXNet's ``half_t``
    template and MXNet's float32 kernel would give other bits (oneDNN's gelu, soft_relu);
    others run MXNet's float32 kernel. Without the library those keep their native float16
    kernel, which is the GPU's template.
kernel : str or None
    The rounding library's op that computes the whole op in float32 with the GPU's float16
    rounding points (``_ext/norm16.cc``); without the library the op keeps its native kernel.
setting : str or None
    The environment variable the GPU arithmetic depends on (:data:`SAFE_ACCUMULATION`), read
    at each run of the op, as MXNet reads it; :attr:`gpu` then has a sentence for each value.
"""

#: MXNet's switch between float16 and float32 accumulation in softmax and the norms.
SAFE_ACCUMULATION = "MXNET_SAFE_ACCUMULATION"

#: The rounding library's op that computes the activations of :attr:`OpSpec.library`.
LIBRARY_OP = "_mxmixed_act16"


def applies(spec, attrs):
    """Whether an op with ``attrs`` (a node's or a call's attributes) is emulated by ``spec``.

    Parameters
    ----------
    spec : OpSpec
    attrs : dict

    Returns
    -------
    bool
    """
    return not spec.when or all(_fits(attrs.get(k), v) for k, v in spec.when.items())


def _fits(value, allowed):
    if callable(allowed):
        return allowed(value)
    return str(value) in (allowed if isinstance(allowed, tuple) else (allowed,))


def _off(value):
    """An ``optional<bool>`` attribute that is off (not given, none, false or 0, as MXNet reads
    them); a value MXNet refuses keeps the native kernel, which gives MXNet's own error."""
    try:
        return not read_optional_bool(value, "use_length")
    except ValueError:
        return False


def library_compute(spec, attrs):
    """The rounding library's op that computes an emulated op with ``attrs`` (see
    :attr:`OpSpec.library` and :attr:`OpSpec.kernel`), or None.

    Parameters
    ----------
    spec : OpSpec
    attrs : dict

    Returns
    -------
    str or None
    """
    if spec.kernel:
        return spec.kernel
    return LIBRARY_OP if spec.library and str(attrs.get("act_type")) in spec.library else None


def gpu_arithmetic(spec, environ=None):
    """What a GPU computes for ``spec``'s op now: :attr:`OpSpec.gpu`, or for an op that
    depends on a setting, its sentence for the setting's present value.

    Parameters
    ----------
    spec : OpSpec
    environ : mapping, optional
        ``os.environ`` by default.

    Returns
    -------
    str
    """
    if spec.setting is None:
        return spec.gpu
    return spec.gpu[env_bool(spec.setting, False, environ)]

ONE_ROUNDING = "float32 arithmetic inside the op, one rounding of each float16 output"
BIAS_TWICE = ("no-bias result (float32 accumulation) rounded to float16, then the bias added "
              "in float16 arithmetic: a second rounding")
FLOAT16_STEPS = "float16 arithmetic step by step"

_BN_AUX = (3, 4)  # moving_mean, moving_var: updated in place, always float32
_NO_GEMM = "no CPU float16 kernel: 'FP16 gemm on cpu not implemented!'"
_NO_FP16_TRANSFORMER = "no CPU float16 kernel: 'Only FP32 is supported on CPU at the moment'"

# Group 1: AMP's float16 list plus dot/batch_dot and the interleaved attention GEMMs.
# No CPU float16 kernel exists in 1.9.1.
GEMM_OPS = {
    # GPU: linalg_gemm (cuBLAS, float32 compute) into the float16 output, then
    # AddBias -> add_bias_kernel<half_t> adds the bias in float16 (fully_connected-inl.h).
    # Known difference kept: FCBackward reduces the bias gradient with
    # ReduceAxesComputeImpl<..., safe_acc=false>, which may accumulate in float16 on the GPU;
    # the emulation sums it in float32 and rounds once (more accurate, not bit-faithful).
    "FullyConnected": OpSpec("no CPU float16 kernel: 'only supported by CuDNN'", (), None, True,
                             BIAS_TWICE, 2),
    # GPU: cudnnConvolutionForward into the float16 output (float32 compute type), then
    # cudnnAddTensor(bias, alpha=1, beta=1) (cudnn_convolution-inl.h).
    "Convolution": OpSpec(_NO_GEMM, (), None, True, BIAS_TWICE, 2),
    # GPU: cudnnConvolutionBackwardData, then cudnnAddTensor (cudnn_deconvolution-inl.h).
    "Deconvolution": OpSpec(_NO_GEMM, (), None, True, BIAS_TWICE, 2),
    # GPU: cuDNN's fused RNN adds its biases inside the kernel and keeps float16 states
    # between steps; emulated at its boundary (see the RNN note in mxmixed.emulation).
    "RNN": OpSpec("no CPU float16 kernel; see the RNN note in mxmixed.emulation", (), None,
                  True, "cuDNN fused RNN: float32 math inside each step, float16 states "
                  "between steps (emulated at the op boundary)"),
    # GPU: bilinear UpSampling runs MXNet's DeconvolutionOp (linalg_gemm on cuBLAS, float32
    # compute) without bias, so one rounding; nearest is a copy (exact). Known difference
    # kept: nearest with multi_input_mode='sum' adds its inputs in float32 and rounds once,
    # where the GPU adds in float16 (equal for two inputs; three or more may differ by 1 ulp).
    "UpSampling": OpSpec("no CPU float16 kernel for bilinear: 'FP16 gemm on cpu not "
                         "implemented!'", (), None, True, ONE_ROUNDING),
    "dot": OpSpec("no CPU float16 kernel: dtype check fails in dot", (), None, True,
                  ONE_ROUNDING),
    "batch_dot": OpSpec("no CPU float16 kernel: dtype check fails in batch_dot", (), None,
                        True, ONE_ROUNDING),
    # Transformer attention (gluonnlp's BERT: selfatt_qk/valatt; encdec_qk/valatt). GPU
    # (src/operator/contrib/transformer.cu, 1.9.1): every forward and backward GEMM is
    # gemm_switch_fp32accum -> CublasStridedBatchedGemm -> cublasGemmStridedBatchedEx with
    # float16 A, B and C, computeType CUDA_R_32F (pseudoFP16: CublasType<half>::ScaleType is
    # float; MXNET_FC_TRUE_FP16=1 would switch to float16 compute) and
    # CUBLAS_GEMM_DEFAULT_TENSOR_OP. The qk ops' scale, 1/sqrt(head_dim) in float
    # ("const float scale = 1.0 / sqrt(static_cast<float>(head_dim))"), is the GEMM's float32
    # alpha ("gemm_switch_fp32accum(s, true, false, ..., scale, queries_keys_values +
    # head_dim, ...)"): applied to the float32 accumulator, not to a float16 query, then one
    # rounding. The backward GEMMs use the same alpha; each gradient region (q, k, v of the
    # interleaved input) is written by one GEMM (the rest memset to 0), so one rounding each.
    # The CPU float32 kernel (transformer.cc, strided_batch_sgemm with the same alpha) is the
    # same arithmetic in float32: the emulation is float32 math on float16 operands, rounded.
    "_contrib_interleaved_matmul_selfatt_qk": OpSpec(_NO_FP16_TRANSFORMER, (), None, True,
                                                     ONE_ROUNDING),
    "_contrib_interleaved_matmul_selfatt_valatt": OpSpec(_NO_FP16_TRANSFORMER, (), None, True,
                                                         ONE_ROUNDING),
    "_contrib_interleaved_matmul_encdec_qk": OpSpec(_NO_FP16_TRANSFORMER, (), None, True,
                                                    ONE_ROUNDING),
    "_contrib_interleaved_matmul_encdec_valatt": OpSpec(_NO_FP16_TRANSFORMER, (), None, True,
                                                        ONE_ROUNDING),
}

# Group 2: ops the tutorials and gluoncv models use whose CPU float16 kernel is more than
# 2x slower than float32, measured by benchmarks/op_survey.py (forward+backward, 2-core CI
# machine; ratios in benchmarks/op_survey.json), and whose float32-then-round result equals
# what a GPU computes in float16.
SLOW_OPS = {
    # 27.6x slower in float16. cuDNN computes float16 BatchNorm in float32 with float32
    # gamma/beta/statistics, which is exactly the emulation. Moving stats are never cast.
    "BatchNorm": OpSpec("float16 CPU kernel 27.6x slower than float32", _BN_AUX, (0,), False,
                        ONE_ROUNDING),
    # avg 22.1x, global avg 21.0x, max 5.9x. cuDNN accumulates float16 averages in float32;
    # max pooling is exact in any precision.
    "Pooling": OpSpec("float16 CPU kernel 5.9-22.1x slower than float32", (), None, True,
                      ONE_ROUNDING),
    # relu 15.5x. GPU (nn/activation.cu): relu, sigmoid and tanh run cuDNN's activation
    # (float32 math inside, one rounding: MXNet's float32 kernel and a rounding, 100% of the
    # H100 comparison's bits); softrelu and softsign run the mshadow_op templates on half_t,
    # as the CPU's float16 kernel does: float math rounded once, and a backward factor rounded
    # to float16 before it multiplies the float16 gradient. oneDNN's float32 soft_relu and the
    # unrounded factors differ from that (softrelu: 3% of float16 inputs forward, 19%
    # backward), so the rounding library computes those two (tests/emulation/test_ops16.py).
    "Activation": OpSpec("float16 CPU kernel 15.5x slower (relu)", (), None, True,
                         ONE_ROUNDING + "; softrelu and softsign: the half_t template's float "
                         "math, the backward factor rounded to float16 first",
                         library=("softrelu", "softsign")),
    # 4.5x. float32 holds the sum of two float16 values well enough that rounding it to
    # float16 equals the correctly rounded float16 sum (24 >= 2*11 + 2 bits).
    "elemwise_add": OpSpec("float16 CPU kernel 4.5x slower than float32", (), None, True,
                           ONE_ROUNDING),
    # 2.3x (relu6 in mobilenetv2). Rounding is monotonic, so clipping a float16 value in
    # float32 and rounding gives the float16 clip against the rounded bounds.
    "clip": OpSpec("float16 CPU kernel 2.3x slower than float32", (), None, True,
                   ONE_ROUNDING),
}

# Group 3: AMP's own cast ops. MXNet 1.9.1's oneDNN kernel of amp_multicast has no float16
# guard ("unknown type for MKLDNN :2") for any input mix that includes float16; AMP inserts
# it into hybridized graphs and gluoncv calls F.amp_multicast directly (SSD's box decoder).
# A cast of a float16 value to float32 is exact, and float32 -> float16 rounds once, so
# casting each input straight to the dtype MXNet's type inference gives its output is exactly
# the GPU's cast: the NDArray wrapper calls amp_cast per input, and the graph pass replaces
# the node by those amp_casts (none where the dtype stays), so no oneDNN multicast runs.
# (amp_cast itself handles float16 <-> float32 on oneDNN; its gap is float64 and int64,
# which AMP never feeds it: see NOT_EMULATED.)
AMP_OPS = {
    "amp_multicast": OpSpec("oneDNN kernel has no float16 guard: 'unknown type for MKLDNN :2'",
                            (), None, False, "a cast: exact, or one rounding to float16"),
}

# The gluoncv model zoo (benchmarks/op_survey.py --zoo: SSD, YOLOv3 with its training loss,
# Faster R-CNN, FCN/PSP/DeepLab, simple_pose; ratios in benchmarks/op_survey_zoo.json) adds no
# op without a CPU float16 kernel beyond group 1, and one oneDNN dtype error: amp_multicast
# (group 3). Its other float16 ops run natively on the CPU, several slowly: see NOT_EMULATED.
ZOO_OPS = {}

# Not emulated, with the reason. Measured slow, but float32 arithmetic would change the
# numerics a GPU produces ("slow:" entries, backed by benchmarks/op_survey.json; "same:"
# entries, checked against the GPU's source), or a gap that float16 never reaches ("gap:").
NOT_EMULATED = {
    "log_softmax": "slow: 19.5x at scale, but it accumulates in float16 unless "
                   "MXNET_SAFE_ACCUMULATION=1",
    "mean": "slow: 7.5x, but it writes the float16 sum before dividing, so it overflows past "
            "65504 whatever MXNET_SAFE_ACCUMULATION says; float32 arithmetic would hide that",
    "_mul_scalar": "slow: 5.7x, but the GPU casts the scalar to float16 first (1e-8 becomes 0)",
    "Dropout": "slow: 5.5x, but the mask holds round16(1/keep_prob), not 1/keep_prob",
    "Embedding": "slow: backward 5.4x, but its weight gradient is accumulated in float16 "
                 "(AddTakeGrad in DType, on the GPU too); the forward is an exact gather. Gap: "
                 "the CPU's row_sparse backward (sparse_grad=True) refuses float16, the GPU's "
                 "adds in float16; not emulated (under AMP the weight is float32)",
    # from the model-zoo survey (benchmarks/op_survey_zoo.json). LeakyReLU's gelu is emulated
    # (NLP_OPS); its other act_types are slow too (60x, YOLOv3's leaky) but keep their native
    # kernel: the GPU casts the slope to float16 before it multiplies (DType(slope)), as for
    # _mul_scalar.
    "_contrib_ROIAlign": "slow: 31x (Faster R-CNN), but the GPU kernel interpolates in "
                         "float16 arithmetic step by step",
    "_contrib_box_nms": "slow: 2.2x, but the GPU computes the overlaps in float16",
    "_contrib_box_decode": "slow: 14x (SSD, Faster R-CNN), but the GPU decodes in float16 "
                           "arithmetic step by step",
    "L2Normalization": "slow: 11x (SSD VGG), but it sums the squares in float16 on the GPU",
    "_contrib_BilinearResize2D": "slow: 5.2x (FCN/PSP/DeepLab); the GPU kernel's accumulation "
                                 "dtype is not verified, so the native float16 kernel stays",
    "_contrib_AdaptiveAvgPooling2D": "slow: 12x (PSP, Faster R-CNN); as for "
                                     "_contrib_BilinearResize2D",
    # "same:" entries, from gluonnlp's BERT and Transformer (tests/emulation/test_nlp.py): the
    # CPU float16 kernel is the GPU's template with the same dtypes, so it computes what the GPU
    # does; the slowdowns (forward+backward, 8x64x256 float16 against float32, 2-core AMD EPYC)
    # were measured for issue 37, not by benchmarks/op_survey.py.
    "_contrib_div_sqrt_dim": "same: 8x slower, but one template on CPU and GPU (transformer-inl.h): "
                             "in / DType(sqrt(d)), a float16 divisor; float32 would change it",
    "erf": "same: 4.3x slower; math::erf in float32, one rounding; erf_grad squares in float16 "
           "first (exp(-(a * a))), on the GPU too, so float32 would change the gradient",
    "where": "same: 2.8x slower; a select, exact in any dtype",
    "amp_cast": "gap: its oneDNN kernel fails on float64 and int64 ('unknown type for MKLDNN "
                ":1' / ':6'), never on float16 <-> float32, the only casts AMP and the "
                "emulation insert",
}

# Also slow in the zoo survey, and left native for now: elementwise and broadcast arithmetic,
# comparisons, exp/sigmoid/abs, tile/repeat/where/max (2-22x). Each is one operation per
# element, so float32-then-round would give the GPU's result for +, -, *, /, and comparisons
# and copies are exact; they are candidates for SLOW_OPS once an end-to-end measurement shows
# that the two casts cost less than the slow kernel on detection-sized tensors.

# Group 4: ops of gluonnlp's BERT under AMP whose float16 CPU kernel dominates the emulated step
# (benchmarks/emulation_profile.py --bert), computed by the rounding library in float32 with the
# bits of MXNet's float16 kernel (tests/emulation/test_ops16.py: every float16 input, forward
# and backward); and BERT's softmax and LayerNorm, float16 in a model cast to float16 (AMP runs
# them in float32), computed by the library with the GPU kernels' rounding points and order
# (tests/emulation/test_norm16.py).
NLP_OPS = {
    # 26x slower forward+backward (1024x512). GPU and CPU run one template,
    # LeakyReLUOp<xpu> (leaky_relu-inl.h, leaky_relu.cu registers it for gpu): forward
    # mshadow_op::gelu on half_t, DType(0.5f * float(a) * (1.0f + erf(float(a) / SQRT_2))),
    # float math rounded once; backward backward_grad<gelu_grad>: the factor is DType(...) of
    # float math (rounded to float16), times the float16 output gradient in half_t arithmetic,
    # half_t(float(a) * float(b)) (mshadow/half.h, __float2half on the GPU): one more rounding.
    # The GPU's erff is CUDA's, the CPU's glibc's: both within 2 float32 ulps, so a float16
    # result can differ where the float32 value lies within that of a rounding boundary. The
    # float32 LeakyReLU would run oneDNN's gelu_erf, other bits, hence the library's op.
    "LeakyReLU": OpSpec("float16 CPU kernel 26x slower than float32 (gelu)", (), None, True,
                        "float32 gelu math, one rounding; backward: the float16-rounded "
                        "factor times the float16 gradient, one rounding",
                        when={"act_type": "gelu"}, library=("gelu",)),
    # 35x slower forward+backward (1024x512; 77x in SSD, Faster R-CNN). GPU (softmax-inl.h,
    # softmax.cu): SoftmaxCompute reads MXNET_SAFE_ACCUMULATION at each run; AType is float
    # with it, half_t without. softmax_stride1_compute_kernel (last axis, at most 10240
    # values; otherwise softmax_compute_kernel, 128 threads): the row max in half_t; the sum
    # of static_cast<AType>(expf(val - smax)), val - smax a half_t difference, each thread
    # summing a strided share, then halved pairwise (shared memory, then warp_reduce); the
    # output softmax_fwd: DType(expf(val - smax) / ssum), one rounding. Backward
    # (softmax_stride1_grad_kernel, at most 5120 values): the sum of mshadow_op::mul on
    # half_t (each dy * y rounded) in AType, in the same order; softmax_bwd: out * (ograd -
    # sum), where ograd - sum is half_t whatever AType is: two roundings. MXNet's CPU
    # template rounds at the same points in its own order (so the CPU's float16 sums differ
    # from the GPU's). Emulated without use_length, temperature or dtype.
    "softmax": OpSpec("float16 CPU kernel 35x slower than float32", (), None, True, {
        False: "half_t accumulation: the row's exp(half(x - max)), each rounded, summed in "
               "float16 in the GPU's thread order; half(exp / sum). Backward: half(dy * y) "
               "summed in float16 likewise; half(y * half(dy - sum))",
        True: "float32 accumulation of exp(half(x - max)); half(exp / sum). Backward: "
              "half(dy * y) summed in float32; half(y * half(dy - sum))"},
        when={"use_length": _off, "temperature": ("None", "1", "1.0"),
              "dtype": ("None",)}, kernel="_mxmixed_softmax16", setting=SAFE_ACCUMULATION),
    # 8.7x slower forward+backward (1024x512). GPU (layer_norm.cu, last axis: the contiguous
    # kernels; other axes run LayerNormComputeGeneral and keep the native kernel here):
    # LayerNormCompute<gpu> reads MXNET_SAFE_ACCUMULATION at each run; AType float with it,
    # DType (half_t) without. LayerNormFusedForwardKernelContig: 32 x (1, 2 or 4) threads
    # per row each run Welford's update on their values (half2 pairs in float; 4 consecutive
    # values in half_t), merged by Chan's formula across lanes (xor shuffles) and warps; lane
    # k's mean and variance serve the columns k mod 32. std_eps = sqrt(var + eps);
    # invstd_eps = DType(1.0) / std_eps, half_t / AType: a float16 value either way; out =
    # gamma * DType(invstd_eps * (x - mean)) + beta in half_t: three roundings; the mean and
    # std outputs float16. Backward (LayerNormFusedBackwardKernel_Data; _PartGammaBeta and
    # _GammaBeta: 16 parts of rows, 16 threads each) from those float16 mean and std: dx =
    # dy*gamma*invstd - mean(dy*gamma*invstd) - (x - mean)*invstd*mean(dy*gamma*(x -
    # mean)*invstd^2), rounded once in float, each step in half_t; dgamma = sum((x - mean) /
    # std * dy), dbeta = sum(dy), rounded once. MXNet's CPU kernel rounds once whatever the
    # variable says, so its native float16 LayerNorm is not the GPU's.
    "LayerNorm": OpSpec("float16 CPU kernel 8.7x slower than float32", (), None, True, {
        False: "half_t Welford sums and merges in the GPU's thread order; half(1 / "
               "std); half(half(gamma * half(invstd * (x - mean))) + beta). Backward: each "
               "step in float16 arithmetic, the sums in the GPU's order",
        True: "float32 Welford sums and merges; half(1 / std); half(half(gamma * half(invstd * "
              "(x - mean))) + beta). Backward: float32, one rounding of each gradient"},
        when={"axis": ("None", "-1")}, kernel="_mxmixed_layernorm16",
        setting=SAFE_ACCUMULATION),
}

EMULATED_OPS = dict(GEMM_OPS, **SLOW_OPS, **AMP_OPS, **ZOO_OPS, **NLP_OPS)
