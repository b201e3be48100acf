#include "moe/baseline/unfused.hpp"

#include <cuda_bf16.h>

#include <cstring>
#include <string>

#include "common/cublas_check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/nccl_check.hpp"
#include "common/bf16x8.cuh"
#include "moe/baseline/fp8_expert_rows.hpp"
#include "moe/fp8/fp8_warp.cuh"
#include "moe/fp8/quantize_device.hpp"
#include "common/launch.cuh"
#include "moe/swiglu.cuh"

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
    act[r * h_inter + j] = __float2bfloat16_rn(swiglu(g, u));
  }
}

// fp8: padded expert-major row p takes received packed row padded_to_recv[p] (codes | scales, see
// forward_fp8), its codes into `codes` [rows][h] and its scales into cuBLASLt's per-expert N-major layout
// (fp8_expert_rows.hpp); a padding row (-1) gets zero codes and scale 1, so its GEMM outputs are exactly 0.
// One block per padded row.
__global__ void gather_fp8_rows_kernel(std::uint8_t* codes, float* scales, const std::uint8_t* recv,
                                       const std::int32_t* padded_to_recv, const std::int32_t* first, int E_local, int h,
                                       std::int64_t packed_row_bytes) {
  const std::int64_t p = blockIdx.x;
  const std::int32_t src = padded_to_recv[p];
  const std::uint8_t* from = src >= 0 ? recv + static_cast<std::int64_t>(src) * packed_row_bytes : nullptr;
  uint4* to = reinterpret_cast<uint4*>(codes + p * h);
  for (int v = threadIdx.x; v < h / 16; v += blockDim.x)
    to[v] = from != nullptr ? reinterpret_cast<const uint4*>(from)[v] : make_uint4(0, 0, 0, 0);
  const int L = h / fp8::kBlock;
  if (static_cast<int>(threadIdx.x) >= L) return;
  const int e = expert_of_padded_row(first, E_local, p);
  for (int kb = threadIdx.x; kb < L; kb += blockDim.x)
    scales[vec128_scale_index(first, e, L, p, kb)] = from != nullptr ? reinterpret_cast<const float*>(from + h)[kb] : 1.0f;
}

// fp8: act = silu(gate)·up in fp32 from the bf16 Linear-1 output, quantized 1×128 over the logical intermediate
// columns (amax of the fp32 values) into codes [rows][h_inter] and cuBLASLt's per-expert scale layout. One warp
// per (padded row, 128-column block); lane l takes intermediate columns j = 128·kb + 4l .. 4l + 3, whose gate
// columns are contiguous in the tile-interleaved Linear-1 output (b_n/2 is a multiple of 4), as are their up
// columns b_n/2 further. Padding rows (Linear-1 output 0) give codes 0 and scale 1.
__global__ void swiglu_quantize_kernel(const __nv_bfloat16* l1, std::uint8_t* act, float* act_scales,
                                       const std::int32_t* first, int E_local, std::int64_t blocks_total, int h_inter,
                                       int b_n) {
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (warp >= blocks_total) return;  // whole warps leave together
  const int lane = threadIdx.x % 32, L = h_inter / fp8::kBlock;
  const std::int64_t p = warp / L;
  const int kb = static_cast<int>(warp % L);
  const int j = kb * fp8::kBlock + 4 * lane, half = b_n / 2;
  const __nv_bfloat16* in = l1 + p * 2 * h_inter + (j / half) * b_n + j % half;
  const uint2 g = *reinterpret_cast<const uint2*>(in);
  const uint2 u = *reinterpret_cast<const uint2*>(in + half);
  const float2 g01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&g.x));
  const float2 g23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&g.y));
  const float2 u01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 u23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  const float gate[4] = {g01.x, g01.y, g23.x, g23.y}, up[4] = {u01.x, u01.y, u23.x, u23.y};
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = swiglu(gate[i], up[i]);
  const fp8::BlockScale s = warp_block_scale(v);
  *reinterpret_cast<std::uint32_t*>(act + p * h_inter + j) = quantize4(v, s);
  if (lane == 0) act_scales[vec128_scale_index(first, expert_of_padded_row(first, E_local, p), L, p, kb)] = s.scale;
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

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  XSTAGE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

