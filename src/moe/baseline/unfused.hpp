// The unfused expert-parallel MoE layer, as users run it today: the baseline MegaMoE is measured against.
//
//   (a) counts: a histogram of this rank's top-k ids, ncclAllGather of the [P][E] count matrix, one copy
//       to the host with the ids (the one host synchronisation of the call, as in Megatron-style
//       all-to-all dispatchers, which need the split sizes on the host);
//   (b) dispatch: rows gathered into destination order, then all-to-all-v as grouped ncclSend/ncclRecv of
//       exact sizes (no capacity padding crosses NVLink and no token is dropped), then gathered into
//       expert-major order on the owner;
//   (c) Linear-1 per local expert with cuBLAS (bf16 in, fp32 accumulate, bf16 out);
//   (d) SwiGLU over the tile-interleaved gate/up columns of W1 (layer.hpp);
//   (e) Linear-2 per local expert;
//   (f) combine: expert outputs gathered back into receive order, all-to-all-v back with the counts swapped;
//   (g) top-k weighted sum per token (fp32 accumulate, fixed k order) into the output.
// Everything runs on the caller's stream; results are bitwise reproducible (cuBLAS with a fixed workspace,
// no atomics on floats).
//
// fp8 W8A8 (problem.dtype == fp8_e4m3), DeepGEMM-style block scaling as users run it on Hopper:
//   (b) each source quantizes its tokens 1×128 (quantize_rows_fp8) into rows of codes followed by their
//       scales, and the all-to-all-v moves those packed rows (codes AND scales; the scales padded to 16 B per
//       row), gathered on the owner into expert-major order with every expert padded to 4 rows
//       (fp8_expert_rows.hpp: cuBLASLt's block-scaled GEMM needs M, N multiples of 4) and the scales into
//       cuBLASLt's per-expert N-major layout;
//   (c) Linear-1 per expert with cuBLASLt, A = W1 codes with 128×128 scales (BLK128x128_32F), B = token codes
//       with 1×128 scales (VEC128_32F), fp32 accumulation with per-128-K-block promotion, bf16 out;
//   (d) SwiGLU in fp32 and 1×128 quantization of the activation (one kernel);
//   (e) Linear-2 the same way; (f), (g) as in bf16 (bf16 combine rows).
// cuBLASLt supports these scale modes on Hopper (sm_90) only; the heuristic is queried once per GEMM shape
// and cached in the layer. GemmPath::grouped refuses fp8 (InputError).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <nccl.h>

#include <map>
#include <memory>
#include <tuple>

#include "moe/baseline/alltoall_plan.hpp"
#include "moe/baseline/fp8_expert_rows.hpp"
#include "common/device_buffer.hpp"
#include "moe/layer.hpp"

namespace xstage::moe {

// How the per-expert GEMMs are issued: one cublasGemmEx per expert with rows, or one
// cublasGemmGroupedBatchedEx call per Linear (bf16 is supported there since cuBLAS 12.5).
enum class GemmPath { per_expert_loop, grouped };
const char* to_string(GemmPath path);

class UnfusedMoeLayer final : public MoeLayerImpl {
 public:
  // Allocates the worst case (every token of every source routed here min(k, E_local) times), so no
  // routing can overflow a buffer.
  // Throws InputError for fp8 with GemmPath::grouped.
  UnfusedMoeLayer(const MoeProblem& problem, int rank, ncclComm_t comm, GemmPath gemm);
  ~UnfusedMoeLayer() override;
  UnfusedMoeLayer(const UnfusedMoeLayer&) = delete;
  UnfusedMoeLayer& operator=(const UnfusedMoeLayer&) = delete;

  // Synchronises the host once per call: the exchanged counts decide the all-to-all-v sizes.
  void enqueue(const MoeLayerViews& views, cudaStream_t stream) override;
  std::string name() const override;

 private:
  // One cuBLASLt block-scaled fp8 GEMM shape: its matrix layouts and the algorithm the heuristic chose.
  struct Fp8Gemm {
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                    const std::vector<std::int64_t>& send_displs, void* recv,
                    const std::vector<std::int64_t>& recv_counts, const std::vector<std::int64_t>& recv_displs,
                    std::size_t row_bytes, cudaStream_t stream);
  void expert_gemms(const void* weights, std::int64_t weight_rows, int k_dim, const void* act, void* result,
                    int which, cudaStream_t stream);
  void experts_fp8(const MoeLayerViews& in, const Fp8ExpertRows& padded, const std::int32_t* d_first, cudaStream_t stream);
  // D[N][n_out] (bf16, row-major) = X[N][K] · W[n_out][K]^T from e4m3 codes with W's 128×128 and X's 1×128
  // scales (cuBLASLt's layouts, fp8_expert_rows.hpp), N a multiple of 4.
  void fp8_gemm(const std::uint8_t* W, const float* W_scales, int n_out, const std::uint8_t* X, const float* X_scales,
                int N, int K, __nv_bfloat16* D, cudaStream_t stream);

  MoeProblem pr_;
  int rank_;
  ncclComm_t comm_;
  GemmPath gemm_;
  cublasHandle_t cublas_ = nullptr;      // bf16
  cublasLtHandle_t cublas_lt_ = nullptr;  // fp8
  cublasLtMatmulDesc_t fp8_desc_ = nullptr;
  cublasLtMatmulPreference_t fp8_pref_ = nullptr;
  std::map<std::tuple<int, int, int>, Fp8Gemm> fp8_gemms_;  // by (n_out, N, K): one heuristic query per shape
  std::int64_t max_rows_ = 0;
  std::int64_t rows_cap_ = 0;          // expert-major rows the buffers hold (fp8: padded per expert)
  std::int64_t packed_row_bytes_ = 0;  // fp8: one dispatched row, h codes then h/128 scales padded to 16 B
  DeviceBuffer counts_local_, counts_all_, send_rows_, recv_rows_, expert_rows_, l1_out_, act_, back_recv_,
      workspace_, index_arrays_, gemm_pointers_, tokens_fp8_, x_scales_, act_scales_;
  // Pinned host staging: counts + ids coming back, index arrays (and grouped-GEMM pointers) going out.
  int* host_counts_ = nullptr;
  std::int32_t* host_ids_ = nullptr;
  std::int32_t* host_index_ = nullptr;
  void** host_pointers_ = nullptr;
  AllToAllPlan plan_;
};

}  // namespace xstage::moe
