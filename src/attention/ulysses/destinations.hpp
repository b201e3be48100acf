// The cross-rank contract of the fused Ulysses kernels: where the fused epilogue (epilogue_all_to_all.hpp)
// writes (every rank's output window and arrival counter, the call protocol's state) and, on the path that hides
// both all-to-alls, which input chunks the mainloop's producer waits for (InputArrivals). Plain C++: the layer's
// host side builds them, the kernel reads them.
#pragma once

#include <cstdint>

#include "attention/flash_fwd_params.hpp"
#include "attention/ulysses/layout.hpp"
#include "comm/device_status.hpp"
#include "comm/peer_map.hpp"

namespace xstage::attention {

// The two ways the epilogue stores a tile at its owner (comm/device/remote_store.cuh).
enum class A2AStorePath { tma, st_global };
const char* to_string(A2AStorePath path);

// What a failed wait of the fused Ulysses kernels was waiting for (comm::DeviceStatus::what).
//   arrivals  the output rows of every rank (index -1);
//   inputs    an input chunk's arrival flag (index: its flag, InputChunks);
//   start     the start-of-call barrier of fused_both (index: the rank that did not arrive).
enum class UlyssesWait : std::int32_t { none = 0, arrivals = 1, inputs = 2, start = 3 };

inline constexpr int kMaxUlyssesRanks = comm::kMaxFusedOpRanks;

struct AllToAllDestinations {
  UlyssesShape shape;
  int rank = 0;
  void* window[kMaxUlyssesRanks] = {};            // bf16 [2·B][Ms][H][d] on rank j (LSA pointer, or local)
  std::uint32_t* arrived[kMaxUlyssesRanks] = {};  // rank j's arrival counter (row-heads, monotone)
  comm::CallEpochView calls;
  comm::WaitContext wait;
  bool wait_for_arrivals = true;  // false for virtual ranks (the copy-out kernel after every rank's waits)
};

// The input chunks the attention kernel waits for before each TMA load of Q, K and V (fused_both): flags[i] counts
// the pusher's units of chunk i that have arrived (the start of every call resets them); the chunk is there at
// target(i), InputChunks::arrival_target. flags == nullptr: every input is there already (every other path).
//
// The rank's own rows (InPlaceRows) are read from its own input instead: `own_q`, `own_k`, `own_v` point at its first
// own head in its sequence-sharded [B][Ms][H][d] inputs (strides `own_strides`), which hold the sequence's rows
// [in_place.first(rank), in_place.end(rank)); `in_place` says which tiles and blocks read there, and the chunks only
// they cover are never waited for (`in_place_chunks`). own_q == nullptr: every row from the inbox.
struct InputArrivals {
  const std::uint32_t* flags = nullptr;  // [B][Hp][InputChunks::per_batch()], in this rank's memory
  InputChunks chunks;
  comm::WaitContext wait;
  int reserved_sms = 0;       // SMs the attention kernel leaves to the pusher: it runs on the others
  bool system_scope = false;  // written by peers (real ranks): acquire at system scope
  int rank = 0;               // the receiver
  InPlaceRows in_place;
  std::uint64_t in_place_chunks = 0;  // the receiver's chunks never pushed (InPlaceRows::read_in_place)
  const void* own_q = nullptr;
  const void* own_k = nullptr;
  const void* own_v = nullptr;
  BmhdStrides own_strides;

  // The value of the flag of chunk `index_in_batch` (InputChunks::in_batch) once it is there.
  XSTAGE_HD constexpr std::uint32_t target(int index_in_batch) const { return chunks.arrival_target(index_in_batch % chunks.per_source); }
};

}  // namespace xstage::attention
