// Argument validation and head-dim dispatch (host C++; the kernels live in flash_fwd_hdim*.cu).
#include "attention/flash_fwd.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>

#include "attention/tile_shapes.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"

namespace xstage::attention {
namespace {

constexpr int64_t kElementBytes = 2;  // bf16
constexpr int64_t kMaxTmaStrideBytes = int64_t(1) << 40;

void check_strides(const char* name, const BmhdStrides& s) {
  const struct {
    const char* what;
    int64_t value;
  } strides[] = {{"batch", s.batch}, {"row", s.row}, {"head", s.head}};
  for (const auto& st : strides) {
    auto prefix = [&] { return std::string(name) + " " + st.what + " stride is " + std::to_string(st.value) + " elements: "; };
    XSTAGE_REQUIRE(st.value > 0, prefix() + "strides must be positive (head_dim is the contiguous dimension)");
    XSTAGE_REQUIRE((st.value * kElementBytes) % 16 == 0,
                    prefix() + "the TMA unit needs every stride to be a multiple of 16 bytes (8 bf16 elements)");
    XSTAGE_REQUIRE(st.value * kElementBytes < kMaxTmaStrideBytes, prefix() + "the TMA unit needs strides below 2^40 bytes");
  }
}

// `why`: what needs the alignment (for the message).
void check_pointer(const char* name, const void* ptr, std::uintptr_t alignment,
                   const char* why = "the TMA unit needs 16-byte aligned tensors") {
  XSTAGE_REQUIRE(ptr != nullptr, std::string(name) + " pointer is null");
  if (reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0) return;
  std::ostringstream os;
  os << name << " pointer " << ptr << " is not " << alignment << "-byte aligned (" << why << ")";
  throw InputError(os.str());
}

}  // namespace

std::string describe(FwdTileShape const& t) {
  std::ostringstream os;
  os << "b_m=" << t.block_m() << " b_n=" << t.block_n << " stages=" << t.stages << " ("
     << t.consumer_warpgroups << " consumer warpgroups)";
  return os.str();
}

namespace {

// Everything but the output: shapes, scale, Q/K/V strides and pointers, the forced configuration.
void validate_flash_fwd_inputs(FlashFwdArgs const& args) {
  const FlashFwdProblem& p = args.problem;
  auto shape = [&] {
    return " (batch=" + std::to_string(p.batch) + ", seqlen_q=" + std::to_string(p.seqlen_q) +
           ", seqlen_k=" + std::to_string(p.seqlen_k) + ", heads=" + std::to_string(p.heads) +
           ", head_dim=" + std::to_string(p.head_dim) + ")";
  };
  XSTAGE_REQUIRE(p.head_dim == 64 || p.head_dim == 128,
                 "head_dim must be 64 or 128" + shape() + "; other head dims are not built");
  XSTAGE_REQUIRE(p.batch >= 1 && p.heads >= 1 && p.seqlen_q >= 1 && p.seqlen_k >= 1,
                 "batch, heads, seqlen_q and seqlen_k must all be >= 1" + shape());
  // Tile counts and TMA coordinates are 32-bit.
  const int64_t tiles = int64_t(p.batch) * p.heads * ((int64_t(p.seqlen_q) + 63) / 64);  // any b_m >= 64
  XSTAGE_REQUIRE(tiles < (int64_t(1) << 31), "too many output tiles for one launch" + shape());
  // The online softmax rescales by the running row maximum of the raw scores, which is the maximum of the
  // scaled scores only for a positive scale.
  XSTAGE_REQUIRE(std::isfinite(p.softmax_scale) && p.softmax_scale > 0.f,
                 "softmax_scale must be finite and positive (usually 1/sqrt(head_dim))");
  check_strides("Q", p.q);
  check_strides("K", p.k);
  check_strides("V", p.v);
  check_pointer("Q", args.q, 16);
  check_pointer("K", args.k, 16);
  check_pointer("V", args.v, 16);
  // Its values are the kernel's to clamp (flash_fwd_params.hpp): reading them here would synchronise.
  if (args.seqlen_k_per_batch != nullptr)
    check_pointer("per-batch key lengths", args.seqlen_k_per_batch, 4, "int32 values are read as such");
  if (args.tile_config) {
    XSTAGE_REQUIRE(fwd_tile_shape(*args.tile_config).head_dim == p.head_dim,
                   "the forced tile configuration " + describe(fwd_tile_shape(*args.tile_config)) +
                       " is for head_dim " + std::to_string(fwd_tile_shape(*args.tile_config).head_dim) + shape());
  }
}

}  // namespace

void validate_flash_fwd_args(FlashFwdArgs const& args) {
  validate_flash_fwd_inputs(args);
  check_strides("O", args.problem.o);
  check_pointer("O", args.o, 16);
  if (args.lse != nullptr) check_pointer("LSE", args.lse, 4, "fp32 values are stored as such");
}

KeySplit flash_fwd_key_split(FlashFwdArgs const& args, FwdTileConfigId config, int num_sms) {
  const FlashFwdProblem& p = args.problem;
  const FwdTileShape shape = fwd_tile_shape(config);
  const int64_t tiles = (int64_t(p.seqlen_q) + shape.block_m() - 1) / shape.block_m() * p.heads * p.batch;
  const KeySplitMode mode = args.seqlen_k_per_batch != nullptr ? KeySplitMode::off : args.key_split;
  return plan_key_split(mode, tiles, (p.seqlen_k + shape.block_n - 1) / shape.block_n, num_sms);
}

FwdTileConfigId flash_fwd_tile_config(FlashFwdProblem const& p, int num_sms) {
  return choose_fwd_tile_config(p.head_dim, int64_t(p.batch) * p.heads, p.seqlen_q, num_sms);
}

void flash_attention_forward_all_to_all(FlashFwdArgs const& args, AllToAllDestinations const& dst, A2AStorePath path,
                                        cudaStream_t stream, InputArrivals const& inputs) {
  validate_flash_fwd_inputs(args);
  const FlashFwdProblem& p = args.problem;
  const UlyssesShape& s = dst.shape;
  XSTAGE_REQUIRE(args.seqlen_k_per_batch == nullptr, "fused Ulysses: per-batch key lengths are not supported (every key is attended)");
  XSTAGE_REQUIRE(s.ranks >= 1 && s.ranks <= kMaxUlyssesRanks && dst.rank >= 0 && dst.rank < s.ranks,
                 "fused Ulysses: rank " + std::to_string(dst.rank) + " of " + std::to_string(s.ranks) + " ranks (at most " +
                     std::to_string(kMaxUlyssesRanks) + ")");
  XSTAGE_REQUIRE(p.seqlen_q == s.seqlen && p.seqlen_k == s.seqlen && p.heads * s.ranks == s.heads && p.batch == s.batch &&
                     p.head_dim == s.head_dim,
                 "fused Ulysses: the attention problem (batch " + std::to_string(p.batch) + ", M " + std::to_string(p.seqlen_q) +
                     ", heads " + std::to_string(p.heads) + ") is not the head-sharded shard of the layer (batch " +
                     std::to_string(s.batch) + ", M " + std::to_string(s.seqlen) + ", H/P " + std::to_string(s.local_heads()) + ")");
  for (int j = 0; j < s.ranks; ++j) {
    check_pointer("output window", dst.window[j], 16);
    XSTAGE_REQUIRE(dst.arrived[j] != nullptr, "fused Ulysses: no arrival counter for rank " + std::to_string(j));
  }
  const DeviceFacts& device = current_device_facts();
  if (inputs.flags != nullptr) {
    check_pointer("input arrival flags", inputs.flags, 4);
    const InputChunks& c = inputs.chunks;
    XSTAGE_REQUIRE(c.ranks == s.ranks && c.shard_rows == s.shard_rows() && c.rows >= 1 && c.per_source >= 1 &&
                       c.per_source * c.rows >= c.shard_rows && c.per_batch() <= kMaxInputChunksPerBatch,
                   "fused Ulysses: the input chunks (" + std::to_string(c.per_source) + " of " + std::to_string(c.rows) +
                       " rows per source) do not cover the layer's shards of " + std::to_string(s.shard_rows()) + " rows in at most " +
                       std::to_string(kMaxInputChunksPerBatch) + " chunks per batch");
    XSTAGE_REQUIRE(inputs.wait.status != nullptr, "fused Ulysses: input arrivals without a call state");
    XSTAGE_REQUIRE(c.heads == s.local_heads() && c.row_pieces * 16 == s.head_dim * 2,
                   "fused Ulysses: the input chunks count " + std::to_string(c.heads) + " heads of " + std::to_string(c.row_pieces * 16) +
                       "-byte rows, the layer's are " + std::to_string(s.local_heads()) + " of " + std::to_string(s.head_dim * 2));
    XSTAGE_REQUIRE(inputs.reserved_sms >= 0 && inputs.reserved_sms < device.sm_count,
                   "fused Ulysses: the pusher reserves " + std::to_string(inputs.reserved_sms) + " SMs of " +
                       std::to_string(device.sm_count));
  }
  // The kernel runs on the SMs the inputs' pusher leaves (all of them without one): its configuration is chosen for those.
  switch (args.tile_config.value_or(flash_fwd_tile_config(p, device.sm_count - inputs.reserved_sms))) {
#define XSTAGE_FWD_A2A_CASE(name, head_dim, warpgroups, block_n, stages) \
  case FwdTileConfigId::name:                                           \
    return detail::launch_flash_fwd_a2a_config<FwdTileConfigId::name>(args, dst, path, inputs, device, stream);
    XSTAGE_FWD_TILE_CONFIGS(XSTAGE_FWD_A2A_CASE)
#undef XSTAGE_FWD_A2A_CASE
  }
}

const char* to_string(A2AStorePath path) { return path == A2AStorePath::tma ? "tma" : "st_global"; }

void flash_attention_forward(FlashFwdArgs const& args, cudaStream_t stream) {
  flash_attention_forward(args, current_device_facts(), stream);
}

void flash_attention_forward(FlashFwdArgs const& args, DeviceFacts const& device, cudaStream_t stream) {
  validate_flash_fwd_args(args);
  switch (args.tile_config.value_or(flash_fwd_tile_config(args.problem, device.sm_count))) {
#define XSTAGE_FWD_CASE(name, head_dim, warpgroups, block_n, stages) \
  case FwdTileConfigId::name:                                       \
    return detail::launch_flash_fwd_config<FwdTileConfigId::name>(args, device, stream);
    XSTAGE_FWD_TILE_CONFIGS(XSTAGE_FWD_CASE)
#undef XSTAGE_FWD_CASE
  }
}

}  // namespace xstage::attention
