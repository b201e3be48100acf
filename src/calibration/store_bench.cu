#include "calibration/store_bench.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/device_clock.cuh"
#include "common/stats.hpp"
#include "common/error.hpp"
#include "common/launch.cuh"

namespace xstage::calibration {

namespace {

constexpr int kTmaThreads = 32;
// Every producer CTA asks for this much shared memory so that no two share an SM: K producers are K SMs.
constexpr int kOneCtaPerSmSmemBytes = 120 * 1024;
constexpr std::uint64_t kGridWaitTimeoutNs = 2'000'000'000ull;
constexpr std::uint64_t kAlignLeadNs = 3000;  // aligned bursts start this long after the last arrival

struct KernelArgs {
  std::uint8_t* const* region;  // [K]
  std::int64_t slot_bytes;
  int slots;
  std::int64_t B_bytes;
  int max_bursts;
  std::uint64_t duration_ns;
  int isolated;
  std::uint64_t gap_cycles;
  std::uint64_t recovery_ns;
  std::uint32_t seed;
  int K;
  std::uint64_t* stamps;
  std::uint64_t* clock_ref;
  int* bursts;
  unsigned* sync;
  unsigned* error;
};

// The 16-byte word that producer p stores at vector index i of burst b: cheap to generate inside the
// store loop, and distinct across producers, bursts and offsets, so the receiver can verify it.
__host__ __device__ __forceinline__ uint4 pattern_word(std::uint32_t seed, int p, int b, std::int64_t i) {
  const std::uint32_t w0 = seed ^ (static_cast<std::uint32_t>(p) * 0x9E3779B1u) ^
                           (static_cast<std::uint32_t>(b) * 0x85EBCA77u);
  const auto ii = static_cast<std::uint32_t>(i);
  return make_uint4(w0 + ii, w0 ^ (ii * 2654435761u), ii + static_cast<std::uint32_t>(p), static_cast<std::uint32_t>(b));
}

__device__ __forceinline__ void spin_cycles(std::uint64_t from, std::uint64_t cycles) {
  while (sm_clock() - from < cycles) {
  }
}

// Thread 0 of every producer: wait until all K producers arrived for burst b, then until a common
// %globaltimer deadline, so that every producer starts the burst together. Bounded; false on timeout.
__device__ bool aligned_start(const KernelArgs& a, int b) {
  unsigned* arrivals = a.sync;
  unsigned* released = a.sync + 1;
  auto* go_ns = reinterpret_cast<unsigned long long*>(a.sync + 2);
  const unsigned target = static_cast<unsigned>(a.K) * static_cast<unsigned>(b + 1);
  if (atomicAdd(arrivals, 1u) == target - 1) {
    *reinterpret_cast<volatile unsigned long long*>(go_ns) = global_timer_ns() + kAlignLeadNs;
    __threadfence();
    atomicExch(released, static_cast<unsigned>(b + 1));
  } else {
    const std::uint64_t deadline = global_timer_ns() + kGridWaitTimeoutNs;
    while (true) {
      unsigned seen;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(released) : "memory");
      if (seen >= static_cast<unsigned>(b + 1)) break;
      if (global_timer_ns() > deadline) {
        atomicExch(a.error, 1u);
        return false;
      }
    }
  }
  const std::uint64_t go = *reinterpret_cast<volatile unsigned long long*>(go_ns);
  while (global_timer_ns() < go) {
  }
  return true;
}

__device__ __forceinline__ void record_clock_ref(const KernelArgs& a, int which) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    a.clock_ref[2 * which] = sm_clock();
    a.clock_ref[2 * which + 1] = global_timer_ns();
  }
}

__device__ __forceinline__ void flush_stamps(const KernelArgs& a, const std::uint64_t* s_stamps, int bursts_done) {
  std::uint64_t* out = a.stamps + static_cast<std::int64_t>(blockIdx.x) * a.max_bursts * 3;
  for (int i = threadIdx.x; i < bursts_done * 3; i += blockDim.x) out[i] = s_stamps[i];
  if (threadIdx.x == 0) a.bursts[blockIdx.x] = bursts_done;
}

