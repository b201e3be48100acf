// The tile configurations of the forward kernel and the rule that picks one per problem. Plain C++:
// the kernel configuration (flash_fwd_tile_config.hpp), the build, the launcher, the reports and the CPU
// tests all read this one list.
#pragma once

#include <cstdint>

namespace xstage::attention {

// The configurations that are built: the one list. Each entry is one kernel instantiation per epilogue family
// (src/attention/CMakeLists.txt generates their translation units from this list), one FwdTileConfigId and
// one FwdTileShape; keep the list short. Columns: name, head_dim, consumer warpgroups (each owns 64 query
// rows: b_m = 64 x warpgroups), block_n (key/value rows per pipeline stage), stages (K and V pipeline depth).
//   kHdim64Rows128   d=64, 2 consumer warpgroups: more, smaller tiles (fills the GPU at small M*heads)
//   kHdim64Rows192   d=64, 3 consumer warpgroups: ~14% faster per row, coarser tiles
//   kHdim128Rows128  d=128, 2 consumer warpgroups, 160 key/value rows per stage (1-3% faster than 128 on H200:
//                    fewer, longer steps; two stages of 160 are the most that fit beside Q and the O staging buffer)
// clang-format off
#define XSTAGE_FWD_TILE_CONFIGS(X)        \
  X(kHdim64Rows128,  64,  2, 192, 3)      \
  X(kHdim64Rows192,  64,  3, 128, 3)      \
  X(kHdim128Rows128, 128, 2, 160, 2)
// clang-format on

enum class FwdTileConfigId : int {
#define XSTAGE_FWD_TILE_ID(name, head_dim, warpgroups, block_n, stages) name,
  XSTAGE_FWD_TILE_CONFIGS(XSTAGE_FWD_TILE_ID)
#undef XSTAGE_FWD_TILE_ID
};

struct FwdTileShape {
  int head_dim;
  int consumer_warpgroups;  // each owns 64 query rows: b_m = 64 * consumer_warpgroups
  int block_n;              // key/value rows per pipeline stage
  int stages;               // K and V pipeline depth
  constexpr int block_m() const { return 64 * consumer_warpgroups; }
};

inline constexpr FwdTileShape kFwdTileShapes[] = {
#define XSTAGE_FWD_TILE_SHAPE(name, head_dim, warpgroups, block_n, stages) {head_dim, warpgroups, block_n, stages},
    XSTAGE_FWD_TILE_CONFIGS(XSTAGE_FWD_TILE_SHAPE)
#undef XSTAGE_FWD_TILE_SHAPE
};

constexpr FwdTileShape fwd_tile_shape(FwdTileConfigId id) { return kFwdTileShapes[static_cast<int>(id)]; }

inline constexpr const char* kFwdTileConfigNames[] = {
#define XSTAGE_FWD_TILE_NAME(name, head_dim, warpgroups, block_n, stages) #name,
    XSTAGE_FWD_TILE_CONFIGS(XSTAGE_FWD_TILE_NAME)
#undef XSTAGE_FWD_TILE_NAME
};
inline constexpr int kNumFwdTileConfigs = static_cast<int>(sizeof(kFwdTileConfigNames) / sizeof(kFwdTileConfigNames[0]));

// Throughput per query row of kHdim64Rows192 over kHdim64Rows128 once wave quantisation is factored
// out, measured on H200 (1.13-1.16 at h=4 and 12; docs/ATTENTION.md, "Experiments and what they showed").
constexpr double kHdim64Rows192Speedup = 1.14;

// A persistent CTA takes its tiles one after another: the makespan is ceil(tiles / grid) tile times.
constexpr int64_t fwd_tile_waves(int64_t tiles, int num_sms) { return (tiles + num_sms - 1) / num_sms; }

// The predicted makespan of a configuration on `num_sms` SMs: waves x rows per tile / speed per row, in the time of
// 128 rows of kHdim64Rows128 (comparable between d=64's two configurations; d=128 has one).
constexpr double fwd_makespan(FwdTileConfigId config, int64_t batch_heads, int64_t seqlen_q, int num_sms) {
  const int64_t block_m = fwd_tile_shape(config).block_m();
  const int64_t tiles = batch_heads * ((seqlen_q + block_m - 1) / block_m);
  const double speed = config == FwdTileConfigId::kHdim64Rows192 ? kHdim64Rows192Speedup : 1.0;
  return double(fwd_tile_waves(tiles, num_sms)) * double(block_m) / speed;
}

// d=64: the configuration with the shorter predicted makespan; d=128: the one configuration.
constexpr FwdTileConfigId choose_fwd_tile_config(int head_dim, int64_t batch_heads, int64_t seqlen_q, int num_sms) {
  if (head_dim != 64) return FwdTileConfigId::kHdim128Rows128;
  return fwd_makespan(FwdTileConfigId::kHdim64Rows192, batch_heads, seqlen_q, num_sms) <
                 fwd_makespan(FwdTileConfigId::kHdim64Rows128, batch_heads, seqlen_q, num_sms)
             ? FwdTileConfigId::kHdim64Rows192
             : FwdTileConfigId::kHdim64Rows128;
}

}  // namespace xstage::attention
