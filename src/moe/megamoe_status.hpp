// What the MegaMoE kernel reports when something goes wrong on the device, and its message. Plain C++:
// the kernel writes the record (megamoe_device.cuh), the host and the CPU tests read it.
#pragma once

#include <cstdint>
#include <string>

namespace xstage::moe {

inline constexpr int kMaxEpRanks = 8;  // one NVLink domain of H200s; the kernel's per-source arrays

// What a failed wait was waiting for (MoeDeviceStatus::what).
enum class MoeWait : std::int32_t {
  none = 0,
  peer_send_ready,   // index = peer rank: it never published its tokens for this call
  dispatch_ready,    // index = scheduler row p
  l1_done,           // index = ring slot
  l2_done,           // index = ring slot
  combine_arrived,   // index = -1: rows × n-blocks of this rank's tokens that owners have stored
  peer_finished,     // index = peer rank: it never finished reading this rank's previous call
  capacity,          // not a wait: value = dispatch rows needed, target = capacity rows
  accumulator_layout,  // not a wait: the wgmma accumulator layout is not the one SwiGLU pairs columns in
  corrupt_routing,     // not a wait: index = source rank, value = a pair index outside [0, T·k) in its list
};

// One record per rank, in host-mapped memory; the first failing thread fills it.
struct MoeDeviceStatus {
  std::uint32_t failed;
  std::int32_t what;
  std::int32_t rank;
  std::int32_t cta;
  std::int32_t index;
  std::uint32_t value;
  std::uint32_t target;
  std::uint32_t epoch;
};

// One sentence naming what failed, where, and what to do: "MegaMoE timed out after 10 s on rank 1, CTA 7
// waiting for dispatch_ready of scheduler row[12] = 64 (needs 128) in call 3".
std::string describe(const MoeDeviceStatus& status, double timeout_s);

}  // namespace xstage::moe
