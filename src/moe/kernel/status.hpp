// What the MegaMoE kernels report when something goes wrong on the device, and the messages the host makes
// of it. Two records: comm::DeviceStatus (what = MoeWait) for a failure that ends the layer (a wait that
// timed out, a capacity overflow: the ranks may disagree on the call count), and RouterInputReport for bad
// router ids, which the route kernel drops and counts while the call completes normally, so the layer goes
// on. Plain C++: the kernels write the records, the host and the CPU tests read them.
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
  expert_out_of_range, // RouterInputReport only: an id outside [0, E)
  duplicate_expert,    // RouterInputReport only: an id repeated in a token's top-k
};

// One sentence naming what failed, where, and what to do: "MegaMoE timed out after 10 s on rank 1, CTA 7
// waiting for dispatch_ready of scheduler row[12] = 64 (needs 128) in call 3".
std::string describe(const comm::DeviceStatus& status, double timeout_s);

// Router ids the route kernel dropped (kernel/call_kernels.hpp), in host-mapped memory: counters since the
// layer was built, and a sample of the first dropped pair since the host last took one.
struct RouterInputReport {
  std::uint32_t out_of_range;  // pairs with an expert id outside [0, E)
  std::uint32_t repeated;      // pairs repeating an expert that an earlier pair of the same token picked
  std::uint32_t claimed;       // the first dropped pair after the host re-armed the sample takes it (CAS 0 -> 1)
  std::uint32_t sampled;       // written last, after the sample: it is complete
  std::int32_t what;           // the sample: MoeWait::expert_out_of_range or duplicate_expert,
  std::int32_t token;          // the token (row of topk_ids),
  std::int32_t expert;         // the id it picked,
  std::int32_t E;              // the layer's experts,
  std::uint32_t epoch;         // in call `epoch` (1, 2, ...)
};

// What poll() says for `out_of_range` and `repeated` pairs dropped on `rank` since the last poll, with the
// first of them when it was sampled (`first` may be null): "MegaMoE bad router input on rank 0: 1 (token,
// expert) pair dropped since the last poll (...); the first: token 3 picks expert 263, outside [0, 16) ...".
std::string describe_dropped_router_ids(int rank, std::uint32_t out_of_range, std::uint32_t repeated,
                                        const RouterInputReport* first);

}  // namespace xstage::moe