std::int64_t round_up4(std::int64_t v) { return (v + 3) / 4 * 4; }

}  // namespace

const char* to_string(GemmPath path) { return path == GemmPath::grouped ? "grouped" : "loop"; }

UnfusedMoeLayer::UnfusedMoeLayer(const MoeProblem& problem, int rank, ncclComm_t comm, GemmPath gemm)
    : pr_(problem), rank_(rank), comm_(comm), gemm_(gemm) {
  validate(pr_);
  const bool fp8 = pr_.dtype == DType::fp8_e4m3;
  XSTAGE_REQUIRE(!fp8 || gemm_ == GemmPath::per_expert_loop,
                 "unfused-grouped: fp8 W8A8 runs only with the per-expert loop (unfused-loop): "
                 "cublasGemmGroupedBatchedEx has no block-scaled fp8");
  const std::int64_t T = pr_.T_tokens, k = pr_.top_k, h = pr_.h_hidden, I = pr_.h_inter, E = pr_.E_experts;
  max_rows_ = max_rows_received(pr_);
  rows_cap_ = fp8 ? max_fp8_expert_rows(pr_) : max_rows_;
  // fp8 dispatch rows: h codes, then the h/128 fp32 scales padded to 16 B (≤ 12 B per row), so one
  // all-to-all moves both and every row stays 16-byte aligned; shorter than a bf16 row.
  packed_row_bytes_ = h + round_up(h / fp8::kBlock * 4, 16);
  counts_local_ = DeviceBuffer(E * 4);
  counts_all_ = DeviceBuffer(pr_.P_ranks * E * 4);
  send_rows_ = DeviceBuffer(T * k * h * 2);
  back_recv_ = DeviceBuffer(T * k * h * 2);
  recv_rows_ = DeviceBuffer(max_rows_ * h * 2);    // dispatch receive, then the combine's send buffer
  expert_rows_ = DeviceBuffer(rows_cap_ * h * 2);  // expert-major tokens (fp8: codes), then Linear-2 output
  l1_out_ = DeviceBuffer(rows_cap_ * 2 * I * 2);
  act_ = DeviceBuffer(rows_cap_ * I * 2);          // fp8: codes
  workspace_ = DeviceBuffer(kCublasWorkspaceBytes);
  // send_token | expert-major <- receive | receive <- expert-major | pair_send_row | fp8: padded expert offsets
  const std::int64_t index_words = 2 * T * k + 2 * rows_cap_ + pr_.E_local() + 1;
  index_arrays_ = DeviceBuffer(index_words * 4);
  gemm_pointers_ = DeviceBuffer(6 * pr_.E_local() * sizeof(void*));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_counts_, pr_.P_ranks * E * 4));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_ids_, std::max<std::int64_t>(1, T * k) * 4));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_index_, index_words * 4));
  XSTAGE_CUDA_CHECK(cudaMallocHost(&host_pointers_, 6 * pr_.E_local() * sizeof(void*)));
  if (!fp8) {
    XSTAGE_CUBLAS_CHECK(cublasCreate(&cublas_));
    return;
  }
  tokens_fp8_ = DeviceBuffer(T * packed_row_bytes_);
  x_scales_ = DeviceBuffer(rows_cap_ * (h / fp8::kBlock) * 4);
  act_scales_ = DeviceBuffer(rows_cap_ * (I / fp8::kBlock) * 4);
  // D = W·X^T in cuBLAS's column-major terms is "TN": A = W codes ([n_out][K] row-major = K × n_out, transposed),
  // B = X codes ([N][K] row-major = K × N), the only fp8 layout Hopper supports. A (weights) takes 128×128
  // scales, B (activations) 1×128: the pair BLK128x128 / VEC128 is one of the three cuBLAS supports (not both
  // 2D). fp32 compute and scale type, as fp8 requires; no fast accumulation (each 128-K block promoted in fp32).
  XSTAGE_CUBLAS_CHECK(cublasLtCreate(&cublas_lt_));
  XSTAGE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&fp8_desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(fp8_desc_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(fp8_desc_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_desc(fp8_desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  set_desc(fp8_desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  XSTAGE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&fp8_pref_));
  const std::uint64_t workspace_bytes = workspace_.bytes();
  XSTAGE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(fp8_pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes, sizeof(workspace_bytes)));
}

