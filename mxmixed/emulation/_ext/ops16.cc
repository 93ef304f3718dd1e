// Float32 computes of float16 ops, each giving the bits of MXNet 1.9.1's own float16 CPU kernel
// once the emulation's casts round around it (mxmixed/emulation/_ops.py says which op uses
// which; tests/emulation/test_ops16.py checks every float16 input). Part of the rounding
// library built by mxmixed/emulation/_round16.py.
//
// _mxmixed_gelu16: LeakyReLU(act_type='gelu') for float16 data carried as float32.
//   Forward: mshadow_op::gelu's float expression, 0.5f * a * (1 + erff(a / SQRT_2)), rounded
//   once to float16 as the half_t kernel rounds it. Backward: backward_grad of
//   mshadow_op::gelu_grad on half_t: the gradient factor is rounded to float16 (the op returns
//   DType), then multiplied by the float16 output gradient in half_t arithmetic (float product,
//   exact for two float16 values, rounded once by the emulation's input cast). erff and expf are
//   glibc's, as libmxnet.so's (it imports both). Both are tables of the 65536 float16 inputs.
//
// _mxmixed_bias_add: x (..., C) + b (C) in float32, the emulation's bias add after a GEMM.
//   Forward: broadcast_add's one float add. Backward: the bits of MXNet's CPU
//   BinaryBroadcastBackwardUseNone: dx = 0 + g (a -0 gradient becomes +0, as there), db[c] the
//   Kahan sum (mshadow red::sum with its residual) of g[., c] in row order, without the
//   per-element index arithmetic that makes MXNet's generic reduce slow.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>
#include "mxnet/lib_api.h"
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

MXReturnValue parseOne(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue parseTwo(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 2;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue allFloat32(const Attrs& attrs, std::vector<int>* in_types,
                         std::vector<int>* out_types) {
  for (size_t i = 0; i < in_types->size(); ++i) {
    if (in_types->at(i) != kFloat32 && in_types->at(i) != -1) {
      MX_ERROR_MSG << "mxmixed's float16 computes take float32 inputs, not type "
                   << in_types->at(i);
      return MX_FAIL;
    }
    in_types->at(i) = kFloat32;
  }
  out_types->at(0) = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue sameShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in_shapes,
                        std::vector<std::vector<unsigned int>>* out_shapes) {
  out_shapes->at(0) = in_shapes->at(0);
  return MX_SUCCESS;
}

// The float16 results of both, one per float16 input (65536 each): the inputs are float16
// values, so gelu is a table lookup, built once from the expressions above.
struct GeluTables {
  std::vector<float> value, factor;
  GeluTables() : value(65536), factor(65536) {
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const uint16_t half = static_cast<uint16_t>(bits);
      _Float16 h;
      std::memcpy(&h, &half, sizeof(h));
      const float a = static_cast<float>(h);
      value[bits] = round16_one(gelu(a));
      factor[bits] = round16_one(gelu_grad(a));
    }
  }
};

const GeluTables& geluTables() {
  static const GeluTables tables;
  return tables;
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

// Forward: the float16-rounded gelu (the emulation's output cast keeps it).
MXReturnValue geluForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  lookup16Parallel(geluTables().value.data(), inputs->at(0).data<float>(),
                   outputs->at(0).data<float>(), inputs->at(0).size());
  return MX_SUCCESS;
}

// inputs: the output gradient, the forward's input, its output. The product of two float16
// values is exact in float32; the emulation's input cast rounds it once.
MXReturnValue geluBackward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  const float* g = inputs->at(0).data<float>();
  float* dx = outputs->at(0).data<float>();
  const int64_t n = inputs->at(0).size();
  lookup16Parallel(geluTables().factor.data(), inputs->at(1).data<float>(), dx, n);
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * dx[i];
  return MX_SUCCESS;
}

MXReturnValue biasShape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in_shapes,
                        std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& x = in_shapes->at(0);
  const std::vector<unsigned int>& b = in_shapes->at(1);
  if (x.empty() || b.size() != 1 || b[0] != x.back()) {
    MX_ERROR_MSG << "_mxmixed_bias_add needs a bias of the data's last dimension";
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
  const int64_t cols = inputs->at(1).size();
  const int64_t rows = cols ? inputs->at(0).size() / cols : 0;
#pragma omp parallel for schedule(static) if (rows * cols > kParallel)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] + b[c];
  }
  return MX_SUCCESS;
}

// One block of columns: mshadow::red::sum's Reduce with a residual, row after row.
void kahanColumns(const float* g, float* db, int64_t rows, int64_t cols, int64_t begin,
                  int64_t end) {
  const int64_t width = end - begin;
  std::vector<float> val(width, 0.0f), residual(width, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = g + r * cols + begin;
    for (int64_t c = 0; c < width; ++c) {
      const float y = row[c] - residual[c];
      const float t = val[c] + y;
      residual[c] = std::isinf(t) ? 0.0f : (t - val[c]) - y;
      val[c] = t;
    }
  }
  std::memcpy(db + begin, val.data(), width * sizeof(float));
}

// inputs: the output gradient, the forward's inputs (x, b), its output
MXReturnValue biasBackward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  const float* g = inputs->at(0).data<float>();
  float* dx = outputs->at(0).data<float>();
  float* db = outputs->at(1).data<float>();
  const int64_t n = inputs->at(0).size();
  const int64_t cols = outputs->at(1).size();
  const int64_t rows = cols ? n / cols : 0;
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t i = 0; i < n; ++i) dx[i] = 0.0f + g[i];
  const int64_t block = 64;
  const int64_t blocks = (cols + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > kParallel)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t begin = k * block;
    kahanColumns(g, db, rows, cols, begin, begin + block < cols ? begin + block : cols);
  }
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(_mxmixed_gelu16)
.setForward(geluForward, "cpu")
.setBackward(geluBackward, "cpu")
.setParseAttrs(parseOne)
.setInferType(allFloat32)
.setInferShape(sameShape);

REGISTER_OP(_mxmixed_bias_add)
.setForward(biasForward, "cpu")
.setBackward(biasBackward, "cpu")
.setParseAttrs(parseTwo)
.setInferType(allFloat32)
.setInferShape(biasShape);