// Thread 0 of a periodic producer, before burst b: keep going until the deadline (at least 2 bursts).
// The deadline is read from %globaltimer, never from memory: a load issued behind a queue of
// back-pressured remote stores would wait for them and hide their cost in the gap.
__device__ __forceinline__ bool periodic_continue(std::uint64_t deadline_ns, int b) {
  return b < 2 || global_timer_ns() < deadline_ns;
}

// Plain 16-byte st.global from registers: 8 warps, coalesced, one region per producer.
__global__ void __launch_bounds__(kStoreThreads, 1) st_global_bench_kernel(KernelArgs a) {
  extern __shared__ std::uint64_t s_stamps[];
  __shared__ int s_abort;
  const int p = blockIdx.x;
  const int tid = threadIdx.x;
  const std::int64_t nvec = a.B_bytes / 16;
  auto* region = reinterpret_cast<uint4*>(a.region[p]);
  if (tid == 0) s_abort = 0;
  record_clock_ref(a, 0);
  const std::uint64_t deadline_ns = global_timer_ns() + a.duration_ns;  // launch skew across CTAs: ~µs

  int b = 0;
  for (; b < a.max_bursts; ++b) {
    if (tid == 0) s_abort = a.isolated ? !aligned_start(a, b) : !periodic_continue(deadline_ns, b);
    __syncthreads();
    if (s_abort) break;
    const std::uint64_t t_start = sm_clock();
    uint4* out = region + static_cast<std::int64_t>(b % a.slots) * (a.slot_bytes / 16);
#pragma unroll 4
    for (std::int64_t i = tid; i < nvec; i += kStoreThreads) out[i] = pattern_word(a.seed, p, b, i);
    __syncthreads();  // every warp's stores have issued
    std::uint64_t t_issued = 0, t_end = 0;
    if (tid == 0) t_issued = sm_clock();
    if (a.isolated) {
      __threadfence_system();  // each thread waits for its own stores to become visible
      __syncthreads();
      if (tid == 0) {
        t_end = sm_clock();
        const std::uint64_t until = global_timer_ns() + a.recovery_ns;
        while (global_timer_ns() < until) {
        }
      }
    } else if (tid == 0) {
      spin_cycles(t_issued, a.gap_cycles);
      t_end = sm_clock();
    }
    if (tid == 0) {
      s_stamps[3 * b] = t_start;
      s_stamps[3 * b + 1] = t_issued;
      s_stamps[3 * b + 2] = t_end;
    }
  }
  record_clock_ref(a, 1);
  __syncthreads();
  flush_stamps(a, s_stamps, b);
}

// TMA bulk stores from shared memory: one issuing thread per producer, like a TMA-store epilogue.
__global__ void __launch_bounds__(kTmaThreads, 1) tma_bulk_bench_kernel(KernelArgs a) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  std::uint64_t* s_stamps = reinterpret_cast<std::uint64_t*>(smem + a.B_bytes);
  const int p = blockIdx.x;
  const int tid = threadIdx.x;
  // The source tile: burst 0's pattern, written once with generic stores, then made visible to the
  // async (TMA) proxy.
  for (std::int64_t i = tid; i < a.B_bytes / 16; i += kTmaThreads)
    reinterpret_cast<uint4*>(smem)[i] = pattern_word(a.seed, p, 0, i);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
  record_clock_ref(a, 0);
  const std::uint64_t deadline_ns = global_timer_ns() + a.duration_ns;

  int b = 0;
  if (tid == 0) {
    const auto src = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
    std::uint8_t* region = a.region[p];
    for (; b < a.max_bursts; ++b) {
      if (a.isolated ? !aligned_start(a, b) : !periodic_continue(deadline_ns, b)) break;
      std::uint8_t* out = region + static_cast<std::int64_t>(b % a.slots) * a.slot_bytes;
      const std::uint64_t t_start = sm_clock();
      for (std::int64_t off = 0; off < a.B_bytes; off += kTmaChunkBytes) {
        const auto bytes = static_cast<std::uint32_t>(min(kTmaChunkBytes, a.B_bytes - off));
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(out + off),
                     "r"(src + static_cast<std::uint32_t>(off)), "r"(bytes)
                     : "memory");
      }
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // source reusable: issue done
      const std::uint64_t t_issued = sm_clock();
      std::uint64_t t_end;
      if (a.isolated) {
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // writes performed
        __threadfence_system();
        t_end = sm_clock();
        const std::uint64_t until = global_timer_ns() + a.recovery_ns;
        while (global_timer_ns() < until) {
        }
      } else {
        spin_cycles(t_issued, a.gap_cycles);
        t_end = sm_clock();
      }
      s_stamps[3 * b] = t_start;
      s_stamps[3 * b + 1] = t_issued;
      s_stamps[3 * b + 2] = t_end;
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  record_clock_ref(a, 1);
  // Broadcast how many bursts thread 0 completed, then flush.
  b = __shfl_sync(0xffffffffu, b, 0);
  flush_stamps(a, s_stamps, b);
}

