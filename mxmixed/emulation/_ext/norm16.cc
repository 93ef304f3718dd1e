// softmax and LayerNorm of float16 data (carried as float32) with the arithmetic of MXNet 1.9.1's
// GPU kernels, under either value of MXNET_SAFE_ACCUMULATION, read at each run as MXNet reads it
// (dmlc::GetEnv<bool>). Part of the rounding library built by mxmixed/emulation/_round16.py;
// mxmixed/emulation/_ops.py writes the GPU arithmetic next to each op's entry.
//
// The GPU kernels accumulate in AType: float with the variable set, half_t without it. Each
// half_t operation is float arithmetic rounded to float16 (mshadow/half.h: half_t op T returns
// half_t(float(a) op float(b))), so a half_t sum depends on its order: the order here is the
// kernels' own. A block's threads each sum a strided share of a row, then halve the partial sums
// pairwise (shared memory trees, warp shuffles), which is fold() below.
//
// _mxmixed_softmax16 (attr axis): softmax-inl.h, softmax_stride1_compute_kernel (last axis, at
//   most 10240 elements; backward 5120) or softmax_compute_kernel (128 threads).
//   forward:  d = half(x - max); sum of AType(expf(d)); y = half(expf(d) / sum)
//   backward: sum of AType(half(dy * y)); dx = half(y * half(dy - sum))
// _mxmixed_layernorm16 (attr eps; last axis): layer_norm.cu's contiguous kernels.
//   forward: per-thread Welford sums, merged by Chan's formula across a warp's lanes (xor
//   shuffles) and warps; invstd = half(1 / sqrt(var + eps)); y = half(half(gamma *
//   half(invstd * (x - mean))) + beta); the outputs mean and std are float16.
//   backward: from the float16 mean and std; dx = half(dy * gamma * invstd - mean(dy * gamma *
//   invstd) - (x - mean) * invstd * mean(dy * gamma * (x - mean) * invstd^2)); dgamma, dbeta
//   summed over rows in 16 parts of 16 threads.
// In float (AType float) nvcc may fuse a multiply and an add; these sums do not, so float32 sums
// can differ from the GPU's in their last bit, and a float16 result next to a rounding boundary
// with them.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>
#include "mxnet/lib_api.h"
#include "float32_types.h"
#include "round16_kernel.h"

// Every float operation rounds where the GPU's does: no multiply-add is fused into one rounding
// (GCC fuses them under -march=native on CPUs with FMA).
#pragma GCC optimize("fp-contract=off")

using namespace mxnet::ext;

