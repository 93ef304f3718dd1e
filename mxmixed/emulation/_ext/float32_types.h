// The type inference shared by the float32 computes of the rounding library (ops16.cc and
// norm16.cc): every input float32 (or not yet known), every output float32. Needs
// mxnet/lib_api.h first.
#ifndef MXMIXED_FLOAT32_TYPES_H_
#define MXMIXED_FLOAT32_TYPES_H_
#include <string>
#include <unordered_map>
#include <vector>

static inline mxnet::ext::MXReturnValue allFloat32(
    const std::unordered_map<std::string, std::string>& attrs, std::vector<int>* in_types,
    std::vector<int>* out_types) {
  for (size_t i = 0; i < in_types->size(); ++i) {
    if (in_types->at(i) != mxnet::ext::kFloat32 && in_types->at(i) != -1) {
      MX_ERROR_MSG << "mxmixed's float16 computes take float32 inputs, not type "
                   << in_types->at(i);
      return mxnet::ext::MX_FAIL;
    }
    in_types->at(i) = mxnet::ext::kFloat32;
  }
  for (size_t i = 0; i < out_types->size(); ++i) out_types->at(i) = mxnet::ext::kFloat32;
  return mxnet::ext::MX_SUCCESS;
}

#endif  // MXMIXED_FLOAT32_TYPES_H_
