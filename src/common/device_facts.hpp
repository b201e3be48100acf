// What xstage asks of a CUDA device: asked once per device in a process (thread-safe) and kept, so that
// per-call paths (the C ABI, the launchers) pay an array lookup, not a driver query. The struct is plain
// C++: CUDA-free planners (moe/plan.hpp) take it as an input, and their CPU tests make one up.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace xstage {

struct DeviceFacts {
  int device = -1;             // CUDA ordinal; -1: not known (a plan made without a GPU)
  int sm_count = 0;            // K_SM: the persistent kernels' grid; 0: not known
  int cc_major = 0, cc_minor = 0;
  int smem_optin_bytes = 0;    // the most dynamic shared memory one block may opt into

  bool known() const { return sm_count > 0; }
  bool sm90() const { return cc_major == 9 && cc_minor == 0; }
};

// The facts of CUDA device `device`. Throws PlatformError when CUDA is unusable on this machine (no driver,
// no GPU) or the device does not exist.
const DeviceFacts& device_facts(int device);
// The facts of the calling thread's current device.
const DeviceFacts& current_device_facts();

// Throws PlatformError unless `device` is an sm_90 GPU (xstage's kernels are sm_90a code), naming it.
void require_sm90(int device);

// A kernel's opt-in to more than the default 48 KiB of dynamic shared memory, which CUDA keeps per device and
// kernel: each launcher holds one as a function-local static next to its kernel, and ensure() asks CUDA only
// the first time on each device (devices 0..63; beyond, every time).
class SharedMemoryOptIn {
 public:
  // On `device`, which must be the current device: `kernel` (a __global__ function's address) may use `bytes`.
  // Throws PlatformError when the device offers less.
  void ensure(const void* kernel, std::size_t bytes, const DeviceFacts& device);
  // The same on the current device (asked of CUDA).
  void ensure(const void* kernel, std::size_t bytes) { ensure(kernel, bytes, current_device_facts()); }

 private:
  std::atomic<std::uint64_t> devices_{0};  // bit d: done on device d
};

}  // namespace xstage