__global__ void count_mismatches_kernel(const uint4* base, std::int64_t slot_vecs, int slots, std::int64_t nvec, int K,
                                        const ExpectedRegion* expected, int tma, unsigned long long* mismatches) {
  unsigned long long local = 0;
  const std::int64_t total = static_cast<std::int64_t>(K) * slots * nvec;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = idx % nvec;
    const int s = static_cast<int>((idx / nvec) % slots);
    const int p = static_cast<int>(idx / (nvec * slots));
    const int n = expected[p].bursts;
    if (s >= n) continue;  // this slot was never written
    // The last burst that wrote slot s (TMA producers store burst 0's tile every time).
    const int last_b = tma ? 0 : s + ((n - 1 - s) / slots) * slots;
    const uint4 want = pattern_word(expected[p].seed, p, last_b, i);
    const uint4 got = base[(static_cast<std::int64_t>(p) * slots + s) * slot_vecs + i];
    local += (got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w);
  }
  if (local) atomicAdd(mismatches, local);
}

std::size_t smem_bytes(const StoreBenchConfig& cfg) {
  const std::size_t stamps = sizeof(std::uint64_t) * 3 * static_cast<std::size_t>(cfg.max_bursts);
  const std::size_t need = cfg.path == StorePath::tma_bulk ? static_cast<std::size_t>(cfg.B_bytes) + stamps : stamps;
  return std::max<std::size_t>(need, kOneCtaPerSmSmemBytes);
}

}  // namespace

void validate(const StoreBenchConfig& cfg, int max_K) {
  auto fail = [](const std::string& m) { throw InputError(m); };
  if (cfg.K < 1 || cfg.K > max_K)
    fail("K (producers) must be in 1.." + std::to_string(max_K) + " (one per SM), got " + std::to_string(cfg.K));
  const std::int64_t quantum = cfg.path == StorePath::tma_bulk ? 16 : 16 * kStoreThreads;
  if (cfg.B_bytes < quantum || cfg.B_bytes % quantum != 0)
    fail("B (bytes per producer) must be a positive multiple of " + std::to_string(quantum) + " for " +
         model::to_string(cfg.path) + ", got " + std::to_string(cfg.B_bytes));
  const std::int64_t max_B = cfg.path == StorePath::tma_bulk ? kMaxTmaBurstBytes : kMaxBurstBytes;
  if (cfg.B_bytes > max_B)
    fail("B must be at most " + std::to_string(max_B) + " bytes for " + model::to_string(cfg.path) + ", got " +
         std::to_string(cfg.B_bytes));
  if (!(cfg.gap_ns >= 0) || cfg.gap_ns > 1e8) fail("gap G must be in [0, 1e8] ns, got " + std::to_string(cfg.gap_ns));
  if (cfg.max_bursts < 4 || cfg.max_bursts > kMaxBursts)
    fail("bursts per producer must be in 4.." + std::to_string(kMaxBursts) + ", got " + std::to_string(cfg.max_bursts));
  if (cfg.mode == Mode::periodic && !(cfg.duration_ns > 0 && cfg.duration_ns <= 1e9))
    fail("a periodic launch must run for (0, 1 s], got " + std::to_string(cfg.duration_ns) + " ns");
  if (cfg.slots < 1 || cfg.slot_bytes < cfg.B_bytes || cfg.slot_bytes % 16 != 0)
    fail("destination slots must hold a burst (slot_bytes >= B, multiple of 16)");
  if (cfg.producer_region.size() != static_cast<std::size_t>(cfg.K) ||
      std::any_of(cfg.producer_region.begin(), cfg.producer_region.end(), [](void* r) { return r == nullptr; }))
    fail("every one of the " + std::to_string(cfg.K) + " producers needs a destination region");
}

