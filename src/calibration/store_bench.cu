#include "calibration/store_bench.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/cuda_check.hpp"
#include "common/device_clock.cuh"
#include "common/error.hpp"

namespace xstage::calibration {

namespace {

constexpr int kTmaThreads = 32;
// Every producer CTA asks for this much shared memory so that no two share an SM: K producers are K SMs.
constexpr int kOneCtaPerSmSmemBytes = 120 * 1024;
constexpr int kMaxSmemBytes = 227 * 1024;
constexpr std::uint64_t kGridWaitTimeoutNs = 2'000'000'000ull;
constexpr std::uint64_t kAlignLeadNs = 3000;  // aligned bursts start this long after the last arrival

struct KernelArgs {
  std::uint8_t* dst;
  std::int64_t slot_bytes;
  int slots;
  std::int64_t B_bytes;
  int n_bursts;
  int isolated;
  std::uint64_t gap_cycles;
  std::uint64_t recovery_ns;
  std::uint32_t seed;
  int K;
  std::uint64_t* stamps;
  std::uint64_t* clock_ref;
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
  std::uint64_t* out = a.stamps + static_cast<std::int64_t>(blockIdx.x) * a.n_bursts * 3;
  for (int i = threadIdx.x; i < bursts_done * 3; i += blockDim.x) out[i] = s_stamps[i];
}

// Plain 16-byte st.global from registers: 8 warps, coalesced, one region per producer.
__global__ void __launch_bounds__(kStoreThreads, 1) st_global_bench_kernel(KernelArgs a) {
  extern __shared__ std::uint64_t s_stamps[];
  __shared__ int s_abort;
  const int p = blockIdx.x;
  const int tid = threadIdx.x;
  const std::int64_t nvec = a.B_bytes / 16;
  auto* region = reinterpret_cast<uint4*>(a.dst + static_cast<std::int64_t>(p) * a.slots * a.slot_bytes);
  if (tid == 0) s_abort = 0;
  record_clock_ref(a, 0);

  int b = 0;
  for (; b < a.n_bursts; ++b) {
    if (a.isolated && tid == 0 && !aligned_start(a, b)) s_abort = 1;
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

  int b = 0;
  if (tid == 0) {
    const auto src = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
    std::uint8_t* region = a.dst + static_cast<std::int64_t>(p) * a.slots * a.slot_bytes;
    for (; b < a.n_bursts; ++b) {
      if (a.isolated && !aligned_start(a, b)) break;
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

__global__ void count_mismatches_kernel(const uint4* region, std::int64_t slot_vecs, int slots, std::int64_t nvec,
                                        int K, int n_bursts, int tma, std::uint32_t seed,
                                        unsigned long long* mismatches) {
  unsigned long long local = 0;
  const std::int64_t total = static_cast<std::int64_t>(K) * slots * nvec;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = idx % nvec;
    const int s = static_cast<int>((idx / nvec) % slots);
    const int p = static_cast<int>(idx / (nvec * slots));
    if (s >= n_bursts) continue;  // this slot was never written
    // The last burst that wrote slot s (TMA producers store burst 0's tile every time).
    const int last_b = tma ? 0 : s + ((n_bursts - 1 - s) / slots) * slots;
    const uint4 want = pattern_word(seed, p, last_b, i);
    const uint4 got = region[(static_cast<std::int64_t>(p) * slots + s) * slot_vecs + i];
    local += (got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w);
  }
  if (local) atomicAdd(mismatches, local);
}

double median_of(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double quantile_of(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  const auto k = static_cast<std::ptrdiff_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[static_cast<std::size_t>(k)];
}

std::size_t smem_bytes(const StoreBenchConfig& cfg) {
  const std::size_t stamps = sizeof(std::uint64_t) * 3 * static_cast<std::size_t>(cfg.n_bursts);
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
  if (cfg.n_bursts < 2 || cfg.n_bursts > kMaxBursts)
    fail("bursts per producer must be in 2.." + std::to_string(kMaxBursts) + ", got " + std::to_string(cfg.n_bursts));
  if (cfg.slots < 1 || cfg.slot_bytes < cfg.B_bytes || cfg.slot_bytes % 16 != 0)
    fail("destination slots must hold a burst (slot_bytes >= B, multiple of 16)");
  if (!cfg.dst) fail("no destination buffer");
  if (smem_bytes(cfg) > static_cast<std::size_t>(kMaxSmemBytes))
    fail("B plus the stamps of " + std::to_string(cfg.n_bursts) + " bursts exceed shared memory");
}

StoreBench::StoreBench(int max_K) : max_K_(max_K) {
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_stamps_, sizeof(std::uint64_t) * 3 * kMaxBursts * static_cast<std::size_t>(max_K)));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_clock_, sizeof(std::uint64_t) * 4));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_sync_, sizeof(unsigned) * 4));
  XSTAGE_CUDA_CHECK(cudaMalloc(&d_error_, sizeof(unsigned)));
  XSTAGE_CUDA_CHECK(cudaEventCreate(&ev_start_));
  XSTAGE_CUDA_CHECK(cudaEventCreate(&ev_stop_));
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(st_global_bench_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes));
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(tma_bulk_bench_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmemBytes));
}

StoreBench::~StoreBench() {
  cudaFree(d_stamps_);
  cudaFree(d_clock_);
  cudaFree(d_sync_);
  cudaFree(d_error_);
  cudaEventDestroy(ev_start_);
  cudaEventDestroy(ev_stop_);
}

