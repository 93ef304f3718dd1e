// _mxmixed_round16: float32 in, float32 out holding the float16-rounded value (IEEE
// round-to-nearest-even, overflow to inf, float16 subnormals and zero), in one pass.
// Backward rounds the gradient the same way: a float16 gradient carried as float32.
// It stands for a float16 cast pair (float32 -> float16 -> float32) between two emulated ops;
// the graph pass of mxmixed.emulation inserts it. Built by mxmixed/emulation/_round16.py.
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

REGISTER_OP(_mxmixed_round16)
.setForward(forward, "cpu")
.setBackward(backward, "cpu")
.setParseAttrs(parseAttrs)
.setInferType(inferType)
.setInferShape(inferShape);

MXReturnValue initialize(int version) {
  return version >= 10900 ? MX_SUCCESS : MX_FAIL;
}
