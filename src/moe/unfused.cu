#include "moe/unfused.hpp"

#include <cuda_bf16.h>

#include <cstring>

#include "common/cublas_check.hpp"
#include "common/cuda_check.hpp"
#include "common/nccl_check.hpp"
#include "moe/bf16x8.cuh"

namespace xstage::moe {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kCublasWorkspaceBytes = 32u << 20;

__global__ void expert_histogram_kernel(const std::int32_t* ids, std::int64_t pairs, int E, int* counts) {
  for (std::int64_t q = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; q < pairs; q += std::int64_t(gridDim.x) * blockDim.x) {
    const int e = ids[q];
    if (e >= 0 && e < E) atomicAdd(counts + e, 1);  // an invalid id is reported by the host plan
  }
}

// dst row i = src row index[i]; rows of `vecs` 16-byte vectors. One block per row.
__global__ void gather_rows_kernel(uint4* dst, const uint4* src, const std::int32_t* index, int vecs) {
  const std::int64_t i = blockIdx.x;
  const uint4* from = src + static_cast<std::int64_t>(index[i]) * vecs;
  uint4* to = dst + i * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) to[v] = from[v];
}

// act[r][j] = silu(gate)·up, where W1's tile-interleaved rows put gate column nb·b_n/2 + c of block nb at
// Linear-1 column nb·b_n + c and its up column at nb·b_n + b_n/2 + c (layout.hpp, l1_logical_row).
__global__ void swiglu_kernel(const __nv_bfloat16* l1, __nv_bfloat16* act, int h_inter, int b_n) {
  const std::int64_t r = blockIdx.x;
  const int half = b_n / 2;
  const __nv_bfloat16* in = l1 + r * 2 * h_inter;
  for (int j = threadIdx.x; j < h_inter; j += blockDim.x) {
    const int col = (j / half) * b_n + j % half;
    const float g = __bfloat162float(in[col]), u = __bfloat162float(in[col + half]);
    act[r * h_inter + j] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
  }
}

// out[t] = Σ_j w[t][j]·combined[pair_row[t][j]], fp32 in a fixed j order (bitwise reproducible). One block
// per token, 8 bf16 per thread step.
__global__ void topk_reduce_kernel(__nv_bfloat16* out, const __nv_bfloat16* combined, const std::int32_t* pair_row,
                                   const float* weights, int k, int h) {
  const std::int64_t t = blockIdx.x;
  for (int v = threadIdx.x; v < h / 8; v += blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < k; ++j)
      accumulate_bf16x8(acc, weights[t * k + j],
                        reinterpret_cast<const uint4*>(combined + static_cast<std::int64_t>(pair_row[t * k + j]) * h)[v]);
    reinterpret_cast<uint4*>(out + t * h)[v] = pack_bf16x8(acc);
  }
}

void discard_nccl_probe_errors() { (void)cudaGetLastError(); }  // as comm::Runtime does after NCCL calls

}  // namespace

const char* to_string(GemmPath path) { return path == GemmPath::grouped ? "grouped" : "loop"; }

UnfusedMoeLayer::UnfusedMoeLayer(const MoeProblem& problem, int rank, ncclComm_t comm, GemmPath gemm)
    : pr_(problem), rank_(rank), comm_(comm), gemm_(gemm) {
  validate(pr_);
  const std::int64_t T = pr_.T_tokens, k = pr_.top_k, h = pr_.h_hidden, I = pr_.h_inter, E = pr_.E_experts;
  max_rows_ = max_rows_received(pr_);
  counts_local_ = DeviceBuffer(E * 4);
  counts_all_ = DeviceBuffer(pr_.P_ranks * E * 4);
  send_rows_ = DeviceBuffer(T * k * h * 2);
  back_recv_ = DeviceBuffer(T * k * h * 2);
  recv_rows_ = DeviceBuffer(max_rows_ * h * 2);    // dispatch receive, then the combine's send buffer
  expert_rows_ = DeviceBuffer(max_rows_ * h * 2);  // expert-major tokens, then Linear-2 output
  l1_out_ = DeviceBuffer(max_rows_ * 2 * I * 2);
  act_ = DeviceBuffer(max_rows_ * I * 2);
  workspace_ = DeviceBuffer(kCublasWorkspaceBytes);
  const std::int64_t index_words = 2 * T * k + 2 * max_rows_;
  index_arrays_ = DeviceBuffer(index_words * 4);
  gemm_pointers_ = DeviceBuffer(6 * pr_.E_local() * sizeof(void*));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_counts_, pr_.P_ranks * E * 4));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_ids_, std::max<std::int64_t>(1, T * k) * 4));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_index_, index_words * 4));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_pointers_, 6 * pr_.E_local() * sizeof(void*)));
  XSTAGE_CUBLAS_CHECK(cublasCreate(&cublas_));
}

