// The fused MegaMoE kernel's configurations that are built: the one list. Each entry is one kernel
// instantiation (src/moe/CMakeLists.txt generates its translation unit, megamoe_<name>.cu, from this list),
// one MegaMoeConfigId and one row of kMegaMoeConfigs; a configuration is added here and nowhere else
// (kernel/config.hpp turns the columns into a MegaMoeConfig). Plain C++: the planner (moe/plan.hpp) reads it.
//   name, dtype, b_n, half_l2 (each row's last Linear-2 block half full), cluster_n (CTA pairs along N),
//   cluster_m (CTA pairs along M)
#pragma once

#include "moe/problem/problem.hpp"

// clang-format off
#define XSTAGE_MEGAMOE_CONFIGS(X)                      \
  X(bf16_n128,        bf16,     128, false, 1, 1)      \
  X(bf16_n128_pairs,  bf16,     128, false, 2, 1)      \
  X(bf16_n256,        bf16,     256, false, 1, 1)      \
  X(bf16_n256_pairs,  bf16,     256, false, 2, 1)      \
  X(bf16_n256_mpairs, bf16,     256, false, 1, 2)      \
  X(bf16_n256_half,   bf16,     256, true,  1, 1)      \
  X(fp8_n256,         fp8_e4m3, 256, false, 1, 1)      \
  X(fp8_n256_pairs,   fp8_e4m3, 256, false, 2, 1)      \
  X(fp8_n256_mpairs,  fp8_e4m3, 256, false, 1, 2)      \
  X(fp8_n256_half,    fp8_e4m3, 256, true,  1, 1)
// clang-format on

namespace xstage::moe {

// The kernel's shared-memory tables (kernel/config.hpp), every configuration: local experts, and P · E_local
// per-source counts.
inline constexpr int kMegaMoeMaxLocalExperts = 512;
inline constexpr int kMegaMoeMaxCounts = 2048;

enum class MegaMoeConfigId {
#define XSTAGE_MEGAMOE_ID(name, dtype, b_n, half_l2, cluster_n, cluster_m) name,
  XSTAGE_MEGAMOE_CONFIGS(XSTAGE_MEGAMOE_ID)
#undef XSTAGE_MEGAMOE_ID
};

struct MegaMoeConfigSpec {
  MegaMoeConfigId id;
  const char* name;
  DType dtype;
  int b_n;
  bool half_l2;
  int cluster_n, cluster_m;
};

inline constexpr MegaMoeConfigSpec kMegaMoeConfigs[] = {
#define XSTAGE_MEGAMOE_SPEC(name, dtype, b_n, half_l2, cluster_n, cluster_m) \
  {MegaMoeConfigId::name, #name, DType::dtype, b_n, half_l2, cluster_n, cluster_m},
    XSTAGE_MEGAMOE_CONFIGS(XSTAGE_MEGAMOE_SPEC)
#undef XSTAGE_MEGAMOE_SPEC
};

constexpr const MegaMoeConfigSpec& spec_of(MegaMoeConfigId id) { return kMegaMoeConfigs[static_cast<int>(id)]; }
inline const char* to_string(MegaMoeConfigId id) { return spec_of(id).name; }

// The built configuration for a layer's kernel; InputError naming the combination when none is built.
MegaMoeConfigId megamoe_config_id(DType dtype, int b_n, bool half_l2, int cluster_n, int cluster_m);

}  // namespace xstage::moe
