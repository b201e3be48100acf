#include "attention/ulysses/layer.hpp"

#include <nccl.h>

#include <algorithm>
#include <limits>
#include <string>

#include "attention/flash_fwd.hpp"
#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/grid_dependency.cuh"
#include "common/launch.cuh"
#include "common/nccl_check.hpp"
#include "comm/device/ptx.cuh"
#include "comm/signal_barrier.cuh"

namespace xstage::attention {
namespace {

// One rank's head-sharded tensor [B][M][Hp][d] in bytes, equal to its sequence-sharded one [B][Ms][H][d].
std::int64_t head_sharded_bytes(const UlyssesShape& s) {
  return static_cast<std::int64_t>(s.batch) * s.seqlen * s.local_heads() * s.head_dim * 2;
}

// Grid-stride copies: a few blocks per SM.
constexpr int kCopyThreads = 256;
int copy_blocks() { return current_device_facts().sm_count * 4; }

// The kernels of a call follow each other on the caller's stream, each launched with kEarlyStart (common/launch.cuh,
// common/grid_dependency.cuh): while the one before it finishes, the next is launched and its CTAs set up on the SMs
// freed. Each waits for the kernels before it, then lets the next one start; the fused attention kernels, which wait
// for other grids, let it start at their exit. fused_both's pusher beside the attention kernels, on a stream of its
// own, is launched as usual.

// dst row (i0, i1) <- src row (i0, i1), `row_pieces` 16-byte pieces each, rows at the given strides (in 16-byte
// pieces): every layout change of the layer is one of these (split/merge heads, split/merge sequence).
__global__ void strided_row_copy_kernel(const uint4* src, uint4* dst, int n0, int n1, std::int64_t src_s0, std::int64_t src_s1,
                                        std::int64_t dst_s0, std::int64_t dst_s1, int row_pieces) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const std::int64_t total = static_cast<std::int64_t>(n0) * n1 * row_pieces;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const int piece = static_cast<int>(i % row_pieces);
    const std::int64_t row = i / row_pieces;
    const std::int64_t i0 = row / n1, i1 = row % n1;
    dst[i0 * dst_s0 + i1 * dst_s1 + piece] = src[i0 * src_s0 + i1 * src_s1 + piece];
  }
}

void strided_row_copy(const void* src, void* dst, int n0, int n1, std::int64_t src_s0, std::int64_t src_s1, std::int64_t dst_s0,
                      std::int64_t dst_s1, std::int64_t row_bytes, cudaStream_t stream) {
  const std::int64_t p = 16;
  launch_kernel(strided_row_copy_kernel, copy_blocks(), kCopyThreads, 0, kEarlyStart, stream, static_cast<const uint4*>(src), static_cast<uint4*>(dst), n0,
                n1, src_s0 / p, src_s1 / p, dst_s0 / p, dst_s1 / p, static_cast<int>(row_bytes / p));
}

// The end of a fused call, one kernel for every held rank: each CTA first checks, bounded, that every row of this
// call has arrived in each held rank's window (with real ranks the fused kernel's last CTA has waited for the peers'
// rows already; with virtual ranks every rank's fused kernel is ahead on the stream), then the CTAs copy this call's
// half of each window (the call counter says which) to that rank's output.
struct CopyOut {
  int held = 0;
  std::int64_t half_pieces = 0;  // 16-byte pieces of one window half: a rank's output
  std::uint32_t per_call = 0;    // UlyssesShape::arrivals_per_call
  const uint4* window[kMaxUlyssesRanks] = {};
  uint4* out[kMaxUlyssesRanks] = {};
  const std::uint32_t* arrived[kMaxUlyssesRanks] = {};
  comm::CallEpochView calls[kMaxUlyssesRanks] = {};
  comm::WaitContext wait[kMaxUlyssesRanks] = {};
};

__global__ void copy_out_kernel(CopyOut c) {
  wait_for_prior_grids();
  if (threadIdx.x == 0)
    for (int i = 0; i < c.held; ++i) {
      const std::uint32_t done = *static_cast<const volatile std::uint32_t*>(c.calls[i].calls_done);
      comm::wait_counter<true>(c.wait[i], c.arrived[i], done * c.per_call, static_cast<int>(UlyssesWait::arrivals), -1);
    }
  __syncthreads();
  allow_dependent_grids();
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (int i = 0; i < c.held; ++i) {
    const std::uint32_t done = *static_cast<const volatile std::uint32_t*>(c.calls[i].calls_done);
    const uint4* half = c.window[i] + static_cast<std::int64_t>(done & 1u) * c.half_pieces;
    for (std::int64_t x = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; x < c.half_pieces; x += stride) c.out[i][x] = half[x];
  }
}

// fused_both, at the start of a call: every held rank's input arrival flags <- 0; with real ranks, then a barrier,
// so that no rank pushes (and sets a flag) before its receiver has reset them and finished reading its previous
// call's inputs (every rank arrives after its previous call's kernels, which are ahead of this one on its stream).
struct StartOfCall {
  int held = 0;
  int flags_per_rank = 0;
  std::uint32_t* flags[kMaxUlyssesRanks] = {};
  bool barrier = false;
  const std::uint32_t* calls_done = nullptr;  // real ranks: the barrier's epoch is the call's number
  comm::SignalBarrierView ranks{};
};

