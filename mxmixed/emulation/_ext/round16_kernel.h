// The float16 rounding of float32 values, shared by the extension op (round16.cc) and its
// oneDNN-layout compute (round16_onednn.cc): IEEE round-to-nearest-even, overflow to inf,
// float16 subnormals and zero, NaN kept.
#ifndef MXMIXED_ROUND16_KERNEL_H_
#define MXMIXED_ROUND16_KERNEL_H_
#include <cstdint>
#if defined(__F16C__)
#include <immintrin.h>
#endif

// One element: GCC's _Float16 conversion (F16C's scalar vcvtps2ph under -march=native,
// libgcc's software rounding without it). Same IEEE rounding as the vector path below.
static inline float round16_one(float x) {
  return static_cast<float>(static_cast<_Float16>(x));
}

// A block of elements. GCC does not vectorize the _Float16 conversion, so F16C's 8-wide form
// is spelled out (on every x86-64 CPU with F16C, AVX-512 ones included); rounding mode imm 4
// is MXCSR's (nearest-even), as in the scalar vcvtps2ph GCC emits.
static inline void round16_block(const float* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_CUR_DIRECTION);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = round16_one(in[i]);
}

static inline void round16(const float* in, float* out, int64_t n) {
  const int64_t chunk = 1 << 14;
  const int64_t blocks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * chunk;
    round16_block(in + start, out + start, (n - start < chunk) ? n - start : chunk);
  }
}
#endif  // MXMIXED_ROUND16_KERNEL_H_
