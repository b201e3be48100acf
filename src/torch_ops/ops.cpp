// libxstage_torch.so: the CUDA kernels of torch.ops.xstage.flash_attention and torch.ops.xstage.moe, registered
// through PyTorch's stable C ABI (torch/csrc/stable, the AOTInductor C shim), so that an eager call goes from
// torch's dispatcher straight to C++: no Python implementation, no ctypes descriptors, outputs allocated by
// torch's caching allocator from C++. python/xstage/_ops.py loads it on the first CUDA call where torch is new
// enough (docs/PYTHON.md, "Host time per call"); the ops' schemas, fake implementations and the kernels of
// other devices stay the Python ones (python/xstage/attention.py, moe.py), which define the ops.
//
// The kernels call xstage's C ABI (libxstage_c.so, the `_trusted` forward functions: torch's tensors are device
// memory of their device and its current stream belongs to that device), which checks every argument; nothing
// is checked twice here. Its errors come back as RuntimeError("xstage.<class>: <message>"), the class being
// the Python exception of the C status; xstage's public functions re-raise them as that class (or, where the
// Python checks find the problem, as their TypeError/ValueError).
//
// Built against TORCH_TARGET_VERSION (CMakeLists.txt): one build loads into every torch from that version on.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "capi/xstage_c.h"

#define XSTAGE_TORCH_API extern "C" __attribute__((visibility("default")))

// What the MoE kernel asks python/xstage/moe.py when it has no layer for a call's configuration (mirrored by
// _ops.MoeRequest): the operands as the C ABI sees them, and the op's other arguments.
struct xstage_torch_moe_request {
  const xstage_tensor* operands[7];  // x, topk_ids, topk_weights, w1, w2, w1_scales, w2_scales (NULL: None)
  const char* group;
  const char* schedule;
  int64_t max_tokens;
  int64_t tile_n;
  int64_t cluster_n;
  int64_t cluster_m;
  double timeout_s;
};

// Returns an XSTAGE_* status; on XSTAGE_OK *layer is the xstage_moe* for the request (built if needed), else
// message (message_bytes long) says what was wrong.
using xstage_torch_moe_resolver = int (*)(const xstage_torch_moe_request* request, void** layer, char* message,
                                          size_t message_bytes);

// For a call of `layer` that failed with XSTAGE_ERROR_PLATFORM and the C library's `error`: returns the status to
// raise and writes its message. A layer that an earlier call ended is dropped there (one rank: the call after
// this builds a new one, and the handle may dangle) or must be rebuilt by every rank (python/xstage/moe.py).
using xstage_torch_moe_failed = int (*)(void* layer, const char* error, char* message, size_t message_bytes);

namespace xstage::torch_ops {
namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

[[noreturn]] void fail(int status, const std::string& message) {
  const char* kind = status == XSTAGE_ERROR_INPUT      ? "xstage.InputError"
                     : status == XSTAGE_ERROR_PLATFORM ? "xstage.PlatformError"
                                                       : "xstage.XstageError";
  throw std::runtime_error(std::string(kind) + ": " + message);
}

void check(int status) {
  if (status != XSTAGE_OK) fail(status, xstage_last_error());
}

void check_shim(AOTITorchError error, const char* what) {
  if (error != AOTI_TORCH_SUCCESS) fail(XSTAGE_ERROR_OTHER, std::string("PyTorch's C shim: ") + what + " failed");
}

int32_t xstage_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return XSTAGE_DTYPE_BFLOAT16;
    case ScalarType::Half: return XSTAGE_DTYPE_FLOAT16;
    case ScalarType::Float: return XSTAGE_DTYPE_FLOAT32;
    case ScalarType::Float8_e4m3fn: return XSTAGE_DTYPE_FLOAT8_E4M3;
    case ScalarType::Int: return XSTAGE_DTYPE_INT32;
    case ScalarType::Long: return XSTAGE_DTYPE_INT64;
    case ScalarType::Byte: return XSTAGE_DTYPE_UINT8;
    default: return 0;  // no xstage dtype: the C ABI names it as an unknown code
  }
}

