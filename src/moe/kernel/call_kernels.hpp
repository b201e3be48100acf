// The small kernel a MegaMoE call runs before the main one, on the same stream (one launch, where there were
// four operations: a prologue kernel, a memset, the tokens' copy and a route kernel). Every block first
//   waits (bounded) until every peer has finished reading this rank's data of the previous call (its
//              peer_finished flag), so that this call may overwrite its counters, tokens and send lists;
// then the blocks
//   zero       this rank's readiness counters (every wait of the call counts from 0),
//   copy       the bf16 tokens into the window (an fp8 layer's are quantized there by a kernel of their own, after
//              this one), and
//   route      per expert (block e), the count and token-ordered list of this rank's (token, k) pairs (the owners
//              pull them), checking the router's ids on the way: a pair with an id outside [0, E), or repeating an
//              expert of an earlier pair of its token, is dropped (it adds nothing to the token's output) and
//              counted in the layer's RouterInputReport (kernel/status.hpp), never a timeout and never the end of
//              the layer;
// and the host's side of that report.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>

#include "comm/device_status.hpp"
#include "moe/kernel/status.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/problem.hpp"

namespace xstage::moe {

// tokens_bf16: the call's [tokens][h] bf16 tokens to copy (row pitch window.tokens.row_pitch_bytes), or nullptr
// (an fp8 layer). sm_count: the GPU's (sizes the copy).
void enqueue_call_start(const std::int32_t* topk_ids, const void* tokens_bf16, int tokens, const MoeProblem& problem, int rank,
                        int sm_count, char* local, const SymmetricWindow& window, RouterInputReport* report,
                        const comm::WaitContext& wait, const comm::CallEpochView& calls, cudaStream_t stream);

// One layer's RouterInputReport in host-mapped memory: the route kernel writes it, the host reads it without
// synchronising.
class RouterInputMonitor {
 public:
  explicit RouterInputMonitor(int rank);
  ~RouterInputMonitor();
  RouterInputMonitor(const RouterInputMonitor&) = delete;
  RouterInputMonitor& operator=(const RouterInputMonitor&) = delete;

  // The report as the route kernel addresses it.
  RouterInputReport* device() const { return device_; }
  // Non-blocking: describe_dropped_router_ids for the pairs dropped since the last take() (nullopt if none),
  // after which the sample is re-armed for the next ones.
  std::optional<std::string> take();

 private:
  int rank_;
  RouterInputReport* host_ = nullptr;
  RouterInputReport* device_ = nullptr;
  std::uint32_t taken_out_of_range_ = 0, taken_repeated_ = 0;
};

}  // namespace xstage::moe