namespace {

using Attrs = std::unordered_map<std::string, std::string>;
using Shapes = std::vector<std::vector<unsigned int>>;

// MXNET_SAFE_ACCUMULATION as dmlc::GetEnv<bool> reads it: unset or empty is false.
MXReturnValue safeAccumulation(bool* safe) {
  const char* value = std::getenv("MXNET_SAFE_ACCUMULATION");
  *safe = false;
  if (value == nullptr || *value == '\0') return MX_SUCCESS;
  std::string lower(value);
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "true" || lower == "1") {
    *safe = true;
  } else if (lower != "false" && lower != "0") {
    MX_ERROR_MSG << "Invalid Parameter format for MXNET_SAFE_ACCUMULATION expect boolean but "
                 << "value='" << value << "'";
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

// AType arithmetic: each result rounded to float16 for half_t, kept for float.
template <bool kHalf>
inline float acc(float x) {
  return kHalf ? round16_one(x) : x;
}

// The pairwise halving of n (a power of two) partial sums into p[0].
template <bool kHalf>
float fold(float* p, int n) {
  for (int size = n / 2; size > 0; size /= 2) {
    for (int t = 0; t < size; ++t) p[t] += p[t + size];
    if (kHalf) round16_block(p, p, size);
  }
  return p[0];
}

// Thread t of `threads` sums v[t], v[t + threads], ... in order; then fold().
template <bool kHalf>
float blockSum(const float* v, int64_t n, int threads, float* partial) {
  std::fill(partial, partial + threads, 0.0f);
  for (int64_t base = 0; base < n; base += threads) {
    const int m = static_cast<int>(std::min<int64_t>(threads, n - base));
    for (int t = 0; t < m; ++t) partial[t] += v[base + t];
    if (kHalf) round16_block(partial, partial, m);
  }
  return fold<kHalf>(partial, threads);
}

int roundToPower2(int n) {
  int power = 1;
  while (power < n) power *= 2;
  return power;
}

// Threads per row of softmax's kernels: get_load_type and get_rows_per_block
// (src/common/cuda_utils.cc) for the stride-1 kernel, 128 for the general one.
int softmaxThreads(int64_t m, bool last_axis, bool backward) {
  const int64_t opt_limit = backward ? 5120 : 10240;
  if (!last_axis || m > opt_limit) return 128;
  const int64_t bytes = m * 2;
  const int64_t row_size = bytes % 8 == 0 ? m / 4 : (bytes % 4 == 0 ? m / 2 : m);
  const int64_t threads = (row_size + 1) / 2;
  const int warps = static_cast<int>(std::min<int64_t>((threads + 31) / 32, 16));
  return 32 * roundToPower2(std::max(warps, 1));
}

struct Layout {
  int64_t outer, m, inner;
};

MXReturnValue axisLayout(const Attrs& attrs, const std::vector<int64_t>& shape,
                         Layout* layout) {
  int axis = -1;
  auto found = attrs.find("axis");
  if (found != attrs.end() && found->second != "None") axis = std::stoi(found->second);
  const int ndim = static_cast<int>(shape.size());
  if (axis < 0) axis += ndim;
  if (axis < 0 || axis >= ndim) {
    MX_ERROR_MSG << "_mxmixed_softmax16: axis out of range for " << ndim << " dimensions";
    return MX_FAIL;
  }
  layout->outer = layout->inner = 1;
  for (int k = 0; k < axis; ++k) layout->outer *= shape[k];
  for (int k = axis + 1; k < ndim; ++k) layout->inner *= shape[k];
  layout->m = shape[axis];
  return MX_SUCCESS;
}

template <bool kHalf>
void softmaxRow(const float* x, float* y, int64_t m, int threads, float* work, float* partial) {
  float top = x[0];
  for (int64_t j = 1; j < m; ++j) top = top < x[j] ? x[j] : top;
  for (int64_t j = 0; j < m; ++j) work[j] = x[j] - top;
  round16_block(work, work, m);  // (val - smax) is half_t
  for (int64_t j = 0; j < m; ++j) y[j] = expf(work[j]);
  if (kHalf) round16_block(y, work, m);  // static_cast<half_t>(expf(...))
  const float sum = blockSum<kHalf>(kHalf ? work : y, m, threads, partial);
  for (int64_t j = 0; j < m; ++j) y[j] = y[j] / sum;
  round16_block(y, y, m);
}

template <bool kHalf>
void softmaxGradRow(const float* dy, const float* y, float* dx, int64_t m, int threads,
                    float* work, float* partial) {
  for (int64_t j = 0; j < m; ++j) work[j] = dy[j] * y[j];
  round16_block(work, work, m);  // mshadow_op::mul on half_t
  const float sum = blockSum<kHalf>(work, m, threads, partial);
  for (int64_t j = 0; j < m; ++j) dx[j] = dy[j] - sum;
  round16_block(dx, dx, m);  // ograd - sum is half_t (a float sum too)
  for (int64_t j = 0; j < m; ++j) dx[j] = y[j] * dx[j];
  round16_block(dx, dx, m);
}

// Rows along the axis: copied out for an inner axis, in place for the last one.
template <typename RowFn>
void forRows(const Layout& l, int inputs, const float* const* in, float* out, RowFn fn) {
#pragma omp parallel
  {
    std::vector<float> rows(l.m * (inputs + 1));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < l.outer * l.inner; ++r) {
      const int64_t o = r / l.inner, i = r % l.inner, base = o * l.m * l.inner + i;
      const float* src[2];
      for (int k = 0; k < inputs; ++k) {
        if (l.inner == 1) {
          src[k] = in[k] + base;
        } else {
          for (int64_t j = 0; j < l.m; ++j) rows[k * l.m + j] = in[k][base + j * l.inner];
          src[k] = rows.data() + k * l.m;
        }
      }
      float* dst = l.inner == 1 ? out + base : rows.data() + inputs * l.m;
      fn(src, dst);
      if (l.inner != 1) {
        for (int64_t j = 0; j < l.m; ++j) out[base + j * l.inner] = dst[j];
      }
    }
  }
}

MXReturnValue parseSoftmax(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue softmaxForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource& res) {
  bool safe;
  Layout l;
  if (safeAccumulation(&safe) != MX_SUCCESS ||
      axisLayout(attrs, inputs->at(0).shape, &l) != MX_SUCCESS) return MX_FAIL;
  if (l.m == 0 || inputs->at(0).size() == 0) return MX_SUCCESS;
  const int threads = softmaxThreads(l.m, l.inner == 1, false);
  const float* in[1] = {inputs->at(0).data<float>()};
  const int64_t m = l.m;
  forRows(l, 1, in, outputs->at(0).data<float>(), [&](const float* const* src, float* dst) {
    thread_local std::vector<float> work, partial;
    work.resize(m);
    partial.resize(threads);
    if (safe) {
      softmaxRow<false>(src[0], dst, m, threads, work.data(), partial.data());
    } else {
      softmaxRow<true>(src[0], dst, m, threads, work.data(), partial.data());
    }
  });
  return MX_SUCCESS;
}

// inputs: the output gradient, the forward's input, its output
MXReturnValue softmaxBackward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                              std::vector<MXTensor>* outputs, const OpResource& res) {
  bool safe;
  Layout l;
  if (safeAccumulation(&safe) != MX_SUCCESS ||
      axisLayout(attrs, inputs->at(0).shape, &l) != MX_SUCCESS) return MX_FAIL;
  if (l.m == 0 || inputs->at(0).size() == 0) return MX_SUCCESS;
  const int threads = softmaxThreads(l.m, l.inner == 1, true);
  const float* in[2] = {inputs->at(0).data<float>(), inputs->at(2).data<float>()};
  const int64_t m = l.m;
  forRows(l, 2, in, outputs->at(0).data<float>(), [&](const float* const* src, float* dst) {
    thread_local std::vector<float> work, partial;
    work.resize(m);
    partial.resize(threads);
    if (safe) {
      softmaxGradRow<false>(src[0], src[1], dst, m, threads, work.data(), partial.data());
    } else {
      softmaxGradRow<true>(src[0], src[1], dst, m, threads, work.data(), partial.data());
    }
  });
  return MX_SUCCESS;
}