StoreBench::StoreBench(int max_K) : max_K_(max_K) {
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_stamps_, sizeof(std::uint64_t) * 3 * kMaxBursts * static_cast<std::size_t>(max_K)));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_clock_, sizeof(std::uint64_t) * 4));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_bursts_, sizeof(int) * static_cast<std::size_t>(max_K)));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_regions_, sizeof(std::uint8_t*) * static_cast<std::size_t>(max_K)));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_sync_, sizeof(unsigned) * 8));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_error_, sizeof(unsigned)));
  XSTAGE_CUDA_CHECK(cudaEventCreate(&ev_start_));
  XSTAGE_CUDA_CHECK(cudaEventCreate(&ev_stop_));
  // Opt in to all the dynamic shared memory a block may have, less each kernel's static share.
  const int optin = current_device_facts().smem_optin_bytes;
  cudaFuncAttributes st{}, tma{};
  XSTAGE_CUDA_CHECK(cudaFuncGetAttributes(&st, st_global_bench_kernel));
  XSTAGE_CUDA_CHECK(cudaFuncGetAttributes(&tma, tma_bulk_bench_kernel));
  max_smem_st_ = optin - static_cast<int>(st.sharedSizeBytes);
  max_smem_tma_ = optin - static_cast<int>(tma.sharedSizeBytes);
  static SharedMemoryOptIn st_opt_in, tma_opt_in;
  st_opt_in.ensure(reinterpret_cast<const void*>(st_global_bench_kernel), max_smem_st_);
  tma_opt_in.ensure(reinterpret_cast<const void*>(tma_bulk_bench_kernel), max_smem_tma_);
}

StoreBench::~StoreBench() {
  cudaFree(d_stamps_);
  cudaFree(d_clock_);
  cudaFree(d_bursts_);
  cudaFree(d_regions_);
  cudaFree(d_sync_);
  cudaFree(d_error_);
  cudaEventDestroy(ev_start_);
  cudaEventDestroy(ev_stop_);
}

StoreBenchRaw StoreBench::run(const StoreBenchConfig& cfg, double clock_mhz_for_gap, cudaStream_t stream) {
  validate(cfg, max_K_);
  const std::size_t smem = smem_bytes(cfg);
  const int max_smem = cfg.path == StorePath::tma_bulk ? max_smem_tma_ : max_smem_st_;
  if (smem > static_cast<std::size_t>(max_smem))
    throw InputError("B plus the stamps of " + std::to_string(cfg.max_bursts) + " bursts need " + std::to_string(smem) +
                     " bytes of shared memory; this GPU allows " + std::to_string(max_smem));
  KernelArgs a{};
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(d_regions_, cfg.producer_region.data(), sizeof(void*) * cfg.producer_region.size(),
                                    cudaMemcpyHostToDevice, stream));
  a.region = d_regions_;
  a.slot_bytes = cfg.slot_bytes;
  a.slots = cfg.slots;
  a.B_bytes = cfg.B_bytes;
  a.max_bursts = cfg.max_bursts;
  a.duration_ns = static_cast<std::uint64_t>(cfg.duration_ns);
  a.isolated = cfg.mode == Mode::isolated;
  a.gap_cycles = static_cast<std::uint64_t>(std::llround(cfg.gap_ns * clock_mhz_for_gap / 1000.0));
  a.recovery_ns = static_cast<std::uint64_t>(std::llround(cfg.recovery_ns));
  a.seed = cfg.pattern_seed;
  a.K = cfg.K;
  a.stamps = d_stamps_;
  a.clock_ref = d_clock_;
  a.bursts = d_bursts_;
  a.sync = d_sync_;
  a.error = d_error_;

  XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_sync_, 0, sizeof(unsigned) * 8, stream));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_error_, 0, sizeof(unsigned), stream));
  XSTAGE_CUDA_CHECK(cudaEventRecord(ev_start_, stream));
  if (cfg.path == StorePath::st_global_16B)
    launch_kernel(st_global_bench_kernel, cfg.K, kStoreThreads, smem, stream, a);
  else
    launch_kernel(tma_bulk_bench_kernel, cfg.K, kTmaThreads, smem, stream, a);
  XSTAGE_CUDA_CHECK(cudaEventRecord(ev_stop_, stream));
  XSTAGE_CUDA_CHECK(cudaEventSynchronize(ev_stop_));

  unsigned error = 0;
  XSTAGE_CUDA_CHECK(cudaMemcpy(&error, d_error_, sizeof error, cudaMemcpyDeviceToHost));
  if (error)
    throw Error("store benchmark: producers did not all arrive at an aligned burst within " +
                std::to_string(kGridWaitTimeoutNs / 1000000) + " ms (are all " + std::to_string(cfg.K) +
                " CTAs co-resident? another kernel may be occupying SMs)");

  StoreBenchRaw raw;
  raw.bursts.resize(static_cast<std::size_t>(cfg.K));
  XSTAGE_CUDA_CHECK(cudaMemcpy(raw.bursts.data(), d_bursts_, raw.bursts.size() * sizeof(int), cudaMemcpyDeviceToHost));
  // Copy only the stamps that were written: K rows of the longest producer's bursts.
  const std::size_t row = sizeof(std::uint64_t) * 3 * static_cast<std::size_t>(cfg.max_bursts);
  const std::size_t used = sizeof(std::uint64_t) * 3 * static_cast<std::size_t>(*std::max_element(raw.bursts.begin(), raw.bursts.end()));
  raw.stamps.resize(static_cast<std::size_t>(cfg.K) * cfg.max_bursts * 3);
  XSTAGE_CUDA_CHECK(cudaMemcpy2D(raw.stamps.data(), row, d_stamps_, row, used, static_cast<std::size_t>(cfg.K),
                                 cudaMemcpyDeviceToHost));
  std::uint64_t clock_ref[4];
  XSTAGE_CUDA_CHECK(cudaMemcpy(clock_ref, d_clock_, sizeof clock_ref, cudaMemcpyDeviceToHost));
  const double dt_ns = static_cast<double>(clock_ref[3] - clock_ref[1]);
  const double dclk = static_cast<double>(clock_ref[2] - clock_ref[0]);
  raw.sm_clock_mhz = dt_ns > 0 ? dclk / dt_ns * 1000.0 : clock_mhz_for_gap;
  float ms = 0;
  XSTAGE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_start_, ev_stop_));
  raw.elapsed_ns = ms * 1e6;
  return raw;
}