UnfusedMoeLayer::~UnfusedMoeLayer() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  for (auto& [shape, g] : fp8_gemms_) {
    if (g.a != nullptr) cublasLtMatrixLayoutDestroy(g.a);
    if (g.b != nullptr) cublasLtMatrixLayoutDestroy(g.b);
    if (g.d != nullptr) cublasLtMatrixLayoutDestroy(g.d);
  }
  if (fp8_pref_ != nullptr) cublasLtMatmulPreferenceDestroy(fp8_pref_);
  if (fp8_desc_ != nullptr) cublasLtMatmulDescDestroy(fp8_desc_);
  if (cublas_lt_ != nullptr) cublasLtDestroy(cublas_lt_);
  cudaFreeHost(host_counts_);
  cudaFreeHost(host_ids_);
  cudaFreeHost(host_index_);
  cudaFreeHost(host_pointers_);
}

std::string UnfusedMoeLayer::name() const {
  return std::string(pr_.dtype == DType::fp8_e4m3 ? "unfused-nccl-cublaslt-fp8-" : "unfused-nccl-cublas-") +
         to_string(gemm_);
}

void UnfusedMoeLayer::all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                                   const std::vector<std::int64_t>& send_displs, void* recv,
                                   const std::vector<std::int64_t>& recv_counts,
                                   const std::vector<std::int64_t>& recv_displs, std::size_t row_bytes,
                                   cudaStream_t stream) {
  // Bytes: the rows are bf16 values or fp8 codes with their scales, and send/recv only move them.
  XSTAGE_NCCL_CHECK(ncclGroupStart());
  for (int p = 0; p < pr_.P_ranks; ++p) {
    if (send_counts[p] > 0)
      XSTAGE_NCCL_CHECK(ncclSend(static_cast<const std::uint8_t*>(send) + send_displs[p] * row_bytes,
                                 send_counts[p] * row_bytes, ncclUint8, p, comm_, stream));
    if (recv_counts[p] > 0)
      XSTAGE_NCCL_CHECK(ncclRecv(static_cast<std::uint8_t*>(recv) + recv_displs[p] * row_bytes,
                                 recv_counts[p] * row_bytes, ncclUint8, p, comm_, stream));
  }
  XSTAGE_NCCL_CHECK(ncclGroupEnd());
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

// D = X·W^T per expert on cuBLASLt (see the constructor for the operand roles). The scale pointers are set per
// call (they move with the expert); the algorithm is chosen once per shape, with the pointers of the first
// call set, and reused (every expert's pointers are as aligned as the first's: W and X offsets are multiples
// of 512 B, D of 1 KiB, the scales of 16 B).
void UnfusedMoeLayer::fp8_gemm(const std::uint8_t* W, const float* W_scales, int n_out, const std::uint8_t* X,
                               const float* X_scales, int N, int K, __nv_bfloat16* D, cudaStream_t stream) {
  set_desc(fp8_desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(W_scales));
  set_desc(fp8_desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(X_scales));
  const auto shape = std::make_tuple(n_out, N, K);
  auto it = fp8_gemms_.find(shape);
  if (it == fp8_gemms_.end()) {
    it = fp8_gemms_.emplace(shape, Fp8Gemm{}).first;  // the destructor frees whatever gets created
    Fp8Gemm& g = it->second;
    XSTAGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8F_E4M3, K, n_out, K));
    XSTAGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8F_E4M3, K, N, K));
    XSTAGE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_16BF, n_out, N, n_out));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(cublas_lt_, fp8_desc_, g.a, g.b, g.d, g.d, fp8_pref_, 1, &result, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      const DeviceFacts& device = current_device_facts();
      cublasLtMatrixLayoutDestroy(g.a);
      cublasLtMatrixLayoutDestroy(g.b);
      cublasLtMatrixLayoutDestroy(g.d);
      fp8_gemms_.erase(it);  // last: g refers into the erased entry
      throw Error("unfused fp8 layer: cuBLASLt offers no block-scaled fp8 GEMM for [" + std::to_string(N) + " x " +
                  std::to_string(K) + "] x [" + std::to_string(n_out) + " x " + std::to_string(K) +
                  "]^T (A scales BLK128x128_32F, B scales VEC128_32F, TN, bf16 out): heuristic status " +
                  cublasGetStatusName(st) + ", " + std::to_string(found) +
                  " algorithm(s). These scale modes need a Hopper GPU (sm_90) and cuBLAS >= 12.9; this is sm_" +
                  std::to_string(device.cc_major) + std::to_string(device.cc_minor) + " with cuBLASLt " +
                  std::to_string(cublasLtGetVersion()));
    }
    g.algo = result.algo;
  }
  const Fp8Gemm& g = it->second;
  const float one = 1.0f, zero = 0.0f;
  XSTAGE_CUBLAS_CHECK(cublasLtMatmul(cublas_lt_, fp8_desc_, &one, W, g.a, X, g.b, &zero, D, g.d, D, g.d, &g.algo,
                                     workspace_.get(), workspace_.bytes(), stream));
}