// The C ABI's view of a tensor. More than XSTAGE_MAX_NDIM dimensions keep their count, so that the C ABI
// rejects them by name; a tensor not on a CUDA device is host memory to it (it rejects that too).
xstage_tensor describe(const Tensor& t) {
  xstage_tensor d{};
  const int64_t ndim = t.dim();
  d.ndim = static_cast<int32_t>(ndim);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int64_t i = 0; i < ndim && i < XSTAGE_MAX_NDIM; ++i) {
    d.shape[i] = sizes[i];
    d.strides[i] = strides[i];
  }
  d.data = t.data_ptr();
  d.dtype = xstage_dtype(t.scalar_type());
  d.device = t.is_cuda() ? t.get_device_index() : XSTAGE_DEVICE_CPU;
  return d;
}

// A new contiguous tensor (at most 4 dimensions) on the device of `like`.
Tensor empty(std::initializer_list<int64_t> shape, int32_t torch_dtype, const Tensor& like) {
  int64_t sizes[4], strides[4];
  const int64_t ndim = static_cast<int64_t>(shape.size());
  int64_t i = 0;
  for (int64_t s : shape) sizes[i++] = s;
  for (int64_t j = ndim - 1, stride = 1; j >= 0; --j) {
    strides[j] = stride;
    stride *= sizes[j] > 1 ? sizes[j] : 1;
  }
  int32_t device_type = 0;
  check_shim(aoti_torch_get_device_type(like.get(), &device_type), "aoti_torch_get_device_type");
  AtenTensorHandle handle = nullptr;
  check_shim(aoti_torch_empty_strided(ndim, sizes, strides, torch_dtype, device_type, like.get_device_index(), &handle),
             "aoti_torch_empty_strided (out of GPU memory?)");
  return Tensor(handle);
}

// torch's current stream of the tensor's device (NULL for a tensor that is not on a CUDA device: the C ABI
// rejects it before looking at the stream).
void* current_stream(const Tensor& t) {
  if (!t.is_cuda()) return nullptr;
  void* stream = nullptr;
  check_shim(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream), "aoti_torch_get_current_cuda_stream");
  return stream;
}

std::tuple<Tensor, Tensor> flash_attention(Tensor q, Tensor k, Tensor v, double softmax_scale, bool return_lse,
                                           std::optional<Tensor> key_lengths) {
  const xstage_tensor dq = describe(q), dk = describe(k), dv = describe(v);
  const std::optional<xstage_tensor> dlengths = key_lengths ? std::optional(describe(*key_lengths)) : std::nullopt;
  // The outputs' shapes come from q's: it must have them (the C ABI checks everything else).
  if (dq.ndim != 4)
    fail(XSTAGE_ERROR_INPUT, "xstage_flash_attention_forward: q must be 4-D [batch, seqlen, heads, head_dim]; got " +
                                 std::to_string(dq.ndim) + " dimensions");
  const int64_t b = dq.shape[0], m = dq.shape[1], h = dq.shape[2], d = dq.shape[3];
  Tensor out = empty({b, m, h, d}, aoti_torch_dtype_bfloat16(), q);
  Tensor lse = return_lse ? empty({b, h, m}, aoti_torch_dtype_float32(), q) : empty({0}, aoti_torch_dtype_float32(), q);
  const xstage_tensor dout = describe(out), dlse = describe(lse);
  check(xstage_flash_attention_forward_key_lengths_trusted(&dq, &dk, &dv, dlengths ? &*dlengths : nullptr, &dout,
                                                           return_lse ? &dlse : nullptr, static_cast<float>(softmax_scale),
                                                           current_stream(q)));
  return {out, lse};
}

// --- MoE: the layer (buffers, symmetric windows) is built and cached by Python (the communicator owns it); this
// cache maps a call's configuration to its layer so that a call finds it without Python. Python answers the two
// questions a call cannot: which layer a new configuration gets, and what a platform failure means for the layer
// (python/xstage/moe.py: _resolve_layer, _layer_failed).

