#include "comm/signal_barrier.hpp"

#include <string>

#include "comm/device/call_epoch.cuh"
#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "common/launch.cuh"

namespace xstage::comm {

namespace {
__global__ void signal_barrier_kernel(SignalBarrierView view, CallEpochView calls) {
  const std::uint32_t epoch = current_call(calls);
  view.arrive_and_wait(epoch);
  finish_cta(calls, epoch, 1);
}
}  // namespace

SignalBarrier::SignalBarrier(Runtime& rt, double timeout_s) : rt_(rt), state_(rt.rank(), timeout_s) {
  if (rt_.world_size() > kMaxLsaRanks)
    throw PlatformError("the signal barrier supports up to " + std::to_string(kMaxLsaRanks) + " LSA ranks");
  flags_ = std::make_unique<SymmetricBuffer>(rt_, sizeof(std::uint32_t) * kMaxLsaRanks);
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(flags_->local(), 0, flags_->bytes(), rt_.stream()));
  view_.local_flags = static_cast<std::uint32_t*>(flags_->local());
  for (int p = 0; p < rt_.world_size(); ++p)
    view_.peer_flags[p] = static_cast<std::uint32_t*>(flags_->peer_pointer(p));
  view_.wait = state_.wait_context();
  view_.rank = rt_.rank();
  view_.world = rt_.world_size();
  rt_.barrier();  // every rank's flags are zeroed before anyone signals
}

void SignalBarrier::sync_on_stream(cudaStream_t stream) {
  launch_kernel(signal_barrier_kernel, 1, 1, 0, stream, view_, state_.epoch_view());
}

void SignalBarrier::check() const {
  if (const auto failure = state_.failure())
    throw Error(describe_timeout(*failure, state_.timeout_s(), "the device barrier", "the signal of peer rank", true));
}

}  // namespace xstage::comm
