// The MegaMoE combine storer's store pattern alone (src/moe/kernel/storer.cuh), beside the calibration's
// store benchmark (store_bench.cu, which stores contiguous bursts from registers with 8 warps): 1 or 2 warps
// per CTA drain 128-row tiles from a padded shared-memory staging buffer, each row's 16-byte pieces to its own
// scattered destination row in global memory (local), the row found as the storer finds it (RowSources read
// with ld.global.cg, then shuffled per row), then end each tile with one of the fence / release variants.
// Two store loops:
//
//   rows          per row: its two shuffles, the destination's table lookup, a branch for a missing row, the
//                 staged read, the store (the storer's first loop)
//   pred          the same without the branch: a missing row's store is predicated off (the storer's second loop)
//   batch4/8      each lane looks up its own row's destination once per group of 32 rows; then per batch of 4
//                 or 8 steps all the shuffles, all the staged reads, all the stores (predicated), as storer.cuh
//                 does (C::kStoreBatch: 4 for fp8, 8 for bf16)
//
// Tile ends:
//
//   none          no fence, no release (the store issue rate)
//   gpu_warp      fence.acq_rel.gpu (__threadfence) by every storer warp
//   sys_warp      fence.sc.sys (__threadfence_system) by every storer warp
//   gpu_tile      the storer warps meet at a named barrier, then one thread fences at GPU scope
//   sys_tile      ... at system scope
//   storer        what storer.cuh did at EP = 1 before it published each tile once: sys_warp, then per warp
//                 red.release.sys of its row count, and warp 0 one red.release.gpu (l2_done)
//   publish       what storer.cuh does now: each warp's row count to shared memory, the warps meet at a named
//                 barrier, then warp 0's lane 0 (one source here) fence.acq_rel.sys, a relaxed add of the
//                 tile's rows and a relaxed add to l2_done; the other warps go on (the kernel at EP > 1)
//   publish_gpu   ... fence.acq_rel.gpu and GPU-scope adds (the kernel at EP = 1: every destination local)
//   release_tile  the candidate: named barrier, then one thread red.release.sys (the release orders the
//                 other warps' stores, which the barrier made its own, before the count), no separate fence
//   release_tile_gpu  ... red.release.gpu (enough when every destination is on this GPU)
//
// Background: none; hbm_read (the storers' launch beside a kernel that reads a buffer 32 times the L2 with 16-byte
// loads on every SM until the storers are done, as the fused kernel's weight stream loads HBM beside its storers);
// l2_read (the same over a quarter of the L2, every load a hit: the L2 loaded as the mainloop's operand stream
// loads it). The loaded ones run for the kernel's loop and tile ends only, on every SM.
//
// Timed with clock64 per CTA (frequency from %globaltimer anchors of the same launch): ns per tile
// (median and p90 over CTAs), of it ns issuing (RowSources to last store issued) and ns in the tile's end (fence
// and release), GB/s per CTA, and GB/s of the whole launch. Every stored byte is checked on the device.
//
// --rows grouped gives each tile 128 consecutive destination rows instead of a random choice (scattered, as a tile's
// tokens are): the same stores with a few pages to translate per tile instead of one per row.
//
//   xstage_storer_bench [--tiles N] [--h H] [--seed S] [--rows scattered|grouped] --out FILE
//
// Per variant (row bytes, CTAs, warps, loop, tile end):
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/device/ptx.cuh"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/device_clock.cuh"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/launch.cuh"
#include "common/run_info.hpp"

