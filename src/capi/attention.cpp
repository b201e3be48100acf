// xstage_flash_attention_forward(_key_lengths): the C ABI of xstage::attention::flash_attention_forward.
//
// Checks in this order, so that every argument error is reported without touching CUDA (and can be tested
// on a machine without a GPU): tensors (null, ndim, dtype, shapes, head dim, head-dim stride, device
// indices; the key lengths' dtype, shape and layout, not their values), then the C++ validator (strides, alignment, scale), then CUDA (driver, device architecture,
// that every pointer is device memory of that device, the stream's device), then the launch. The trusted
// entry point skips the pointer and stream queries only (its caller vouches for both, xstage_c.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "attention/flash_fwd.hpp"
#include "attention/flash_fwd_params.hpp"
#include "capi/capi_internal.hpp"
#include "capi/xstage_c.h"
#include "common/error.hpp"

namespace xstage::capi {
namespace {

constexpr const char* kBmhd = "[batch, seqlen, heads, head_dim]";

std::string dims(const char* a, int64_t va, const char* b, int64_t vb) {
  return std::string(a) + " = " + std::to_string(va) + ", " + b + " = " + std::to_string(vb);
}

// The [batch, seq, heads, head_dim] strides of `t` for the kernel (head_dim stride checked to be 1).
attention::BmhdStrides bmhd_strides(const xstage_tensor& t, const char* name) {
  XSTAGE_REQUIRE(t.shape[3] == 1 || t.strides[3] == 1,
                 std::string(name) + " has head_dim stride " + std::to_string(t.strides[3]) +
                     "; the last (head_dim) dimension must be contiguous (stride 1)");
  return {effective_stride(t, 0), effective_stride(t, 1), effective_stride(t, 2)};
}

int to_int(int64_t v, const char* what) {
  XSTAGE_REQUIRE(v <= INT32_MAX, std::string(what) + " = " + std::to_string(v) + " is larger than 2^31 - 1");
  return static_cast<int>(v);
}

void flash_attention_forward(const xstage_tensor* q_in, const xstage_tensor* k_in, const xstage_tensor* v_in,
                             const xstage_tensor* lengths_in, const xstage_tensor* o_in, const xstage_tensor* lse_in,
                             float softmax_scale, void* stream, bool verify_memory) {
  const xstage_tensor& q = require_tensor(q_in, "q");
  const xstage_tensor& k = require_tensor(k_in, "k");
  const xstage_tensor& v = require_tensor(v_in, "v");
  const xstage_tensor& o = require_tensor(o_in, "out");
  require_ndim(q, "q", 4, kBmhd);
  require_ndim(k, "k", 4, kBmhd);
  require_ndim(v, "v", 4, kBmhd);
  require_ndim(o, "out", 4, kBmhd);
  require_dtype(q, "q", XSTAGE_DTYPE_BFLOAT16);
  require_dtype(k, "k", XSTAGE_DTYPE_BFLOAT16);
  require_dtype(v, "v", XSTAGE_DTYPE_BFLOAT16);
  require_dtype(o, "out", XSTAGE_DTYPE_BFLOAT16);

  const int64_t batch = q.shape[0], seqlen_q = q.shape[1], heads = q.shape[2], head_dim = q.shape[3];
  const int64_t seqlen_k = k.shape[1];
  XSTAGE_REQUIRE(head_dim == 64 || head_dim == 128,
                 "head_dim is " + std::to_string(head_dim) + " (q shape " + shape_string(q) +
                     "); xstage's attention kernels are built for head_dim 64 and 128");
  XSTAGE_REQUIRE(k.shape[0] == batch && k.shape[2] == heads && k.shape[3] == head_dim,
                 "k shape " + shape_string(k) + " does not match q shape " + shape_string(q) +
                     " (batch, heads and head_dim must be equal)");
  XSTAGE_REQUIRE(v.shape[0] == k.shape[0] && v.shape[1] == k.shape[1] && v.shape[2] == k.shape[2] &&
                     v.shape[3] == k.shape[3],
                 "v shape " + shape_string(v) + " must equal k shape " + shape_string(k));
  XSTAGE_REQUIRE(o.shape[0] == q.shape[0] && o.shape[1] == q.shape[1] && o.shape[2] == q.shape[2] &&
                     o.shape[3] == q.shape[3],
                 "out shape " + shape_string(o) + " must equal q shape " + shape_string(q));
  XSTAGE_REQUIRE(batch >= 1 && heads >= 1 && seqlen_q >= 1 && seqlen_k >= 1,
                 "empty attention: " + dims("batch", batch, "heads", heads) + ", " +
                     dims("seqlen_q", seqlen_q, "seqlen_k", seqlen_k) + " (all must be >= 1)");

  attention::FlashFwdArgs args;
  attention::FlashFwdProblem& p = args.problem;
  p.batch = to_int(batch, "batch");
  p.seqlen_q = to_int(seqlen_q, "seqlen_q");
  p.seqlen_k = to_int(seqlen_k, "seqlen_k");
  p.heads = to_int(heads, "heads");
  p.head_dim = static_cast<int>(head_dim);
  p.softmax_scale = softmax_scale;
  p.q = bmhd_strides(q, "q");
  p.k = bmhd_strides(k, "k");
  p.v = bmhd_strides(v, "v");
  p.o = bmhd_strides(o, "out");
  args.q = q.data;
  args.k = k.data;
  args.v = v.data;
  args.o = o.data;

  const int32_t device = q.device;
  require_same_cuda_device(q, "q", device, "q");
  require_same_cuda_device(k, "k", device, "q");
  require_same_cuda_device(v, "v", device, "q");
  require_same_cuda_device(o, "out", device, "q");

  if (lse_in != nullptr) {
    const xstage_tensor& lse = require_tensor(lse_in, "lse");
    require_ndim(lse, "lse", 3, "[batch, heads, seqlen_q]");
    require_dtype(lse, "lse", XSTAGE_DTYPE_FLOAT32);
    XSTAGE_REQUIRE(lse.shape[0] == batch && lse.shape[1] == heads && lse.shape[2] == seqlen_q,
                   "lse shape " + shape_string(lse) + " must be [batch, heads, seqlen_q] = [" + std::to_string(batch) +
                       ", " + std::to_string(heads) + ", " + std::to_string(seqlen_q) + "]");
    // Contiguous; the stride of a dimension of size 1 is not looked at.
    XSTAGE_REQUIRE((seqlen_q == 1 || lse.strides[2] == 1) && (heads == 1 || lse.strides[1] == seqlen_q) &&
                       (batch == 1 || lse.strides[0] == heads * seqlen_q),
                   "lse must be contiguous (strides [heads*seqlen_q, seqlen_q, 1])");
    require_same_cuda_device(lse, "lse", device, "q");
    args.lse = static_cast<float*>(lse.data);
  }
  if (lengths_in != nullptr) {
    const xstage_tensor& lengths = require_tensor(lengths_in, "key_lengths");
    require_dtype(lengths, "key_lengths", XSTAGE_DTYPE_INT32);
    require_shape(lengths, "key_lengths", {batch}, "[batch]");
    require_contiguous(lengths, "key_lengths");
    require_aligned(lengths, "key_lengths", 4);  // and not NULL, which would mean no lengths to the kernel
    require_same_cuda_device(lengths, "key_lengths", device, "q");
    args.seqlen_k_per_batch = static_cast<const int32_t*>(lengths.data);
  }
  // Strides (positive, 16-byte multiples, below 2^40 bytes), pointers (non-null, aligned), scale.
  attention::validate_flash_fwd_args(args);

  require_sm90(device);
  DeviceGuard guard(device);
  if (verify_memory) {
    require_device_pointer(q.data, "q", device);
    require_device_pointer(k.data, "k", device);
    require_device_pointer(v.data, "v", device);
    require_device_pointer(o.data, "out", device);
    if (args.lse != nullptr) require_device_pointer(args.lse, "lse", device);
    if (args.seqlen_k_per_batch != nullptr) require_device_pointer(args.seqlen_k_per_batch, "key_lengths", device);
    require_stream_on_device(stream, device);
  }
  attention::flash_attention_forward(args, device_facts(device), static_cast<cudaStream_t>(stream));  // current: the guard
}

}  // namespace
}  // namespace xstage::capi

