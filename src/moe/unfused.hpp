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
#pragma once

#include <cublas_v2.h>
#include <nccl.h>

#include <memory>

#include "moe/alltoall_plan.hpp"
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
  UnfusedMoeLayer(const MoeProblem& problem, int rank, ncclComm_t comm, GemmPath gemm);
  ~UnfusedMoeLayer() override;
  UnfusedMoeLayer(const UnfusedMoeLayer&) = delete;
  UnfusedMoeLayer& operator=(const UnfusedMoeLayer&) = delete;

  void forward(const LayerInputs& in, LayerOutput& out, cudaStream_t stream) override;
  std::string name() const override;
  std::int64_t last_peer_bytes() const override { return last_peer_bytes_; }
  const AllToAllPlan& last_plan() const { return plan_; }

 private:
  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                    const std::vector<std::int64_t>& send_displs, void* recv,
                    const std::vector<std::int64_t>& recv_counts, const std::vector<std::int64_t>& recv_displs,
                    cudaStream_t stream);
  void expert_gemms(const void* weights, std::int64_t weight_rows, int k_dim, const void* act, void* result,
                    int which, cudaStream_t stream);

  MoeProblem pr_;
  int rank_;
  ncclComm_t comm_;
  GemmPath gemm_;
  cublasHandle_t cublas_ = nullptr;
  std::int64_t max_rows_ = 0;
  DeviceBuffer counts_local_, counts_all_, send_rows_, recv_rows_, expert_rows_, l1_out_, act_, back_recv_,
      workspace_, index_arrays_, gemm_pointers_;
  // Pinned host staging: counts + ids coming back, index arrays (and grouped-GEMM pointers) going out.
  int* host_counts_ = nullptr;
  std::int32_t* host_ids_ = nullptr;
  std::int32_t* host_index_ = nullptr;
  void** host_pointers_ = nullptr;
  AllToAllPlan plan_;
  std::int64_t last_peer_bytes_ = 0;
};

}  // namespace xstage::moe