namespace xstage::calibration {
namespace {

constexpr int kTileRows = 128;
enum class TileEnd { none, gpu_warp, sys_warp, gpu_tile, sys_tile, storer, publish, publish_gpu, release_tile, release_tile_gpu };
constexpr TileEnd kTileEnds[] = {TileEnd::none, TileEnd::gpu_warp, TileEnd::sys_warp, TileEnd::gpu_tile,
                                 TileEnd::sys_tile, TileEnd::storer, TileEnd::publish, TileEnd::publish_gpu, TileEnd::release_tile,
                                 TileEnd::release_tile_gpu};
const char* name_of(TileEnd e) {
  switch (e) {
    case TileEnd::none: return "none";
    case TileEnd::gpu_warp: return "gpu_warp";
    case TileEnd::sys_warp: return "sys_warp";
    case TileEnd::gpu_tile: return "gpu_tile";
    case TileEnd::sys_tile: return "sys_tile";
    case TileEnd::storer: return "storer";
    case TileEnd::publish: return "publish";
    case TileEnd::publish_gpu: return "publish_gpu";
    case TileEnd::release_tile: return "release_tile";
    case TileEnd::release_tile_gpu: return "release_tile_gpu";
  }
  return "?";
}

struct Args {
  const int2* sources;   // [tiles of all CTAs][128]: {rank (0), destination row}, as the dispatch leaves them
  std::uint8_t* peer[8];  // per rank its destination buffer [dest_rows][row_pitch]: all this GPU's (EP = 1)
  std::int64_t row_pitch;
  int n_blocks;          // row blocks of kRowBytes per destination row
  int tiles;             // per CTA
  std::uint32_t* counters;  // [0]: rows released (combine_arrived), [1]: tiles released (l2_done)
  unsigned long long* stamps;  // [cta][6]: start clock, start ns, end clock, end ns, issue cycles, end cycles
};

// The 16-byte word the staging buffer holds at row r, piece q of CTA c (the destination is checked against it).
__host__ __device__ __forceinline__ uint4 word_of(int c, int r, int q) {
  const std::uint32_t x = static_cast<std::uint32_t>(c) * 0x9E3779B1u ^ static_cast<std::uint32_t>(r * 64 + q) * 0x85EBCA77u;
  return make_uint4(x, x + 1, static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(r * 64 + q) + 1);
}

__device__ __forceinline__ void storers_meet(int threads) { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); }

// Tile g = cta·tiles + t of the whole launch writes row block g % n_blocks of the rows sources[g·128 ...]:
// every destination piece is written once in a launch. kBatch: -1 and 0 for the row-wise loops (with a branch,
// predicated), else steps per batch.
template <int kRowBytes, TileEnd kEnd, int kBatch>
__global__ void __launch_bounds__(64, 1) storer_bench_kernel(Args a) {
  constexpr int kLanesPerRow = kRowBytes / 16, kRowsPerStep = 32 / kLanesPerRow;
  constexpr int kPitch = kRowBytes + 16;  // bytes per staged row, padded as C::kStagingPitch pads it
  extern __shared__ __align__(16) std::uint8_t staging[];
  const int lane = threadIdx.x % 32, sw = threadIdx.x / 32, warps = blockDim.x / 32;
  const int piece = lane % kLanesPerRow;
  for (int i = threadIdx.x; i < kTileRows * kLanesPerRow; i += blockDim.x)
    *reinterpret_cast<uint4*>(staging + (i / kLanesPerRow) * kPitch + (i % kLanesPerRow) * 16) =
        word_of(blockIdx.x, i / kLanesPerRow, i % kLanesPerRow);
  __syncthreads();
  unsigned long long* st = a.stamps + 6 * blockIdx.x;
  if (threadIdx.x == 0) st[0] = sm_clock(), st[1] = global_timer_ns();
  unsigned long long issue_cycles = 0, end_cycles = 0;
  for (int t = 0; t < a.tiles; ++t) {
    const long long g = static_cast<long long>(blockIdx.x) * a.tiles + t;
    const long long t_start = clock64();
    const int2* src = a.sources + g * kTileRows;
    int2 rs[4] = {};
#pragma unroll
    for (int b = 0; b < 4; ++b)
      if (b % warps == sw) rs[b] = __ldcg(src + 32 * b + lane);
    const std::int64_t col = static_cast<std::int64_t>(g % a.n_blocks) * kRowBytes + piece * 16;
    unsigned rows = 0;
    if constexpr (kBatch <= 0) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        if (b % warps != sw) continue;
#pragma unroll
        for (int it = 0; it < 32 / kRowsPerStep; ++it) {
          const int r_in = kRowsPerStep * it + lane / kLanesPerRow;
          const int rank = __shfl_sync(0xffffffffu, rs[b].x, r_in);
          const int row = __shfl_sync(0xffffffffu, rs[b].y, r_in);
          const int r = 32 * b + r_in;
          if constexpr (kBatch < 0) {
            if (row < 0) continue;
            const uint4 v = *reinterpret_cast<const uint4*>(staging + r * kPitch + piece * 16);
            *reinterpret_cast<uint4*>(a.peer[rank] + static_cast<std::int64_t>(row) * a.row_pitch + col) = v;
          } else {
            const uint4 v = *reinterpret_cast<const uint4*>(staging + r * kPitch + piece * 16);
            const bool row_exists = row >= 0;
            comm::st_global_v4_if(a.peer[row_exists ? rank : 0] + static_cast<std::int64_t>(row_exists ? row : 0) * a.row_pitch + col,
                                  v, row_exists);
          }
          rows += piece == 0 && row >= 0;
        }
      }
    } else {
      constexpr int kSteps = 32 / kRowsPerStep;
      static_assert(kSteps % kBatch == 0, "whole batches of steps per group of 32 rows");
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        if (b % warps != sw) continue;
        const bool row_exists = rs[b].y >= 0;
        const unsigned long long dst =
            row_exists ? reinterpret_cast<unsigned long long>(a.peer[rs[b].x] + static_cast<std::int64_t>(rs[b].y) * a.row_pitch) : 0ull;
        rows += __popc(__ballot_sync(0xffffffffu, row_exists)) * (lane == 0);
#pragma unroll
        for (int s0 = 0; s0 < kSteps; s0 += kBatch) {
          unsigned long long to[kBatch];
          uint4 v[kBatch];
#pragma unroll
          for (int k = 0; k < kBatch; ++k) to[k] = __shfl_sync(0xffffffffu, dst, kRowsPerStep * (s0 + k) + lane / kLanesPerRow);
#pragma unroll
          for (int k = 0; k < kBatch; ++k)
            v[k] = *reinterpret_cast<const uint4*>(staging + (32 * b + kRowsPerStep * (s0 + k) + lane / kLanesPerRow) * kPitch + piece * 16);
#pragma unroll
          for (int k = 0; k < kBatch; ++k) comm::st_global_v4_if(reinterpret_cast<std::uint8_t*>(to[k]) + col, v[k], to[k] != 0ull);
        }
      }
    }
    __syncwarp();
    const long long t_issued = clock64();
    if constexpr (kEnd == TileEnd::gpu_warp) __threadfence();
    if constexpr (kEnd == TileEnd::sys_warp || kEnd == TileEnd::storer) __threadfence_system();
    if constexpr (kEnd == TileEnd::storer) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) rows += __shfl_xor_sync(0xffffffffu, rows, o);
      if (lane == 0) comm::red_release_sys_add(a.counters, rows);
      if (lane == 0 && sw == 0) comm::red_release_gpu_add(a.counters + 1, 1);
    }
    if constexpr (kEnd == TileEnd::publish || kEnd == TileEnd::publish_gpu) {
      __shared__ unsigned warp_rows[2][2];  // [tile parity][storer warp]: this launch has 1 or 2 warps
#pragma unroll
      for (int o = 16; o > 0; o /= 2) rows += __shfl_xor_sync(0xffffffffu, rows, o);
      if (lane == 0) warp_rows[t & 1][sw] = rows;
      storers_meet(blockDim.x);
      if (sw == 0 && lane == 0) {
        unsigned n = 0;
        for (int v = 0; v < warps; ++v) n += warp_rows[t & 1][v];
        if constexpr (kEnd == TileEnd::publish) {
          comm::fence_acq_rel_sys();
          comm::red_relaxed_sys_add(a.counters, n);
        } else {
          comm::fence_acq_rel_gpu();
          comm::red_relaxed_gpu_add(a.counters, n);
        }
        comm::red_relaxed_gpu_add(a.counters + 1, 1);
      }
    }
    if constexpr (kEnd == TileEnd::gpu_tile || kEnd == TileEnd::sys_tile || kEnd == TileEnd::release_tile ||
                  kEnd == TileEnd::release_tile_gpu) {
      storers_meet(blockDim.x);
      if (threadIdx.x == 0) {
        if constexpr (kEnd == TileEnd::gpu_tile) __threadfence();
        if constexpr (kEnd == TileEnd::sys_tile) __threadfence_system();
        if constexpr (kEnd == TileEnd::release_tile) comm::red_release_sys_add(a.counters, kTileRows);
        if constexpr (kEnd == TileEnd::release_tile_gpu) comm::red_release_gpu_add(a.counters, kTileRows);
      }
    }
    __syncwarp();
    const long long t_end = clock64();
    issue_cycles += t_issued - t_start;
    end_cycles += t_end - t_issued;
  }
  __syncthreads();
  if (threadIdx.x == 0) st[2] = sm_clock(), st[3] = global_timer_ns(), st[4] = issue_cycles, st[5] = end_cycles;
}