bool StoreBenchRaw::hit_capacity(const StoreBenchConfig& cfg) const {
  return cfg.mode == Mode::periodic && std::any_of(bursts.begin(), bursts.end(), [&](int n) { return n >= cfg.max_bursts; });
}

int StoreBench::burst_capacity(StorePath path, std::int64_t B_bytes) const {
  const std::int64_t free_bytes = path == StorePath::tma_bulk ? max_smem_tma_ - B_bytes : max_smem_st_;
  return static_cast<int>(std::clamp<std::int64_t>(free_bytes / static_cast<std::int64_t>(3 * sizeof(std::uint64_t)), 0, kMaxBursts));
}

BurstSample summarize(const StoreBenchConfig& cfg, const StoreBenchRaw& raw, Destination dest, int rank) {
  const double ns_per_cycle = 1000.0 / raw.sm_clock_mhz;
  auto stamps_of = [&](int p) { return raw.stamps.data() + static_cast<std::size_t>(p) * cfg.max_bursts * 3; };
  auto warmup_of = [](int n) { return std::max(2, n / 8); };
  BurstSample out;
  out.mode = cfg.mode;
  out.path = cfg.path;
  out.dest = dest;
  out.K = cfg.K;
  out.B_bytes = cfg.B_bytes;
  out.gap_ns_requested = cfg.mode == Mode::periodic ? cfg.gap_ns : 0.0;
  out.sm_clock_mhz = raw.sm_clock_mhz;
  out.rank = rank;
  std::int64_t total_bursts = 0;
  for (int n : raw.bursts) total_bursts += n;
  out.wall_bytes_per_ns = static_cast<double>(total_bursts) * static_cast<double>(cfg.B_bytes) / raw.elapsed_ns;

  std::vector<double> t_iss;
  if (cfg.mode == Mode::periodic) {
    std::vector<double> gap;
    double rate_sum = 0;  // Σ_p 1/period_p, bursts per ns
    int steady = 0;
    for (int p = 0; p < cfg.K; ++p) {
      const std::uint64_t* s = stamps_of(p);
      const int n = raw.bursts[static_cast<std::size_t>(p)];
      const int w = warmup_of(n);
      if (n - w < 3) throw Error("store benchmark: producer " + std::to_string(p) + " completed only " +
                                 std::to_string(n) + " bursts; the launch was too short to reach a steady state");
      rate_sum += (n - 1 - w) / (static_cast<double>(s[3 * (n - 1)] - s[3 * w]) * ns_per_cycle);
      for (int b = w; b + 1 < n; ++b) {
        t_iss.push_back(static_cast<double>(s[3 * b + 1] - s[3 * b]) * ns_per_cycle);
        gap.push_back(static_cast<double>(s[3 * (b + 1)] - s[3 * b + 1]) * ns_per_cycle);
      }
      steady += n - 1 - w;
    }
    out.T_period_ns = cfg.K / rate_sum;
    out.gap_ns = median(gap);
    out.T_iss_ns = out.T_period_ns - out.gap_ns;
    out.n_bursts = steady / cfg.K;
  } else {
    const int n = *std::min_element(raw.bursts.begin(), raw.bursts.end());
    for (int b = warmup_of(n); b < n; ++b) {
      double slowest = 0;
      for (int p = 0; p < cfg.K; ++p) {
        const std::uint64_t* s = stamps_of(p);
        slowest = std::max(slowest, static_cast<double>(s[3 * b + 1] - s[3 * b]) * ns_per_cycle);
      }
      t_iss.push_back(slowest);
    }
    out.T_iss_ns = median(t_iss);
    out.n_bursts = static_cast<int>(t_iss.size());
  }
  out.T_iss_p10_ns = quantile(t_iss, 0.1);
  out.T_iss_p90_ns = quantile(t_iss, 0.9);
  return out;
}