constexpr int kStartThreads = 128;
__global__ void start_of_call_kernel(StartOfCall s) {
  wait_for_prior_grids();
  allow_dependent_grids();  // its barrier waits only for the peers' start kernels, on their own GPUs
  for (int i = 0; i < s.held; ++i)
    for (int f = threadIdx.x; f < s.flags_per_rank; f += blockDim.x) s.flags[i][f] = 0u;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (s.barrier) {
      const std::uint32_t call = *static_cast<const volatile std::uint32_t*>(s.calls_done) + 1u;
      s.ranks.arrive_and_wait(call, static_cast<int>(UlyssesWait::start));
    }
  }
}

// fused_both's pusher: `gridDim.x` CTAs walk PushOrder's items [first_item, end_item), every item cut into units
// (InputChunks: runs of kPushUnitPieces 16-byte pieces of one of its tensors, one head of each row, d·2 bytes at the
// input's row pitch, contiguous in the head-major inbox) and the units shared by the warps (PushRuns: runs of `run`
// consecutive units, run j to warp j mod W, the warps numbered CTA-fastest so that consecutive runs go to different
// SMs; a warp goes from one of its runs to the next, PushOrder::locate finding each unit's item). It runs twice a
// call: on every SM before the attention kernel for the first wave's heads (the head start), then on SMs of its own
// (the attention kernel leaves them) beside it for the rest. A warp streams: per unit each lane issues kPushUnroll
// 16-byte loads, then signals the item it finished before (if this unit starts a new one), then stores. No CTA-wide
// barrier: a warp never waits for another. A signal's fence waits for the warp's loads and stores
// in flight, so it drains the warp: the runs make that once per run of units rather than once per unit or two.
//
// A signal: every lane fences (release at GPU scope, or system scope with real ranks, whose stores are remote), the
// warp syncs, and lane 0 adds the warp's unit count of the item to its flag with a release. Why every lane fences:
// lane 0's release alone covers the other lanes' stores only through cumulativity over bar.warp.sync (which the PTX
// model gives, but which then carries the whole protocol); a fence executed by every lane orders each lane's own
// stores before the flag directly, and costs the same (one warp-wide instruction). The fence.proxy.async before it
// pairs with the kernel's after its acquire: the data is read by TMA loads. The flag reaches
// InputChunks::arrival_target when every unit of the chunk has arrived, whichever warps moved them.
struct Pusher {
  PushOrder order;
  int first_item = 0, end_item = 0;  // the items of this launch
  int units = 0;                     // their units (PushOrder::launch_units; 32 bits, as the layer checked)
  int run = kPushRunAlongside;       // PushRuns::run
  const std::uint8_t* q[kMaxUlyssesRanks] = {};  // by source rank: its inputs [B][Ms][H][d] (held sources only)
  const std::uint8_t* k[kMaxUlyssesRanks] = {};
  const std::uint8_t* v[kMaxUlyssesRanks] = {};
  std::uint8_t* inbox[kMaxUlyssesRanks] = {};    // by receiver: its head-sharded Q, K, V [3][B][Hp][M][d]
  std::uint32_t* flags[kMaxUlyssesRanks] = {};   // by receiver: its arrival flags (InputChunks::flag)
  std::int64_t head_sharded_bytes = 0;           // one of the three
  bool system_scope = false;                     // real ranks: the stores and flags are a peer's
};

// 512 threads: at 1024 (64 registers each) the loop spilled (34 spill instructions against 4), and the pusher alone
// moved 9-28% less per SM than at 512 (results/h200/attention/2026-12-01-fused-both-stream/threads512/).
constexpr int kPushThreads = 512;
constexpr int kPushUnroll = 8;  // 16-byte loads in flight per lane: 64 KB per CTA
static_assert(32 * kPushUnroll == kPushUnitPieces, "a unit is one round of loads of one warp");

__device__ __forceinline__ void push_signal(std::uint32_t* flag, std::uint32_t units, bool system_scope) {
  comm::fence_proxy_async_global();
  if (system_scope) comm::fence_acq_rel_sys();
  else comm::fence_acq_rel_gpu();
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
    if (system_scope) comm::red_release_sys_add(flag, units);
    else comm::red_release_gpu_add(flag, units);
  }
}