// Counts destination pieces that differ from what their tile's staging buffer held.
template <int kRowBytes>
__global__ void check_kernel(Args a, long long all_tiles, unsigned long long* mismatches) {
  constexpr int kLanesPerRow = kRowBytes / 16;
  const long long n = all_tiles * kTileRows * kLanesPerRow;
  unsigned long long bad = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long g = i / (kTileRows * kLanesPerRow);
    const int r = static_cast<int>(i / kLanesPerRow % kTileRows), q = static_cast<int>(i % kLanesPerRow);
    const int2 s = a.sources[g * kTileRows + r];
    const uint4 v = *reinterpret_cast<const uint4*>(a.peer[0] + static_cast<std::int64_t>(s.y) * a.row_pitch +
                                                    (g % a.n_blocks) * kRowBytes + q * 16);
    const uint4 w = word_of(static_cast<int>(g / a.tiles), r, q);
    bad += v.x != w.x || v.y != w.y || v.z != w.z || v.w != w.w;
  }
  if (bad) atomicAdd(mismatches, bad);
}

// Streams `words` 16-byte words of `src` with four loads in flight per thread, round after round, until *stop is set
// or `max_rounds` rounds have passed (bounded: it ends even if the storers' launch never runs beside it); adds the
// bytes it read to *bytes_read.
__global__ void background_read_kernel(const uint4* src, long long words, const unsigned* stop, int max_rounds,
                                       unsigned long long* bytes_read) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  unsigned x = 0;
  long long loads = 0;
  for (int round = 0; round < max_rounds; ++round) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i + 3 * stride < words; i += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = __ldcg(src + i + k * stride);
