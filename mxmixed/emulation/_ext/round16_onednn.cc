// The oneDNN-layout compute of _mxmixed_round16 and its backward.
//
// An extension-library op (round16.cc) only sees plain arrays: MXNet reorders a convolution's
// blocked oneDNN output to plain layout before the rounding, and the BatchNorm, pooling or
// convolution reading the rounded value then runs on plain layout, 4-7x slower for BatchNorm.
// Rounding is elementwise, so it can run on the blocked buffer as it is and hand on the same
// layout. mxmixed_round16_keep_layouts() swaps the registered ops' CPU compute for one that
// does, marks them oneDNN-aware (so MXNet stops reordering their inputs) and drops the
// resources the extension dispatcher asked for. Every element is rounded by the same kernel
// (round16_kernel.h), padding included (zero stays zero). What changes is the layout the next
// op reads: oneDNN's BatchNorm gives other float32 bits on the blocked layout than on the
// plain one. mxmixed installs this by default; MXMIXED_EMULATION_KEEP_LAYOUTS=0 leaves the
// plain compute (the results recorded before it was the default).
//
// Only 4-D arrays (2-D convolutions' NCHW) keep their layout. MXNet's oneDNN BatchNorm reads a
// 3-D or 5-D input (Conv1D, Conv3D) through a 4-D reshape, a view, and a view of a blocked
// array fails its "Check failed: !is_view"; those arrays are rounded in plain layout.
//
// It is built against the MXNet wheel's own C++ headers and libmxnet.so, which is how
// MXNet's operators themselves are written, with two things the headers do not promise:
// - libmxnet.so calls a std::function's invoker with its arguments by value (the libstdc++
//   of GCC 4.8, which built the 1.9.1 wheels); newer libstdc++ passes them by reference.
//   probe_convention() asks libmxnet.so which it does, and the functions handed to it are
//   built for that convention (Compatible).
// - the layout of a oneDNN array (MKLDNNMemory, in MXNet 1.9.1's sources, not its headers) is
//   read through OneDnnMemory below. mxmixed_round16_probe() checks that copy against the
//   loaded libmxnet.so before anything is installed: MXNet itself gives an array a known
//   blocked layout, and the copy must read back that layout, its size and its buffer. Each
//   use also checks it against the array's shape and type; anything unexpected takes the
//   plain path.
// A libmxnet.so built with the other std::string ABI fails to load this library (undefined
// symbols), and mxmixed keeps the extension op's plain-layout compute.
#include <bits/stdc++.h>  // every standard header, before the access change below
#include "round16_kernel.h"

#define private public  // NDArray's chunk, nnvm::Op's index and UpdateAttrMap, OpMap's data
#include <mxnet/ndarray.h>
#include <mxnet/op_attr_types.h>
#include <nnvm/op.h>
#undef private