__global__ void __launch_bounds__(kPushThreads) pusher_kernel(Pusher p) {
  wait_for_prior_grids();
  allow_dependent_grids();
  const UlyssesShape& s = p.order.shape;
  const InputChunks& c = p.order.chunks;
  const std::int64_t Ms = s.shard_rows(), M = s.seqlen;
  const int width = c.row_pieces;                     // 16-byte pieces of one row of one head
  const int src_row = s.heads * s.head_dim * 2 / 16;  // pieces between rows of an input
  const std::int64_t tensor_stride = p.head_sharded_bytes / 16;
  const PushRuns runs{static_cast<int>(gridDim.x * blockDim.x / 32), p.run};
  const int warp = static_cast<int>(threadIdx.x / 32 * gridDim.x + blockIdx.x), lane = static_cast<int>(threadIdx.x % 32);
  const int width_log2 = __ffs(width) - 1;           // a row is 8 or 16 pieces (d = 64 or 128)
  const PieceWalk walk(width);
  const PushOrder& order = p.order;
  const int units = p.units;
  std::uint32_t* pending = nullptr;  // the flag of the item this warp stored into last, not yet signalled
  std::uint32_t pending_units = 0;
  for (int g = runs.first_unit(warp); g < units; g += runs.cycle()) {  // this warp's runs
    const int run_end = g + p.run < units ? g + p.run : units;
    for (int x = g; x < run_end;) {  // the items this run crosses
      const PushOrder::Span part = order.span(p.first_item, x, run_end);
      const PushItem& it = part.item;
      const int per_tensor = c.units_per_tensor(it.chunk);
      x += part.stop - part.first;
      if (!order.moves(it)) continue;  // read in place by its receiver
      const int pieces = c.rows_of(it.chunk) * width;  // of one tensor
      // The item's rows in each input (offsets from here fit 32 bits: a chunk's rows at the input's pitch) and inbox.
      const std::int64_t first_row = c.first_row(it.source, it.chunk);
      const std::int64_t src_base = (it.batch * Ms + (first_row - it.source * Ms)) * src_row + (it.receiver * c.heads + it.head) * width;
      const uint4* const src_of[3] = {reinterpret_cast<const uint4*>(p.q[it.source]) + src_base,
                                      reinterpret_cast<const uint4*>(p.k[it.source]) + src_base,
                                      reinterpret_cast<const uint4*>(p.v[it.source]) + src_base};
      uint4* const dst0 = reinterpret_cast<uint4*>(p.inbox[it.receiver]) + ((std::int64_t{it.batch} * c.heads + it.head) * M + first_row) * width;
      std::uint32_t* const flag = p.flags[it.receiver] + c.flag(it.batch, it.head, c.in_batch(it.source, it.chunk));
      for (int u = part.first; u < part.stop; ++u) {
        const int t = (u >= per_tensor) + (u >= 2 * per_tensor), x0 = (u - t * per_tensor) * kPushUnitPieces + lane;
        const uint4* const src = src_of[t];
        uint4* const dst = dst0 + t * tensor_stride + x0;
        uint4 v[kPushUnroll];
        int r = x0 >> width_log2, col = x0 & (width - 1);
#pragma unroll
        for (int k = 0; k < kPushUnroll; ++k) {
          if (x0 + 32 * k < pieces) v[k] = __ldcs(src + (r * src_row + col));
          walk.next(r, col);
        }
        if (pending != nullptr && pending != flag) {
          push_signal(pending, pending_units, p.system_scope);
          pending_units = 0;
        }
#pragma unroll
        for (int k = 0; k < kPushUnroll; ++k) comm::st_global_v4_if(dst + 32 * k, v[k], x0 + 32 * k < pieces);
        pending = flag;
        ++pending_units;
      }
    }
  }
  if (pending != nullptr) push_signal(pending, pending_units, p.system_scope);
}

// The bytes a call's pusher moves: its work list summed, to other ranks and into the receivers' own inboxes.
UlyssesAttention::PushedBytes count_pushed_bytes(const PushOrder& order) {
  const std::int64_t row = static_cast<std::int64_t>(order.shape.head_dim) * 2;  // an item's rows are of one head
  UlyssesAttention::PushedBytes bytes;
  for (int i = 0; i < order.items(); ++i) {
    const PushItem it = order.item(i);
    if (!order.moves(it)) continue;
    (it.receiver != it.source ? bytes.remote : bytes.own) += 3 * order.chunks.rows_of(it.chunk) * row;
  }
  return bytes;
}

// Throws InputError unless there is one set of operands per held rank.
void require_views_of_held_ranks(const std::vector<UlyssesViews>& views, std::size_t held) {
  XSTAGE_REQUIRE(views.size() == held, "Ulysses attention: one set of operands per held rank (" + std::to_string(held) + "), got " +
                                           std::to_string(views.size()));
}

std::string describe_failure(const comm::DeviceStatus& st, double timeout_s, const InputChunks& chunks) {
  switch (static_cast<UlyssesWait>(st.what)) {
    case UlyssesWait::inputs: {
      const InputChunks::FlagOwner o = chunks.owner_of_flag(st.index >= 0 ? st.index : 0);
      return comm::describe_timeout(st, timeout_s, "Ulysses attention",
                                    "the arrival flag of rank " + std::to_string(o.source) + "'s input chunk " + std::to_string(o.chunk) +
                                        " of local head " + std::to_string(o.head) + " of batch " + std::to_string(o.batch) +
                                        " (fused_both), flags",
                                    true);
    }
    case UlyssesWait::start:
      return comm::describe_timeout(st, timeout_s, "Ulysses attention", "the start-of-call barrier (fused_both), from rank", true);
    default:
      return comm::describe_timeout(st, timeout_s, "Ulysses attention", "the rows of every rank (arrivals)", true);
  }
}

}  // namespace

const char* to_string(UlyssesPath path) {
  switch (path) {
    case UlyssesPath::serial: return "serial";
    case UlyssesPath::fused_post: return "fused_post";
    case UlyssesPath::fused_both: return "fused_both";
  }
  return "?";
}

