#include "moe/kernel/call_kernels.hpp"

#include <algorithm>
#include <atomic>

#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#include "common/cuda_check.hpp"
#include "common/launch.cuh"
#include "moe/kernel/status.hpp"

namespace xstage::moe {
namespace {

// A dropped pair: its combine row zeroed (no owner stores it this call, and the reduction sums every j: the
// pair adds nothing to its token's output), counted, and the first one after the host re-armed the sample kept.
// Safe before this call's main kernel: no owner stores into this rank's combine rows before it publishes
// send_ready there.
__device__ void drop_pair(char* local, const CombineBuffer& combine, int h_hidden_16B, RouterInputReport* r,
                          std::uint32_t* counter, MoeWait what, int token, int j, std::int32_t expert, int E,
                          std::uint32_t epoch) {
  uint4* row = reinterpret_cast<uint4*>(local + combine.row_offset(token, j));
  for (int c = 0; c < h_hidden_16B; ++c) row[c] = make_uint4(0u, 0u, 0u, 0u);
  atomicAdd_system(counter, 1u);
  if (atomicCAS_system(&r->claimed, 0u, 1u) != 0u) return;
  volatile RouterInputReport* v = r;
  v->what = static_cast<std::int32_t>(what);
  v->token = token;
  v->expert = expert;
  v->E = E;
  v->epoch = epoch;
  __threadfence_system();
  v->sampled = 1u;
}

// Every block: the wait on the peers' peer_finished flags (threads 0..P-1, the others held at the barrier), then its
// share of the counters zeroed and of the bf16 tokens copied into the window, then (blocks e < E) the route of
// expert e = blockIdx.x. Block e lists this rank's pairs t·k + j
// with ids[t][j] == e in token order (a stable compaction: ballots within a warp, warp totals across the block),
// and stores their count. Block 0 also checks every token's ids: one outside [0, E) matches no block, and of an
// expert repeated in a token's top-k only the first j is listed, so the lists stay consistent (the owners and this
// rank's reduction agree on what is stored) and the call completes; the other pairs are dropped. A wait that times
// out has recorded the failure and raised the op's abort flag; the block goes on, as the main kernel (which
// gives up at once) does.
constexpr int kRouteThreads = 256;
static_assert(kRouteThreads >= kMaxEpRanks, "a thread per peer for the wait");
__global__ void __launch_bounds__(kRouteThreads) call_start_kernel(const std::int32_t* ids, int tokens, int k, int E, int h_hidden_16B,
                                                                   char* local, SendLists send, CombineBuffer combine,
                                                                   EpochFlags flags, std::int64_t counters_offset,
                                                                   std::int64_t counters_words, const uint4* tokens_in,
                                                                   std::int64_t tokens_offset, std::int64_t tokens_16B,
                                                                   int rank, int P, RouterInputReport* report,
                                                                   comm::WaitContext wait, comm::CallEpochView calls) {
  const int peer = threadIdx.x;
  if (peer < P && peer != rank)
    comm::wait_counter<true>(wait, reinterpret_cast<const std::uint32_t*>(local + flags.peer_finished(peer)),
                             comm::current_call(calls) - 1, static_cast<int>(MoeWait::peer_finished), peer);
  __syncthreads();
  std::uint32_t* counters = reinterpret_cast<std::uint32_t*>(local + counters_offset);
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = first; i < counters_words; i += step) counters[i] = 0u;
  uint4* tokens_out = reinterpret_cast<uint4*>(local + tokens_offset);
  for (std::int64_t i = first; i < tokens_16B; i += step) tokens_out[i] = tokens_in[i];
  if (static_cast<int>(blockIdx.x) >= E) return;  // a block of the copy only

