// The host side's door into the MegaMoE kernel: which configuration to run (one translation unit per
// configuration, megamoe_<config>.cu, so the build parallelises and a change to one recompiles one) and
// everything one launch needs, as plain values. Plain C++: the layer (moe/megamoe.cpp) never sees CuTe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "comm/device_status.hpp"
#include "moe/kernel/stats.hpp"
#include "moe/kernel/status.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/schedule_kind.hpp"

namespace xstage::moe {

// The kernel's shared-memory tables (kernel/config.hpp): local experts, and P · E_local per-source counts.
inline constexpr int kMegaMoeMaxLocalExperts = 512;
inline constexpr int kMegaMoeMaxCounts = 2048;

// The kernel configurations that are built (kernel/config.hpp): dtype, b_n, CTA pairs along N (_pairs) or
// M (_mpairs), each row's last Linear-2 block half full (_half).
enum class MegaMoeConfigId {
  bf16_n128,
  bf16_n128_pairs,
  bf16_n256,
  bf16_n256_pairs,
  bf16_n256_mpairs,
  bf16_n256_half,
  fp8_n256,
  fp8_n256_pairs,
  fp8_n256_mpairs,
  fp8_n256_half,
};
const char* to_string(MegaMoeConfigId id);

// The configuration for a layer: `cluster_n` CTAs share A along N, `cluster_m` share B along M (not both);
// `half_l2`: h is an odd multiple of 128 with b_n = 256. Throws InputError for a combination that is not built.
MegaMoeConfigId megamoe_config_id(DType dtype, int b_n, bool half_l2, int cluster_n, int cluster_m);

struct MegaMoeLaunch {
  MoeProblem problem;              // b_m is 256 with M-pairs (their scheduler rows)
  SymmetricWindow window;
  char* local = nullptr;           // this rank's window
  char* peer[kMaxEpRanks] = {};    // every rank's window through LSA (peer[rank] = local)
  int rank = 0;
  int grid = 0;                    // CTAs (one per SM)
  int tokens = 0;                  // T_s this call
  MoeScheduleKind schedule = MoeScheduleKind::interleaved;
  int D_rows = 1, wave_experts = 1, wave_lag = 0;
  const float* topk_weights = nullptr;  // [T_s][k]
  void* out = nullptr;                  // bf16 [T_s][h]
  const void* W1 = nullptr;             // packed (pack_w1), bf16 or e4m3 codes
  const void* W2 = nullptr;
  const float* W1_scales = nullptr;     // fp8 only
  const float* W2_scales = nullptr;
  comm::WaitContext wait;
  comm::CallEpochView calls;
  MoeKernelStats* stats = nullptr;      // kMoeStats builds
  MoeTrace trace;                       // kMoeStats builds
};

// Defined for each MegaMoeConfigId in its megamoe_<config>.cu: builds the TMA descriptors and launches
// (cooperatively, every CTA resident: they wait on each other's counters) on `stream`.
template <MegaMoeConfigId kId>
void launch_megamoe(const MegaMoeLaunch& launch, cudaStream_t stream);

// Dispatches to the one above.
void launch_megamoe(MegaMoeConfigId id, const MegaMoeLaunch& launch, cudaStream_t stream);

}  // namespace xstage::moe