UlyssesPath ulysses_path_from_name(const std::string& name) {
  for (UlyssesPath p : kUlyssesPaths)
    if (name == to_string(p)) return p;
  throw InputError("unknown Ulysses path '" + name + "' (choose from serial, fused_post, fused_both)");
}

// The stream fused_both's pusher runs on, forked from and joined back into the caller's stream.
struct UlyssesAttention::SideStream {
  cudaStream_t stream{};
  cudaEvent_t fork{}, join{};
  SideStream() {
    XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    XSTAGE_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    XSTAGE_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  }
  ~SideStream() {
    cudaStreamDestroy(stream);
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
};

void validate(const UlyssesShape& s) {
  const std::string what = "Ulysses attention (batch " + std::to_string(s.batch) + ", M " + std::to_string(s.seqlen) + ", H " +
                           std::to_string(s.heads) + ", d " + std::to_string(s.head_dim) + ", P " + std::to_string(s.ranks) + ")";
  XSTAGE_REQUIRE(s.ranks >= 1 && s.ranks <= kMaxUlyssesRanks,
                 what + ": 1 to " + std::to_string(kMaxUlyssesRanks) + " ranks (one NVLink domain)");
  XSTAGE_REQUIRE(s.batch >= 1 && s.seqlen >= 1 && s.heads >= 1, what + ": batch, M and H must be >= 1");
  XSTAGE_REQUIRE(s.head_dim == 64 || s.head_dim == 128, what + ": head_dim must be 64 or 128");
  XSTAGE_REQUIRE(s.heads % s.ranks == 0, what + ": H must be a multiple of P (each rank attends to H/P whole heads)");
  XSTAGE_REQUIRE(s.seqlen % s.ranks == 0,
                 what + ": M must be a multiple of P (each rank holds M/P rows; pad the sequence to a multiple of P)");
}

void validate(const UlyssesOptions& o) {
  XSTAGE_REQUIRE(o.push_ctas >= 0 && o.push_ctas <= kMaxPushCtas,
                 "Ulysses attention: push_ctas is " + std::to_string(o.push_ctas) + "; the pusher takes 1 to " +
                     std::to_string(kMaxPushCtas) + " SMs (0: chosen per shape)");
  XSTAGE_REQUIRE(o.timeout_s > 0, "Ulysses attention: the device timeout must be > 0 s");
}

struct UlyssesAttention::Rank {
  int rank = 0;
  comm::CallState state;
  // Pre-attention: the rank's Q, K, V split by destination [P][B][Ms][Hp][d], what arrives [P][B][Ms][Hp][d],
  // and (B > 1) the head-sharded tensors [B][M][Hp][d]; with B = 1 what arrives is already head-sharded.
  DeviceBuffer send[3], recv[3], work[3];
  // Serial post-attention: the local O [B][M][Hp][d], its split by destination (B > 1), what arrives.
  DeviceBuffer o, o_send, o_recv;
  // Fused: this rank's output window [2][B][Ms][H][d] and arrival counter, local (virtual ranks) or symmetric.
  DeviceBuffer window_local;
  std::unique_ptr<comm::SymmetricBuffer> window_symmetric;
  void* window = nullptr;
  std::uint32_t* arrived = nullptr;
  AllToAllDestinations dst;
  // fused_both: the head-sharded inputs Q, K, V [B][M][Hp][d] the peers push into, then their arrival flags
  // [B][chunks per batch] and the start barrier's flags [P]; local (virtual ranks) or symmetric. inbox_of[j]: rank
  // j's inbox as this rank addresses it.
  DeviceBuffer inbox_local;
  std::unique_ptr<comm::SymmetricBuffer> inbox_symmetric;
  char* inbox = nullptr;
  char* inbox_of[kMaxUlyssesRanks] = {};
  std::uint32_t* start_flags = nullptr;  // [P], in the inbox
  InputArrivals inputs;