MXReturnValue sameShape(const Attrs& attrs, Shapes* in_shapes, Shapes* out_shapes) {
  out_shapes->at(0) = in_shapes->at(0);
  return MX_SUCCESS;
}

// ------------------------------------------------------------------------------- LayerNorm
struct Welford {
  float mean = 0.0f, sigma2 = 0.0f;
  int count = 0;
};

// StepWelfordOnlineSum
template <bool kHalf>
inline void step(Welford* w, float curr) {
  w->count += 1;
  const float delta = acc<kHalf>(curr - w->mean);
  w->mean = acc<kHalf>(w->mean + acc<kHalf>(delta / static_cast<float>(w->count)));
  w->sigma2 = acc<kHalf>(w->sigma2 + acc<kHalf>(delta * acc<kHalf>(curr - w->mean)));
}

// ChanMergePartition(lhs, rhs): rhs becomes the merge. In half_t, DType(count) rounds it.
template <bool kHalf>
inline void merge(const Welford& lhs, Welford* rhs) {
  const float delta = acc<kHalf>(rhs->mean - lhs.mean);
  float na = acc<kHalf>(static_cast<float>(lhs.count));
  float nb = acc<kHalf>(static_cast<float>(rhs->count));
  rhs->count = static_cast<int>(acc<kHalf>(na + nb));
  if (rhs->count > 0) {
    const float n = static_cast<float>(rhs->count);
    na = acc<kHalf>(na / n);
    nb = acc<kHalf>(nb / n);
    rhs->mean = acc<kHalf>(acc<kHalf>(na * lhs.mean) + acc<kHalf>(nb * rhs->mean));
    const float spread = acc<kHalf>(acc<kHalf>(acc<kHalf>(acc<kHalf>(delta * delta) * na) * nb) * n);
    rhs->sigma2 = acc<kHalf>(acc<kHalf>(rhs->sigma2 + lhs.sigma2) + spread);
  } else {
    rhs->mean = rhs->sigma2 = 0.0f;
  }
}

