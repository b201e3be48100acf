// Which tile schedule the fused MegaMoE kernel runs (schedule/scheduler.hpp has both): a plain C++ name that
// the CUDA-free planner (auto_schedule.hpp) and the kernel's launch parameters (kernel/launch.hpp) share.
#pragma once

namespace xstage::moe {

enum class MoeScheduleKind { expert_wave, interleaved };

inline const char* to_string(MoeScheduleKind kind) {
  return kind == MoeScheduleKind::expert_wave ? "expert-wave" : "interleaved";
}

}  // namespace xstage::moe
