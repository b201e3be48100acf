// What the MegaMoE kernels report when something goes wrong on the device (comm::DeviceStatus::what),
// and the message the host makes of it. Plain C++: the kernels write the record, the host and the CPU
// tests read it.
#pragma once

#include <cstdint>
#include <string>

#include "comm/device_status.hpp"
#include "comm/peer_map.hpp"

namespace xstage::moe {

inline constexpr int kMaxEpRanks = comm::kMaxFusedOpRanks;  // the kernel's per-source arrays

// What a failed wait was waiting for, or what bad input a kernel found.
enum class MoeWait : std::int32_t {
  none = 0,
  peer_send_ready,   // index = peer rank: it never published its tokens for this call
  dispatch_ready,    // index = scheduler row p
  l1_done,           // index = ring slot
  l2_done,           // index = ring slot
  combine_arrived,   // index = -1: rows × n-blocks of this rank's tokens that owners have stored
  peer_finished,     // index = peer rank: it never finished reading this rank's previous call
  pipeline_full,     // index = stage: a consumer waiting for a stage's TMA loads
  pipeline_empty,    // index = stage: the producer waiting for the consumers to free a stage
  staging_full,      // index = slot: a storer waiting for a Linear-2 tile in the staging buffer
  staging_empty,     // index = slot: a consumer waiting for the storers to free the staging buffer
  capacity,          // not a wait: value = dispatch rows needed, target = capacity rows
  accumulator_layout,  // not a wait: the wgmma accumulator layout is not the one SwiGLU pairs columns in
  corrupt_routing,     // not a wait: index = source rank, value = a pair index outside [0, T·k) in its list
  expert_out_of_range, // bad router input: index = token, value = the expert id, target = E (ids must be < E)
  duplicate_expert,    // bad router input: index = token, value = the expert id it picked twice
};

// One sentence naming what failed, where, and what to do: "MegaMoE timed out after 10 s on rank 1, CTA 7
// waiting for dispatch_ready of scheduler row[12] = 64 (needs 128) in call 3".
std::string describe(const comm::DeviceStatus& status, double timeout_s);

}  // namespace xstage::moe