// BlockWelfordOnlineSum: in half_t (generic template) each thread takes 4 consecutive values
// per pass; in float (the half2 specialization) pairs, thread 0 first taking the value before
// an odd row start (align) and the last value of an odd remainder (padding).
template <bool kHalf>
void threadSums(const float* x, int64_t c, int threads, bool odd_start, Welford* w) {
  for (int t = 0; t < threads; ++t) w[t] = Welford();
  if (kHalf) {
    for (int t = 0; t < threads; ++t) {
      int64_t l = 4 * t;
      for (; l + 3 < c; l += 4 * threads) {
        for (int i = 0; i < 4; ++i) step<true>(&w[t], x[l + i]);
      }
      for (; l < c; ++l) step<true>(&w[t], x[l]);
    }
    return;
  }
  const int64_t shift = odd_start ? 1 : 0;
  if (shift) step<false>(&w[0], x[0]);
  if ((c - shift) % 2) step<false>(&w[0], x[c - 1]);
  const int64_t pairs = (c - shift) / 2;
  for (int t = 0; t < threads; ++t) {
    for (int64_t l = t; l < pairs; l += threads) {
      step<false>(&w[t], x[shift + 2 * l]);
      step<false>(&w[t], x[shift + 2 * l + 1]);
    }
  }
}

// The warp's xor-shuffle merges, then the merges across warps: lane k of warp 0 ends with the
// statistics that the threads of lane k use (w[k]).
template <bool kHalf>
void mergeLanes(Welford* w, int warps) {
  Welford before[32];
  for (int y = 0; y < warps; ++y) {
    Welford* lane = w + 32 * y;
    for (int mask = 16; mask > 0; mask >>= 1) {
      std::copy(lane, lane + 32, before);
      for (int k = 0; k < 32; ++k) merge<kHalf>(before[k ^ mask], &lane[k]);
    }
  }
  for (int offset = warps / 2; offset > 0; offset >>= 1) {
    for (int y = 0; y < offset; ++y) {
      for (int k = 0; k < 32; ++k) merge<kHalf>(w[32 * (y + offset) + k], &w[32 * y + k]);
    }
  }
}

struct NormParams {
  float eps;
  int64_t rows, c;
};

MXReturnValue normParams(const Attrs& attrs, const std::vector<int64_t>& shape,
                         NormParams* p) {
  auto found = attrs.find("eps");
  p->eps = found == attrs.end() ? 1e-5f : std::stof(found->second);
  p->c = shape.empty() ? 1 : shape.back();
  p->rows = 1;
  for (size_t k = 0; k + 1 < shape.size(); ++k) p->rows *= shape[k];
  return MX_SUCCESS;
}

template <bool kHalf>
void normRow(const float* x, const float* gamma, const float* beta, float* y, float* mean_out,
             float* std_out, int64_t c, float eps, bool odd_start) {
  const int warps = c <= 128 ? 1 : (c <= 512 ? 2 : 4);
  Welford w[128];
  threadSums<kHalf>(x, c, 32 * warps, odd_start, w);
  mergeLanes<kHalf>(w, warps);
  float invstd[32], stdev[32];
  for (int k = 0; k < 32; ++k) {
    const float var = acc<kHalf>(w[k].sigma2 / static_cast<float>(c));
    stdev[k] = acc<kHalf>(sqrtf(acc<kHalf>(var + acc<kHalf>(eps))));
    invstd[k] = round16_one(1.0f / stdev[k]);  // DType(1.0) / std_eps is half_t
  }
  for (int64_t i = 0; i < c; ++i) {
    const int k = static_cast<int>(i % 32);
    y[i] = round16_one(invstd[k] * acc<kHalf>(x[i] - w[k].mean));
  }
  for (int64_t i = 0; i < c; ++i) y[i] = round16_one(gamma[i] * y[i]);
  for (int64_t i = 0; i < c; ++i) y[i] = round16_one(y[i] + beta[i]);
  *mean_out = round16_one(w[0].mean);
  *std_out = round16_one(stdev[0]);
}

