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
#include <cstring>
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
