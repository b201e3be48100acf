// The fused MegaMoE layer's one front door for decisions (CUTLASS's can_implement in spirit): a request (the
// problem, a schedule by name or automatic, the CTA pairing or automatic, the knobs) and the device's facts go
// in; why_not() says whether the kernel can run it, plan_layer() says what it will run: the schedule and its
// lead or wave size, the pairing, the kernel configuration, the symmetric window (buffer sizes) and why.
// The CLI, the C ABI (and through it the Python package) and FusedMoeLayer all ask here; nothing else
// decides a schedule or a pairing. Plain C++ (CPU-tested): the device comes in as DeviceFacts.
//
//   moe::MoeLayerRequest r;
//   r.problem = problem;
//   r.set_schedule("auto");                                   // or interleaved, expert_wave, pipelined_waves
//   const moe::MoeLayerPlan plan = moe::plan_layer(r, device_facts(device));  // InputError: why_not(r, ...)
//   moe::FusedMoeLayer layer(plan, runtime);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/device_facts.hpp"
#include "moe/kernel/configs.hpp"
#include "moe/kernel/status.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/schedule_kind.hpp"

namespace xstage::moe {

// The schedules a caller asks for by name (docs/MOE.md describes them): the one list of names.
struct NamedSchedule {
  const char* name;
  bool automatic;         // chosen per layer (choose_schedule, schedule/auto_schedule.hpp)
  MoeScheduleKind kind;   // else this schedule,
  int wave_lag;           // with this expert-wave lag λ
};
inline constexpr NamedSchedule kNamedSchedules[] = {
    {"auto", true, MoeScheduleKind::interleaved, 0},
    {"interleaved", false, MoeScheduleKind::interleaved, 0},
    {"expert_wave", false, MoeScheduleKind::expert_wave, 0},
    {"pipelined_waves", false, MoeScheduleKind::expert_wave, 1},
};
// The schedule of that name; InputError listing the names otherwise.
const NamedSchedule& named_schedule(std::string_view name);
// The name of a schedule kind run without a lag ("interleaved", "expert_wave").
const char* schedule_name(MoeScheduleKind kind);

struct MoeLayerRequest {
  MoeProblem problem;  // b_m = 128, b_n = 128 or 256 (default_tile_n)
  // true: schedule, wave_lag, cluster_n and cluster_m are chosen for the problem (choose_schedule: the lockstep
  // makespan, mainloop factors, a routing-skew hedge, the X-Stage audit's stall and the weight re-reads, at the
  // balanced load and H200's calibrated M_X); the four fields below are then ignored.
  bool automatic = false;
  MoeScheduleKind schedule = MoeScheduleKind::interleaved;
  int wave_lag = 0;      // expert-wave λ: 0 = the paper's waves, 1 = pipelined waves (scheduler.hpp)
  int cluster_n = 0;     // CTAs sharing A along N: 1, 2, or 0 = automatic_cluster_n (schedule_host.hpp)
  int cluster_m = 1;     // 2: M-pairs on 256-row scheduler rows (scheduler.hpp's MixedPairTiling)
  int D_rows = 0;        // interleaved lead D; 0 = interleave_lead_rows (schedule_host.hpp)
  int wave_experts = 0;  // expert-wave size; 0 = wave_size_experts (scheduler.hpp)
  double capacity_slack = 0.0;  // dispatch capacity = expected load × slack (>= 1); 0 = worst case (never overflows)
  double timeout_s = 10.0;      // every device-side wait

  // Sets automatic, schedule and wave_lag from a named schedule (named_schedule).
  void set_schedule(std::string_view name);
};

// What the fused layer runs for a request on a device.
struct MoeLayerPlan {
  MoeProblem problem;  // as the kernel runs it: b_m = 256 with M-pairs (their scheduler rows)
  bool automatic = false;
  MoeScheduleKind schedule = MoeScheduleKind::interleaved;
  int wave_lag = 0;    // expert-wave only (0 for the interleaved schedule)
  int cluster_n = 1, cluster_m = 1;
  int grid = 0;        // CTAs: one per SM
  int D_rows = 1, wave_experts = 1;
  MegaMoeConfigId config{};
  SymmetricWindow window;  // the layer's symmetric window on each rank: window.total_bytes
  double timeout_s = 10.0;
  std::string reason;      // why this schedule: choose_schedule's reason, or "as configured"

  // "megamoe-interleaved D=11 128x256 pairs", "megamoe-auto: expert-wave W=3 128x256", ...
  std::string name() const;
};

// Empty when the kernel can run the request on `device`, else why not (in the request's terms). A device
// that is not known (DeviceFacts{}: a check without a GPU) leaves out what depends on it (the SM count's
// parity for CTA pairs); plan_layer checks it. (The architecture is the layer's check: not sm_90 is a
// PlatformError, not a bad request.)
std::string why_not(const MoeLayerRequest& request, const DeviceFacts& device);

// The plan for a request on a known device; InputError with why_not's reason when the kernel cannot run it.
MoeLayerPlan plan_layer(const MoeLayerRequest& request, const DeviceFacts& device);

}  // namespace xstage::moe
