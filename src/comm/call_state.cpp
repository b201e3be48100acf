#include "comm/call_state.hpp"

#include <cuda_runtime.h>

#include <cmath>

#include "common/cuda_check.hpp"
#include "common/error.hpp"

namespace xstage::comm {

CallState::CallState(int rank, double timeout_s) : timeout_s_(timeout_s), rank_(rank) {
  XSTAGE_REQUIRE(timeout_s > 0 && std::isfinite(timeout_s), "the device timeout must be a positive number of seconds");
  XSTAGE_CUDA_CHECK(cudaHostAlloc(&status_, sizeof(DeviceStatus), cudaHostAllocMapped));
  *status_ = DeviceStatus{};
  XSTAGE_CUDA_CHECK(cudaMalloc(&words_, 3 * sizeof(std::uint32_t)));
  XSTAGE_CUDA_CHECK(cudaMemset(words_, 0, 3 * sizeof(std::uint32_t)));
}

CallState::~CallState() {
  if (words_) cudaFree(words_);
  if (status_) cudaFreeHost(status_);
}

WaitContext CallState::wait_context() const {
  WaitContext ctx;
  XSTAGE_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ctx.status), status_, 0));
  ctx.aborted = words_;
  ctx.calls_done = words_ + 1;
  ctx.timeout_ns = static_cast<std::uint64_t>(timeout_s_ * 1e9);
  ctx.rank = rank_;
  return ctx;
}

CallEpochView CallState::epoch_view() const { return CallEpochView{words_ + 1, words_ + 2}; }

std::optional<DeviceStatus> CallState::failure() const {
  // The device writes the record over the bus while the host may read it: field by field, through volatile.
  const volatile DeviceStatus* v = status_;
  if (!v->failed) return std::nullopt;
  DeviceStatus s;
  s.failed = v->failed;
  s.what = v->what;
  s.rank = v->rank;
  s.cta = v->cta;
  s.index = v->index;
  s.value = v->value;
  s.target = v->target;
  s.epoch = v->epoch;
  s.claimed = v->claimed;
  return s;
}

std::uint32_t CallState::calls_done() const {
  std::uint32_t v = 0;
  XSTAGE_CUDA_CHECK(cudaMemcpy(&v, words_ + 1, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace xstage::comm
