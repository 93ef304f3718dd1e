// Float32 computes of float16 ops, each giving the bits of MXNet 1.9.1's own float16 CPU kernel
// once the emulation's casts round around it (mxmixed/emulation/_ops.py says which op uses
// which; tests/emulation/test_ops16.py checks every float16 input). Part of the rounding
// library built by mxmixed/emulation/_round16.py.
//
// _mxmixed_act16 (act_type gelu, softrelu or softsign): float16 data carried as float32.
//   gelu, LeakyReLU(act_type='gelu'): forward: mshadow_op::gelu's float expression, 0.5f * a * (1 + erff(a / SQRT_2)), rounded
//   once to float16 as the half_t kernel rounds it. Backward: backward_grad of
//   mshadow_op::gelu_grad on half_t: the gradient factor is rounded to float16 (the op returns
//   DType), then multiplied by the float16 output gradient in half_t arithmetic (float product,
//   exact for two float16 values, rounded once by the emulation's input cast). erff and expf are
//   glibc's, as libmxnet.so's (it imports both). softrelu and softsign, Activation's two
//   act_types that MXNet's GPU runs as mshadow templates (not cuDNN): forward the float math,
//   rounded once; backward the float16-rounded factor (softrelu's of the output, softsign's of
//   the input) times the float16 gradient. Each is a table of the 65536 float16 values.
//
// _mxmixed_bias_add: x + b (C) in float32 on x's axis `axis` (attribute; the last axis when
//   absent), the emulation's bias add after a GEMM (the last axis) or a convolution (axis 1).
//   Forward: broadcast_add's one float add. Backward: the bits of MXNet's CPU
//   BinaryBroadcastBackwardUseNone: dx = 0 + g (a -0 gradient becomes +0, as there), db[c] the
//   Kahan sum (mshadow red::sum with its residual) of g[., c, .] in memory order (MXNet's
//   reduce walks the axes before `axis`, then those after it), without the per-element index
//   arithmetic that makes MXNet's generic reduce slow.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>
#include "mxnet/lib_api.h"
#include "float32_types.h"
#include "round16_kernel.h"

using namespace mxnet::ext;

namespace {

const float kSqrt2 = 1.4142135623730950488016887242096f;  // mshadow_op::SQRT_2
const float kPi = 3.14159265358979323846f;                // mshadow_op::PI
const int64_t kParallel = 1 << 15;

using Attrs = std::unordered_map<std::string, std::string>;

inline float gelu(float a) { return 0.5f * a * (1.0f + erff(a / kSqrt2)); }

// mshadow_op::erf_grad::Map<float>: 2.0 / sqrt(PI) is a double quotient of sqrtf(PI).
inline float erf_grad(float a) {
  return static_cast<float>(2.0 / sqrtf(kPi) * expf(-(a * a)));
}

// A NaN input gives the input's NaN (quieted), as libmxnet.so's build of the expression does:
// which NaN operand an addition keeps depends on the compiler's operand order.
inline float gelu_grad(float a) {
  if (std::isnan(a)) return a + 0.0f;
  return 0.5f * (1.0f + erff(a / kSqrt2) + a * erf_grad(a / kSqrt2) / kSqrt2);
}

// The attribute `axis`: false when it is there and not a non-negative integer; else true, with
// *axis the integer, or -1 when there is no attribute.
bool axisAttr(const Attrs& attrs, int64_t* axis) {
  *axis = -1;
  const auto found = attrs.find("axis");
  if (found == attrs.end()) return true;
  const std::string& text = found->second;
  if (text.empty() || text.size() > 3 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *axis = std::stoll(text);
  return true;
}

// The bias's axis on an input of rank `ndim`: the attribute, else the last axis; -1 when that
// is not an axis of the input.
int64_t biasAxis(const Attrs& attrs, size_t ndim) {
  int64_t axis = -1;
  if (!axisAttr(attrs, &axis)) return -1;
  if (axis < 0) return static_cast<int64_t>(ndim) - 1;
  return axis < static_cast<int64_t>(ndim) ? axis : -1;
}

MXReturnValue parseBias(const Attrs& attrs, int* num_in, int* num_out) {
  int64_t axis = -1;
  if (!axisAttr(attrs, &axis)) {
    MX_ERROR_MSG << "_mxmixed_bias_add's axis must be a non-negative integer";
    return MX_FAIL;
  }
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

// x seen as (outer, cols, inner) around the bias's axis, from x's shape.
struct BiasView {
  int64_t outer = 1, cols = 1, inner = 1;
};

BiasView biasView(const Attrs& attrs, const std::vector<int64_t>& shape) {
  BiasView view;
  const int64_t axis = biasAxis(attrs, shape.size());
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) view.outer *= shape[d];
    if (d == axis) view.cols = shape[d];
    if (d > axis) view.inner *= shape[d];
  }
  return view;
}

MXReturnValue sameShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in_shapes,
                        std::vector<std::vector<unsigned int>>* out_shapes) {
  out_shapes->at(0) = in_shapes->at(0);
  return MX_SUCCESS;
}