#pragma unroll
      for (int k = 0; k < 4; ++k) x ^= v[k].x ^ v[k].w;
      loads += 4;
      if ((loads & 255) == 0 && *reinterpret_cast<const volatile unsigned*>(stop)) round = max_rounds;
      if (round == max_rounds) break;
    }
  }
  atomicAdd(bytes_read, static_cast<unsigned long long>(loads) * 16);
  if (x == 0xFFFFFFFFu && loads < 0) bytes_read[1] = x;  // never true: keeps the loads
}

__global__ void set_flag_kernel(unsigned* flag) { *reinterpret_cast<volatile unsigned*>(flag) = 1; }

enum class Background { none, hbm_read, l2_read };
const char* name_of(Background b) { return b == Background::none ? "none" : b == Background::hbm_read ? "hbm_read" : "l2_read"; }

constexpr int kBatches[] = {-1, 0, 4, 8};  // the store loops: row-wise (branch, predicated), batches of 4 and 8 steps
const char* loop_name(int batch) { return batch < 0 ? "rows" : batch == 0 ? "pred" : batch == 4 ? "batch4" : "batch8"; }

template <int kRowBytes, TileEnd kEnd>
void launch_one(int batch, const Args& a, int ctas, int warps, cudaStream_t stream) {
  const auto kernel = batch < 0    ? storer_bench_kernel<kRowBytes, kEnd, -1>
                      : batch == 0 ? storer_bench_kernel<kRowBytes, kEnd, 0>
                      : batch == 4 ? storer_bench_kernel<kRowBytes, kEnd, 4>
                                   : storer_bench_kernel<kRowBytes, kEnd, 8>;
  const int smem = kTileRows * (kRowBytes + 16);
  XSTAGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch_kernel(kernel, dim3(ctas), dim3(32 * warps), smem, stream, a);
}

