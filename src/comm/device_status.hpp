// What a fused op's kernels report when a device-side wait fails or they find bad input, and how the host
// reads it. Plain C++: the kernels write the record (comm/device/bounded_wait.cuh), the host and the CPU
// tests read it.
//
// The rule every fused op in xstage follows: no device-side wait is unbounded. A wait that passes its
// deadline records which counter, its value and the target in a host-mapped DeviceStatus and raises the
// op's `aborted` flag; from then on every wait of every kernel of that op returns at once, the kernels wind
// down on whatever their buffers hold (every address they compute stays in bounds), and the host's
// non-blocking poll() turns the record into an error that names the wait. No trap: the CUDA context stays
// usable, so the caller can report, tear down collectively and go on. Both the record and the flag are
// sticky: an op that failed once refuses further calls (its ranks no longer agree on the call count).
#pragma once

#include <cstdint>
#include <string>

namespace xstage::comm {

// One record per op instance and rank, in host-mapped memory; the first failing thread fills it.
struct DeviceStatus {
  std::uint32_t failed;  // written last, after the fields below: the host reads them once it sees it
  std::int32_t what;   // the op's own code (e.g. moe::MoeWait)
  std::int32_t rank;
  std::int32_t cta;
  std::int32_t index;  // which counter of that kind (a row, a slot, a peer), -1 for none
  std::uint32_t value; // what the counter held at the deadline
  std::uint32_t target;
  std::uint32_t epoch; // the call it happened in (1, 2, ...)
  std::uint32_t claimed;  // the first failing thread takes the record with a CAS on this
};

// Everything a bounded wait needs to report a timeout; kernels get it by value.
struct WaitContext {
  DeviceStatus* status = nullptr;           // host-mapped
  std::uint32_t* aborted = nullptr;         // device memory, sticky: a wait of this op has failed
  const std::uint32_t* calls_done = nullptr;  // device memory: the op's completed calls (CallEpoch)
  std::uint64_t timeout_ns = 0;
  int rank = 0;
};

// The op's call counter in device memory (comm/device/call_epoch.cuh): call e runs while calls_done = e - 1.
struct CallEpochView {
  std::uint32_t* calls_done = nullptr;  // never reset
  std::uint32_t* ctas_done = nullptr;   // reset by the last CTA of each call
};

// "<op> timed out after 10 s on rank 1, CTA 7 waiting for <what>[12] = 64 (needs 128) in call 3", with
// `peer_hint` appended when the awaited value is written by another rank that may never have got there.
std::string describe_timeout(const DeviceStatus& status, double timeout_s, const std::string& op, const std::string& what,
                             bool written_by_a_peer);

}  // namespace xstage::comm
