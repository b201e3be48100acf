#include "moe/kernel/call_kernels.hpp"

#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#include "common/launch.cuh"
#include "moe/kernel/status.hpp"

namespace xstage::moe {
namespace {

__global__ void prologue_kernel(char* local, EpochFlags flags, int rank, int P, comm::WaitContext wait, comm::CallEpochView calls) {
  const int peer = threadIdx.x;
  const std::uint32_t epoch = comm::current_call(calls);
  if (peer < P && peer != rank)
    comm::wait_counter<true>(wait, reinterpret_cast<const std::uint32_t*>(local + flags.peer_finished(peer)), epoch - 1,
                             static_cast<int>(MoeWait::peer_finished), peer);
}

// Block e lists this rank's pairs t·k + j with ids[t][j] == e in token order (a stable compaction: ballots
// within a warp, warp totals across the block), and stores their count. Block 0 also checks every token's
// ids: one outside [0, E) matches no block and one repeated in a token's top-k is listed once, so the lists
// stay consistent (the owners and this rank's reduction agree on what is stored) and the call completes; the
// record says which token and which id.
constexpr int kRouteThreads = 256;
__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const std::int32_t* ids, int tokens, int k, int E, char* local, SendLists send, comm::WaitContext wait) {
  __shared__ int warp_total[kRouteThreads / 32];
  const int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (e == 0)
    for (int t = threadIdx.x; t < tokens; t += kRouteThreads)
      for (int j = 0; j < k; ++j) {
        const std::int32_t id = ids[static_cast<std::int64_t>(t) * k + j];
        if (id < 0 || id >= E) {
          comm::device_record(wait, static_cast<int>(MoeWait::expert_out_of_range), t, static_cast<std::uint32_t>(id),
                              static_cast<std::uint32_t>(E));
          continue;
        }
        for (int j2 = 0; j2 < j; ++j2)
          if (ids[static_cast<std::int64_t>(t) * k + j2] == id)
            comm::device_record(wait, static_cast<int>(MoeWait::duplicate_expert), t, static_cast<std::uint32_t>(id), 0u);
      }
  int* list = reinterpret_cast<int*>(local + send.pair_offset(e, 0));
  int base = 0;
  for (int t0 = 0; t0 < tokens; t0 += kRouteThreads) {
    const int t = t0 + threadIdx.x;
    int hit = -1;
    if (t < tokens)
      for (int j = 0; j < k; ++j)
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

void enqueue_prologue(char* local, const EpochFlags& flags, int rank, int P, const comm::WaitContext& wait,
                      const comm::CallEpochView& calls, cudaStream_t stream) {
  launch_kernel(prologue_kernel, 1, kMaxEpRanks, 0, stream, local, flags, rank, P, wait, calls);
}

void enqueue_route(const std::int32_t* topk_ids, int tokens, const MoeProblem& pr, char* local, const SendLists& send,
                   const comm::WaitContext& wait, cudaStream_t stream) {
  launch_kernel(route_kernel, pr.E_experts, kRouteThreads, 0, stream, topk_ids, tokens, pr.top_k, pr.E_experts, local, send, wait);
}

}  // namespace xstage::moe