extern "C" XSTAGE_C_API int xstage_flash_attention_forward(const xstage_tensor* q, const xstage_tensor* k,
                                                           const xstage_tensor* v, const xstage_tensor* out,
                                                           const xstage_tensor* lse, float softmax_scale,
                                                           void* stream) {
  return xstage::capi::guarded("xstage_flash_attention_forward", [&] {
    xstage::capi::flash_attention_forward(q, k, v, nullptr, out, lse, softmax_scale, stream, true);
  });
}

extern "C" XSTAGE_C_API int xstage_flash_attention_forward_trusted(const xstage_tensor* q, const xstage_tensor* k,
                                                                   const xstage_tensor* v, const xstage_tensor* out,
                                                                   const xstage_tensor* lse, float softmax_scale,
                                                                   void* stream) {
  return xstage::capi::guarded("xstage_flash_attention_forward", [&] {
    xstage::capi::flash_attention_forward(q, k, v, nullptr, out, lse, softmax_scale, stream, false);
  });
}

extern "C" XSTAGE_C_API int xstage_flash_attention_forward_key_lengths(const xstage_tensor* q, const xstage_tensor* k,
                                                                       const xstage_tensor* v, const xstage_tensor* key_lengths,
                                                                       const xstage_tensor* out, const xstage_tensor* lse,
                                                                       float softmax_scale, void* stream) {
  return xstage::capi::guarded("xstage_flash_attention_forward", [&] {
    xstage::capi::flash_attention_forward(q, k, v, key_lengths, out, lse, softmax_scale, stream, true);
  });
}

extern "C" XSTAGE_C_API int xstage_flash_attention_forward_key_lengths_trusted(
    const xstage_tensor* q, const xstage_tensor* k, const xstage_tensor* v, const xstage_tensor* key_lengths,
    const xstage_tensor* out, const xstage_tensor* lse, float softmax_scale, void* stream) {
  return xstage::capi::guarded("xstage_flash_attention_forward", [&] {
    xstage::capi::flash_attention_forward(q, k, v, key_lengths, out, lse, softmax_scale, stream, false);
  });
}