void UnfusedMoeLayer::enqueue(const MoeLayerViews& in, cudaStream_t stream) {
  XSTAGE_REQUIRE(in.tokens >= 0 && in.tokens <= pr_.T_tokens,
                 "unfused MoE layer: " + std::to_string(in.tokens) + " tokens, built for at most T = " + std::to_string(pr_.T_tokens));
  const bool fp8 = pr_.dtype == DType::fp8_e4m3;
  const int P = pr_.P_ranks, E = pr_.E_experts, EL = pr_.E_local(), k = pr_.top_k;
  const std::int64_t h = pr_.h_hidden, I = pr_.h_inter, pairs = static_cast<std::int64_t>(in.tokens) * k;
  XSTAGE_REQUIRE(!fp8 || (in.W1_scales != nullptr && in.W2_scales != nullptr),
                 "unfused fp8 layer: the weights come without their scales (W1_scales/W2_scales, as make_layer_inputs makes them "
                 "for dtype fp8_e4m3)");
  const std::int32_t* ids = in.topk_ids;

  // (a) counts: histogram, all-gather, one copy to the host with the ids.
  XSTAGE_CUDA_CHECK(cudaMemsetAsync(counts_local_.get(), 0, counts_local_.bytes(), stream));
  if (pairs > 0) {
    launch_kernel(expert_histogram_kernel, static_cast<int>(std::min<std::int64_t>((pairs + kThreads - 1) / kThreads, 1024)), kThreads, 0, stream, ids, pairs, E, counts_local_.get<int>());
  }
  XSTAGE_NCCL_CHECK(ncclAllGather(counts_local_.get(), counts_all_.get(), E, ncclInt32, comm_, stream));
  XSTAGE_CUDA_CHECK(cudaMemcpyAsync(host_counts_, counts_all_.get(), counts_all_.bytes(), cudaMemcpyDeviceToHost, stream));
  if (pairs > 0) XSTAGE_CUDA_CHECK(cudaMemcpyAsync(host_ids_, ids, pairs * 4, cudaMemcpyDeviceToHost, stream));
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  plan_ = build_alltoall_plan(pr_, rank_, std::vector<int>(host_counts_, host_counts_ + P * E), in.tokens, host_ids_);
  const std::int64_t sent = plan_.rows_sent(), received = plan_.rows_received();
  // Dispatch rows: bf16 rows, or fp8 packed rows; combine rows: bf16.
  const std::int64_t dispatch_row_bytes = fp8 ? packed_row_bytes_ : h * 2;

  // Expert-major order: the plan's, or (fp8) padded per expert to 4 rows (fp8_expert_rows.hpp).
  Fp8ExpertRows padded;
  if (fp8) padded = pad_expert_rows(plan_);
  const std::vector<std::int32_t>& to_recv = fp8 ? padded.padded_to_recv : plan_.expert_row_to_recv_row;
  const std::vector<std::int32_t>& from_recv = fp8 ? padded.recv_to_padded : plan_.recv_row_to_expert_row;
  const std::int64_t expert_rows = static_cast<std::int64_t>(to_recv.size());

  // Index arrays to the device in one copy: send_token | expert-major <- receive | receive <- expert-major |
  // pair_send_row | fp8: padded expert offsets.
  std::int32_t* hi = host_index_;
  std::memcpy(hi, plan_.send_token.data(), sent * 4);
  std::memcpy(hi + sent, to_recv.data(), expert_rows * 4);
  std::memcpy(hi + sent + expert_rows, from_recv.data(), received * 4);
  std::memcpy(hi + sent + expert_rows + received, plan_.pair_send_row.data(), pairs * 4);
  if (fp8) std::memcpy(hi + sent + expert_rows + received + pairs, padded.first.data(), (EL + 1) * 4);
  const std::int64_t words = sent + expert_rows + received + pairs + (fp8 ? EL + 1 : 0);
  if (words > 0)
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(index_arrays_.get(), hi, words * 4, cudaMemcpyHostToDevice, stream));
  const std::int32_t* d_send_token = index_arrays_.get<std::int32_t>();
  const std::int32_t* d_to_recv = d_send_token + sent;
  const std::int32_t* d_from_recv = d_to_recv + expert_rows;
  const std::int32_t* d_pair_send_row = d_from_recv + received;
  const std::int32_t* d_first = d_pair_send_row + pairs;  // fp8 only
  if (gemm_ == GemmPath::grouped) {
    // Per non-empty expert: {A, B, C} pointers of Linear-1 (slots 0..2) and Linear-2 (slots 3..5).
    const auto* W1 = static_cast<const __nv_bfloat16*>(in.W1);
    const auto* W2 = static_cast<const __nv_bfloat16*>(in.W2);
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

  // (b) dispatch. fp8: quantize this rank's tokens 1×128 into packed rows (h codes, then the scales), so the
  // gather into send order and the all-to-all move codes and scales together.
  const void* dispatch_src = in.tokens_bf16;
  if (fp8 && in.tokens > 0) {
    std::uint8_t* packed = tokens_fp8_.get<std::uint8_t>();
    quantize_rows_fp8(static_cast<const __nv_bfloat16*>(in.tokens_bf16), h, in.tokens, pr_.h_hidden, packed, packed_row_bytes_,
                      reinterpret_cast<float*>(packed + h), packed_row_bytes_ / 4, 1, stream);
    dispatch_src = packed;
  }
  if (sent > 0) {
    launch_kernel(gather_rows_kernel, static_cast<unsigned>(sent), kThreads, 0, stream, send_rows_.get<uint4>(), static_cast<const uint4*>(dispatch_src), d_send_token, static_cast<int>(dispatch_row_bytes / 16));
  }
  all_to_all_v(send_rows_.get(), plan_.send_counts, plan_.send_displs, recv_rows_.get(), plan_.recv_counts,
               plan_.recv_displs, dispatch_row_bytes, stream);
  const int vecs = static_cast<int>(h * 2 / 16);  // one bf16 row in 16-byte vectors
  if (received > 0) {
    if (fp8)
      launch_kernel(gather_fp8_rows_kernel, static_cast<unsigned>(expert_rows), kThreads, 0, stream, expert_rows_.get<std::uint8_t>(),
                    x_scales_.get<float>(), recv_rows_.get<std::uint8_t>(), d_to_recv, d_first, EL, pr_.h_hidden, packed_row_bytes_);
    else
      launch_kernel(gather_rows_kernel, static_cast<unsigned>(received), kThreads, 0, stream, expert_rows_.get<uint4>(),
                    recv_rows_.get<uint4>(), d_to_recv, vecs);
  }

  // (c)-(e) the experts.
  if (received > 0) {
    if (fp8) {
      experts_fp8(in, padded, d_first, stream);
    } else {
      XSTAGE_CUBLAS_CHECK(cublasSetStream(cublas_, stream));
      XSTAGE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.get(), workspace_.bytes()));  // after SetStream, which resets it
      expert_gemms(in.W1, 2 * I, static_cast<int>(h), expert_rows_.get(), l1_out_.get(), 0, stream);
      launch_kernel(swiglu_kernel, static_cast<unsigned>(received), kThreads, 0, stream, l1_out_.get<__nv_bfloat16>(), act_.get<__nv_bfloat16>(), pr_.h_inter, pr_.b_n);
      expert_gemms(in.W2, h, static_cast<int>(I), act_.get(), expert_rows_.get(), 1, stream);
    }
    // (f) back into receive order (reusing the receive buffer), then to the sources.
    launch_kernel(gather_rows_kernel, static_cast<unsigned>(received), kThreads, 0, stream, recv_rows_.get<uint4>(), expert_rows_.get<uint4>(), d_from_recv, vecs);
  }
  all_to_all_v(recv_rows_.get(), plan_.recv_counts, plan_.recv_displs, back_recv_.get(), plan_.send_counts,
               plan_.send_displs, h * 2, stream);

  // (g) top-k weighted sum.
  if (in.tokens > 0) {
    launch_kernel(topk_reduce_kernel, static_cast<unsigned>(in.tokens), kThreads, 0, stream, static_cast<__nv_bfloat16*>(in.out_bf16), back_recv_.get<__nv_bfloat16>(), d_pair_send_row, in.topk_weights, k, pr_.h_hidden);
  }
}