template <int kRowBytes>
void launch(TileEnd end, int batch, const Args& a, int ctas, int warps, cudaStream_t stream) {
  switch (end) {
    case TileEnd::none: return launch_one<kRowBytes, TileEnd::none>(batch, a, ctas, warps, stream);
    case TileEnd::gpu_warp: return launch_one<kRowBytes, TileEnd::gpu_warp>(batch, a, ctas, warps, stream);
    case TileEnd::sys_warp: return launch_one<kRowBytes, TileEnd::sys_warp>(batch, a, ctas, warps, stream);
    case TileEnd::gpu_tile: return launch_one<kRowBytes, TileEnd::gpu_tile>(batch, a, ctas, warps, stream);
    case TileEnd::sys_tile: return launch_one<kRowBytes, TileEnd::sys_tile>(batch, a, ctas, warps, stream);
    case TileEnd::storer: return launch_one<kRowBytes, TileEnd::storer>(batch, a, ctas, warps, stream);
    case TileEnd::publish: return launch_one<kRowBytes, TileEnd::publish>(batch, a, ctas, warps, stream);
    case TileEnd::publish_gpu: return launch_one<kRowBytes, TileEnd::publish_gpu>(batch, a, ctas, warps, stream);
    case TileEnd::release_tile: return launch_one<kRowBytes, TileEnd::release_tile>(batch, a, ctas, warps, stream);
    case TileEnd::release_tile_gpu: return launch_one<kRowBytes, TileEnd::release_tile_gpu>(batch, a, ctas, warps, stream);
  }
}

double quantile(std::vector<double> xs, double p) {
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<std::size_t>(p * static_cast<double>(xs.size())))];
}

struct Options {
  int tiles = 64;     // per CTA
  int h = 7168;       // destination row: h bf16 (the combine buffer's row)
  std::uint64_t seed = 1;
  bool scattered = true;  // --rows scattered: each tile's 128 destination rows a random choice; grouped: consecutive
  std::string out;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    XSTAGE_REQUIRE(i + 1 < argc, "xstage_storer_bench: " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--tiles") o.tiles = std::atoi(v.c_str());
    else if (k == "--h") o.h = std::atoi(v.c_str());
    else if (k == "--seed") o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--out") o.out = v;
    else if (k == "--rows") {
      XSTAGE_REQUIRE(v == "scattered" || v == "grouped", "xstage_storer_bench: --rows must be scattered or grouped, not " + v);
      o.scattered = v == "scattered";
    } else throw InputError("xstage_storer_bench: unknown option " + k + " (--tiles, --h, --seed, --rows, --out)");
  }
  XSTAGE_REQUIRE(o.tiles >= 2 && o.tiles <= 4096, "xstage_storer_bench: --tiles must be in [2, 4096]");
  XSTAGE_REQUIRE(o.h >= 256 && o.h % 256 == 0 && o.h <= 65536, "xstage_storer_bench: --h must be a multiple of 256 in [256, 65536]");
  XSTAGE_REQUIRE(!o.out.empty(), "xstage_storer_bench: --out FILE is required");
  return o;
}