UnfusedMoeLayer::~UnfusedMoeLayer() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cudaFreeHost(host_counts_);
  cudaFreeHost(host_ids_);
  cudaFreeHost(host_index_);
  cudaFreeHost(host_pointers_);
}

std::string UnfusedMoeLayer::name() const { return std::string("unfused-nccl-cublas-") + to_string(gemm_); }

void UnfusedMoeLayer::all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                                   const std::vector<std::int64_t>& send_displs, void* recv,
                                   const std::vector<std::int64_t>& recv_counts,
                                   const std::vector<std::int64_t>& recv_displs, cudaStream_t stream) {
  const std::size_t row = pr_.h_hidden;  // elements
  XSTAGE_NCCL_CHECK(ncclGroupStart());
  for (int p = 0; p < pr_.P_ranks; ++p) {
    if (send_counts[p] > 0)
      XSTAGE_NCCL_CHECK(ncclSend(static_cast<const __nv_bfloat16*>(send) + send_displs[p] * row, send_counts[p] * row,
                                 ncclBfloat16, p, comm_, stream));
    if (recv_counts[p] > 0)
      XSTAGE_NCCL_CHECK(ncclRecv(static_cast<__nv_bfloat16*>(recv) + recv_displs[p] * row, recv_counts[p] * row,
                                 ncclBfloat16, p, comm_, stream));
  }
  XSTAGE_NCCL_CHECK(ncclGroupEnd());
  discard_nccl_probe_errors();
}

// result rows of local expert e = act rows of e · weights[e]^T; weights [E_local][weight_rows][k_dim].
// Row-major C[m][n] = A[m][k]·W[n][k]^T is column-major C^T = W^T·A^T: cuBLAS "TN" with m = n_out.
void UnfusedMoeLayer::expert_gemms(const void* weights, std::int64_t weight_rows, int k_dim, const void* act,
                                   void* result, int which, cudaStream_t stream) {
  const float one = 1.0f, zero = 0.0f;
  const auto* W = static_cast<const __nv_bfloat16*>(weights);
  const auto* X = static_cast<const __nv_bfloat16*>(act);
  auto* C = static_cast<__nv_bfloat16*>(result);
  const int n_out = static_cast<int>(weight_rows);
  if (gemm_ == GemmPath::per_expert_loop) {
    for (int e = 0; e < pr_.E_local(); ++e) {
      const std::int64_t rows = plan_.expert_rows[e], first = plan_.expert_first_row[e];
      if (rows == 0) continue;
      XSTAGE_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n_out, static_cast<int>(rows), k_dim, &one,
                                       W + e * weight_rows * k_dim, CUDA_R_16BF, k_dim, X + first * k_dim, CUDA_R_16BF,
                                       k_dim, &zero, C + first * n_out, CUDA_R_16BF, n_out, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
    }
    return;
  }
  // Grouped: one group per expert with rows; pointer arrays live on the device (copied in forward()).
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, kk, lda, ldb, ldc, group_size;
  std::vector<float> alpha, beta;
  for (int e = 0; e < pr_.E_local(); ++e) {
    if (plan_.expert_rows[e] == 0) continue;
    ta.push_back(CUBLAS_OP_T);
    tb.push_back(CUBLAS_OP_N);
    m.push_back(n_out);
    n.push_back(static_cast<int>(plan_.expert_rows[e]));
    kk.push_back(k_dim);
    lda.push_back(k_dim);
    ldb.push_back(k_dim);
    ldc.push_back(n_out);
    alpha.push_back(one);
    beta.push_back(zero);
    group_size.push_back(1);
  }
  if (m.empty()) return;
  void** dev = gemm_pointers_.get<void*>() + which * 3 * pr_.E_local();
  XSTAGE_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      cublas_, ta.data(), tb.data(), m.data(), n.data(), kk.data(), alpha.data(), dev, CUDA_R_16BF, lda.data(),
      dev + pr_.E_local(), CUDA_R_16BF, ldb.data(), beta.data(), dev + 2 * pr_.E_local(), CUDA_R_16BF, ldc.data(),
      static_cast<int>(m.size()), group_size.data(), CUBLAS_COMPUTE_32F));
}

