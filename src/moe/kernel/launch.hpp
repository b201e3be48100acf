// The host side's door into the MegaMoE kernel: which configuration to run (kernel/configs.hpp; one
// translation unit per configuration, so the build parallelises and a change to one recompiles one) and
// everything one launch needs, as plain values, which the kernel's parameters embed as they are
// (kernel/params.hpp). Plain C++: the layer (moe/megamoe.cpp) never sees CuTe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "comm/device_status.hpp"
#include "moe/kernel/configs.hpp"
#include "moe/kernel/stats.hpp"
#include "moe/kernel/status.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/schedule_kind.hpp"

namespace xstage::moe {

struct MegaMoeLaunch {
  MoeProblem problem;              // b_m is 256 with M-pairs (their scheduler rows)
  SymmetricWindow window;
  char* local = nullptr;           // this rank's window
  char* peer[kMaxEpRanks] = {};    // every rank's window through LSA (peer[rank] = local)
  int rank = 0;
  int device = -1;                 // the layer's CUDA device (current at every launch)
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

// Instantiated for each MegaMoeConfigId in its own translation unit (kernel/launch.cuh has the body): builds
// the TMA descriptors and launches (cooperatively, every CTA resident: they wait on each other's counters) on
// `stream`.
template <MegaMoeConfigId kId>
void launch_megamoe(const MegaMoeLaunch& launch, cudaStream_t stream);

// Dispatches to the one above.
void launch_megamoe(MegaMoeConfigId id, const MegaMoeLaunch& launch, cudaStream_t stream);

}  // namespace xstage::moe
