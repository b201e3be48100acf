// xstage_moe_*: the C ABI of moe::FusedMoeLayer (the fused MegaMoE layer over a communicator) and of the
// weight preparation it needs (pack_w1, the 128x128 fp8 weight quantizer). What a configuration may be is the
// plan's to say (moe/plan.hpp), asked here without a GPU (xstage_moe_check_config) and with one (create).
// Argument errors are found before CUDA is touched (shapes, dtypes, layouts, alignment, devices), so they are
// tested without a GPU.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "capi/capi_internal.hpp"
#include "capi/handles.hpp"
#include "capi/xstage_c.h"
#include "common/error.hpp"
#include "common/device_facts.hpp"
#include "moe/fp8/fp8.hpp"
#include "moe/fp8/quantize_device.hpp"
#include "moe/megamoe.hpp"
#include "moe/plan.hpp"
#include "moe/problem/problem.hpp"
#include "moe/weights.hpp"

namespace xstage::capi {
namespace {

std::string s(int64_t v) { return std::to_string(v); }

moe::DType moe_dtype(int32_t dtype, const char* what) {
  XSTAGE_REQUIRE(dtype == XSTAGE_DTYPE_BFLOAT16 || dtype == XSTAGE_DTYPE_FLOAT8_E4M3,
                 std::string(what) + " is " + dtype_name(dtype) +
                     "; the MoE layer runs bfloat16 or float8_e4m3fn (W8A8) weights");
  return dtype == XSTAGE_DTYPE_BFLOAT16 ? moe::DType::bf16 : moe::DType::fp8_e4m3;
}

// The request a config stands for: the C fields decoded (codes, 0 for a default), everything else judged by
// the plan's one legality check (moe::why_not), without a GPU (`device` not known) or on the device.
moe::MoeLayerRequest request_of(const xstage_moe_config* c, int32_t ranks, const DeviceFacts& device) {
  XSTAGE_REQUIRE(c != nullptr, "config is NULL");
  XSTAGE_REQUIRE(c->reserved == 0, "config.reserved must be 0 (xstage_moe_config not zero-initialised?)");
  moe::MoeLayerRequest r;
  moe::MoeProblem& p = r.problem;
  p.P_ranks = ranks;
  p.E_experts = c->experts;
  p.top_k = c->top_k;
  p.h_hidden = c->hidden;
  p.h_inter = c->inter;
  p.T_tokens = c->max_tokens;
  p.dtype = moe_dtype(c->dtype, "config.dtype");
  p.b_m = 128;
  XSTAGE_REQUIRE(c->tile_n == 0 || c->tile_n == 128 || c->tile_n == 256,
                 "config.tile_n is " + s(c->tile_n) + "; it must be 128, 256 or 0 (the default for the shape)");
  p.b_n = c->tile_n ? c->tile_n : moe::default_tile_n(p.dtype, c->hidden, c->inter);
  XSTAGE_REQUIRE(c->schedule == XSTAGE_MOE_SCHEDULE_INTERLEAVED || c->schedule == XSTAGE_MOE_SCHEDULE_EXPERT_WAVE ||
                     c->schedule == XSTAGE_MOE_SCHEDULE_AUTO,
                 "config.schedule is " + s(c->schedule) + "; it must be XSTAGE_MOE_SCHEDULE_INTERLEAVED (0), "
                 "XSTAGE_MOE_SCHEDULE_EXPERT_WAVE (1) or XSTAGE_MOE_SCHEDULE_AUTO (2)");
  r.automatic = c->schedule == XSTAGE_MOE_SCHEDULE_AUTO;
  r.schedule = c->schedule == XSTAGE_MOE_SCHEDULE_EXPERT_WAVE ? moe::MoeScheduleKind::expert_wave : moe::MoeScheduleKind::interleaved;
  r.wave_lag = c->wave_lag;
  r.wave_experts = c->wave_experts;
  r.D_rows = c->lead_rows;
  r.cluster_n = c->cluster_n;
  r.cluster_m = c->cluster_m ? c->cluster_m : 1;
  r.capacity_slack = c->capacity_slack;
  XSTAGE_REQUIRE(c->timeout_s >= 0 && c->timeout_s < 1e6, "config.timeout_s is " + std::to_string(c->timeout_s) + "; it must be >= 0 (0: 10 s)");
  if (c->timeout_s > 0) r.timeout_s = c->timeout_s;
  const std::string why = moe::why_not(r, device);
  if (!why.empty()) throw InputError(why);
  return r;
}

// A [d0][d1]... operand: non-null, the dtype, exactly the shape, contiguous, 16-byte aligned, on `device`.
const xstage_tensor& operand(const xstage_tensor* in, const char* name, int32_t dtype, std::initializer_list<int64_t> dims,
                             const char* layout, int32_t device) {
  const xstage_tensor& t = require_tensor(in, name);
  require_ndim(t, name, static_cast<int32_t>(dims.size()), layout);
  require_dtype(t, name, dtype);
  require_shape(t, name, dims, layout);
  require_contiguous(t, name);
  require_aligned(t, name, 16);
  if (element_count(t) > 0) require_same_cuda_device(t, name, device, "the communicator");
  return t;
}

void moe_forward(xstage_moe* layer, const xstage_tensor* tokens_in, const xstage_tensor* ids_in, const xstage_tensor* weights_in,
                 const xstage_tensor* w1_in, const xstage_tensor* w2_in, const xstage_tensor* w1s_in, const xstage_tensor* w2s_in,
                 const xstage_tensor* out_in, void* stream, bool verify_memory) {
  XSTAGE_REQUIRE(layer != nullptr && layer->layer != nullptr, "layer is NULL (create it with xstage_moe_create)");
  const int32_t device = require_comm(layer->comm).device();
  const moe::MoeProblem& p = layer->problem;
  const int64_t h = p.h_hidden, I = p.h_inter, k = p.top_k, EL = p.E_local();
  const xstage_tensor& x = require_tensor(tokens_in, "tokens");
  require_ndim(x, "tokens", 2, "[tokens, hidden]");
  const int64_t T = x.shape[0];
  XSTAGE_REQUIRE(T <= p.T_tokens, "tokens has " + s(T) + " rows; the layer was created for at most max_tokens = " + s(p.T_tokens) +
                                      " per call (create a layer with a larger max_tokens)");
  operand(tokens_in, "tokens", XSTAGE_DTYPE_BFLOAT16, {T, h}, "[tokens, hidden]", device);
  const xstage_tensor& ids = operand(ids_in, "topk_ids", XSTAGE_DTYPE_INT32, {T, k}, "[tokens, top_k]", device);
  const xstage_tensor& wts = operand(weights_in, "topk_weights", XSTAGE_DTYPE_FLOAT32, {T, k}, "[tokens, top_k]", device);
  const int32_t wdtype = p.dtype == moe::DType::bf16 ? XSTAGE_DTYPE_BFLOAT16 : XSTAGE_DTYPE_FLOAT8_E4M3;
  const xstage_tensor& w1 = operand(w1_in, "w1", wdtype, {EL, 2 * I, h}, "[experts/P, 2*inter, hidden]", device);
  const xstage_tensor& w2 = operand(w2_in, "w2", wdtype, {EL, h, I}, "[experts/P, hidden, inter]", device);
  const xstage_tensor* w1s = nullptr;
  const xstage_tensor* w2s = nullptr;
  if (p.dtype == moe::DType::fp8_e4m3) {
    XSTAGE_REQUIRE(w1s_in != nullptr && w2s_in != nullptr, "an fp8 layer needs w1_scales and w2_scales");
    w1s = &operand(w1s_in, "w1_scales", XSTAGE_DTYPE_FLOAT32, {EL * 2 * I / 128, moe::fp8::weight_scale_pitch(h)},
                   "[experts/P * 2*inter/128, round_up(hidden/128, 4)]", device);
    w2s = &operand(w2s_in, "w2_scales", XSTAGE_DTYPE_FLOAT32, {EL * h / 128, moe::fp8::weight_scale_pitch(I)},
                   "[experts/P * hidden/128, round_up(inter/128, 4)]", device);
  } else {
    XSTAGE_REQUIRE(w1s_in == nullptr && w2s_in == nullptr, "a bfloat16 layer takes no weight scales (pass NULL)");
  }
  const xstage_tensor& o = operand(out_in, "out", XSTAGE_DTYPE_BFLOAT16, {T, h}, "[tokens, hidden]", device);
  require_disjoint(o, "out", x, "tokens");

  DeviceGuard guard(device);
  if (verify_memory) {  // the trusted entry point's caller vouches for the pointers and the stream (xstage_c.h)
    const auto pointer = [&](const xstage_tensor& t, const char* name) {
      if (element_count(t) > 0) require_device_pointer(t.data, name, device);
    };
    pointer(x, "tokens");
    pointer(ids, "topk_ids");
    pointer(wts, "topk_weights");
    pointer(w1, "w1");
    pointer(w2, "w2");
    if (w1s) pointer(*w1s, "w1_scales");
    if (w2s) pointer(*w2s, "w2_scales");
    pointer(o, "out");
    require_stream_on_device(stream, device);
  }

  moe::MoeLayerViews v;
  v.tokens = static_cast<int>(T);
  v.tokens_bf16 = T ? x.data : nullptr;
  v.topk_ids = T ? static_cast<const std::int32_t*>(ids.data) : nullptr;
  v.topk_weights = T ? static_cast<const float*>(wts.data) : nullptr;
  v.W1 = w1.data;
  v.W2 = w2.data;
  v.W1_scales = w1s ? static_cast<const float*>(w1s->data) : nullptr;
  v.W2_scales = w2s ? static_cast<const float*>(w2s->data) : nullptr;
  v.out_bf16 = T ? o.data : nullptr;
  layer->layer->enqueue(v, static_cast<cudaStream_t>(stream));
}

void pack_w1(const xstage_tensor* logical_in, const xstage_tensor* packed_in, int32_t tile_n, void* stream) {
  const xstage_tensor& logical = require_tensor(logical_in, "logical");
  require_ndim(logical, "logical", 3, "[experts, 2*inter, hidden]");
  const int64_t E = logical.shape[0], N = logical.shape[1], h = logical.shape[2];
  const int32_t device = logical.device;
  XSTAGE_REQUIRE(tile_n == 128 || tile_n == 256, "tile_n is " + s(tile_n) + "; it must be 128 or 256");
  XSTAGE_REQUIRE(E >= 1 && N >= 2 && N % 2 == 0 && N % tile_n == 0 && h >= 8 && h % 8 == 0,
                 "logical has shape " + shape_string(logical) + "; [experts, 2*inter, hidden] needs experts >= 1, 2*inter a "
                 "multiple of tile_n = " + s(tile_n) + " and hidden a multiple of 8");
  XSTAGE_REQUIRE(E * N * h < (int64_t{1} << 40), "logical is too large");
  operand(logical_in, "logical", XSTAGE_DTYPE_BFLOAT16, {E, N, h}, "[experts, 2*inter, hidden]", device);
  const xstage_tensor& packed = operand(packed_in, "packed", XSTAGE_DTYPE_BFLOAT16, {E, N, h}, "[experts, 2*inter, hidden]", device);
  require_disjoint(packed, "packed", logical, "logical");
  require_sm90(device);
  DeviceGuard guard(device);
  require_device_pointer(logical.data, "logical", device);
  require_device_pointer(packed.data, "packed", device);
  require_stream_on_device(stream, device);
  moe::pack_w1(static_cast<const __nv_bfloat16*>(logical.data), static_cast<__nv_bfloat16*>(packed.data), static_cast<int>(E),
               static_cast<int>(h), static_cast<int>(N / 2), tile_n, static_cast<cudaStream_t>(stream));
}

void quantize_weights(const xstage_tensor* w_in, const xstage_tensor* codes_in, const xstage_tensor* scales_in, void* stream) {
  const xstage_tensor& w = require_tensor(w_in, "w");
  require_ndim(w, "w", 2, "[n, k]");
  const int64_t n = w.shape[0], k = w.shape[1];
  const int32_t device = w.device;
  XSTAGE_REQUIRE(n >= 128 && k >= 128 && n % 128 == 0 && k % 128 == 0 && n <= INT32_MAX && k <= INT32_MAX,
                 "w has shape " + shape_string(w) + "; 128x128-block quantization needs n and k positive multiples of 128");
  operand(w_in, "w", XSTAGE_DTYPE_BFLOAT16, {n, k}, "[n, k]", device);
  const xstage_tensor& c = require_tensor(codes_in, "codes");
  XSTAGE_REQUIRE(c.dtype == XSTAGE_DTYPE_FLOAT8_E4M3 || c.dtype == XSTAGE_DTYPE_UINT8,
                 "codes has dtype " + dtype_name(c.dtype) + "; it must be float8_e4m3fn (or uint8)");
  const xstage_tensor& codes = operand(codes_in, "codes", c.dtype, {n, k}, "[n, k]", device);
  const xstage_tensor& scales =
      operand(scales_in, "scales", XSTAGE_DTYPE_FLOAT32, {n / 128, moe::fp8::weight_scale_pitch(k)}, "[n/128, round_up(k/128, 4)]", device);
  require_sm90(device);
  DeviceGuard guard(device);
  require_device_pointer(w.data, "w", device);
  require_device_pointer(codes.data, "codes", device);
  require_device_pointer(scales.data, "scales", device);
  require_stream_on_device(stream, device);
  moe::quantize_weights_fp8(static_cast<const __nv_bfloat16*>(w.data), static_cast<int>(n), static_cast<int>(k),
                            static_cast<std::uint8_t*>(codes.data), static_cast<float*>(scales.data), static_cast<cudaStream_t>(stream));
}

}  // namespace
}  // namespace xstage::capi

