// The MegaMoE kernel's own account of where a call's time went, as a compile-time policy: the counters
// below are compiled into the kernel only in an instrumented build (CMake -DXSTAGE_MOE_STATS=ON, which
// defines XSTAGE_MOE_STATS=1 for every MegaMoE translation unit); the default build has none of their
// global atomics or timer reads. Plain C++, so the host can read the record and know whether it exists.
#pragma once

#include <cstdint>

#ifndef XSTAGE_MOE_STATS
#define XSTAGE_MOE_STATS 0
#endif

namespace xstage::moe {

inline constexpr bool kMoeStats = XSTAGE_MOE_STATS != 0;

// Per-call totals over all CTAs (device memory, zeroed per call), cycles from clock64: where the time goes.
struct MoeKernelStats {
  unsigned long long peer_bytes;            // bytes pulled from (dispatch) and stored to (combine) other ranks
  unsigned long long consumer_cycles;       // consumer warpgroup 0: start of its first tile to end of its last
  unsigned long long staging_wait_cycles;   // ... of which waiting for a free staging slot: the combine stores'
                                            // back-pressure on the tensor cores
  unsigned long long storer_drain_cycles;   // storer in fence.sc.sys after each tile: its stores completing (T_RS)
  unsigned long long producer_wait_cycles;  // producer waiting on dispatch_ready / l1_done / l2_done
  unsigned long long tail_cycles;           // roles done -> reduction done (other ranks' combine + the reduction)
  // K_act, measured: CTAs whose storers are draining an L2 tile (staging read -> stores complete) at the
  // moment another starts one, itself included; summed over L2 tiles, and the most seen.
  unsigned long long draining_now;          // live count during the kernel
  unsigned long long burst_overlap_sum;
  unsigned long long burst_overlap_max;
  // %globaltimer (ns, one clock for all SMs): the earliest CTA entry and first tile start are kept as their
  // bitwise complements under atomicMax (the record starts zeroed), the last tile end and kernel end as is.
  unsigned long long kernel_start_not_ns, first_tile_not_ns, last_tile_end_ns, kernel_end_ns;
  // %globaltimer per CTA (consumer warpgroup 0): first tile start to last tile end, summed over CTAs (the
  // clock64 total above converted at the SM clock measured afterwards is only as good as that clock), and the
  // earliest CTA's last tile end (complemented, as above): how unevenly the CTAs finish.
  unsigned long long consumer_ns, first_cta_done_not_ns;
};

// Per-tile trace of one call (instrumented builds only; paper Fig. 9, Fig. 10, Table 2). SM cycle stamps
// (clock64); each CTA's stamps convert to one timeline through its two anchors (%globaltimer and clock64 read
// together at its start and at its end), with the frequency they give.
struct MoeTileRecord {     // one tile of a CTA's walk, by consumer warpgroup 0's first thread
  std::uint32_t stage;     // 1 = Linear-1, 2 = Linear-2
  std::uint32_t row;       // scheduler row
  long long mainloop_start, mainloop_end;  // first stage awaited -> last wgmma done
  long long epilogue_end;  // ring written and l1_done released (L1), or tile staged (L2)
  long long staging_wait;  // L2: cycles waiting for a free staging slot (the stall Δt reaching the MMA)
  // L1 only (0 for L2): the epilogue's phases after mainloop_end. stored: SwiGLU done and the ring stores
  // issued; fenced: this thread's fence done (its stores visible); then the consumer warpgroups' barrier and
  // the release until epilogue_end.
  long long l1_stored, l1_fenced;
};
// One Linear-2 tile's stores by one storer warp (its first lane), in its phases: T_RS = drained - staged.
// Compact: the stamps after `staged` are cycles since it (a tile's drain is far below 2^32 cycles).
inline constexpr int kTracedStorerWarps = 2;  // records per tile: the storer warps (kernel/config.hpp)
struct MoeDrainRecord {
  long long staged;        // the tile is in the staging buffer (staging_full observed)
  std::uint32_t loaded;    // + its RowSources have arrived (warp 0 also counted K_act first: two L2 atomics)
  std::uint32_t issued;    // + its last store issued (the loop reading staged rows and storing them)
  std::uint32_t drained;   // + its stores complete: after the system-scope fence
  std::uint32_t released;  // + the per-rank counts and l2_done released
};
struct MoeCtaAnchor {
  unsigned long long start_ns, start_clock, end_ns, end_clock;
  std::uint32_t tiles, l2_tiles;  // records written
};
// Where a CTA's records go: tiles[cta·capacity + i], drains[(cta·capacity + j)·kTracedStorerWarps + warp],
// anchors[cta].
struct MoeTrace {
  MoeTileRecord* tiles = nullptr;
  MoeDrainRecord* drains = nullptr;
  MoeCtaAnchor* anchors = nullptr;
  int capacity = 0;  // records per CTA (tiles beyond it are not recorded)
};

}  // namespace xstage::moe