  __shared__ int warp_total[kRouteThreads / 32];
  const int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (e == 0)
    for (int t = threadIdx.x; t < tokens; t += kRouteThreads)
      for (int j = 0; j < k; ++j) {
        const std::int32_t id = ids[static_cast<std::int64_t>(t) * k + j];
        if (id < 0 || id >= E) {
          drop_pair(local, combine, h_hidden_16B, report, &report->out_of_range, MoeWait::expert_out_of_range, t, j, id, E,
                    comm::current_call(calls));
          continue;
        }
        for (int j2 = 0; j2 < j; ++j2)
          if (ids[static_cast<std::int64_t>(t) * k + j2] == id) {
            drop_pair(local, combine, h_hidden_16B, report, &report->repeated, MoeWait::duplicate_expert, t, j, id, E,
                      comm::current_call(calls));
            break;
          }
      }
  int* list = reinterpret_cast<int*>(local + send.pair_offset(e, 0));
  int base = 0;
  for (int t0 = 0; t0 < tokens; t0 += kRouteThreads) {
    const int t = t0 + threadIdx.x;
    int hit = -1;
    if (t < tokens)
      for (int j = 0; j < k && hit < 0; ++j)
        if (ids[static_cast<std::int64_t>(t) * k + j] == e) hit = j;
    const unsigned mask = __ballot_sync(0xffffffffu, hit >= 0);
    if (lane == 0) warp_total[warp] = __popc(mask);
    __syncthreads();
    int before = base, total = 0;
    for (int q = 0; q < kRouteThreads / 32; ++q) {
      if (q < warp) before += warp_total[q];
      total += warp_total[q];
    }
    if (hit >= 0) list[before + __popc(mask & ((1u << lane) - 1u))] = t * k + hit;
    base += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) *reinterpret_cast<int*>(local + send.count_offset(e)) = base;
}

}  // namespace

void enqueue_call_start(const std::int32_t* topk_ids, const void* tokens_bf16, int tokens, const MoeProblem& pr, int rank,
                        int sm_count, char* local, const SymmetricWindow& window, RouterInputReport* report,
                        const comm::WaitContext& wait, const comm::CallEpochView& calls, cudaStream_t stream) {
  const int h_hidden_16B = static_cast<int>(window.combine.row_pitch_bytes / 16);
  const std::int64_t tokens_16B = tokens_bf16 ? static_cast<std::int64_t>(tokens) * window.tokens.row_pitch_bytes / 16 : 0;
  // The copy wants the whole GPU (a few hundred bytes in flight per thread): blocks beyond the experts' copy only.
  const std::int64_t copy_blocks = std::min<std::int64_t>(4LL * sm_count, (tokens_16B + kRouteThreads - 1) / kRouteThreads);
  const int blocks = static_cast<int>(std::max<std::int64_t>(pr.E_experts, copy_blocks));
  launch_kernel(call_start_kernel, blocks, kRouteThreads, 0, stream, topk_ids, tokens, pr.top_k, pr.E_experts, h_hidden_16B, local,
                window.send, window.combine, window.epochs, window.counters.region.offset_bytes,
                window.counters.region.size_bytes / 4, static_cast<const uint4*>(tokens_bf16), window.tokens.region.offset_bytes,
                tokens_16B, rank, pr.P_ranks, report, wait, calls);
}

RouterInputMonitor::RouterInputMonitor(int rank) : rank_(rank) {
  XSTAGE_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(RouterInputReport), cudaHostAllocMapped));
  *host_ = RouterInputReport{};
  XSTAGE_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
}

RouterInputMonitor::~RouterInputMonitor() {
  if (host_) cudaFreeHost(host_);
}

std::optional<std::string> RouterInputMonitor::take() {
  // The device writes the report over the bus while the host reads it: field by field, through volatile.
  volatile RouterInputReport* v = host_;
  const std::uint32_t out_of_range = v->out_of_range, repeated = v->repeated;
  if (out_of_range == taken_out_of_range_ && repeated == taken_repeated_) return std::nullopt;
  std::optional<RouterInputReport> first;
  if (v->sampled) {
    first = RouterInputReport{};
    first->what = v->what;
    first->token = v->token;
    first->expert = v->expert;
    first->E = v->E;
    first->epoch = v->epoch;
  }
  const std::string message = describe_dropped_router_ids(rank_, out_of_range - taken_out_of_range_,
                                                          repeated - taken_repeated_, first ? &*first : nullptr);
  taken_out_of_range_ = out_of_range;
  taken_repeated_ = repeated;
  // Re-arm: a pair dropped from now on takes the sample (one dropped while this runs may go unsampled; it is
  // still counted).
  v->sampled = 0u;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  v->claimed = 0u;
  return message;
}

}  // namespace xstage::moe