std::int64_t count_mismatches(const void* base, const StoreBenchConfig& cfg, const std::vector<ExpectedRegion>& expected,
                              cudaStream_t stream) {
  if (expected.size() != static_cast<std::size_t>(cfg.K))
    throw Error("count_mismatches: need what to expect in each of the " + std::to_string(cfg.K) + " regions");
  unsigned long long* d_count = nullptr;
  ExpectedRegion* d_expected = nullptr;
  XSTAGE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d_count), sizeof *d_count, stream));
  XSTAGE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d_expected), sizeof(ExpectedRegion) * expected.size(), stream));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_count, 0, sizeof *d_count, stream));
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(d_expected, expected.data(), sizeof(ExpectedRegion) * expected.size(),
                                    cudaMemcpyHostToDevice, stream));
  launch_kernel(count_mismatches_kernel, current_device_facts().sm_count * 2, 256, 0, stream, static_cast<const uint4*>(base), cfg.slot_bytes / 16, cfg.slots,
                                                   cfg.B_bytes / 16, cfg.K, d_expected,
                                                   cfg.path == StorePath::tma_bulk, d_count);
  unsigned long long count = 0;
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(&count, d_count, sizeof count, cudaMemcpyDeviceToHost, stream));
  XSTAGE_CUDA_CHECK(cudaFreeAsync(d_count, stream));
  XSTAGE_CUDA_CHECK(cudaFreeAsync(d_expected, stream));
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<std::int64_t>(count);
}

void* region_of(void* base, const StoreBenchConfig& cfg, int producer) {
  return static_cast<std::uint8_t*>(base) + static_cast<std::int64_t>(producer) * cfg.slots * cfg.slot_bytes;
}

std::vector<void*> local_regions(void* local_base, const StoreBenchConfig& cfg) {
  std::vector<void*> out;
  for (int p = 0; p < cfg.K; ++p) out.push_back(region_of(local_base, cfg, p));
  return out;
}

std::vector<void*> remote_regions(const std::vector<void*>& window_by_rank, const StoreBenchConfig& cfg,
                                  comm::Pairing pairing, int rank, int world) {
  std::vector<void*> out;
  for (int p = 0; p < cfg.K; ++p) {
    const int target = comm::producer_target(pairing, rank, world, p);
    if (target < 0 || target >= static_cast<int>(window_by_rank.size()) || !window_by_rank[target])
      throw Error("producer " + std::to_string(p) + " of rank " + std::to_string(rank) + " has no peer window to store to");
    out.push_back(region_of(window_by_rank[target], cfg, p));
  }
  return out;
}

}  // namespace xstage::calibration