namespace capi = xstage::capi;

extern "C" {

XSTAGE_C_API size_t xstage_moe_config_struct_size(void) { return sizeof(xstage_moe_config); }

XSTAGE_C_API int xstage_moe_default_tile_n(int32_t dtype, int32_t hidden, int32_t inter, int32_t* out) {
  return capi::guarded("xstage_moe_default_tile_n", [&] {
    XSTAGE_REQUIRE(out != nullptr, "out is NULL");
    *out = xstage::moe::default_tile_n(capi::moe_dtype(dtype, "dtype"), hidden, inter);
  });
}

XSTAGE_C_API int xstage_moe_schedule_from_name(const char* name, int32_t* schedule, int32_t* wave_lag) {
  return capi::guarded("xstage_moe_schedule_from_name", [&] {
    XSTAGE_REQUIRE(name != nullptr && schedule != nullptr && wave_lag != nullptr, "name, schedule or wave_lag is NULL");
    const xstage::moe::NamedSchedule& n = xstage::moe::named_schedule(name);
    *schedule = n.automatic ? XSTAGE_MOE_SCHEDULE_AUTO
                : n.kind == xstage::moe::MoeScheduleKind::expert_wave ? XSTAGE_MOE_SCHEDULE_EXPERT_WAVE
                                                                       : XSTAGE_MOE_SCHEDULE_INTERLEAVED;
    *wave_lag = n.wave_lag;
  });
}

XSTAGE_C_API int xstage_moe_check_config(const xstage_moe_config* config, int32_t ranks) {
  return capi::guarded("xstage_moe_check_config", [&] { (void)capi::request_of(config, ranks, xstage::DeviceFacts{}); });
}

XSTAGE_C_API int xstage_moe_create(xstage_comm* comm, const xstage_moe_config* config, xstage_moe** out) {
  return capi::guarded("xstage_moe_create", [&] {
    XSTAGE_REQUIRE(out != nullptr, "out is NULL");
    *out = nullptr;
    xstage::comm::Runtime& rt = capi::require_comm(comm);
    const xstage::DeviceFacts& device = xstage::device_facts(rt.device());
    const xstage::moe::MoeLayerRequest request = capi::request_of(config, rt.world_size(), device);
    capi::DeviceGuard guard(rt.device());
    auto handle = std::make_unique<xstage_moe>();
    handle->comm = comm;
    handle->problem = request.problem;
    handle->layer = std::make_unique<xstage::moe::FusedMoeLayer>(xstage::moe::plan_layer(request, device), rt);
    ++comm->layers;
    *out = handle.release();
  });
}

XSTAGE_C_API int xstage_moe_forward(xstage_moe* layer, const xstage_tensor* tokens, const xstage_tensor* topk_ids,
                                    const xstage_tensor* topk_weights, const xstage_tensor* w1, const xstage_tensor* w2,
                                    const xstage_tensor* w1_scales, const xstage_tensor* w2_scales, const xstage_tensor* out,
                                    void* stream) {
  return capi::guarded("xstage_moe_forward", [&] {
    capi::moe_forward(layer, tokens, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, out, stream, true);
  });
}

XSTAGE_C_API int xstage_moe_forward_trusted(xstage_moe* layer, const xstage_tensor* tokens, const xstage_tensor* topk_ids,
                                            const xstage_tensor* topk_weights, const xstage_tensor* w1, const xstage_tensor* w2,
                                            const xstage_tensor* w1_scales, const xstage_tensor* w2_scales,
                                            const xstage_tensor* out, void* stream) {
  return capi::guarded("xstage_moe_forward", [&] {
    capi::moe_forward(layer, tokens, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales, out, stream, false);
  });
}

XSTAGE_C_API int xstage_moe_poll(const xstage_moe* layer) {
  return capi::guarded("xstage_moe_poll", [&] {
    XSTAGE_REQUIRE(layer != nullptr && layer->layer != nullptr, "layer is NULL");
    layer->layer->poll();
  });
}

XSTAGE_C_API int xstage_moe_ended(const xstage_moe* layer, int32_t* ended) {
  return capi::guarded("xstage_moe_ended", [&] {
    XSTAGE_REQUIRE(layer != nullptr && layer->layer != nullptr, "layer is NULL");
    XSTAGE_REQUIRE(ended != nullptr, "ended is NULL");
    *ended = layer->layer->ended() ? 1 : 0;
  });
}

XSTAGE_C_API int xstage_moe_destroy(xstage_moe* layer) {
  return capi::guarded("xstage_moe_destroy", [&] { capi::destroy_layer(layer); });
}

XSTAGE_C_API int xstage_moe_pack_w1(const xstage_tensor* logical, const xstage_tensor* packed, int32_t tile_n, void* stream) {
  return capi::guarded("xstage_moe_pack_w1", [&] { capi::pack_w1(logical, packed, tile_n, stream); });
}

XSTAGE_C_API int xstage_moe_quantize_weights_fp8(const xstage_tensor* w, const xstage_tensor* codes, const xstage_tensor* scales,
                                                 void* stream) {
  return capi::guarded("xstage_moe_quantize_weights_fp8", [&] { capi::quantize_weights(w, codes, scales, stream); });
}

}  // extern "C"