int run(const Options& o) {
  require_sm90(0);
  XSTAGE_CUDA_CHECK(cudaSetDevice(0));
  const int sms = current_device_facts().sm_count;
  XSTAGE_REQUIRE(sms > 0, "xstage_storer_bench: the device's SM count is not known");
  cudaStream_t stream, bg_stream;
  XSTAGE_CUDA_CHECK(cudaStreamCreate(&stream));
  XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&bg_stream, cudaStreamNonBlocking));
  cudaEvent_t bg_start, bg_end;
  XSTAGE_CUDA_CHECK(cudaEventCreate(&bg_start));
  XSTAGE_CUDA_CHECK(cudaEventCreate(&bg_end));
  // The background read's buffer: 32 times the L2, so that every load goes to HBM; its stop flag and byte count.
  int l2_bytes = 0;
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
  DeviceBuffer d_background(32 * std::max<std::size_t>(static_cast<std::size_t>(l2_bytes), 1u << 20)),
      d_stop(3 * sizeof(unsigned long long));  // [0]: the flag, [1]: bytes read, [2]: the loads' sink
  XSTAGE_CUDA_CHECK(cudaMemset(d_background.get(), 1, d_background.bytes()));
  const std::int64_t row_pitch = 2LL * o.h;
  nlohmann::json variants = nlohmann::json::array();
  int failures = 0;
  for (const int row_bytes : {256, 512}) {
    const int n_blocks = static_cast<int>(row_pitch / row_bytes);
    const long long all_tiles = static_cast<long long>(sms) * o.tiles;  // the largest launch
    const long long groups = (all_tiles + n_blocks - 1) / n_blocks;
    const long long dest_rows = groups * kTileRows;
    XSTAGE_REQUIRE(dest_rows < (1LL << 31), "xstage_storer_bench: too many destination rows: lower --tiles");
    // Each row group's 128 rows are a random choice of destination rows (a random permutation cut in groups):
    // scattered as a tile's tokens are.
    std::vector<int> perm(static_cast<std::size_t>(dest_rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(o.seed);
    if (o.scattered) std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int2> sources(static_cast<std::size_t>(all_tiles) * kTileRows);
    for (long long g = 0; g < all_tiles; ++g)
      for (int r = 0; r < kTileRows; ++r) sources[g * kTileRows + r] = make_int2(0, perm[(g / n_blocks) * kTileRows + r]);
    DeviceBuffer d_sources(sources.size() * sizeof(int2)), d_dest(static_cast<std::size_t>(dest_rows * row_pitch)),
        d_counters(2 * sizeof(std::uint32_t)), d_stamps(6 * sizeof(unsigned long long) * sms), d_bad(sizeof(unsigned long long));
    XSTAGE_CUDA_CHECK(cudaMemcpy(d_sources.get(), sources.data(), d_sources.bytes(), cudaMemcpyHostToDevice));
    for (const int ctas : {1, sms})
      for (const int warps : {1, 2})
        for (const int batch : kBatches)
        for (const TileEnd end : kTileEnds)
        for (const Background background : {Background::none, Background::hbm_read, Background::l2_read}) {
          const bool loaded = background != Background::none;
          if (loaded && !(ctas == sms && warps == 2 && batch >= 4 &&
                          (end == TileEnd::none || end == TileEnd::sys_warp || end == TileEnd::storer ||
                           end == TileEnd::publish || end == TileEnd::publish_gpu)))
            continue;
          Args a{d_sources.get<const int2>(), {}, row_pitch, n_blocks, o.tiles, d_counters.get<std::uint32_t>(),
                 d_stamps.get<unsigned long long>()};
          for (std::uint8_t*& p : a.peer) p = d_dest.get<std::uint8_t>();
          std::vector<double> ns_per_tile, issue_ns, end_ns, background_GBps;
          double launch_ns = 0;
          unsigned long long bad = 0;
          for (int rep = 0; rep < 4; ++rep) {  // rep 0 warms up
            XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_dest.get(), 0, d_dest.bytes(), stream));
            XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_bad.get(), 0, d_bad.bytes(), stream));
            if (loaded) {
              XSTAGE_CUDA_CHECK(cudaMemsetAsync(d_stop.get(), 0, d_stop.bytes(), stream));
              XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
              XSTAGE_CUDA_CHECK(cudaEventRecord(bg_start, bg_stream));
              const bool hbm = background == Background::hbm_read;
              launch_kernel(background_read_kernel, dim3(sms), dim3(256), 0, bg_stream, d_background.get<const uint4>(),
                            static_cast<long long>(hbm ? d_background.bytes() / 16 : static_cast<std::size_t>(l2_bytes) / 64),
                            d_stop.get<const unsigned>(), hbm ? 64 : 8192, d_stop.get<unsigned long long>() + 1);
              XSTAGE_CUDA_CHECK(cudaEventRecord(bg_end, bg_stream));
            }
            if (row_bytes == 256) launch<256>(end, batch, a, ctas, warps, stream);
            else launch<512>(end, batch, a, ctas, warps, stream);
            if (loaded) launch_kernel(set_flag_kernel, dim3(1), dim3(1), 0, stream, d_stop.get<unsigned>());
            if (row_bytes == 256) launch_kernel(check_kernel<256>, dim3(4 * sms), dim3(256), 0, stream, a, static_cast<long long>(ctas) * o.tiles, d_bad.get<unsigned long long>());
            else launch_kernel(check_kernel<512>, dim3(4 * sms), dim3(256), 0, stream, a, static_cast<long long>(ctas) * o.tiles, d_bad.get<unsigned long long>());
            std::vector<unsigned long long> st(6 * static_cast<std::size_t>(ctas));
            unsigned long long rep_bad = 0;
            XSTAGE_CUDA_CHECK(cudaMemcpyAsync(st.data(), d_stamps.get(), st.size() * sizeof(st[0]), cudaMemcpyDeviceToHost, stream));
            XSTAGE_CUDA_CHECK(cudaMemcpyAsync(&rep_bad, d_bad.get(), sizeof(rep_bad), cudaMemcpyDeviceToHost, stream));
            XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
            XSTAGE_CUDA_CHECK(cudaStreamSynchronize(bg_stream));
            bad += rep_bad;
            if (rep == 0) continue;
            if (loaded) {
              unsigned long long bg_bytes = 0;
              float bg_ms = 0;
              XSTAGE_CUDA_CHECK(cudaMemcpy(&bg_bytes, d_stop.get<unsigned long long>() + 1, sizeof(bg_bytes), cudaMemcpyDeviceToHost));
              XSTAGE_CUDA_CHECK(cudaEventElapsedTime(&bg_ms, bg_start, bg_end));
              background_GBps.push_back(static_cast<double>(bg_bytes) / (1e6 * static_cast<double>(bg_ms)));
            }
            unsigned long long first_ns = ~0ull, last_ns = 0;
            for (int c = 0; c < ctas; ++c) {
              const unsigned long long* s = &st[6 * static_cast<std::size_t>(c)];
              XSTAGE_REQUIRE(s[3] > s[1] && s[2] > s[0], "xstage_storer_bench: a CTA's clock anchors did not advance");
              const double ns_per_cycle = static_cast<double>(s[3] - s[1]) / static_cast<double>(s[2] - s[0]);
              ns_per_tile.push_back(static_cast<double>(s[3] - s[1]) / o.tiles);
              issue_ns.push_back(static_cast<double>(s[4]) * ns_per_cycle / o.tiles);
              end_ns.push_back(static_cast<double>(s[5]) * ns_per_cycle / o.tiles);
              first_ns = std::min(first_ns, s[1]);
              last_ns = std::max(last_ns, s[3]);
            }
            launch_ns += static_cast<double>(last_ns - first_ns) / 3;
          }
          const double tile_bytes = static_cast<double>(kTileRows) * row_bytes;
          const double med = quantile(ns_per_tile, 0.5);
          nlohmann::json v = {{"row_bytes", row_bytes}, {"ctas", ctas}, {"warps", warps}, {"loop", loop_name(batch)}, {"tile_end", name_of(end)},
                              {"background", name_of(background)},
                              {"background_GBps_median", loaded ? nlohmann::json(quantile(background_GBps, 0.5)) : nlohmann::json(nullptr)},
                              {"ns_per_tile_median", med}, {"ns_per_tile_p90", quantile(ns_per_tile, 0.9)},
                              {"issue_ns_per_tile_median", quantile(issue_ns, 0.5)}, {"end_ns_per_tile_median", quantile(end_ns, 0.5)},
                              {"GBps_per_cta_median", tile_bytes / med},
                              {"GBps_all_ctas", tile_bytes * o.tiles * ctas / launch_ns}, {"mismatches", bad}};
          if (bad) ++failures;
          std::printf("rows %3d B  %3d CTAs x %d warps  %-6s  %-16s  %-8s  %8.0f ns/tile (p90 %8.0f; issue %7.0f, end %7.0f)  %6.1f GB/s per CTA  %7.1f GB/s all%s\n",
                      row_bytes, ctas, warps, loop_name(batch), name_of(end), name_of(background), med,
                      quantile(ns_per_tile, 0.9), quantile(issue_ns, 0.5), quantile(end_ns, 0.5), tile_bytes / med,
                      tile_bytes * o.tiles * ctas / launch_ns, bad ? "  WRONG DATA" : "");
          if (loaded) std::printf("    background read %.0f GB/s\n", quantile(background_GBps, 0.5));
          variants.push_back(v);
        }
  }
  XSTAGE_CUDA_CHECK(cudaEventDestroy(bg_start));
  XSTAGE_CUDA_CHECK(cudaEventDestroy(bg_end));
  XSTAGE_CUDA_CHECK(cudaStreamDestroy(bg_stream));
  XSTAGE_CUDA_CHECK(cudaStreamDestroy(stream));
  const nlohmann::json doc = {{"command", command_line()}, {"date", utc_timestamp()}, {"tiles_per_cta", o.tiles}, {"h", o.h},
                              {"rows", o.scattered ? "scattered" : "grouped"},
                              {"seed", o.seed}, {"sm_count", sms}, {"variants", variants}};
  write_json_file(o.out, doc);
  std::printf("wrote %s; %d variant(s) stored wrong data\n", o.out.c_str(), failures);
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace xstage::calibration

int main(int argc, char** argv) try {
  xstage::set_command_line(argc, argv);
  return xstage::calibration::run(xstage::calibration::parse(argc, argv));
} catch (const xstage::InputError& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
