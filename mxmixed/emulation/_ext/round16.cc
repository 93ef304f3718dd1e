// _mxmixed_round16: float32 in, float32 out holding the float16-rounded value (IEEE
// round-to-nearest-even, overflow to inf, float16 subnormals and zero), in one pass.
// Backward rounds the gradient the same way: a float16 gradient carried as float32.
// It stands for a float16 cast pair (float32 -> float16 -> float32) between two emulated ops;
// the graph pass of mxmixed.emulation inserts it. Built by mxmixed/emulation/_round16.py.
//
// _mxmixed_round_bf16: float32 in, float32 out holding the bfloat16-rounded value (round to
// nearest even, overflow to inf, bfloat16 subnormals kept, NaN kept as a quiet NaN), with no
// bfloat16 tensor and no AVX-512: the rounding of mxmixed.symbolic's bfloat16 emulation, which
// validates a bfloat16 model on a CPU where MXNet's bfloat16 (oneDNN) cannot run.
//
// _mxmixed_nonfinite: num_arrays float32 or float16 arrays in, one float32 flag per array out
// (1 when the array holds an inf or a NaN, else 0): the exact per-element test of MXNet's
// multi_all_finite, on the exponent bits, at the speed of one vectorized pass over the data.
// The emulation's overflow check (mxmixed/emulation/_overflow.py) runs it on the gradients.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "mxnet/lib_api.h"
#include "round16_kernel.h"

using namespace mxnet::ext;

static MXReturnValue parseAttrs(const std::unordered_map<std::string, std::string>& attrs,
                                int* num_in, int* num_out) {
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

// The op only ever stands for a cast pair of a float32 value, so both types are float32. Like
// MXNet's own ops it accepts an input type still unknown (-1): graphs whose variables get their
// types in a later pass (a SymbolBlock built under amp.init, gluon-cv's FPN R-CNNs) bind.
// lib_api hands the outputs in as unknown, so fixing the input covers inference from the output.
static MXReturnValue inferType(const std::unordered_map<std::string, std::string>& attrs,
                               std::vector<int>* in_types, std::vector<int>* out_types) {
  if (in_types->at(0) != kFloat32 && in_types->at(0) != -1) {
    MX_ERROR_MSG << "_mxmixed_round16 takes float32 input, not type " << in_types->at(0);
    return MX_FAIL;
  }
  in_types->at(0) = kFloat32;
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

// One element, on the bits: add half an ulp of bfloat16 (less one, plus the kept bit's parity,
// so ties go to even) and drop the low 16 bits. A NaN is kept (quieted) rather than carried
// into inf. Finite values near the float32 maximum round up to inf, as a cast does.
static inline float round_bf16_one(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    u = (u | 0x00400000u) & 0xFFFF0000u;
  } else {
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  }
  float y;
  std::memcpy(&y, &u, sizeof(y));
  return y;
}

static void round_bf16(const float* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 18))
  for (int64_t i = 0; i < n; ++i) out[i] = round_bf16_one(in[i]);
}

static MXReturnValue inferTypeBf16(const std::unordered_map<std::string, std::string>& attrs,
                                   std::vector<int>* in_types, std::vector<int>* out_types) {
  if (in_types->at(0) != kFloat32 && in_types->at(0) != -1) {
    MX_ERROR_MSG << "_mxmixed_round_bf16 takes float32 input, not type " << in_types->at(0);
    return MX_FAIL;
  }
  in_types->at(0) = kFloat32;
  out_types->at(0) = kFloat32;
  return MX_SUCCESS;
}

static MXReturnValue forwardBf16(const std::unordered_map<std::string, std::string>& attrs,
                                 std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                                 const OpResource& res) {
  round_bf16(inputs->at(0).data<float>(), outputs->at(0).data<float>(), inputs->at(0).size());
  return MX_SUCCESS;
}

static MXReturnValue backwardBf16(const std::unordered_map<std::string, std::string>& attrs,
                                  std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                                  const OpResource& res) {
  round_bf16(inputs->at(0).data<float>(), outputs->at(0).data<float>(), inputs->at(0).size());
  return MX_SUCCESS;
}