MXReturnValue parseNorm(const Attrs& attrs, int* num_in, int* num_out) {
  *num_in = 3;
  *num_out = 3;
  return MX_SUCCESS;
}

MXReturnValue normShape(const Attrs& attrs, Shapes* in_shapes, Shapes* out_shapes) {
  const std::vector<unsigned int>& x = in_shapes->at(0);
  if (x.empty() || in_shapes->at(1) != std::vector<unsigned int>{x.back()} ||
      in_shapes->at(2) != std::vector<unsigned int>{x.back()}) {
    MX_ERROR_MSG << "_mxmixed_layernorm16 needs gamma and beta of the data's last dimension";
    return MX_FAIL;
  }
  std::vector<unsigned int> stats = x;
  stats.back() = 1;
  out_shapes->at(0) = x;
  out_shapes->at(1) = out_shapes->at(2) = stats;
  return MX_SUCCESS;
}

MXReturnValue normForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource& res) {
  bool safe;
  NormParams p;
  if (safeAccumulation(&safe) != MX_SUCCESS ||
      normParams(attrs, inputs->at(0).shape, &p) != MX_SUCCESS) return MX_FAIL;
  const float* x = inputs->at(0).data<float>();
  const float* gamma = inputs->at(1).data<float>();
  const float* beta = inputs->at(2).data<float>();
  float* y = outputs->at(0).data<float>();
  float* mean = outputs->at(1).data<float>();
  float* stdev = outputs->at(2).data<float>();
#pragma omp parallel for schedule(static) if (p.rows * p.c > (1 << 15))
  for (int64_t r = 0; r < p.rows; ++r) {
    const bool odd_start = (r * p.c) % 2 != 0;  // a half2 load needs a 4-byte address
    if (safe) {
      normRow<false>(x + r * p.c, gamma, beta, y + r * p.c, mean + r, stdev + r, p.c, p.eps,
                     odd_start);
    } else {
      normRow<true>(x + r * p.c, gamma, beta, y + r * p.c, mean + r, stdev + r, p.c, p.eps,
                    odd_start);
    }
  }
  return MX_SUCCESS;
}

// LayerNormFusedBackwardKernel_Data for one row: 32 * warps threads, 4 consecutive values per
// pass; the sums reduced over each warp's lanes, then over the warps.
template <bool kHalf>
void normGradRow(const float* dy, const float* x, const float* gamma, float mean, float stdev,
                 float* dx, int64_t c) {
  const int warps = c <= 32 ? 1 : (c <= 128 ? 2 : (c <= 512 ? 4 : 8));
  const int threads = 32 * warps;
  const float inv = acc<kHalf>(1.0f / stdev);
  float s0[256], s1[256];
  for (int t = 0; t < threads; ++t) {
    float a = 0.0f, b = 0.0f;
    auto add = [&](int64_t i) {
      const float scaled = acc<kHalf>(dy[i] * gamma[i]);
      a = acc<kHalf>(a + acc<kHalf>(scaled * inv));
      const float centred = acc<kHalf>(x[i] - mean);
      b = acc<kHalf>(b + acc<kHalf>(acc<kHalf>(acc<kHalf>(scaled * centred) * inv) * inv));
    };
    int64_t l = 4 * t;
    for (; l + 3 < c; l += 4 * threads) {
      for (int i = 0; i < 4; ++i) add(l + i);
    }
    for (; l < c; ++l) add(l);
    s0[t] = a;
    s1[t] = b;
  }
  float w0[8], w1[8];
  for (int y = 0; y < warps; ++y) {
    w0[y] = fold<kHalf>(s0 + 32 * y, 32);
    w1[y] = fold<kHalf>(s1 + 32 * y, 32);
  }
  const float n = static_cast<float>(c);
  const float sum0 = acc<kHalf>(fold<kHalf>(w0, warps) / n);
  const float sum1 = acc<kHalf>(fold<kHalf>(w1, warps) / n);
  for (int64_t i = 0; i < c; ++i) {
    const float first = acc<kHalf>(acc<kHalf>(acc<kHalf>(dy[i] * gamma[i]) * inv) - sum0);
    const float second = acc<kHalf>(acc<kHalf>(acc<kHalf>(x[i] - mean) * inv) * sum1);
    dx[i] = round16_one(first - second);
  }
}

