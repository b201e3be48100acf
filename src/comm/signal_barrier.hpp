// Host side of the bounded LSA signal barrier (src/comm/signal_barrier.cuh).
#pragma once

#include <memory>

#include "comm/call_state.hpp"
#include "comm/runtime.hpp"
#include "comm/signal_barrier.cuh"

namespace xstage::comm {

class SignalBarrier {
 public:
  // Collective: every rank constructs its barrier together. A wait gives up after `timeout_s`.
  explicit SignalBarrier(Runtime& rt, double timeout_s = 5.0);
  SignalBarrier(const SignalBarrier&) = delete;
  SignalBarrier& operator=(const SignalBarrier&) = delete;

  // Stream-ordered barrier: a one-thread kernel fences, signals every peer and waits (bounded). The call
  // counter lives on the device, so a captured barrier replays correctly.
  void sync_on_stream(cudaStream_t stream);
  // Non-blocking: throws xstage::Error naming the missing peer if any wait on this barrier timed out.
  void check() const;

 private:
  Runtime& rt_;
  std::unique_ptr<SymmetricBuffer> flags_;
  CallState state_;
  SignalBarrierView view_{};
};

}  // namespace xstage::comm