std::mutex g_moe_mutex;
xstage_torch_moe_resolver g_moe_resolver = nullptr;
xstage_torch_moe_failed g_moe_failed = nullptr;
std::unordered_map<std::string, xstage_moe*> g_moe_layers;
constexpr std::size_t kMaxCachedLayers = 4096;  // a new token count per call (one rank) must not grow it forever

template <class T>
void append(std::string& key, const T& value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof value);
}

Tensor moe(Tensor x, Tensor topk_ids, Tensor topk_weights, Tensor w1, Tensor w2, std::optional<Tensor> w1_scales,
           std::optional<Tensor> w2_scales, std::string group, int64_t max_tokens, int64_t tile_n, std::string schedule,
           int64_t cluster_n, int64_t cluster_m, double timeout_s) {
  const xstage_tensor dx = describe(x), dids = describe(topk_ids), dwts = describe(topk_weights), dw1 = describe(w1),
                      dw2 = describe(w2);
  const std::optional<xstage_tensor> ds1 = w1_scales ? std::optional(describe(*w1_scales)) : std::nullopt;
  const std::optional<xstage_tensor> ds2 = w2_scales ? std::optional(describe(*w2_scales)) : std::nullopt;

  // What selects the layer: everything moe.py's layer key holds. Operands of other ranks cannot be read
  // into a key: they go to Python, whose checks reject them. (The thread's buffer is reused: no allocation.)
  thread_local std::string key;
  key.clear();
  const bool keyed = dx.ndim == 2 && dids.ndim == 2 && dw2.ndim == 3;
  if (keyed) {
    key += group;
    key.push_back('\0');
    key += schedule;
    key.push_back('\0');
    for (int64_t value : {int64_t{dx.device}, dx.shape[1], dids.shape[1], dw2.shape[0], dw2.shape[2], int64_t{dw1.dtype},
                          tile_n, cluster_n, cluster_m, max_tokens, max_tokens ? 0 : dx.shape[0]})
      append(key, value);
    append(key, timeout_s);
  }
  xstage_moe* layer = nullptr;
  xstage_torch_moe_resolver resolver = nullptr;
  xstage_torch_moe_failed failed = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_moe_mutex);
    if (keyed) {
      const auto found = g_moe_layers.find(key);
      if (found != g_moe_layers.end()) layer = found->second;
    }
    resolver = g_moe_resolver;
    failed = g_moe_failed;
  }
  if (resolver == nullptr || failed == nullptr)
    fail(XSTAGE_ERROR_OTHER, "xstage.moe: the layer callbacks are not installed (load this library through xstage)");
  if (layer == nullptr) {
    const xstage_torch_moe_request request{{&dx, &dids, &dwts, &dw1, &dw2, ds1 ? &*ds1 : nullptr, ds2 ? &*ds2 : nullptr},
                                           group.c_str(), schedule.c_str(), max_tokens, tile_n, cluster_n, cluster_m,
                                           timeout_s};
    char message[2048] = {0};
    void* resolved = nullptr;
    // Outside the lock: the resolver runs Python (it takes the GIL) and may build the layer (collective).
    const int status = resolver(&request, &resolved, message, sizeof message);
    if (status != XSTAGE_OK) fail(status, message);
    layer = static_cast<xstage_moe*>(resolved);
    if (keyed) {
      std::lock_guard<std::mutex> lock(g_moe_mutex);
      if (g_moe_layers.size() >= kMaxCachedLayers) g_moe_layers.clear();
      g_moe_layers.emplace(key, layer);
    }
  }
  Tensor out = empty({dx.shape[0], dx.shape[1]}, aoti_torch_dtype_bfloat16(), x);
  const xstage_tensor dout = describe(out);
  const int status = xstage_moe_forward_trusted(layer, &dx, &dids, &dwts, &dw1, &dw2, ds1 ? &*ds1 : nullptr,
                                                ds2 ? &*ds2 : nullptr, &dout, current_stream(x));
  if (status == XSTAGE_ERROR_PLATFORM) {
    // Python decides what a platform failure means for the layer (and may destroy it: not used after this).
    const std::string error = xstage_last_error();
    char message[4096] = {0};
    const int raised = failed(layer, error.c_str(), message, sizeof message);
    fail(raised, message);
  }
  check(status);
  return out;
}

