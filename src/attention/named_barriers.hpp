// Named hardware barriers of the forward kernel (user ids; CUTLASS adds its reserved offset).
#pragma once

#include <cutlass/arch/barrier.h>

namespace xstage::attention {

enum class FwdNamedBarrier : uint32_t {
  kEpilogue = 0,     // the 256 consumer threads around the shared-memory staging of O
  kTurnWarpGroup0 = 1,  // wgmma issue ping-pong between the two consumer warpgroups
  kTurnWarpGroup1 = 2,
};

constexpr uint32_t kConsumerThreads = 256;

// Ping-pong: warpgroup w waits for its turn, issues its wgmma batches, then passes the turn to the
// other warpgroup. Warpgroup 1 hands warpgroup 0 the first turn (named_barrier_give_first_turn);
// warpgroup 0 takes one extra turn at the end (named_barrier_drain_turns) so every barrier completes.
CUTE_DEVICE void named_barrier_wait_turn(int warp_group) {
  cutlass::arch::NamedBarrier::sync(kConsumerThreads,
                                    uint32_t(FwdNamedBarrier::kTurnWarpGroup0) + uint32_t(warp_group));
}
CUTE_DEVICE void named_barrier_pass_turn(int warp_group) {
  cutlass::arch::NamedBarrier::arrive(kConsumerThreads,
                                      uint32_t(FwdNamedBarrier::kTurnWarpGroup0) + uint32_t(1 - warp_group));
}
CUTE_DEVICE void named_barrier_give_first_turn(int warp_group) {
  if (warp_group == 1) {
    cutlass::arch::NamedBarrier::arrive(kConsumerThreads, uint32_t(FwdNamedBarrier::kTurnWarpGroup0));
  }
}
CUTE_DEVICE void named_barrier_drain_turns(int warp_group) {
  if (warp_group == 0) named_barrier_wait_turn(0);
}

}  // namespace xstage::attention