// mshadow_op::softrelu on half_t: the input itself above 20, else log1p(exp(a)) in float math.
inline float softrelu(float a) { return a > 20.0f ? a : log1pf(expf(a)); }
// mshadow_op::softrelu_grad, of the float16 output: -expm1(-a).
inline float softrelu_grad(float out) { return -expm1f(-out); }
// mshadow_op::softsign and its gradient, of the input, in float math.
inline float softsign(float a) { return a / (1.0f + fabsf(a)); }
inline float softsign_grad(float a) {
  const float d = 1.0f + fabsf(a);
  return 1.0f / (d * d);
}

inline float from_bits(uint32_t bits) {
  const uint16_t half = static_cast<uint16_t>(bits);
  _Float16 h;
  std::memcpy(&h, &half, sizeof(h));
  return static_cast<float>(h);
}

// One activation's float16 results, one per float16 value (65536 each): its inputs are float16
// values, so forward and backward are table lookups, built once from the expressions above.
// factor[v] is the float16-rounded gradient factor of the value v the backward reads (the input
// for gelu and softsign, the output for softrelu).
struct Tables {
  std::vector<float> value, factor;
  bool of_output = false;
  Tables(float (*fn)(float), float (*grad)(float), bool grad_of_output)
      : value(65536), factor(65536), of_output(grad_of_output) {
    // expf and erff set errno to ERANGE where they overflow or underflow, and the tables are
    // built in the caller's thread: MXNet's parameter parser (dmlc::stod) reads a stale ERANGE
    // as "Out of range value" for the next "inf" it parses (x != inf), so errno is put back.
    const int saved = errno;
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      value[bits] = round16_one(fn(from_bits(bits)));
      factor[bits] = round16_one(grad(from_bits(bits)));
    }
    errno = saved;
  }
};

// The tables of an act_type; nullptr for one the library does not compute.
const Tables* tablesOf(const std::string& act) {
  if (act == "gelu") {
    static const Tables tables(gelu, gelu_grad, false);
    return &tables;
  }
  if (act == "softrelu") {
    static const Tables tables(softrelu, softrelu_grad, true);
    return &tables;
  }
  if (act == "softsign") {
    static const Tables tables(softsign, softsign_grad, false);
    return &tables;
  }
  return nullptr;
}

const Tables* tablesFor(const Attrs& attrs) {
  auto found = attrs.find("act_type");
  return found == attrs.end() ? nullptr : tablesOf(found->second);
}

inline uint32_t half_bits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

// out[i] = table[float16 bits of x[i]] (x[i] rounded to float16 first: a float16 value is kept)
void lookup16(const float* table, const float* x, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_CUR_DIRECTION);
    _mm256_storeu_ps(out + i, _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(h), 4));
  }
#endif
  for (; i < n; ++i) out[i] = table[half_bits(x[i])];
}

void lookup16Parallel(const float* table, const float* x, float* out, int64_t n) {
  const int64_t chunk = 1 << 14;
  const int64_t blocks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * chunk;
    lookup16(table, x + start, out + start, n - start < chunk ? n - start : chunk);
  }
}

MXReturnValue parseAct(const Attrs& attrs, int* num_in, int* num_out) {
  if (tablesFor(attrs) == nullptr) {
    MX_ERROR_MSG << "_mxmixed_act16 needs act_type gelu, softrelu or softsign";
    return MX_FAIL;
  }
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

// Forward: the float16-rounded activation (the emulation's output cast keeps it).
MXReturnValue actForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                         std::vector<MXTensor>* outputs, const OpResource& res) {
  lookup16Parallel(tablesFor(attrs)->value.data(), inputs->at(0).data<float>(),
                   outputs->at(0).data<float>(), inputs->at(0).size());
  return MX_SUCCESS;
}

