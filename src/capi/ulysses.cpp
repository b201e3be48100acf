// xstage_ulysses_*: the C ABI of attention::UlyssesAttention over a communicator (real ranks, one per
// process). The forward call checks its tensors without touching CUDA first (shape, dtype, layout,
// alignment, devices: testable without a GPU), then the pointers and the stream, then enqueues.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention/ulysses/layer.hpp"
#include "capi/capi_internal.hpp"
#include "capi/handles.hpp"
#include "capi/xstage_c.h"
#include "common/cuda_check.hpp"
#include "common/error.hpp"

namespace xstage::capi {
namespace {

constexpr const char* kShard = "[batch, seqlen/P, heads, head_dim]";

attention::UlyssesShape make_shape(int32_t batch, int32_t seqlen, int32_t heads, int32_t head_dim, int32_t ranks) {
  attention::UlyssesShape s;
  s.batch = batch;
  s.seqlen = seqlen;
  s.heads = heads;
  s.head_dim = head_dim;
  s.ranks = ranks;
  attention::validate(s);
  return s;
}

const xstage_tensor& shard_operand(const xstage_tensor* in, const char* name, const attention::UlyssesShape& s, int32_t device) {
  const xstage_tensor& t = require_tensor(in, name);
  require_ndim(t, name, 4, kShard);
  require_dtype(t, name, XSTAGE_DTYPE_BFLOAT16);
  require_shape(t, name, {s.batch, s.shard_rows(), s.heads, s.head_dim}, kShard);
  require_contiguous(t, name);
  require_aligned(t, name, 16);
  require_same_cuda_device(t, name, device, "the communicator");
  return t;
}

// XSTAGE_ULYSSES_* -> the layer's path; the values are the enum's order (static_asserts below).
attention::UlyssesPath path_of(int32_t path) {
  XSTAGE_REQUIRE(path >= XSTAGE_ULYSSES_SERIAL && path <= XSTAGE_ULYSSES_FUSED_BOTH,
                 "path is " + std::to_string(path) + "; it must be XSTAGE_ULYSSES_SERIAL (0), XSTAGE_ULYSSES_FUSED_POST (1) or "
                 "XSTAGE_ULYSSES_FUSED_BOTH (2)");
  return static_cast<attention::UlyssesPath>(path);
}
static_assert(static_cast<int>(attention::UlyssesPath::serial) == XSTAGE_ULYSSES_SERIAL);
static_assert(static_cast<int>(attention::UlyssesPath::fused_post) == XSTAGE_ULYSSES_FUSED_POST);
static_assert(static_cast<int>(attention::UlyssesPath::fused_both) == XSTAGE_ULYSSES_FUSED_BOTH);

void ulysses_forward(xstage_ulysses* layer, const xstage_tensor* q_in, const xstage_tensor* k_in, const xstage_tensor* v_in,
                     const xstage_tensor* o_in, int32_t path_code, void* stream) {
  const attention::UlyssesPath path = path_of(path_code);  // first: a bad value is refused without a layer or GPU
  XSTAGE_REQUIRE(layer != nullptr && layer->layer != nullptr, "layer is NULL (create it with xstage_ulysses_create)");
  const int32_t device = require_comm(layer->comm).device();
  const attention::UlyssesShape& s = layer->shape;
  const xstage_tensor& q = shard_operand(q_in, "q", s, device);
  const xstage_tensor& k = shard_operand(k_in, "k", s, device);
  const xstage_tensor& v = shard_operand(v_in, "v", s, device);
  const xstage_tensor& o = shard_operand(o_in, "out", s, device);
  require_disjoint(o, "out", q, "q");
  require_disjoint(o, "out", k, "k");
  require_disjoint(o, "out", v, "v");

  DeviceGuard guard(device);
  require_device_pointer(q.data, "q", device);
  require_device_pointer(k.data, "k", device);
  require_device_pointer(v.data, "v", device);
  require_device_pointer(o.data, "out", device);
  require_stream_on_device(stream, device);
  const std::vector<attention::UlyssesViews> views{{q.data, k.data, v.data, o.data}};
  layer->layer->enqueue(views, path, static_cast<cudaStream_t>(stream));
}

}  // namespace
}  // namespace xstage::capi

namespace capi = xstage::capi;

extern "C" {

XSTAGE_C_API int xstage_ulysses_path_from_name(const char* name, int32_t* path) {
  return capi::guarded("xstage_ulysses_path_from_name", [&] {
    XSTAGE_REQUIRE(name != nullptr && path != nullptr, "name or path is NULL");
    *path = static_cast<int32_t>(xstage::attention::ulysses_path_from_name(name));
  });
}

XSTAGE_C_API int xstage_ulysses_check_shape(int32_t batch, int32_t seqlen, int32_t heads, int32_t head_dim, int32_t ranks) {
  return capi::guarded("xstage_ulysses_check_shape", [&] { (void)capi::make_shape(batch, seqlen, heads, head_dim, ranks); });
}

XSTAGE_C_API int xstage_ulysses_create(xstage_comm* comm, int32_t batch, int32_t seqlen, int32_t heads, int32_t head_dim,
                                       int32_t store_path, double timeout_s, xstage_ulysses** out) {
  return capi::guarded("xstage_ulysses_create", [&] {
    XSTAGE_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    xstage::comm::Runtime& rt = capi::require_comm(comm);
    const xstage::attention::UlyssesShape shape = capi::make_shape(batch, seqlen, heads, head_dim, rt.world_size());
    XSTAGE_REQUIRE(store_path == XSTAGE_A2A_STORE_TMA || store_path == XSTAGE_A2A_STORE_ST_GLOBAL,
                   "store_path is " + std::to_string(store_path) + "; it must be XSTAGE_A2A_STORE_TMA (0) or "
                   "XSTAGE_A2A_STORE_ST_GLOBAL (1)");
    XSTAGE_REQUIRE(timeout_s >= 0 && timeout_s < 1e6, "timeout_s is " + std::to_string(timeout_s) +
                                                           "; it must be >= 0 seconds (0: the default, 10 s)");
    xstage::attention::UlyssesOptions options;
    options.store_path = store_path == XSTAGE_A2A_STORE_TMA ? xstage::attention::A2AStorePath::tma
                                                            : xstage::attention::A2AStorePath::st_global;
    if (timeout_s > 0) options.timeout_s = timeout_s;
    capi::DeviceGuard guard(rt.device());
    auto handle = std::make_unique<xstage_ulysses>();
    handle->comm = comm;
    handle->shape = shape;
    handle->layer = std::make_unique<xstage::attention::UlyssesAttention>(shape, rt, options);
    ++comm->layers;
    *out = handle.release();
  });
}

XSTAGE_C_API int xstage_ulysses_forward(xstage_ulysses* layer, const xstage_tensor* q, const xstage_tensor* k,
                                        const xstage_tensor* v, const xstage_tensor* out, int32_t path, void* stream) {
  return capi::guarded("xstage_ulysses_forward",
                       [&] { capi::ulysses_forward(layer, q, k, v, out, path, stream); });
}

XSTAGE_C_API int xstage_ulysses_poll(const xstage_ulysses* layer) {
  return capi::guarded("xstage_ulysses_poll", [&] {
    XSTAGE_REQUIRE(layer != nullptr && layer->layer != nullptr, "layer is NULL");
    layer->layer->poll();
  });
}

XSTAGE_C_API int xstage_ulysses_destroy(xstage_ulysses* layer) {
  return capi::guarded("xstage_ulysses_destroy", [&] {
    if (layer == nullptr) return;
    capi::destroy_layer(layer);
  });
}

}  // extern "C"