  Rank(int r, double timeout_s) : rank(r), state(r, timeout_s) {}
  const void* head_sharded(int t) const { return work[t].bytes() ? work[t].get() : recv[t].get(); }
};

UlyssesAttention::UlyssesAttention(const UlyssesShape& shape, comm::Runtime& rt, const UlyssesOptions& options)
    : shape_(shape), opt_(options), rt_(&rt) {
  validate(shape_);
  validate(opt_);
  XSTAGE_REQUIRE(rt.world_size() == shape_.ranks, "Ulysses attention: the layer has P = " + std::to_string(shape_.ranks) +
                                                      " ranks but the job has " + std::to_string(rt.world_size()));
  XSTAGE_REQUIRE(rt.lsa_size() >= shape_.ranks, "Ulysses attention: every rank must reach every other by NVLink loads/stores");
  allocate(&rt);
}

UlyssesAttention::UlyssesAttention(const UlyssesShape& shape, const UlyssesOptions& options) : shape_(shape), opt_(options) {
  validate(shape_);
  validate(opt_);
  allocate(nullptr);
}

UlyssesAttention::~UlyssesAttention() = default;

int UlyssesAttention::rank_of(int i) const { return ranks_.at(i)->rank; }

void UlyssesAttention::allocate(comm::Runtime* rt) {
  const std::int64_t B = shape_.batch, Ms = shape_.shard_rows(), H = shape_.heads, d = shape_.head_dim;
  const std::int64_t head_sharded = head_sharded_bytes(shape_);
  const std::int64_t window_bytes = 2 * B * Ms * H * d * 2, counter_offset = window_bytes, total = window_bytes + 128;
  const int held = rt ? 1 : shape_.ranks;
  for (int i = 0; i < held; ++i) {
    auto r = std::make_unique<Rank>(rt ? rt->rank() : i, opt_.timeout_s);
    for (int t = 0; t < 3; ++t) {
      r->send[t] = DeviceBuffer(head_sharded);
      r->recv[t] = DeviceBuffer(head_sharded);
      if (B > 1) r->work[t] = DeviceBuffer(head_sharded);
    }
    r->o = DeviceBuffer(head_sharded);
    if (B > 1) r->o_send = DeviceBuffer(head_sharded);
    r->o_recv = DeviceBuffer(head_sharded);
    if (rt) {
      r->window_symmetric = std::make_unique<comm::SymmetricBuffer>(*rt, static_cast<std::size_t>(total));
      r->window = r->window_symmetric->local();
    } else {
      r->window_local = DeviceBuffer(total);
      r->window = r->window_local.get();
    }
    r->arrived = reinterpret_cast<std::uint32_t*>(static_cast<char*>(r->window) + counter_offset);
    XSTAGE_CUDA_CHECK(cudaMemset(r->window, 0, total));
    ranks_.push_back(std::move(r));
  }
  for (auto& r : ranks_) {
    AllToAllDestinations& d_ = r->dst;
    d_.shape = shape_;
    d_.rank = r->rank;
    for (int j = 0; j < shape_.ranks; ++j) {
      if (rt) {
        char* base = j == r->rank ? static_cast<char*>(r->window) : static_cast<char*>(r->window_symmetric->peer_pointer(j));
        d_.window[j] = base;
        d_.arrived[j] = reinterpret_cast<std::uint32_t*>(base + counter_offset);
      } else {
        d_.window[j] = ranks_[j]->window;
        d_.arrived[j] = ranks_[j]->arrived;
      }
    }
    d_.calls = r->state.epoch_view();
    d_.wait = r->state.wait_context();
    d_.wait_for_arrivals = rt != nullptr;
  }
  // fused_both's inboxes, its pusher's SMs and its head start (the attention kernel's tiles as flash_fwd_all_to_all
  // will cut them, on the SMs the pusher leaves).
  chunks_ = make_input_chunks(shape_);
  const int sms = current_device_facts().sm_count;
  const std::int64_t batch_heads = B * shape_.local_heads();
  push_ctas_ = opt_.push_ctas > 0 ? opt_.push_ctas : choose_push_ctas(shape_.head_dim, batch_heads, shape_.seqlen, sms);
  // The configuration flash_attention_forward_all_to_all chooses for the SMs the pusher leaves: its Q tiles and K/V
  // blocks decide which of each receiver's own rows it reads in place.
  const FwdTileShape tile = fwd_tile_shape(choose_fwd_tile_config(shape_.head_dim, batch_heads, shape_.seqlen, sms - push_ctas_));
  const int b_m = tile.block_m();
  const int m_blocks = (shape_.seqlen + b_m - 1) / b_m;
  const std::int64_t tiles = batch_heads * m_blocks;
  const int ctas = static_cast<int>(std::min<std::int64_t>(tiles, sms - push_ctas_));
  const InPlaceRows in_place{b_m, tile.block_n, shape_.seqlen, shape_.shard_rows()};
  push_order_ = PushOrder{shape_, chunks_, rt ? rt->rank() : -1, first_wave_heads(ctas, m_blocks), in_place};
  XSTAGE_REQUIRE(push_order_.launch_units(0, push_order_.items()) <= std::numeric_limits<int>::max() / 2,
                 "Ulysses attention: fused_both's pusher counts a call's 16-byte units in 32 bits (at most about 2^30); this shape has " +
                     std::to_string(push_order_.launch_units(0, push_order_.items())));
  pushed_bytes_ = count_pushed_bytes(push_order_);
  const std::int64_t flag_bytes = chunks_.flags(shape_.batch) * std::int64_t{4}, start_offset = 3 * head_sharded + flag_bytes,
                     inbox_total = start_offset + shape_.ranks * 4;
  for (auto& r : ranks_) {
    if (rt) {
      r->inbox_symmetric = std::make_unique<comm::SymmetricBuffer>(*rt, static_cast<std::size_t>(inbox_total));
      r->inbox = static_cast<char*>(r->inbox_symmetric->local());
    } else {
      r->inbox_local = DeviceBuffer(inbox_total);
      r->inbox = static_cast<char*>(r->inbox_local.get());
    }
    XSTAGE_CUDA_CHECK(cudaMemset(r->inbox + 3 * head_sharded, 0, inbox_total - 3 * head_sharded));
  }
  for (auto& r : ranks_) {
    for (int j = 0; j < shape_.ranks; ++j)
      r->inbox_of[j] = rt ? (j == r->rank ? r->inbox : static_cast<char*>(r->inbox_symmetric->peer_pointer(j))) : ranks_[j]->inbox;
    r->start_flags = reinterpret_cast<std::uint32_t*>(r->inbox + start_offset);
    r->inputs.flags = reinterpret_cast<const std::uint32_t*>(r->inbox + 3 * head_sharded);
    r->inputs.chunks = chunks_;
    r->inputs.wait = r->state.wait_context();
    r->inputs.reserved_sms = push_ctas_;
    r->inputs.system_scope = rt != nullptr;
    r->inputs.rank = r->rank;
    r->inputs.in_place = in_place;
    r->inputs.in_place_chunks = push_order_.never_pushed[r->rank];  // the pusher steps over exactly these
  }
  side_ = std::make_unique<SideStream>();
  XSTAGE_CUDA_CHECK(cudaDeviceSynchronize());
  if (rt) rt->barrier();  // every window and flag zeroed before any rank's first call
}

// Every held rank's send buffer -> every rank's receive buffer, `bytes_per_peer` from rank i to rank j at
// send_i + j·bytes and recv_j + i·bytes.
void UlyssesAttention::exchange(const std::vector<const void*>& send, const std::vector<void*>& recv, std::size_t bytes_per_peer,
                                cudaStream_t stream) {
  if (rt_) {
    XSTAGE_NCCL_CHECK(ncclAlltoAll(send[0], recv[0], bytes_per_peer / 2, ncclBfloat16, rt_->comm(), stream));
    return;
  }
  for (int i = 0; i < shape_.ranks; ++i)
    for (int j = 0; j < shape_.ranks; ++j)
      XSTAGE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv[j]) + i * bytes_per_peer,
                                        static_cast<const char*>(send[i]) + j * bytes_per_peer, bytes_per_peer,
                                        cudaMemcpyDeviceToDevice, stream));
}

