// The host side of one fused op's call protocol (comm/device_status.hpp, comm/device/call_epoch.cuh): the
// failure record the kernels fill (host-mapped, so the host reads it without synchronising), the op's
// sticky abort flag and its call counter (device memory, advanced by the kernels themselves).
//
// An op enqueues its calls with no host synchronisation; afterwards, whenever it likes, the caller asks
// poll(): nothing happens while all is well, and once a device-side wait of any earlier call has failed it
// gets the record (the op turns it into an error naming the wait).
#pragma once

#include <cstdint>
#include <optional>

#include "comm/device_status.hpp"

namespace xstage::comm {

class CallState {
 public:
  // `rank` goes into the failure record; every device-side wait of the op gives up after `timeout_s`.
  CallState(int rank, double timeout_s);
  ~CallState();
  CallState(const CallState&) = delete;
  CallState& operator=(const CallState&) = delete;

  WaitContext wait_context() const;
  CallEpochView epoch_view() const;
  double timeout_s() const { return timeout_s_; }

  // Non-blocking: the failure record once a kernel of the op has written one (it stays there), else nullopt.
  // Reflects whatever the device has written so far; after a stream synchronisation, everything up to it.
  std::optional<DeviceStatus> failure() const;
  // Blocking (tests, reports): calls the device has completed.
  std::uint32_t calls_done() const;

 private:
  double timeout_s_;
  int rank_;
  DeviceStatus* status_ = nullptr;      // host-mapped
  std::uint32_t* words_ = nullptr;      // device: [0] aborted, [1] calls_done, [2] ctas_done
};

}  // namespace xstage::comm