// inputs: the output gradient, the forward's input, its output. The product of two float16
// values is exact in float32; the emulation's input cast rounds it once.
MXReturnValue actBackward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  const Tables* tables = tablesFor(attrs);
  const float* g = inputs->at(0).data<float>();
  float* dx = outputs->at(0).data<float>();
  const int64_t n = inputs->at(0).size();
  lookup16Parallel(tables->factor.data(), inputs->at(tables->of_output ? 2 : 1).data<float>(),
                   dx, n);
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * dx[i];
  return MX_SUCCESS;
}

MXReturnValue biasShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in_shapes,
                        std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& x = in_shapes->at(0);
  const std::vector<unsigned int>& b = in_shapes->at(1);
  const int64_t axis = biasAxis(attrs, x.size());
  if (axis < 0 || b.size() != 1 || b[0] != x[axis]) {
    MX_ERROR_MSG << "_mxmixed_bias_add needs a bias of the data's dimension on its axis";
    return MX_FAIL;
  }
  out_shapes->at(0) = x;
  return MX_SUCCESS;
}

MXReturnValue biasForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  const float* x = inputs->at(0).data<float>();
  const float* b = inputs->at(1).data<float>();
  float* y = outputs->at(0).data<float>();
  const BiasView v = biasView(attrs, inputs->at(0).shape);
  if (v.inner == 1) {  // the last axis
#pragma omp parallel for schedule(static) if (v.outer * v.cols > kParallel)
    for (int64_t r = 0; r < v.outer; ++r) {
      for (int64_t c = 0; c < v.cols; ++c) y[r * v.cols + c] = x[r * v.cols + c] + b[c];
    }
    return MX_SUCCESS;
  }
  const int64_t rows = v.outer * v.cols;  // a row: the inner elements of one (outer, c)
#pragma omp parallel for schedule(static) if (rows * v.inner > kParallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float bias = b[r % v.cols];
    for (int64_t i = 0; i < v.inner; ++i) y[r * v.inner + i] = x[r * v.inner + i] + bias;
  }
  return MX_SUCCESS;
}

// mshadow::red::sum's Reduce: one term added to a sum with its residual (Kahan).
inline void kahanAdd(float x, float* val, float* residual) {
  const float y = x - *residual;
  const float t = *val + y;
  *residual = std::isinf(t) ? 0.0f : (t - *val) - y;
  *val = t;
}

// One block of columns, each summed row after row.
void kahanColumns(const float* g, float* db, int64_t rows, int64_t cols, int64_t begin,
                  int64_t end) {
  const int64_t width = end - begin;
  std::vector<float> val(width, 0.0f), residual(width, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = g + r * cols + begin;
    for (int64_t c = 0; c < width; ++c) kahanAdd(row[c], &val[c], &residual[c]);
  }
  std::memcpy(db + begin, val.data(), width * sizeof(float));
}

// One channel c of x seen as (outer, cols, inner): g[o, c, i] summed o after o, and i after i
// within each.
void kahanChannel(const float* g, float* db, const BiasView& v, int64_t c) {
  float val = 0.0f, residual = 0.0f;
  for (int64_t o = 0; o < v.outer; ++o) {
    const float* block = g + (o * v.cols + c) * v.inner;
    for (int64_t i = 0; i < v.inner; ++i) kahanAdd(block[i], &val, &residual);
  }
  db[c] = val;
}

// inputs: the output gradient, the forward's inputs (x, b), its output
MXReturnValue biasBackward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  const float* g = inputs->at(0).data<float>();
  float* dx = outputs->at(0).data<float>();
  float* db = outputs->at(1).data<float>();
  const int64_t n = inputs->at(0).size();
  const BiasView v = biasView(attrs, inputs->at(1).shape);
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t i = 0; i < n; ++i) dx[i] = 0.0f + g[i];
  if (v.inner == 1) {  // the last axis: blocks of columns, each summed row after row
    const int64_t block = 64;
    const int64_t blocks = (v.cols + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > kParallel)
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t begin = k * block;
      kahanColumns(g, db, v.outer, v.cols, begin, begin + block < v.cols ? begin + block : v.cols);
    }
    return MX_SUCCESS;
  }
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t c = 0; c < v.cols; ++c) kahanChannel(g, db, v, c);
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(_mxmixed_act16)
.setForward(actForward, "cpu")
.setBackward(actBackward, "cpu")
.setParseAttrs(parseAct)
.setInferType(allFloat32)
.setInferShape(sameShape);

REGISTER_OP(_mxmixed_bias_add)
.setForward(biasForward, "cpu")
.setBackward(biasBackward, "cpu")
.setParseAttrs(parseBias)
.setInferType(allFloat32)
.setInferShape(biasShape);
