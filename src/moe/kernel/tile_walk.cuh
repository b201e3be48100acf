// The schedule and the tile walk as the kernel's CTAs see them (schedule/tile_walk.hpp has the code the CPU
// simulation shares): one instance per cluster of this launch, this CTA's share of each pair tile.
#pragma once

#include "moe/kernel/params.hpp"
#include "moe/schedule/tile_walk.hpp"

namespace xstage::moe {

template <class Schedule, class C>
using CtaTileWalk = TileWalk<Schedule, C::kClusterN, C::kClusterM>;

template <class Schedule, class C>
__device__ __forceinline__ Schedule make_device_schedule(const MegaMoeParams<C>& prm, const int* first_row) {
  return make_cluster_schedule<Schedule, C::kClusterN, C::kClusterM>(prm.problem, first_row, static_cast<int>(gridDim.x), prm.D_rows,
                                                                      prm.wave_experts, prm.wave_lag);
}

}  // namespace xstage::moe