void UnfusedMoeLayer::forward(const LayerInputs& in, LayerOutput& out, cudaStream_t stream) {
  require_input(in.problem.E_experts == pr_.E_experts && in.problem.h_hidden == pr_.h_hidden &&
                    in.problem.h_inter == pr_.h_inter && in.problem.top_k == pr_.top_k &&
                    in.problem.P_ranks == pr_.P_ranks && in.tokens <= pr_.T_tokens && in.rank == rank_,
                "unfused MoE layer: the inputs were made for another problem or rank");
  const int P = pr_.P_ranks, E = pr_.E_experts, EL = pr_.E_local(), k = pr_.top_k;
  const std::int64_t h = pr_.h_hidden, I = pr_.h_inter, pairs = static_cast<std::int64_t>(in.tokens) * k;
  const auto* ids = in.topk_ids.get<std::int32_t>();

  // (a) counts: histogram, all-gather, one copy to the host with the ids.
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(counts_local_.get(), 0, counts_local_.bytes(), stream));
  if (pairs > 0) {
    expert_histogram_kernel<<<static_cast<int>(std::min<std::int64_t>((pairs + kThreads - 1) / kThreads, 1024)), kThreads, 0,
                              stream>>>(ids, pairs, E, counts_local_.get<int>());
    XSTAGE_CUDA_CHECK_LAUNCH();
  }
  XSTAGE_NCCL_CHECK(ncclAllGather(counts_local_.get(), counts_all_.get(), E, ncclInt32, comm_, stream));
  discard_nccl_probe_errors();
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(host_counts_, counts_all_.get(), counts_all_.bytes(), cudaMemcpyDeviceToHost, stream));
  if (pairs > 0) XSTAGE_CUDA_CHECK(cudaMemcpyAsync(host_ids_, ids, pairs * 4, cudaMemcpyDeviceToHost, stream));
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  plan_ = build_alltoall_plan(pr_, rank_, std::vector<int>(host_counts_, host_counts_ + P * E), in.tokens, host_ids_);
  last_peer_bytes_ = plan_.rows_sent_to_peers() * h * 2;
  const std::int64_t sent = plan_.rows_sent(), received = plan_.rows_received();

  // Index arrays to the device in one copy: send_token | expert_row_to_recv_row | recv_row_to_expert_row | pair_send_row.
  std::int32_t* hi = host_index_;
  std::memcpy(hi, plan_.send_token.data(), sent * 4);
  std::memcpy(hi + sent, plan_.expert_row_to_recv_row.data(), received * 4);
  std::memcpy(hi + sent + received, plan_.recv_row_to_expert_row.data(), received * 4);
  std::memcpy(hi + sent + 2 * received, plan_.pair_send_row.data(), pairs * 4);
  const std::int64_t words = sent + 2 * received + pairs;
  if (words > 0)
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(index_arrays_.get(), hi, words * 4, cudaMemcpyHostToDevice, stream));
  const std::int32_t* d_send_token = index_arrays_.get<std::int32_t>();
  const std::int32_t* d_expert_to_recv = d_send_token + sent;
  const std::int32_t* d_recv_to_expert = d_expert_to_recv + received;
  const std::int32_t* d_pair_send_row = d_recv_to_expert + received;
  if (gemm_ == GemmPath::grouped) {
    // Per non-empty expert: {A, B, C} pointers of Linear-1 (slots 0..2) and Linear-2 (slots 3..5).
    const auto* W1 = in.W1.get<__nv_bfloat16>();
    const auto* W2 = in.W2.get<__nv_bfloat16>();
    void** hp = host_pointers_;
    int g = 0;
    for (int e = 0; e < EL; ++e) {
      if (plan_.expert_rows[e] == 0) continue;
      const std::int64_t first = plan_.expert_first_row[e];
      hp[0 * EL + g] = const_cast<__nv_bfloat16*>(W1 + e * 2 * I * h);
      hp[1 * EL + g] = expert_rows_.get<__nv_bfloat16>() + first * h;
      hp[2 * EL + g] = l1_out_.get<__nv_bfloat16>() + first * 2 * I;
      hp[3 * EL + g] = const_cast<__nv_bfloat16*>(W2 + e * h * I);
      hp[4 * EL + g] = act_.get<__nv_bfloat16>() + first * I;
      hp[5 * EL + g] = expert_rows_.get<__nv_bfloat16>() + first * h;
      ++g;
    }
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(gemm_pointers_.get(), hp, 6 * EL * sizeof(void*), cudaMemcpyHostToDevice, stream));
  }

  // (b) dispatch.
  const int vecs = static_cast<int>(h * 2 / 16);
  if (sent > 0) {
    gather_rows_kernel<<<static_cast<unsigned>(sent), kThreads, 0, stream>>>(
        send_rows_.get<uint4>(), in.tokens_bf16.get<uint4>(), d_send_token, vecs);
    XSTAGE_CUDA_CHECK_LAUNCH();
  }
  all_to_all_v(send_rows_.get(), plan_.send_counts, plan_.send_displs, recv_rows_.get(), plan_.recv_counts,
               plan_.recv_displs, stream);
  if (received > 0) {
    gather_rows_kernel<<<static_cast<unsigned>(received), kThreads, 0, stream>>>(
        expert_rows_.get<uint4>(), recv_rows_.get<uint4>(), d_expert_to_recv, vecs);
    XSTAGE_CUDA_CHECK_LAUNCH();
  }

  // (c)-(e) the experts.
  XSTAGE_CUBLAS_CHECK(cublasSetStream(cublas_, stream));
  XSTAGE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.get(), workspace_.bytes()));  // after SetStream, which resets it
  if (received > 0) {
    expert_gemms(in.W1.get(), 2 * I, static_cast<int>(h), expert_rows_.get(), l1_out_.get(), 0, stream);
    swiglu_kernel<<<static_cast<unsigned>(received), kThreads, 0, stream>>>(
        l1_out_.get<__nv_bfloat16>(), act_.get<__nv_bfloat16>(), pr_.h_inter, pr_.b_n);
    XSTAGE_CUDA_CHECK_LAUNCH();
    expert_gemms(in.W2.get(), h, static_cast<int>(I), act_.get(), expert_rows_.get(), 1, stream);
    // (f) back into receive order (reusing the receive buffer), then to the sources.
    gather_rows_kernel<<<static_cast<unsigned>(received), kThreads, 0, stream>>>(
        recv_rows_.get<uint4>(), expert_rows_.get<uint4>(), d_recv_to_expert, vecs);
    XSTAGE_CUDA_CHECK_LAUNCH();
  }
  all_to_all_v(recv_rows_.get(), plan_.recv_counts, plan_.recv_displs, back_recv_.get(), plan_.send_counts,
               plan_.send_displs, stream);

  // (g) top-k weighted sum.
  if (in.tokens > 0) {
    topk_reduce_kernel<<<static_cast<unsigned>(in.tokens), kThreads, 0, stream>>>(
        out.out_bf16.get<__nv_bfloat16>(), back_recv_.get<__nv_bfloat16>(), d_pair_send_row,
        in.topk_weights.get<float>(), k, pr_.h_hidden);
    XSTAGE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace xstage::moe
