// Host side of the bounded LSA signal barrier (src/comm/signal_barrier.cuh).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/runtime.hpp"
#include "comm/signal_barrier.cuh"

namespace xstage::comm {

class SignalBarrier {
 public:
  explicit SignalBarrier(Runtime& rt);
  ~SignalBarrier();
  SignalBarrier(const SignalBarrier&) = delete;
  SignalBarrier& operator=(const SignalBarrier&) = delete;

  // The view kernels take by value; `next_epoch()` gives the epoch for the next barrier instance.
  const SignalBarrierView& view() const { return view_; }
  std::uint32_t next_epoch() { return ++epoch_; }

  // Stream-ordered barrier: a one-thread kernel fences, signals every peer and waits (bounded).
  void sync_on_stream(cudaStream_t stream, std::uint64_t timeout_ns = 5'000'000'000ull);
  // Throws xstage::Error naming the missing peer if any wait on this barrier timed out.
  void check() const;

 private:
  Runtime& rt_;
  std::unique_ptr<SymmetricBuffer> flags_;
  DeviceWaitError* error_ = nullptr;
  SignalBarrierView view_{};
  std::uint32_t epoch_ = 0;
};

}  // namespace xstage::comm
