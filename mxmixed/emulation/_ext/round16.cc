// _mxmixed_round16: float32 in, float32 out holding the float16-rounded value (IEEE
// round-to-nearest-even, overflow to inf, float16 subnormals and zero), in one pass.
// Backward rounds the gradient the same way: a float16 gradient carried as float32.
// It stands for a float16 cast pair (float32 -> float16 -> float32) between two emulated ops;
// the graph pass of mxmixed.emulation inserts it. Built by mxmixed/emulation/_round16.py.
#include <cstdint>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include "mxnet/lib_api.h"

using namespace mxnet::ext;

// One element: GCC's _Float16 conversion (F16C's scalar vcvtps2ph under -march=native,
// libgcc's software rounding without it). Same IEEE rounding as the vector path below.
static inline float round16_one(float x) {
  return static_cast<float>(static_cast<_Float16>(x));
}

// A block of elements. GCC does not vectorize the _Float16 conversion, so F16C's 8-wide form
// is spelled out (on every x86-64 CPU with F16C, AVX-512 ones included); rounding mode imm 4
// is MXCSR's (nearest-even), as in the scalar vcvtps2ph GCC emits.
static void round16_block(const float* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_CUR_DIRECTION);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = round16_one(in[i]);
}

static void round16(const float* in, float* out, int64_t n) {
  const int64_t chunk = 1 << 14;
  const int64_t blocks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * chunk;
    round16_block(in + start, out + start, (n - start < chunk) ? n - start : chunk);
  }
}

static MXReturnValue parseAttrs(const std::unordered_map<std::string, std::string>& attrs,
                                int* num_in, int* num_out) {
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

static MXReturnValue inferType(const std::unordered_map<std::string, std::string>& attrs,
                               std::vector<int>* in_types, std::vector<int>* out_types) {
  if (in_types->at(0) != kFloat32) {
    MX_ERROR_MSG << "_mxmixed_round16 takes float32 input";
    return MX_FAIL;
  }
  out_types->at(0) = kFloat32;
  return MX_SUCCESS;
}

static MXReturnValue inferShape(const std::unordered_map<std::string, std::string>& attrs,
                                std::vector<std::vector<unsigned int>>* in_shapes,
                                std::vector<std::vector<unsigned int>>* out_shapes) {
  out_shapes->at(0) = in_shapes->at(0);
  return MX_SUCCESS;
}

static MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                             std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                             const OpResource& res) {
  round16(inputs->at(0).data<float>(), outputs->at(0).data<float>(), inputs->at(0).size());
  return MX_SUCCESS;
}

// inputs: the output gradient first (then the forward's input and output, unused)
static MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                              std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                              const OpResource& res) {
  round16(inputs->at(0).data<float>(), outputs->at(0).data<float>(), inputs->at(0).size());
  return MX_SUCCESS;
}

REGISTER_OP(_mxmixed_round16)
.setForward(forward, "cpu")
.setBackward(backward, "cpu")
.setParseAttrs(parseAttrs)
.setInferType(inferType)
.setInferShape(inferShape);

MXReturnValue initialize(int version) {
  return version >= 10900 ? MX_SUCCESS : MX_FAIL;
}
