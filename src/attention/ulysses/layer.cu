#include "attention/ulysses/layer.hpp"

#include <cuda.h>
#include <nccl.h>

#include <string>

#include "attention/flash_fwd.hpp"
#include "comm/device/bounded_wait.cuh"
#include "comm/device/call_epoch.cuh"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/launch.cuh"
#include "common/nccl_check.hpp"
#include "comm/signal_barrier.cuh"

namespace xstage::attention {
namespace {

// Grid-stride copies: a few blocks per SM.
constexpr int kCopyThreads = 256;
int copy_blocks() { return current_device_facts().sm_count * 4; }

// dst row (i0, i1) <- src row (i0, i1), `row_pieces` 16-byte pieces each, rows at the given strides (in 16-byte
// pieces): every layout change of the layer is one of these (split/merge heads, split/merge sequence).
__global__ void strided_row_copy_kernel(const uint4* src, uint4* dst, int n0, int n1, std::int64_t src_s0, std::int64_t src_s1,
                                        std::int64_t dst_s0, std::int64_t dst_s1, int row_pieces) {
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
  launch_kernel(strided_row_copy_kernel, copy_blocks(), kCopyThreads, 0, stream, static_cast<const uint4*>(src), static_cast<uint4*>(dst), n0,
                n1, src_s0 / p, src_s1 / p, dst_s0 / p, dst_s1 / p, static_cast<int>(row_bytes / p));
}

// This call's half of a rank's output window -> its output (the call counter says which half).
__global__ void copy_out_kernel(const uint4* window, uint4* out, std::int64_t half_pieces, comm::CallEpochView calls) {
  const std::uint32_t done = *static_cast<const volatile std::uint32_t*>(calls.calls_done);
  const uint4* half = window + static_cast<std::int64_t>(done & 1u) * half_pieces;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < half_pieces; i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = half[i];
}

// Virtual ranks: after every rank's fused kernel of the call, each rank's rows must all have arrived.
__global__ void wait_arrivals_kernel(const std::uint32_t* arrived, std::uint32_t per_call, comm::CallEpochView calls,
                                     comm::WaitContext wait) {
  const std::uint32_t done = *static_cast<const volatile std::uint32_t*>(calls.calls_done);
  comm::wait_counter<true>(wait, arrived, done * per_call, static_cast<int>(UlyssesWait::arrivals), -1);
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

// cuStreamWriteValue32 (a stream memory operation: the GPU's front end writes the word once the stream's earlier
// work is complete and visible, no SM involved), through the runtime's driver entry point.
using StreamWriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
StreamWriteValue32 stream_write_value32() {
  static const StreamWriteValue32 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    XSTAGE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      throw PlatformError("Ulysses attention (fused_both): the CUDA driver has no cuStreamWriteValue32");
    return reinterpret_cast<StreamWriteValue32>(f);
  }();
  return fn;
}

void write_flag(cudaStream_t stream, std::uint32_t* flag) {
  const CUresult r = stream_write_value32()(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), 1u, 0u);
  if (r != CUDA_SUCCESS) throw PlatformError("Ulysses attention (fused_both): cuStreamWriteValue32 failed with CUresult " + std::to_string(r));
}

std::string describe_failure(const comm::DeviceStatus& st, double timeout_s) {
  switch (static_cast<UlyssesWait>(st.what)) {
    case UlyssesWait::inputs:
      return comm::describe_timeout(st, timeout_s, "Ulysses attention", "an input chunk's arrival flag (fused_both)", true);
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

// One stream per destination rank for fused_both's pushes, forked from and joined back into the caller's stream.
struct UlyssesAttention::CopyStreams {
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> joins;
  cudaEvent_t fork{};
  explicit CopyStreams(int n) : streams(n), joins(n) {
    XSTAGE_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    for (int i = 0; i < n; ++i) {
      XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
      XSTAGE_CUDA_CHECK(cudaEventCreateWithFlags(&joins[i], cudaEventDisableTiming));
    }
  }
  ~CopyStreams() {
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    for (cudaEvent_t e : joins) cudaEventDestroy(e);
    cudaEventDestroy(fork);
  }
  CopyStreams(const CopyStreams&) = delete;
  CopyStreams& operator=(const CopyStreams&) = delete;
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
  // [B][chunks per batch], the start barrier's flags [P] and this rank's push word; local (virtual ranks) or
  // symmetric. inbox_of[j]: rank j's inbox as this rank addresses it.
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
  XSTAGE_REQUIRE(rt.world_size() == shape_.ranks, "Ulysses attention: the layer has P = " + std::to_string(shape_.ranks) +
                                                      " ranks but the job has " + std::to_string(rt.world_size()));
  XSTAGE_REQUIRE(rt.lsa_size() >= shape_.ranks, "Ulysses attention: every rank must reach every other by NVLink loads/stores");
  allocate(&rt);
}

UlyssesAttention::UlyssesAttention(const UlyssesShape& shape, const UlyssesOptions& options) : shape_(shape), opt_(options) {
  validate(shape_);
  allocate(nullptr);
}

UlyssesAttention::~UlyssesAttention() = default;

int UlyssesAttention::rank_of(int i) const { return ranks_.at(i)->rank; }

void UlyssesAttention::allocate(comm::Runtime* rt) {
  const std::int64_t B = shape_.batch, M = shape_.seqlen, Ms = shape_.shard_rows(), Hp = shape_.local_heads(), H = shape_.heads,
                     d = shape_.head_dim;
  const std::int64_t head_sharded = B * M * Hp * d * 2;  // bytes; equal to one rank's sequence-sharded tensor
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
  // fused_both's inboxes.
  chunks_ = make_input_chunks(shape_);
  const std::int64_t flag_bytes = B * chunks_.per_batch() * 4, start_offset = 3 * head_sharded + flag_bytes,
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
    r->inputs.system_scope = rt != nullptr;
  }
  copies_ = std::make_unique<CopyStreams>(shape_.ranks);
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
  XSTAGE_REQUIRE(views.size() == ranks_.size(), "Ulysses attention: one set of operands per held rank (" +
                                                    std::to_string(ranks_.size()) + "), got " + std::to_string(views.size()));
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
FlashFwdArgs head_sharded_args(const UlyssesShape& s, const void* q, const void* k, const void* v, void* o) {
  FlashFwdArgs a;
  a.problem.batch = s.batch;
  a.problem.seqlen_q = a.problem.seqlen_k = s.seqlen;
  a.problem.heads = s.local_heads();
  a.problem.head_dim = s.head_dim;
  a.problem.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  a.problem.q = a.problem.k = a.problem.v = a.problem.o = packed_bmhd_strides(s.seqlen, s.local_heads(), s.head_dim);
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
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
  enqueue_attention_fused_kernels(stream, false);
}

// The fused kernel of every held rank; `gated`: on the inboxes, waiting for the input chunks (fused_both).
void UlyssesAttention::enqueue_attention_fused_kernels(cudaStream_t stream, bool gated) {
  const std::int64_t head_sharded = static_cast<std::int64_t>(shape_.batch) * shape_.seqlen * shape_.local_heads() * shape_.head_dim * 2;
  for (auto& r : ranks_) {
    if (gated)
      flash_attention_forward_all_to_all(
          head_sharded_args(shape_, r->inbox, r->inbox + head_sharded, r->inbox + 2 * head_sharded, nullptr), r->dst, opt_.store_path,
          stream, r->inputs);
    else
      flash_attention_forward_all_to_all(head_sharded_args(shape_, r->head_sharded(0), r->head_sharded(1), r->head_sharded(2), nullptr),
                                         r->dst, opt_.store_path, stream);
  }
  if (!rt_)
    for (auto& r : ranks_)
      launch_kernel(wait_arrivals_kernel, 1, 1, 0, stream, static_cast<const std::uint32_t*>(r->arrived), shape_.arrivals_per_call(),
                    r->state.epoch_view(), r->state.wait_context());
}

// Every held rank's Q, K, V rows -> every rank's inbox, chunk by chunk on the copy engines (one stream per
// receiving rank), each chunk's three 2D copies followed by its arrival flag (a stream write: ordered after the
// copies, with a memory barrier, so the rows are there before the flag says so). Chunks go from the last rows of
// the sequence to the first, the order the kernel's tiles and key/value loops need them.
void UlyssesAttention::enqueue_pushes(const std::vector<UlyssesViews>& views) {
  const std::int64_t B = shape_.batch, M = shape_.seqlen, Ms = shape_.shard_rows(), Hp = shape_.local_heads(), H = shape_.heads,
                     d = shape_.head_dim;
  const std::int64_t head_sharded = B * M * Hp * d * 2, src_pitch = H * d * 2, width = Hp * d * 2;
  const InputChunks& c = chunks_;
  pushed_remote_bytes_ = 0;
  auto push = [&](int src_i, int dst_rank, std::int64_t b, int chunk, cudaStream_t st) {
    const Rank& src = *ranks_[src_i];
    const int j = src.rank;
    const std::int64_t rows = c.rows_of(chunk), first = c.first_row(j, chunk);  // first: a sequence row
    char* inbox = src.inbox_of[dst_rank];
    const void* from[3] = {views[src_i].q, views[src_i].k, views[src_i].v};
    for (int t = 0; t < 3; ++t) {
      const char* s0 = static_cast<const char*>(from[t]) + ((b * Ms + (first - j * Ms)) * H + dst_rank * Hp) * d * 2;
      char* d0 = inbox + t * head_sharded + (b * M + first) * width;
      XSTAGE_CUDA_CHECK(cudaMemcpy2DAsync(d0, width, s0, src_pitch, width, rows, cudaMemcpyDeviceToDevice, st));
    }
    write_flag(st, reinterpret_cast<std::uint32_t*>(inbox + 3 * head_sharded) + b * c.per_batch() + j * c.per_source + chunk);
    if (dst_rank != j) pushed_remote_bytes_ += 3 * rows * width;
  };
  for (std::size_t i = 0; i < ranks_.size(); ++i)
    for (const void* x : {views[i].q, views[i].k, views[i].v}) XSTAGE_REQUIRE(x != nullptr, "Ulysses attention: Q, K and V must not be null");
  for (int r = 0; r < shape_.ranks; ++r) {
    cudaStream_t st = copies_->streams[r];
    for (std::int64_t b = 0; b < B; ++b) {
      if (rt_) {  // this rank's chunks for rank r, last first
        for (int chunk = c.per_source - 1; chunk >= 0; --chunk) push(0, r, b, chunk, st);
      } else {  // every rank's chunks for rank r, in the order of the sequence from its end
        for (int g = c.per_batch() - 1; g >= 0; --g) push(g / c.per_source, r, b, g % c.per_source, st);
      }
    }
  }
}

void UlyssesAttention::enqueue_attention_fused_both(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  XSTAGE_REQUIRE(views.size() == ranks_.size(), "Ulysses attention: one set of operands per held rank (" +
                                                    std::to_string(ranks_.size()) + "), got " + std::to_string(views.size()));
  poll();
  StartOfCall start;
  start.held = static_cast<int>(ranks_.size());
  start.flags_per_rank = shape_.batch * chunks_.per_batch();
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
  launch_kernel(start_of_call_kernel, 1, kStartThreads, 0, stream, start);
  XSTAGE_CUDA_CHECK(cudaEventRecord(copies_->fork, stream));
  for (cudaStream_t st : copies_->streams) XSTAGE_CUDA_CHECK(cudaStreamWaitEvent(st, copies_->fork, 0));
  enqueue_pushes(views);
  enqueue_attention_fused_kernels(stream, true);
  for (std::size_t i = 0; i < copies_->streams.size(); ++i) {
    XSTAGE_CUDA_CHECK(cudaEventRecord(copies_->joins[i], copies_->streams[i]));
    XSTAGE_CUDA_CHECK(cudaStreamWaitEvent(stream, copies_->joins[i], 0));
  }
}

void UlyssesAttention::enqueue_copy_out(const std::vector<UlyssesViews>& views, cudaStream_t stream) {
  XSTAGE_REQUIRE(views.size() == ranks_.size(), "Ulysses attention: one output per held rank");
  const std::int64_t half_bytes = static_cast<std::int64_t>(shape_.batch) * shape_.shard_rows() * shape_.heads * shape_.head_dim * 2;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    XSTAGE_REQUIRE(views[i].out != nullptr, "Ulysses attention: the output must not be null");
    launch_kernel(copy_out_kernel, copy_blocks(), kCopyThreads, 0, stream, static_cast<const uint4*>(ranks_[i]->window),
                  static_cast<uint4*>(views[i].out), half_bytes / 16, ranks_[i]->state.epoch_view());
  }
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
    if (const auto failure = r->state.failure()) throw PlatformError(describe_failure(*failure, opt_.timeout_s));
}

std::uint32_t UlyssesAttention::calls_done(int i) const { return ranks_.at(i)->state.calls_done(); }

}  // namespace xstage::attention