// A string argument of a boxed call: the stable ABI hands over a StringHandle the kernel owns. TORCH_BOX's
// conversion (torch/csrc/stable/stableivalue_conversions.h, ToImpl<std::string>, torch 2.10 and 2.11) returns a
// copy of a std::string it allocates and never frees: one leaked object per string argument per call. This one
// frees the handle and allocates nothing else.
std::string take_string(StableIValue value) {
  const StringHandle handle = torch::stable::detail::to<StringHandle>(value);
  size_t length = 0;
  const char* data = nullptr;
  const AOTITorchError read = torch_string_length(handle, &length) | torch_string_c_str(handle, &data);
  std::string text = read == AOTI_TORCH_SUCCESS ? std::string(data, length) : std::string();
  check_shim(torch_delete_string(handle), "torch_delete_string");
  check_shim(read, "reading a string argument");
  return text;
}

// moe's boxed kernel, by hand rather than TORCH_BOX for its two string arguments (take_string).
void moe_boxed(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  using torch::stable::detail::from;
  using torch::stable::detail::to;
  if (num_args != 14 || num_outputs != 1)
    fail(XSTAGE_ERROR_OTHER, "xstage.moe: the registered schema has " + std::to_string(num_args) + " arguments and " +
                                 std::to_string(num_outputs) + " outputs; this kernel takes 14 and returns 1");
  // Every argument is taken (owned) before anything can throw, so that none leaks.
  Tensor x = to<Tensor>(stack[0]), topk_ids = to<Tensor>(stack[1]), topk_weights = to<Tensor>(stack[2]),
         w1 = to<Tensor>(stack[3]), w2 = to<Tensor>(stack[4]);
  std::optional<Tensor> w1_scales = to<std::optional<Tensor>>(stack[5]), w2_scales = to<std::optional<Tensor>>(stack[6]);
  std::string group = take_string(stack[7]);
  const int64_t max_tokens = to<int64_t>(stack[8]), tile_n = to<int64_t>(stack[9]);
  std::string schedule = take_string(stack[10]);
  const int64_t cluster_n = to<int64_t>(stack[11]), cluster_m = to<int64_t>(stack[12]);
  const double timeout_s = to<double>(stack[13]);
  stack[0] = from(moe(std::move(x), std::move(topk_ids), std::move(topk_weights), std::move(w1), std::move(w2),
                      std::move(w1_scales), std::move(w2_scales), std::move(group), max_tokens, tile_n, std::move(schedule),
                      cluster_n, cluster_m, timeout_s));
}

}  // namespace
}  // namespace xstage::torch_ops

STABLE_TORCH_LIBRARY_IMPL(xstage, CUDA, m) {
  m.impl("flash_attention", TORCH_BOX(&xstage::torch_ops::flash_attention));
  m.impl("moe", &xstage::torch_ops::moe_boxed);
}

// For python/xstage/_ops.py (ctypes).

XSTAGE_TORCH_API size_t xstage_torch_moe_request_size(void) { return sizeof(xstage_torch_moe_request); }

XSTAGE_TORCH_API void xstage_torch_set_moe_callbacks(xstage_torch_moe_resolver resolver, xstage_torch_moe_failed failed) {
  std::lock_guard<std::mutex> lock(xstage::torch_ops::g_moe_mutex);
  xstage::torch_ops::g_moe_resolver = resolver;
  xstage::torch_ops::g_moe_failed = failed;
}

// Called before any MoE layer is destroyed and before a communicator is created: a cached handle could dangle,
// or belong to another communicator than the one its group or device finds afterwards.
XSTAGE_TORCH_API void xstage_torch_forget_moe_layers(void) {
  std::lock_guard<std::mutex> lock(xstage::torch_ops::g_moe_mutex);
  xstage::torch_ops::g_moe_layers.clear();
}