StoreBenchRaw StoreBench::run(const StoreBenchConfig& cfg, double clock_mhz_for_gap, cudaStream_t stream) {
  validate(cfg, max_K_);
  KernelArgs a{};
  a.dst = static_cast<std::uint8_t*>(cfg.dst);
  a.slot_bytes = cfg.slot_bytes;
  a.slots = cfg.slots;
  a.B_bytes = cfg.B_bytes;
  a.n_bursts = cfg.n_bursts;
  a.isolated = cfg.mode == Mode::isolated;
  a.gap_cycles = static_cast<std::uint64_t>(std::llround(cfg.gap_ns * clock_mhz_for_gap / 1000.0));
  a.recovery_ns = static_cast<std::uint64_t>(std::llround(cfg.recovery_ns));
  a.seed = cfg.pattern_seed;
  a.K = cfg.K;
  a.stamps = d_stamps_;
  a.clock_ref = d_clock_;
  a.sync = d_sync_;
  a.error = d_error_;

  XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_sync_, 0, sizeof(unsigned) * 4, stream));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_error_, 0, sizeof(unsigned), stream));
  const std::size_t smem = smem_bytes(cfg);
  XSTAGE_CUDA_CHECK(cudaEventRecord(ev_start_, stream));
  if (cfg.path == StorePath::st_global_16B)
    st_global_bench_kernel<<<cfg.K, kStoreThreads, smem, stream>>>(a);
  else
    tma_bulk_bench_kernel<<<cfg.K, kTmaThreads, smem, stream>>>(a);
  XSTAGE_CUDA_CHECK_LAUNCH();
  XSTAGE_CUDA_CHECK(cudaEventRecord(ev_stop_, stream));
  XSTAGE_CUDA_CHECK(cudaEventSynchronize(ev_stop_));

  unsigned error = 0;
  XSTAGE_CUDA_CHECK(cudaMemcpy(&error, d_error_, sizeof error, cudaMemcpyDeviceToHost));
  if (error)
    throw Error("store benchmark: producers did not all arrive at an aligned burst within " +
                std::to_string(kGridWaitTimeoutNs / 1000000) + " ms (are all " + std::to_string(cfg.K) +
                " CTAs co-resident? another kernel may be occupying SMs)");

  StoreBenchRaw raw;
  raw.stamps.resize(static_cast<std::size_t>(cfg.K) * cfg.n_bursts * 3);
  XSTAGE_CUDA_CHECK(cudaMemcpy(raw.stamps.data(), d_stamps_, raw.stamps.size() * sizeof(std::uint64_t),
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

BurstSample summarize(const StoreBenchConfig& cfg, const StoreBenchRaw& raw, Destination dest, int warmup_bursts,
                      int rank) {
  const double ns_per_cycle = 1000.0 / raw.sm_clock_mhz;
  std::vector<double> t_iss, period, gap;
  for (int p = 0; p < cfg.K; ++p) {
    const std::uint64_t* s = raw.stamps.data() + static_cast<std::size_t>(p) * cfg.n_bursts * 3;
    for (int b = warmup_bursts; b < cfg.n_bursts; ++b) {
      t_iss.push_back(static_cast<double>(s[3 * b + 1] - s[3 * b]) * ns_per_cycle);
      if (cfg.mode == Mode::periodic) {
        gap.push_back(static_cast<double>(s[3 * b + 2] - s[3 * b + 1]) * ns_per_cycle);
        if (b + 1 < cfg.n_bursts) period.push_back(static_cast<double>(s[3 * (b + 1)] - s[3 * b]) * ns_per_cycle);
      }
    }
  }
  BurstSample out;
  out.mode = cfg.mode;
  out.path = cfg.path;
  out.dest = dest;
  out.K = cfg.K;
  out.B_bytes = cfg.B_bytes;
  out.gap_ns_requested = cfg.mode == Mode::periodic ? cfg.gap_ns : 0.0;
  out.gap_ns = median_of(gap);
  out.T_iss_ns = median_of(t_iss);
  out.T_iss_p10_ns = quantile_of(t_iss, 0.1);
  out.T_iss_p90_ns = quantile_of(t_iss, 0.9);
  out.T_period_ns = median_of(period);
  out.wall_bytes_per_ns = static_cast<double>(cfg.K) * static_cast<double>(cfg.B_bytes) * cfg.n_bursts / raw.elapsed_ns;
  out.sm_clock_mhz = raw.sm_clock_mhz;
  out.n_bursts = cfg.n_bursts - warmup_bursts;
  out.rank = rank;
  return out;
}

std::int64_t count_mismatches(const void* region, const StoreBenchConfig& cfg, cudaStream_t stream) {
  unsigned long long* d_count = nullptr;
  XSTAGE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d_count), sizeof *d_count, stream));
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_count, 0, sizeof *d_count, stream));
  count_mismatches_kernel<<<264, 256, 0, stream>>>(static_cast<const uint4*>(region), cfg.slot_bytes / 16, cfg.slots,
                                                   cfg.B_bytes / 16, cfg.K, cfg.n_bursts,
                                                   cfg.path == StorePath::tma_bulk, cfg.pattern_seed, d_count);
  XSTAGE_CUDA_CHECK_LAUNCH();
  unsigned long long count = 0;
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(&count, d_count, sizeof count, cudaMemcpyDeviceToHost, stream));
  XSTAGE_CUDA_CHECK(cudaFreeAsync(d_count, stream));
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<std::int64_t>(count);
}

}  // namespace xstage::calibration