void UlyssesAttention::enqueue_pre_all_to_all(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  require_views_of_held_ranks(views, ranks_.size());
  const std::int64_t B = shape_.batch, M = shape_.seqlen, Ms = shape_.shard_rows(), Hp = shape_.local_heads(), H = shape_.heads,
                     d = shape_.head_dim, P = shape_.ranks;
  const std::int64_t slice = Hp * d * 2, chunk = B * Ms * Hp * d * 2;  // bytes: one row's heads for one peer; one peer's share
  for (int t = 0; t < 3; ++t) {
    std::vector<const void*> send;
    std::vector<void*> recv;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = *ranks_[i];
      const void* x = t == 0 ? views[i].q : t == 1 ? views[i].k : views[i].v;
      XSTAGE_REQUIRE(x != nullptr, "Ulysses attention: Q, K and V must not be null");
      // split heads: [B·Ms][P][Hp·d] -> [P][B·Ms][Hp·d]
      strided_row_copy(x, r.send[t].get(), static_cast<int>(P), static_cast<int>(B * Ms), slice, H * d * 2, chunk, slice, slice, stream);
      send.push_back(r.send[t].get());
      recv.push_back(r.recv[t].get());
    }
    exchange(send, recv, static_cast<std::size_t>(chunk), stream);
    if (B > 1)
      for (auto& rp : ranks_)  // merge sequence: [P][B][Ms·Hp·d] -> [B][P][Ms·Hp·d]
        strided_row_copy(rp->recv[t].get(), rp->work[t].get(), static_cast<int>(P), static_cast<int>(B), chunk, Ms * Hp * d * 2,
                         Ms * Hp * d * 2, M * Hp * d * 2, Ms * Hp * d * 2, stream);
  }
}

namespace {
// The attention problem of one rank's head-sharded Q, K, V and O, packed [B][M][Hp][d] (what the pre-attention
// all-to-all makes) or, for fused_both's inbox, head-major [B][Hp][M][d] (a pushed chunk of one head is contiguous).
enum class HeadSharded { packed, head_major };
FlashFwdArgs head_sharded_args(const UlyssesShape& s, const void* q, const void* k, const void* v, void* o,
                               HeadSharded layout = HeadSharded::packed) {
  FlashFwdArgs a;
  a.problem.batch = s.batch;
  a.problem.seqlen_q = a.problem.seqlen_k = s.seqlen;
  a.problem.heads = s.local_heads();
  a.problem.head_dim = s.head_dim;
  a.problem.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const std::int64_t M = s.seqlen, Hp = s.local_heads(), d = s.head_dim;
  a.problem.q = a.problem.k = a.problem.v = a.problem.o =
      layout == HeadSharded::packed ? packed_bmhd_strides(M, Hp, d) : BmhdStrides{Hp * M * d, d, M * d};
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  // Every path's kernel walks whole tiles, so that fused_post and fused_both stay bit-identical to serial (the split
  // tail, key_split.hpp, merges a tile's parts in another order of additions).
  a.key_split = KeySplitMode::off;
  return a;
}
}  // namespace

void UlyssesAttention::enqueue_attention_local(cudaStream_t stream) {
  for (auto& r : ranks_)
    flash_attention_forward(head_sharded_args(shape_, r->head_sharded(0), r->head_sharded(1), r->head_sharded(2), r->o.get()), stream);
}