// fp8 (c)-(e) over the padded expert-major rows: Linear-1 per expert with rows into l1_out_ (bf16), SwiGLU +
// 1×128 quantization of every padded row into act_ / act_scales_, Linear-2 per expert into expert_rows_ (bf16).
// Expert e's weight scales start at its first block-row (layer.hpp's stacking); its activation scales at
// L·first[e] (fp8_expert_rows.hpp).
void UnfusedMoeLayer::experts_fp8(const MoeLayerViews& in, const Fp8ExpertRows& padded, const std::int32_t* d_first,
                                  cudaStream_t stream) {
  const int EL = pr_.E_local(), h = pr_.h_hidden, I = pr_.h_inter;
  const int L_h = h / fp8::kBlock, L_I = I / fp8::kBlock;
  const std::int64_t L4_h = round_up4(L_h), L4_I = round_up4(L_I);
  const auto* W1 = static_cast<const std::uint8_t*>(in.W1);
  const auto* W2 = static_cast<const std::uint8_t*>(in.W2);
  const float* W1_scales = in.W1_scales;
  const float* W2_scales = in.W2_scales;
  for (int e = 0; e < EL; ++e) {
    const std::int64_t first = padded.first[e];
    const int N = padded.first[e + 1] - padded.first[e];
    if (N == 0) continue;
    fp8_gemm(W1 + static_cast<std::int64_t>(e) * 2 * I * h, W1_scales + e * (2LL * I / fp8::kBlock) * L4_h, 2 * I,
             expert_rows_.get<std::uint8_t>() + first * h, x_scales_.get<float>() + L_h * first, N, h,
             l1_out_.get<__nv_bfloat16>() + first * 2 * I, stream);
  }
  const std::int64_t blocks = padded.total() * L_I;
  launch_kernel(swiglu_quantize_kernel, static_cast<unsigned>((blocks + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, stream, l1_out_.get<__nv_bfloat16>(), act_.get<std::uint8_t>(), act_scales_.get<float>(), d_first, EL, blocks, I, pr_.b_n);
  for (int e = 0; e < EL; ++e) {
    const std::int64_t first = padded.first[e];
    const int N = padded.first[e + 1] - padded.first[e];
    if (N == 0) continue;
    fp8_gemm(W2 + static_cast<std::int64_t>(e) * h * I, W2_scales + e * (static_cast<std::int64_t>(h) / fp8::kBlock) * L4_I,
             h, act_.get<std::uint8_t>() + first * I, act_scales_.get<float>() + L_I * first, N, I,
             expert_rows_.get<__nv_bfloat16>() + first * h, stream);
  }
}

}  // namespace xstage::moe
