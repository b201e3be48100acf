// The remote-store microbenchmarks of paper §3.1: K producers (one CTA per SM) each store B bytes per
// burst, then spend a gap G with no stores. Every burst of every producer is stamped with clock64:
//   start  — the burst's first store is about to issue,
//   issued — every store of the burst has been accepted by the SM (st.global: all warps passed the
//            barrier after their last store; TMA: cp.async.bulk.wait_group.read 0 returned, so the
//            shared-memory source may be reused),
//   end    — periodic: the gap is over; isolated: the burst is visible remotely (fence.sys / full
//            wait_group), which bounds the recovery before the next aligned burst.
// Periodic producers burst until a common deadline (%globaltimer), not for a fixed count: when the
// drain serves producers unevenly, fast producers would otherwise finish early and leave the slow
// ones a less contended link, and the steady state would be measured with fewer than K producers.
// The SM clock is measured in the same launch against %globaltimer, never taken from the spec sheet.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "calibration/measurement.hpp"
#include "comm/peer_map.hpp"

namespace xstage::calibration {

constexpr int kStoreThreads = 256;        // st.global producers: 8 warps of 16-byte stores
constexpr int kMaxBursts = 8192;          // stamps live in shared memory during the launch
constexpr std::int64_t kTmaChunkBytes = 16384;
constexpr std::int64_t kMaxTmaBurstBytes = 128 * 1024;  // the TMA source must fit in shared memory
constexpr std::int64_t kMaxBurstBytes = 1 << 20;

struct StoreBenchConfig {
  Mode mode = Mode::periodic;
  StorePath path = StorePath::st_global_16B;
  int K = 1;                    // producers (CTAs)
  std::int64_t B_bytes = 4096;  // per producer per burst; multiple of 16 (st.global: of 16*kStoreThreads)
  int max_bursts = 64;          // periodic: stamp capacity per producer; isolated: exactly this many bursts
  double duration_ns = 200e3;   // periodic: producers keep bursting until this long after the launch
  double gap_ns = 0;            // periodic: the gap after each burst
  double recovery_ns = 2000;    // isolated: idle time after a burst became visible
  // Where producer p stores: its region (`slots` slots of `slot_bytes`), local or on a peer; burst b
  // goes to slot b % slots. make_regions() lays regions out for a pairing.
  std::vector<void*> producer_region;
  std::int64_t slot_bytes = 0;  // >= B_bytes
  int slots = 2;
  std::uint32_t pattern_seed = 1;
};

struct StoreBenchRaw {
  std::vector<int> bursts;            // [K]: bursts each producer completed
  std::vector<std::uint64_t> stamps;  // [K][max_bursts][3]: start, issued, end (clock64)
  double sm_clock_mhz = 0;            // clock64 ticks per µs, measured in this launch
  double elapsed_ns = 0;              // launch wall-clock (CUDA events)
  // A periodic producer that filled its stamp capacity stopped before the deadline: rerun shorter.
  bool hit_capacity(const StoreBenchConfig& cfg) const;
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
  // Stamp capacity per producer for a burst of B bytes on `path` (shared memory holds stamps and,
  // for TMA, the source tile).
  int burst_capacity(StorePath path, std::int64_t B_bytes) const;

 private:
  int max_K_;
  int max_smem_st_ = 0, max_smem_tma_ = 0;  // dynamic shared memory each kernel may use
  std::uint64_t* d_stamps_ = nullptr;
  std::uint64_t* d_clock_ = nullptr;       // [4]: clock64 and globaltimer at start and end (CTA 0)
  int* d_bursts_ = nullptr;                // [max_K]: bursts completed per producer
  std::uint8_t** d_regions_ = nullptr;     // [max_K]: each producer's destination region
  unsigned* d_sync_ = nullptr;             // isolated bursts: [0] arrivals, [1] release epoch, [2..3] go time
  unsigned* d_error_ = nullptr;            // non-zero: a device-side wait timed out
  cudaEvent_t ev_start_ = nullptr, ev_stop_ = nullptr;
};

void validate(const StoreBenchConfig& cfg, int max_K);

// Region p of a buffer at `base` (the layout every rank's window and the local control share).
void* region_of(void* base, const StoreBenchConfig& cfg, int producer);

// Producer regions for one launch: all in `local_base` (the local-memory control), or producer p in
// region p of the window of its target rank under `pairing` (`window_by_rank[r]`: rank r's window as
// this process addresses it; unused entries may be null).
std::vector<void*> local_regions(void* local_base, const StoreBenchConfig& cfg);
std::vector<void*> remote_regions(const std::vector<void*>& window_by_rank, const StoreBenchConfig& cfg,
                                  comm::Pairing pairing, int rank, int world);

// Summarises stamps into one sample (the first eighth of every producer's bursts, at least 2, are
// warm-up and dropped):
//   periodic: G = median of (next start − issued): all producer time without stores, loop included,
//             so that T_period = T_iss + G holds burst by burst. T_period = the aggregate period
//             K / Σ_p 1/period_p, i.e. V over the aggregate store rate, which is what the drain sees
//             even when it serves producers unevenly; T_iss = T_period − G, the flow-consistent issue
//             time; p10/p90 are the spread of the producers' raw issue times.
//   isolated: a burst is issued when its last producer is: T_iss = median over bursts of the
//             slowest producer's issue time (p10/p90 over bursts).
BurstSample summarize(const StoreBenchConfig& cfg, const StoreBenchRaw& raw, Destination dest, int rank);

// What the receiver expects in region p of its window: written by a producer with this pattern seed
// and burst count, or by nobody (bursts = 0).
struct ExpectedRegion {
  std::uint32_t seed = 0;
  int bursts = 0;
};

// Counts 16-byte words of the window at `base` that differ from what the senders left there: in each
// region, the last burst that wrote each slot. Runs on the receiving GPU.
std::int64_t count_mismatches(const void* base, const StoreBenchConfig& cfg, const std::vector<ExpectedRegion>& expected,
                              cudaStream_t stream);

}  // namespace xstage::calibration
