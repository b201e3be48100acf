// Named hardware barriers of the forward kernel (user ids; CUTLASS adds its reserved offset).
#pragma once

#include <cutlass/arch/barrier.h>

namespace xstage::attention {

enum class FwdNamedBarrier : uint32_t {
  kEpilogue = 0,        // all consumer threads, around the shared-memory staging of O
  kTurnWarpGroup0 = 1,  // wgmma issue turns of consumer warpgroups 0, 1, 2 (ids 1..3)
};

// Round-robin issue turns among kGroups consumer warpgroups (a ping-pong for two): warpgroup w waits
// for its turn, issues its wgmma batches, then passes the turn to warpgroup w+1 (mod kGroups). Turn
// barrier w has 256 participants: warpgroup w syncing and warpgroup w-1 arriving. The last warpgroup
// hands warpgroup 0 the first turn (give_first_turn); warpgroup 0 takes one extra turn at the end
// (drain_turns) so that every barrier phase completes before the CTA exits.
template <int kGroups>
struct IssueTurns {
  static constexpr uint32_t kParticipants = 256;
  CUTE_DEVICE static void wait(int warp_group) {
    cutlass::arch::NamedBarrier::sync(kParticipants, uint32_t(FwdNamedBarrier::kTurnWarpGroup0) + uint32_t(warp_group));
  }
  CUTE_DEVICE static void pass(int warp_group) {
    const int next = warp_group + 1 == kGroups ? 0 : warp_group + 1;
    cutlass::arch::NamedBarrier::arrive(kParticipants, uint32_t(FwdNamedBarrier::kTurnWarpGroup0) + uint32_t(next));
  }
  CUTE_DEVICE static void give_first_turn(int warp_group) {
    if (warp_group == kGroups - 1) {
      cutlass::arch::NamedBarrier::arrive(kParticipants, uint32_t(FwdNamedBarrier::kTurnWarpGroup0));
    }
  }
  CUTE_DEVICE static void drain_turns(int warp_group) {
    if (warp_group == 0) wait(0);
  }
};

}  // namespace xstage::attention