namespace {
using mxnet::NDArray;

enum Convention { kUnknown, kByValue, kByReference };
Convention g_convention = kUnknown;
std::atomic<int64_t> g_blocked_calls{0};  // calls that rounded a blocked buffer in its layout

// A std::function<R(A...)> that libmxnet.so can call. With the by-value convention its
// invoker (the last of its four words) is replaced by one taking the arguments by value.
template <typename Sig> struct Compatible;
template <typename R, typename... A> struct Compatible<R(A...)> {
  template <typename F> static std::function<R(A...)> make(F f, Convention convention) {
    struct Boxed {  // larger than std::function's local storage: always held by pointer
      F f;
      char pad[32];
      R operator()(A... a) const { return f(a...); }
    };
    std::function<R(A...)> fn(Boxed{f, {}});
    static_assert(sizeof(fn) == 4 * sizeof(void*), "std::function is four words");
    if (convention == kByValue) {
      R (*invoke)(const std::_Any_data&, A...) = [](const std::_Any_data& d, A... a) -> R {
        return (*d._M_access<Boxed*>())(a...);
      };
      std::memcpy(reinterpret_cast<char*>(&fn) + 3 * sizeof(void*), &invoke, sizeof(invoke));
    }
    return fn;
  }
};

// libmxnet.so's UpdateAttrMap calls its updater with a fresh, empty dmlc::any* (first word,
// its type, null). Called through a by-value invoker, the argument is that pointer; under
// the by-reference convention it is the address of a pointer to it (first word not null).
Convention probe_convention() {
  if (g_convention != kUnknown) return g_convention;
  static int calls = 0;
  static void* first_word = nullptr;
  auto updater = Compatible<void(dmlc::any*)>::make([](dmlc::any* seen) {
    ++calls;
    first_word = *reinterpret_cast<void**>(seen);
  }, kByValue);
  nnvm::Op::UpdateAttrMap("__mxmixed_round16_convention_probe", updater);
  if (calls == 1) g_convention = first_word == nullptr ? kByValue : kByReference;
  return g_convention;
}

// MXNet 1.9.1's MKLDNNMemory (src/operator/nn/mkldnn/mkldnn_base-inl.h).
struct OneDnnMemory {
  std::shared_ptr<mkldnn::memory> mem;
#ifdef MXMIXED_ROUND16_TEST_MISREAD  // tests only: a copy that disagrees with MXNet's
  char misread[MXMIXED_ROUND16_TEST_MISREAD];
#endif
  mkldnn::memory::desc desc;
  size_t size;
};

// The blocked buffer of x when it is a whole, unpadded, 4-D float32 oneDNN array; else null.
const OneDnnMemory* blocked(const NDArray& x) {
  if (!x.IsMKLDNNData() || x.IsView() || x.dtype() != mshadow::kFloat32) return nullptr;
  if (x.shape().ndim() != 4) return nullptr;  // 3-D, 5-D: BatchNorm would read a view of it
  const OneDnnMemory* m = reinterpret_cast<const OneDnnMemory*>(x.ptr_->mkl_mem_.get());
  if (m == nullptr) return nullptr;
  const mkldnn_memory_desc_t& d = m->desc.data;
  if (d.data_type != mkldnn_f32 || d.offset0 != 0 || d.ndims != 4) return nullptr;
  for (int i = 0; i < d.ndims; ++i)
    if (d.dims[i] != x.shape()[i] || d.padded_dims[i] != x.shape()[i]) return nullptr;
  if (m->size != x.shape().Size() * sizeof(float)) return nullptr;
  return m;
}

// Forward (input 0: the value) and backward (input 0: the output gradient; the forward's
// input and output follow, unused) are the same rounding.
void round_keeping_layout(const nnvm::NodeAttrs&, const mxnet::OpContext&,
                              const std::vector<NDArray>& inputs,
                              const std::vector<mxnet::OpReqType>& req,
                              const std::vector<NDArray>& outputs) {
  if (req[0] == mxnet::kNullOp) return;
  const NDArray& x = inputs[0];
  NDArray y = outputs[0];
  const int64_t n = x.shape().Size();
  const OneDnnMemory* m = blocked(x);
  if (m != nullptr && req[0] != mxnet::kAddTo && !y.IsView() &&
      y.CreateMKLDNNData(m->desc) != nullptr) {
    round16(static_cast<const float*>(x.ptr_->shandle.dptr),
            static_cast<float*>(y.ptr_->shandle.dptr), n);
    ++g_blocked_calls;
    return;
  }
  const NDArray plain = x.IsMKLDNNData() ? x.Reorder2Default() : x;
  if (y.IsMKLDNNData()) {
    if (req[0] == mxnet::kAddTo) y.Reorder2Default(); else y.InvalidateMKLDNNData();
  }
  const float* src = plain.data().dptr<float>();
  float* dst = y.data().dptr<float>();
  if (req[0] == mxnet::kAddTo) {
    for (int64_t i = 0; i < n; ++i) dst[i] += round16_one(src[i]);
  } else {
    round16(src, dst, n);
  }
}

// Sets op's value of an attribute MXNet already has (false if it has none of that type).
template <typename T>
bool set_attribute(const nnvm::Op* op, const std::string& key, const T& value,
                   Convention convention) {
  bool done = false;
  auto updater = Compatible<void(dmlc::any*)>::make([&](dmlc::any* map) {
    if (map->empty() || map->type() != typeid(nnvm::OpMap<T>)) return;
    auto& values = nnvm::get<nnvm::OpMap<T>>(*map).data_;
    if (values.size() <= op->index_) values.resize(op->index_ + 1, std::make_pair(T(), 0));
    values[op->index_] = std::make_pair(value, 100);
    done = true;
  }, convention);
  nnvm::Op::UpdateAttrMap(key, updater);
  return done;
}
}  // namespace

// The MXNET_VERSION of the headers this library was built against (10901 for 1.9.1).
extern "C" int mxmixed_round16_headers_version() { return MXNET_VERSION; }