// Whether any of n elements has an all-ones exponent (inf or NaN). The loop has no branch and
// no early exit, so that GCC vectorizes it: a max over the exponent fields.
template <typename Bits>
static inline bool any_nonfinite(const Bits* bits, int64_t n, Bits exponent) {
  Bits top = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Bits e = bits[i] & exponent;
    top = e > top ? e : top;
  }
  return top == exponent;
}

static MXReturnValue parseNonfinite(const std::unordered_map<std::string, std::string>& attrs,
                                    int* num_in, int* num_out) {
  auto found = attrs.find("num_arrays");
  char* end = nullptr;
  const long count = found == attrs.end() ? 0 : std::strtol(found->second.c_str(), &end, 10);
  if (found == attrs.end() || end == found->second.c_str() || *end != '\0' || count < 1 ||
      count > (1 << 20)) {
    MX_ERROR_MSG << "_mxmixed_nonfinite needs num_arrays, a count of at least 1";
    return MX_FAIL;
  }
  *num_in = static_cast<int>(count);
  *num_out = 1;
  return MX_SUCCESS;
}

static MXReturnValue inferTypeNonfinite(const std::unordered_map<std::string, std::string>& attrs,
                                        std::vector<int>* in_types, std::vector<int>* out_types) {
  for (size_t i = 0; i < in_types->size(); ++i) {
    const int type = in_types->at(i);
    if (type != kFloat32 && type != kFloat16) {
      MX_ERROR_MSG << "_mxmixed_nonfinite takes float32 or float16 arrays; array " << i
                   << " has type " << type;
      return MX_FAIL;
    }
  }
  out_types->at(0) = kFloat32;
  return MX_SUCCESS;
}

static MXReturnValue inferShapeNonfinite(
    const std::unordered_map<std::string, std::string>& attrs,
    std::vector<std::vector<unsigned int>>* in_shapes,
    std::vector<std::vector<unsigned int>>* out_shapes) {
  out_shapes->at(0) = {static_cast<unsigned int>(in_shapes->size())};
  return MX_SUCCESS;
}

static MXReturnValue forwardNonfinite(const std::unordered_map<std::string, std::string>& attrs,
                                      std::vector<MXTensor>* inputs,
                                      std::vector<MXTensor>* outputs, const OpResource& res) {
  float* flags = outputs->at(0).data<float>();
  for (size_t i = 0; i < inputs->size(); ++i) {
    MXTensor& array = inputs->at(i);
    bool bad;
    if (array.dtype == kFloat32) {
      bad = any_nonfinite(static_cast<const uint32_t*>(array.data_ptr), array.size(),
                          static_cast<uint32_t>(0x7F800000u));
    } else if (array.dtype == kFloat16) {
      bad = any_nonfinite(static_cast<const uint16_t*>(array.data_ptr), array.size(),
                          static_cast<uint16_t>(0x7C00u));
    } else {
      MX_ERROR_MSG << "_mxmixed_nonfinite takes float32 or float16 arrays";
      return MX_FAIL;
    }
    flags[i] = bad ? 1.0f : 0.0f;
  }
  return MX_SUCCESS;
}

REGISTER_OP(_mxmixed_nonfinite)
.setForward(forwardNonfinite, "cpu")
.setParseAttrs(parseNonfinite)
.setInferType(inferTypeNonfinite)
.setInferShape(inferShapeNonfinite);

REGISTER_OP(_mxmixed_round_bf16)
.setForward(forwardBf16, "cpu")
.setBackward(backwardBf16, "cpu")
.setParseAttrs(parseAttrs)
.setInferType(inferTypeBf16)
.setInferShape(inferShape);

REGISTER_OP(_mxmixed_round16)
.setForward(forward, "cpu")
.setBackward(backward, "cpu")
.setParseAttrs(parseAttrs)
.setInferType(inferType)
.setInferShape(inferShape);

MXReturnValue initialize(int version) {
  return version >= 10900 ? MX_SUCCESS : MX_FAIL;
}
