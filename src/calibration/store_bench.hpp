// The remote-store microbenchmarks of paper §3.1: K producers (one CTA per SM) each store B bytes per
// burst, then spend a gap G with no stores. Every burst of every producer is stamped with clock64:
//   start  — the burst's first store is about to issue,
//   issued — every store of the burst has been accepted by the SM (st.global: all warps passed the
//            barrier after their last store; TMA: cp.async.bulk.wait_group.read 0 returned, so the
//            shared-memory source may be reused),
//   end    — periodic: the gap is over; isolated: the burst is visible remotely (fence.sys / full
//            wait_group), which bounds the recovery before the next aligned burst.
// The SM clock is measured in the same launch against %globaltimer, never taken from the spec sheet.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "calibration/measurement.hpp"

namespace xstage::calibration {

constexpr int kStoreThreads = 256;        // st.global producers: 8 warps of 16-byte stores
constexpr int kMaxBursts = 2048;          // stamps live in shared memory during the launch
constexpr std::int64_t kTmaChunkBytes = 16384;
constexpr std::int64_t kMaxTmaBurstBytes = 128 * 1024;  // the TMA source must fit in shared memory
constexpr std::int64_t kMaxBurstBytes = 1 << 20;

struct StoreBenchConfig {
  Mode mode = Mode::periodic;
  StorePath path = StorePath::st_global_16B;
  int K = 1;                    // producers (CTAs)
  std::int64_t B_bytes = 4096;  // per producer per burst; multiple of 16 (st.global: of 16*kStoreThreads)
  int n_bursts = 64;
  double gap_ns = 0;            // periodic: the gap after each burst
  double recovery_ns = 2000;    // isolated: idle time after a burst became visible
  void* dst = nullptr;          // destination: producer p writes slot (b % slots) of its region
  std::int64_t slot_bytes = 0;  // >= B_bytes
  int slots = 2;
  std::uint32_t pattern_seed = 1;
};

struct StoreBenchRaw {
  std::vector<std::uint64_t> stamps;  // [K][n_bursts][3]: start, issued, end (clock64)
  double sm_clock_mhz = 0;            // clock64 ticks per µs, measured in this launch
  double elapsed_ns = 0;              // launch wall-clock (CUDA events)
};

// Owns the device scratch (stamps, barrier words, error word) for launches up to max_K producers.
class StoreBench {
 public:
  explicit StoreBench(int max_K);
  ~StoreBench();
  StoreBench(const StoreBench&) = delete;
  StoreBench& operator=(const StoreBench&) = delete;

  // Validates `cfg` (InputError on bad K, B, G, bursts), launches, waits, returns the stamps.
  // `clock_mhz_for_gap` converts G to cycles; the measured gap is reported from the stamps.
  StoreBenchRaw run(const StoreBenchConfig& cfg, double clock_mhz_for_gap, cudaStream_t stream);

  int max_K() const { return max_K_; }

 private:
  int max_K_;
  std::uint64_t* d_stamps_ = nullptr;
  std::uint64_t* d_clock_ = nullptr;       // [4]: clock64 and globaltimer at start and end (CTA 0)
  unsigned* d_sync_ = nullptr;             // grid barrier: [0] arrivals, [1] release epoch, [2..3] go time
  unsigned* d_error_ = nullptr;            // non-zero: a device-side wait timed out
  cudaEvent_t ev_start_ = nullptr, ev_stop_ = nullptr;
};

void validate(const StoreBenchConfig& cfg, int max_K);

// Summarises stamps into one sample: medians over producers and the steady bursts (the first
// `warmup_bursts` of every producer are dropped).
BurstSample summarize(const StoreBenchConfig& cfg, const StoreBenchRaw& raw, Destination dest, int warmup_bursts,
                      int rank);

// Counts 16-byte words in a received region that differ from what producer stores of `cfg` leave
// there (the last burst that wrote each slot). Runs on the receiving GPU.
std::int64_t count_mismatches(const void* region, const StoreBenchConfig& cfg, cudaStream_t stream);

}  // namespace xstage::calibration