// 0 when OneDnnMemory reads what the loaded libmxnet.so writes; else which check failed.
// MXNet's own NDArray::CreateMKLDNNData gives a 2x32x3x5 float32 array oneDNN's blocked
// nChw16c layout, described here field by field (oneDNN's functions are not exported by
// libmxnet.so); read through OneDnnMemory, the array must hold that descriptor, its byte size
// and the oneDNN memory MXNet returned (compared as an address, never followed), and
// blocked() must accept it. Only values are compared, so a copy that disagrees with MXNet's
// gives a refusal, not a crash.
extern "C" int mxmixed_round16_probe() {
  try {
    const int64_t dims[4] = {2, 32, 3, 5};
    const int64_t strides[4] = {2 * 3 * 5 * 16, 3 * 5 * 16, 5 * 16, 16};  // N, C/16, H, W
    mkldnn_memory_desc_t want;
    std::memset(&want, 0, sizeof(want));
    want.ndims = 4;
    want.data_type = mkldnn_f32;
    want.format_kind = mkldnn_blocked;
    for (int i = 0; i < 4; ++i) {
      want.dims[i] = want.padded_dims[i] = dims[i];
      want.format_desc.blocking.strides[i] = strides[i];
    }
    want.format_desc.blocking.inner_nblks = 1;
    want.format_desc.blocking.inner_blks[0] = 16;
    want.format_desc.blocking.inner_idxs[0] = 1;
    NDArray probe(mxnet::TShape(mshadow::Shape4(2, 32, 3, 5)), mxnet::Context::CPU(), false,
                  mshadow::kFloat32);
    const mkldnn::memory* made = probe.CreateMKLDNNData(mkldnn::memory::desc(want));
    if (made == nullptr || !probe.IsMKLDNNData()) return 1;
    const auto* m = reinterpret_cast<const OneDnnMemory*>(probe.ptr_->mkl_mem_.get());
    if (m == nullptr) return 2;
    if (m->mem.get() != made) return 3;
    if (m->size != 2 * 32 * 3 * 5 * sizeof(float)) return 4;
    const mkldnn_memory_desc_t& got = m->desc.data;
    if (got.ndims != 4 || got.data_type != mkldnn_f32 || got.offset0 != 0 ||
        got.format_kind != mkldnn_blocked || got.format_desc.blocking.inner_nblks != 1 ||
        got.format_desc.blocking.inner_blks[0] != 16 ||
        got.format_desc.blocking.inner_idxs[0] != 1)
      return 5;
    for (int i = 0; i < 4; ++i)
      if (got.dims[i] != dims[i] || got.padded_dims[i] != dims[i] ||
          got.format_desc.blocking.strides[i] != strides[i])
        return 6;
    if (blocked(probe) != m) return 7;
    return 0;
  } catch (...) {
    return 8;
  }
}

// 0 when the op named keeps oneDNN layouts from now on; else which step failed.
extern "C" int mxmixed_round16_keep_layouts(const char* name) {
  const Convention convention = probe_convention();
  if (convention == kUnknown) return 1;
  const nnvm::Op* op = dmlc::Registry<nnvm::Op>::Get()->Find(name);
  if (op == nullptr) return 2;
  auto compute = Compatible<void(const nnvm::NodeAttrs&, const mxnet::OpContext&,
                                 const std::vector<NDArray>&,
                                 const std::vector<mxnet::OpReqType>&,
                                 const std::vector<NDArray>&)>::make(round_keeping_layout,
                                                                      convention);
  if (!set_attribute<mxnet::FComputeEx>(op, "FComputeEx<cpu>", compute, convention)) return 3;
  auto no_resources = Compatible<std::vector<mxnet::ResourceRequest>(const nnvm::NodeAttrs&)>::make(
      [](const nnvm::NodeAttrs&) { return std::vector<mxnet::ResourceRequest>(); }, convention);
  if (!set_attribute<mxnet::FResourceRequest>(op, "FResourceRequest", no_resources, convention))
    return 4;
  if (!set_attribute<bool>(op, "TIsMKLDNN", true, convention)) return 5;
  return 0;
}

// How many calls so far rounded a blocked oneDNN buffer without reordering it (for the tests).
extern "C" int64_t mxmixed_round16_blocked_calls() { return g_blocked_calls.load(); }