// _PartGammaBeta then _GammaBeta for columns [begin, end): 16 parts of rows, 16 threads each
// taking every 16th row of its part; the threads' sums and then the parts' halved pairwise.
template <bool kHalf>
void gammaBetaColumns(const float* dy, const float* x, const float* mean, const float* stdev,
                      float* dgamma, float* dbeta, int64_t rows, int64_t c, int64_t begin,
                      int64_t end) {
  const int parts = 16, threads = 16;
  const int64_t per_part = (rows + parts - 1) / parts;
  float g[16], b[16], part_g[16], part_b[16];
  for (int64_t col = begin; col < end; ++col) {
    for (int p = 0; p < parts; ++p) {
      const int64_t r_begin = p * per_part, r_end = std::min(rows, (p + 1) * per_part);
      for (int t = 0; t < threads; ++t) {
        float sg = 0.0f, sb = 0.0f;
        for (int64_t r = r_begin + t; r < r_end; r += threads) {
          const float og = dy[r * c + col];
          const float norm = acc<kHalf>(acc<kHalf>(x[r * c + col] - mean[r]) / stdev[r]);
          sg = acc<kHalf>(sg + acc<kHalf>(norm * og));
          sb = acc<kHalf>(sb + og);
        }
        g[t] = sg;
        b[t] = sb;
      }
      part_g[p] = fold<kHalf>(g, threads);
      part_b[p] = fold<kHalf>(b, threads);
    }
    dgamma[col] = round16_one(fold<kHalf>(part_g, parts));
    dbeta[col] = round16_one(fold<kHalf>(part_b, parts));
  }
}

// inputs: the gradients of out, mean and std; the forward's x, gamma, beta; out, mean, std
MXReturnValue normBackward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource& res) {
  bool safe;
  NormParams p;
  if (safeAccumulation(&safe) != MX_SUCCESS ||
      normParams(attrs, inputs->at(3).shape, &p) != MX_SUCCESS) return MX_FAIL;
  const float* dy = inputs->at(0).data<float>();
  const float* x = inputs->at(3).data<float>();
  const float* gamma = inputs->at(4).data<float>();
  const float* mean = inputs->at(7).data<float>();
  const float* stdev = inputs->at(8).data<float>();
  float* dx = outputs->at(0).data<float>();
  const int64_t n = p.rows * p.c;
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t r = 0; r < p.rows; ++r) {
    if (safe) {
      normGradRow<false>(dy + r * p.c, x + r * p.c, gamma, mean[r], stdev[r], dx + r * p.c, p.c);
    } else {
      normGradRow<true>(dy + r * p.c, x + r * p.c, gamma, mean[r], stdev[r], dx + r * p.c, p.c);
    }
  }
  const int64_t block = 32;
  const int64_t blocks = (p.c + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t begin = k * block, end = std::min(p.c, begin + block);
    if (safe) {
      gammaBetaColumns<false>(dy, x, mean, stdev, outputs->at(1).data<float>(),
                              outputs->at(2).data<float>(), p.rows, p.c, begin, end);
    } else {
      gammaBetaColumns<true>(dy, x, mean, stdev, outputs->at(1).data<float>(),
                             outputs->at(2).data<float>(), p.rows, p.c, begin, end);
    }
  }
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(_mxmixed_softmax16)
.setForward(softmaxForward, "cpu")
.setBackward(softmaxBackward, "cpu")
.setParseAttrs(parseSoftmax)
.setInferType(allFloat32)
.setInferShape(sameShape);

REGISTER_OP(_mxmixed_layernorm16)
.setForward(normForward, "cpu")
.setBackward(normBackward, "cpu")
.setParseAttrs(parseNorm)
.setInferType(allFloat32)
.setInferShape(normShape);