void UlyssesAttention::enqueue_post_all_to_all(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  XSTAGE_REQUIRE(views.size() == ranks_.size(), "Ulysses attention: one output per held rank");
  const std::int64_t B = shape_.batch, M = shape_.seqlen, Ms = shape_.shard_rows(), Hp = shape_.local_heads(), H = shape_.heads,
                     d = shape_.head_dim, P = shape_.ranks;
  const std::int64_t slice = Hp * d * 2, chunk = B * Ms * Hp * d * 2;
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (auto& r : ranks_) {
    if (B > 1)  // split sequence: [B][P][Ms·Hp·d] -> [P][B][Ms·Hp·d]
      strided_row_copy(r->o.get(), r->o_send.get(), static_cast<int>(P), static_cast<int>(B), Ms * Hp * d * 2, M * Hp * d * 2, chunk,
                       Ms * Hp * d * 2, Ms * Hp * d * 2, stream);
    send.push_back(B > 1 ? r->o_send.get() : r->o.get());
    recv.push_back(r->o_recv.get());
  }
  exchange(send, recv, static_cast<std::size_t>(chunk), stream);
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    XSTAGE_REQUIRE(views[i].out != nullptr, "Ulysses attention: the output must not be null");
    // merge heads: [P][B·Ms][Hp·d] -> [B·Ms][P][Hp·d]
    strided_row_copy(ranks_[i]->o_recv.get(), views[i].out, static_cast<int>(P), static_cast<int>(B * Ms), chunk, slice, slice, H * d * 2,
                     slice, stream);
  }
}

void UlyssesAttention::enqueue_attention_fused(cudaStream_t stream) {
  poll();
  enqueue_attention_fused_kernels(stream, nullptr);
}

// The fused kernel of every held rank. With `inputs` (fused_both): each on its inbox, waiting for the input chunks,
// after its head start (PushOrder: with virtual ranks rank i's set is i, with real ranks there is one).
void UlyssesAttention::enqueue_attention_fused_kernels(cudaStream_t stream, const std::vector<UlyssesViews>* inputs) {
  const std::int64_t head_sharded = head_sharded_bytes(shape_);
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    Rank* r = ranks_[i].get();
    if (inputs != nullptr) {
      const int set = rt_ ? 0 : static_cast<int>(i);
      enqueue_pusher(*inputs, push_order_.head_start_first(set), push_order_.head_start_first(set + 1), current_device_facts().sm_count,
                     kPushRunHeadStart, true, stream);
      // This call's own rows, read where they lie: the rank's heads of its sequence-sharded [B][Ms][H][d] input.
      InputArrivals arrivals = r->inputs;
      const std::int64_t own_head = std::int64_t{shape_.global_head(r->rank, 0)} * shape_.head_dim * 2;
      arrivals.own_q = static_cast<const char*>((*inputs)[i].q) + own_head;
      arrivals.own_k = static_cast<const char*>((*inputs)[i].k) + own_head;
      arrivals.own_v = static_cast<const char*>((*inputs)[i].v) + own_head;
      arrivals.own_strides = packed_bmhd_strides(shape_.shard_rows(), shape_.heads, shape_.head_dim);
      flash_attention_forward_all_to_all(
          head_sharded_args(shape_, r->inbox, r->inbox + head_sharded, r->inbox + 2 * head_sharded, nullptr, HeadSharded::head_major),
          r->dst, opt_.store_path, stream, arrivals);
    } else {
      flash_attention_forward_all_to_all(head_sharded_args(shape_, r->head_sharded(0), r->head_sharded(1), r->head_sharded(2), nullptr),
                                         r->dst, opt_.store_path, stream);
    }
  }
}

// The pusher of every held rank, one kernel of `ctas` CTAs on `stream`, for items [first_item, end_item) of
// ulysses/layout.hpp's PushOrder, in runs of `run` units per warp; `chained`: a link of the call's chain of kernels.
void UlyssesAttention::enqueue_pusher(const std::vector<UlyssesViews>& views, int first_item, int end_item, int ctas, int run,
                                      bool chained, cudaStream_t stream) {
  Pusher p;
  p.order = push_order_;
  p.first_item = first_item;
  p.end_item = end_item;
  p.units = static_cast<int>(push_order_.launch_units(first_item, end_item));
  p.run = run;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    XSTAGE_REQUIRE(views[i].q != nullptr && views[i].k != nullptr && views[i].v != nullptr, "Ulysses attention: Q, K and V must not be null");
    const int j = ranks_[i]->rank;
    p.q[j] = static_cast<const std::uint8_t*>(views[i].q);
    p.k[j] = static_cast<const std::uint8_t*>(views[i].k);
    p.v[j] = static_cast<const std::uint8_t*>(views[i].v);
  }
  // The receivers' flags sit at the same offset in every inbox (symmetric layout).
  const std::ptrdiff_t flags_offset = reinterpret_cast<const char*>(ranks_[0]->inputs.flags) - ranks_[0]->inbox;
  for (int r = 0; r < shape_.ranks; ++r) {
    p.inbox[r] = reinterpret_cast<std::uint8_t*>(ranks_[0]->inbox_of[r]);
    p.flags[r] = reinterpret_cast<std::uint32_t*>(ranks_[0]->inbox_of[r] + flags_offset);
  }
  p.head_sharded_bytes = head_sharded_bytes(shape_);
  p.system_scope = rt_ != nullptr;
  if (first_item < end_item) launch_kernel(pusher_kernel, ctas, kPushThreads, 0, chained ? kEarlyStart : LaunchOptions{}, stream, p);
}

