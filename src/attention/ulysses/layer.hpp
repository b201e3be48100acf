// The Ulysses sequence-parallel attention layer over P ranks (ulysses/layout.hpp has the index math):
// sequence-sharded Q, K, V [B][M/P][H][d] in, the same shape out. Three ways to run it:
//
//   serial      pre-attention all-to-all (pack, exchange, unpack), attention into a local head-sharded O,
//               post-attention all-to-all (pack, exchange, unpack): what users run today, on the same core;
//   fused_post  pre-attention all-to-all, then the attention kernel with the all-to-all in its epilogue
//               (epilogue_all_to_all.hpp): each output tile goes straight into its owner's output window;
//               then each rank copies this call's half of its window out (the paper's design);
//   fused_both  the pre-attention all-to-all hidden too: a pusher kernel copies each rank's Q, K, V rows, chunk by
//               chunk and head by head (InputChunks, PushOrder), straight from its inputs into every rank's
//               head-major inbox (remote stores with real ranks), counting each chunk on its arrival flag: first,
//               on every SM, what the attention kernel's first wave needs (the head start), then, on a few SMs of
//               its own (push_ctas), the rest while the attention kernel (fused_post's) runs on the other SMs and
//               waits per chunk before it loads rows; tiles walk each head from its last rows, where its pushes
//               begin. A start-of-call kernel resets the flags and, with real ranks, runs a barrier, so that no
//               rank pushes into an inbox its owner is still reading.
//
// The ranks a process holds: one, with an NCCL communicator and symmetric windows (comm::Runtime; the
// exchange is ncclAlltoAll, the epilogue's destinations LSA pointers), or all P on one GPU ("virtual ranks":
// the exchange is copies and the destinations are local buffers), so that the destination math, straddling
// tiles, completion counters and layouts are verified on one GPU. The same kernels run either way.
//
// Every call is enqueued with no host synchronisation (CUDA graphs capture it); poll() reports a device-side
// failure of any earlier call without synchronising.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/ulysses/destinations.hpp"
#include "attention/ulysses/layout.hpp"
#include "comm/call_state.hpp"
#include "comm/runtime.hpp"
#include "common/device_buffer.hpp"

namespace xstage::attention {

enum class UlyssesPath { serial, fused_post, fused_both };
const char* to_string(UlyssesPath path);
// "serial", "fused_post", "fused_both"; throws InputError naming the choices otherwise.
UlyssesPath ulysses_path_from_name(const std::string& name);
inline constexpr UlyssesPath kUlyssesPaths[] = {UlyssesPath::serial, UlyssesPath::fused_post, UlyssesPath::fused_both};

struct UlyssesOptions {
  A2AStorePath store_path = A2AStorePath::tma;  // the fused epilogue's
  double timeout_s = 10.0;                       // every device-side wait
  int push_ctas = 0;                             // fused_both: the pusher's CTAs (SMs the attention kernel leaves it);
                                                 // 0: choose_push_ctas for the shape
};

// One rank's operands, views of caller memory: bf16 [B][M/P][H][d], densely packed.
struct UlyssesViews {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
};

// Throws InputError naming the problem: M and H must divide by P, head_dim 64 or 128, 1 <= P <= 8.
void validate(const UlyssesShape& shape);
// Throws InputError naming the option: push_ctas 0 (chosen per shape) or 1 to kMaxPushCtas, timeout > 0.
void validate(const UlyssesOptions& options);

class UlyssesAttention {
 public:
  // Real ranks: this process is rank rt.rank() of rt.world_size() = shape.ranks (collective: every rank
  // constructs together). Needs every rank in one NVLink domain.
  UlyssesAttention(const UlyssesShape& shape, comm::Runtime& rt, const UlyssesOptions& options);
  // Virtual ranks: all shape.ranks ranks in this process, on the current GPU.
  UlyssesAttention(const UlyssesShape& shape, const UlyssesOptions& options);
  ~UlyssesAttention();
  UlyssesAttention(const UlyssesAttention&) = delete;
  UlyssesAttention& operator=(const UlyssesAttention&) = delete;

