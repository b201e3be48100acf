// Where the fused Ulysses epilogue (epilogue_all_to_all.hpp) writes: every rank's output window and arrival
// counter, and the call protocol's state. Plain C++: the layer's host side builds it, the kernel reads it.
#pragma once

#include <cstdint>

#include "attention/ulysses/layout.hpp"
#include "comm/device_status.hpp"
#include "comm/peer_map.hpp"

namespace xstage::attention {

// The two ways the epilogue stores a tile at its owner (comm/device/remote_store.cuh).
enum class A2AStorePath { tma, st_global };
const char* to_string(A2AStorePath path);

// What a failed wait of the fused Ulysses kernels was waiting for (comm::DeviceStatus::what).
enum class UlyssesWait : std::int32_t { none = 0, arrivals = 1 };

inline constexpr int kMaxUlyssesRanks = comm::kMaxFusedOpRanks;

struct AllToAllDestinations {
  UlyssesShape shape;
  int rank = 0;
  void* window[kMaxUlyssesRanks] = {};            // bf16 [2·B][Ms][H][d] on rank j (LSA pointer, or local)
  std::uint32_t* arrived[kMaxUlyssesRanks] = {};  // rank j's arrival counter (row-heads, monotone)
  comm::CallEpochView calls;
  comm::WaitContext wait;
  bool wait_for_arrivals = true;  // false for virtual ranks (a separate kernel waits)
};

}  // namespace xstage::attention
