#include "comm/signal_barrier.hpp"

#include <string>

#include "common/cuda_check.hpp"
#include "common/error.hpp"

namespace xstage::comm {

namespace {
__global__ void signal_barrier_kernel(SignalBarrierView view, std::uint32_t epoch, std::uint64_t timeout_ns) {
  view.arrive_and_wait(epoch, timeout_ns);
}
}  // namespace

SignalBarrier::SignalBarrier(Runtime& rt) : rt_(rt) {
  if (rt_.world_size() > kMaxLsaRanks)
    throw PlatformError("the signal barrier supports up to " + std::to_string(kMaxLsaRanks) + " LSA ranks");
  flags_ = std::make_unique<SymmetricBuffer>(rt_, sizeof(std::uint32_t) * kMaxLsaRanks);
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(flags_->local(), 0, flags_->bytes(), rt_.stream()));
  XSTAGE_CUDA_CHECK(cudaMalloc(&error_, sizeof(DeviceWaitError)));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(error_, 0, sizeof(DeviceWaitError), rt_.stream()));
  view_.local_flags = static_cast<std::uint32_t*>(flags_->local());
  for (int p = 0; p < rt_.world_size(); ++p)
    view_.peer_flags[p] = static_cast<std::uint32_t*>(flags_->peer_pointer(p));
  view_.error = error_;
  view_.rank = rt_.rank();
  view_.world = rt_.world_size();
  rt_.barrier();  // every rank's flags are zeroed before anyone signals
}

SignalBarrier::~SignalBarrier() {
  if (error_) cudaFree(error_);
}

void SignalBarrier::sync_on_stream(cudaStream_t stream, std::uint64_t timeout_ns) {
  signal_barrier_kernel<<<1, 1, 0, stream>>>(view_, next_epoch(), timeout_ns);
  XSTAGE_CUDA_CHECK_LAUNCH();
}

void SignalBarrier::check() const {
  DeviceWaitError err{};
  XSTAGE_CUDA_CHECK(cudaMemcpy(&err, error_, sizeof err, cudaMemcpyDeviceToHost));
  if (err.timed_out)
    throw Error("device barrier timed out on rank " + std::to_string(rt_.rank()) + ": rank " +
                std::to_string(err.missing_peer) + " never signalled epoch " + std::to_string(err.epoch));
}

}  // namespace xstage::comm