  const UlyssesShape& shape() const { return shape_; }
  int held_ranks() const { return static_cast<int>(ranks_.size()); }
  // The global rank of held rank i.
  int rank_of(int i) const;

  // The whole layer for every held rank (views[i] for held rank i).
  void enqueue(const std::vector<UlyssesViews>& views, UlyssesPath path, cudaStream_t stream);

  // Its steps, for the benchmark's baselines (FA-only, A2A-only, serial, fused) and tests:
  void enqueue_pre_all_to_all(const std::vector<UlyssesViews>& views, cudaStream_t stream);  // Q, K, V -> head-sharded
  void enqueue_attention_local(cudaStream_t stream);   // head-sharded -> local O (the plain epilogue)
  void enqueue_post_all_to_all(const std::vector<UlyssesViews>& views, cudaStream_t stream);  // local O -> out
  // head-sharded -> the owners' windows; with real ranks the kernel ends when every peer's rows have arrived
  void enqueue_attention_fused(cudaStream_t stream);
  // every held rank's rows of this call checked (bounded), then each one's window half -> its out: one kernel
  void enqueue_copy_out(const std::vector<UlyssesViews>& views, cudaStream_t stream);
  // fused_both without the copy-out: the start of the call, the pusher on a side stream forked from and joined back
  // into `stream`, and the gated fused attention.
  void enqueue_attention_fused_both(const std::vector<UlyssesViews>& views, cudaStream_t stream);
  // fused_both's start of the call and pusher alone, on `stream` (no attention kernel): the pusher's own rate. Virtual
  // ranks only.
  void enqueue_push_alone(const std::vector<UlyssesViews>& views, cudaStream_t stream);
  // fused_both's start of the call and every held rank's head start, each on every SM as in the layer (no attention
  // kernel, no pusher beside it): what the layer spends before each rank's first wave. Virtual ranks only.
  void enqueue_head_starts_alone(const std::vector<UlyssesViews>& views, cudaStream_t stream);

  // The input chunks of fused_both, and the bytes its pusher moves per call from the held ranks (its work list summed):
  // to other ranks (the pre-attention all-to-all's volume) and to their own inboxes (the own chunks that a Q tile or
  // K/V block straddling the shard's boundary reads there; every other own row is read in place).
  struct PushedBytes {
    std::int64_t remote = 0, own = 0;
  };
  const InputChunks& input_chunks() const { return chunks_; }
  int push_ctas() const { return push_ctas_; }  // the pusher's CTAs of this layer (UlyssesOptions::push_ctas, or chosen)
  const PushedBytes& pushed_bytes() const { return pushed_bytes_; }

  // Non-blocking: throws PlatformError naming the first failed device wait of any earlier call.
  void poll() const;
  // Fused calls the device has completed on held rank i (blocking).
  std::uint32_t calls_done(int i) const;

 private:
  struct Rank;
  struct SideStream;
  void allocate(comm::Runtime* rt);
  void enqueue_attention_fused_kernels(cudaStream_t stream, const std::vector<UlyssesViews>* inputs);
  void enqueue_start_of_call(cudaStream_t stream);  // fused_both: flags reset, with real ranks a barrier
  void enqueue_pusher(const std::vector<UlyssesViews>& views, int first_item, int end_item, int ctas, int run, bool chained,
                      cudaStream_t stream);
  void exchange(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes_per_peer,
                cudaStream_t stream);

  UlyssesShape shape_;
  UlyssesOptions opt_;
  comm::Runtime* rt_ = nullptr;  // null: virtual ranks
  std::vector<std::unique_ptr<Rank>> ranks_;
  InputChunks chunks_;
  int push_ctas_ = 1;
  PushOrder push_order_;  // fused_both's items, head starts first (the first waves' (batch, head)s)
  PushedBytes pushed_bytes_;  // push_order_'s items that move, summed (count_pushed_bytes)
  std::unique_ptr<SideStream> side_;
};

}  // namespace xstage::attention