void UlyssesAttention::enqueue_start_of_call(cudaStream_t stream) {
  StartOfCall start;
  start.held = static_cast<int>(ranks_.size());
  start.flags_per_rank = chunks_.flags(shape_.batch);
  for (std::size_t i = 0; i < ranks_.size(); ++i) start.flags[i] = const_cast<std::uint32_t*>(ranks_[i]->inputs.flags);
  if (rt_) {
    Rank& me = *ranks_[0];
    const std::ptrdiff_t start_offset = reinterpret_cast<char*>(me.start_flags) - me.inbox;
    start.barrier = true;
    start.calls_done = me.state.epoch_view().calls_done;
    start.ranks.local_flags = me.start_flags;
    for (int p = 0; p < shape_.ranks; ++p) start.ranks.peer_flags[p] = reinterpret_cast<std::uint32_t*>(me.inbox_of[p] + start_offset);
    start.ranks.wait = me.state.wait_context();
    start.ranks.rank = me.rank;
    start.ranks.world = shape_.ranks;
  }
  launch_kernel(start_of_call_kernel, 1, kStartThreads, 0, kEarlyStart, stream, start);
}

void UlyssesAttention::enqueue_attention_fused_both(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  require_views_of_held_ranks(views, ranks_.size());
  poll();
  enqueue_start_of_call(stream);
  XSTAGE_CUDA_CHECK(cudaEventRecord(side_->fork, stream));
  XSTAGE_CUDA_CHECK(cudaStreamWaitEvent(side_->stream, side_->fork, 0));
  // Beside the attention kernels, on the SMs they leave: everything but the head starts, which run on every SM each
  // before its kernel.
  enqueue_pusher(views, push_order_.head_starts_end(), push_order_.items(), push_ctas_, kPushRunAlongside, false, side_->stream);
  enqueue_attention_fused_kernels(stream, &views);
  XSTAGE_CUDA_CHECK(cudaEventRecord(side_->join, side_->stream));
  XSTAGE_CUDA_CHECK(cudaStreamWaitEvent(stream, side_->join, 0));
}

void UlyssesAttention::enqueue_push_alone(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  require_views_of_held_ranks(views, ranks_.size());
  // With real ranks the start barrier's epoch is the call count, which only the attention kernel advances: pushes
  // alone would pass it unsynchronised.
  XSTAGE_REQUIRE(rt_ == nullptr, "Ulysses attention: the pusher alone runs with virtual ranks only");
  poll();
  enqueue_start_of_call(stream);
  enqueue_pusher(views, 0, push_order_.items(), push_ctas_, kPushRunAlongside, true, stream);
}

void UlyssesAttention::enqueue_head_starts_alone(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  require_views_of_held_ranks(views, ranks_.size());
  XSTAGE_REQUIRE(rt_ == nullptr, "Ulysses attention: the head starts alone run with virtual ranks only");
  poll();
  enqueue_start_of_call(stream);
  for (int set = 0; set < static_cast<int>(ranks_.size()); ++set)
    enqueue_pusher(views, push_order_.head_start_first(set), push_order_.head_start_first(set + 1), current_device_facts().sm_count,
                   kPushRunHeadStart, true, stream);
}

void UlyssesAttention::enqueue_copy_out(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  XSTAGE_REQUIRE(views.size() == ranks_.size(), "Ulysses attention: one output per held rank");
  CopyOut c;
  c.held = static_cast<int>(ranks_.size());
  c.half_pieces = static_cast<std::int64_t>(shape_.batch) * shape_.shard_rows() * shape_.heads * shape_.head_dim * 2 / 16;
  c.per_call = shape_.arrivals_per_call();
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    XSTAGE_REQUIRE(views[i].out != nullptr, "Ulysses attention: the output must not be null");
    c.window[i] = static_cast<const uint4*>(ranks_[i]->window);
    c.out[i] = static_cast<uint4*>(views[i].out);
    c.arrived[i] = ranks_[i]->arrived;
    c.calls[i] = ranks_[i]->state.epoch_view();
    c.wait[i] = ranks_[i]->state.wait_context();
  }
  launch_kernel(copy_out_kernel, copy_blocks(), kCopyThreads, 0, kEarlyStart, stream, c);
}

void UlyssesAttention::enqueue(const std::vector<UlyssesViews>& views, UlyssesPath path, cudaStream_t stream) {
  switch (path) {
    case UlyssesPath::serial:
      enqueue_pre_all_to_all(views, stream);
      enqueue_attention_local(stream);
      enqueue_post_all_to_all(views, stream);
      return;
    case UlyssesPath::fused_post:
      enqueue_pre_all_to_all(views, stream);
      enqueue_attention_fused(stream);
      enqueue_copy_out(views, stream);
      return;
    case UlyssesPath::fused_both:
      enqueue_attention_fused_both(views, stream);
      enqueue_copy_out(views, stream);
      return;
  }
}

void UlyssesAttention::poll() const {
  for (const auto& r : ranks_)
    if (const auto failure = r->state.failure()) throw PlatformError(describe_failure(*failure, opt_.timeout_s, chunks_));
}

std::uint32_t UlyssesAttention::calls_done(int i) const { return ranks_.at(i)->state.calls_done(); }

}  // namespace xstage::attention
