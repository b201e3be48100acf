// FlashAttention with the post-attention Ulysses all-to-all fused into its epilogue: piggyback on the
// Q-loop (paper §4.3).
//
// Each persistent CTA that finishes a b_m×d output tile remote-stores it (B_t = b_m·d·s_out bytes) and
// starts its next tile; the next tile's full Q-loop over ceil(M/b_n) KV tiles is the drain window.
// Conservatively all K producers align: V = K·B_t, and the gap is bounded below by σ·ceil(M/b_n).
// Equation numbers: the summary contrasts "Eq. 17 and 18" (completion-coupled vs X-Stage); we read
// Eq. 16 = Δt^cc, Eq. 17 = E^cc = N_t·Δt^cc, Eq. 18 = Δt(M) = [V/R − G_Qloop(M) − T_iss0]+.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/burst_gap.hpp"

namespace xstage::model {

// B_t = b_m·d·s_out (§4.3 design audit).
double attention_tile_bytes(int b_m, int head_dim, int out_bytes);

// Conservative lower bound of the Q-loop gap (§4.3, convergence bound): G_Qloop(M) ≥ σ·ceil(M/b_n).
double qloop_gap_lower_bound_ns(double sigma_ns, std::int64_t M, int b_n);

// Sufficient sequence length (§4.3): M_ub* = b_n·ceil(G*/σ). Every M ≥ M_ub* satisfies both bounds when
// the capacity bound holds.
std::int64_t sufficient_seq_len(double G_star_ns, double sigma_ns, int b_n);

// σ, the time per KV tile of one CTA, from a whole-GPU throughput assumption: QK^T and PV are
// 4·b_m·b_n·d FLOP per KV tile, and K_SM SMs share the throughput.
double sigma_from_throughput_ns(int b_m, int b_n, int head_dim, double tflops, int K_SM);

struct AttentionKernel {
  int b_m = 128;            // query rows per output tile
  int b_n = 128;            // KV rows per KV tile
  int head_dim = 128;       // d
  int out_bytes = 2;        // s_out (bf16 = 2)
  int K = 0;                // concurrent producers (persistent CTAs), worst case all aligned
  double sigma_ns = 0.0;    // σ, Q-loop time per KV tile
  double G_QK_ns = 0.0;     // double-buffered cover window, about one QK^T mainloop
  double T_lat_ns = 0.0;    // fixed completion latency of the completion-coupled counterfactual (Eq. 16)
  std::int64_t heads = 1;   // heads on this rank (H/P under Ulysses)
  std::int64_t batch = 1;
  double remote_fraction = 1.0;  // of the output rows that go to another rank: (P-1)/P under Ulysses
};

// One sequence length.
struct AttentionPoint {
  std::int64_t M = 0;
  double G_Qloop_ns = 0.0;   // σ·ceil(M/b_n)
  std::int64_t tiles = 0;    // output tiles on this rank: ceil(M/b_m)·heads·batch
  std::int64_t N_t = 0;      // output-tile waves: ceil(tiles/K)
  double dt_ns = 0.0;        // Δt(M) = [V/R − G_Qloop − T_iss0]+, issue-side back-pressure (Eq. 18)
  double dt_critical_ns = 0.0;  // Δt'(M) = [Δt − G_QK]+, what reaches the compute critical path
  double E_drain_ns = 0.0;   // N_t·Δt'(M): predicted drain-induced residual under the X-Stage (§4.3)
  double dt_cc_ns = 0.0;     // Δt^cc = [V/R + T_lat − T_cover]+ with T_cover = G_QK (Eq. 16)
  double E_cc_ns = 0.0;      // E^cc = N_t·Δt^cc: the completion-coupled counterfactual, grows ∝ M (Eq. 17)
  double E_tail_ns = 0.0;    // the last wave's burst drains after the last tile's compute, with nothing left to
                             // hide it: V/R + T_lat (the kernel completes when every rank's rows have arrived)
  double E_res_ns = 0.0;     // predicted sender-visible residual T_fused - T_FA: E_drain + E_tail
  DesignTest test;           // Eq. 10 at G = G_Qloop(M)
};

struct AttentionAudit {
  AttentionKernel kernel;
  double B_bytes = 0.0;  // B_t
  double V_bytes = 0.0;  // K·B_t·remote_fraction: the aligned burst that leaves the rank
  double G_star_ns = 0.0;
  double q_peak_bytes = 0.0;
  bool capacity_bound_holds = false;
  std::int64_t M_ub = 0;  // M_ub*
  std::vector<AttentionPoint> points;  // one per requested M, in the order given
  Verdict verdict = Verdict::piggyback;  // the worst over the requested M
  std::string action;
};

// Throws InputError for non-positive shapes, σ, K or M, and for an empty M list.
AttentionAudit audit_attention(const PlatformPoint& p, const AttentionKernel& kernel,
                               const std::vector<std::int64_t>& seq_lens);

// The Ulysses layer that hides the pre-attention all-to-all too (fused_both, beyond the paper; docs/ATTENTION.md):
// the kernel's tiles walk each head's m-blocks in turn, so a wave of K CTAs consumes K / ceil(M/b_m) heads per Q-loop
// time G_Qloop(M); before the kernel each rank pushes its rows of the first wave's heads to every rank on every SM
// (the head start, its remote part at the platform's drain rate R); the pusher beside the kernel then has to push the
// next wave's heads within a wave: each rank its M/P rows of each head to all P ranks, 3·M·d·s_in bytes per head.
// What the model leaves out: the copy-out of the output window (fused_post pays it too) and any cost of the waits in
// the attention kernel itself.
struct PushPoint {
  std::int64_t M = 0;
  std::int64_t first_wave_heads = 0;  // min(heads·batch, ceil(K / ceil(M/b_m)))
  double head_start_bytes = 0.0;      // remote bytes one rank pushes before its kernel
  double head_start_ns = 0.0;         // head_start_bytes / R
  double wave_ns = 0.0;               // G_Qloop(M): one wave of tiles
  double wave_bytes = 0.0;            // what one rank's pusher moves for the next wave: K/ceil(M/b_m) heads (at most all),
                                      // the (P − 1)/P of their rows that live on other ranks (the own rows are read in place)
  double stall_per_wave_ns = 0.0;     // [wave_bytes / R_push − wave_ns]+
  double E_push_ns = 0.0;             // head start + (N_t − 1)·stall: what fused_both adds to the fused kernel
  double pre_all_to_all_ns = 0.0;     // the exposed pre-attention exchange of serial and fused_post: remote bytes / R
  double hidden_fraction = 0.0;       // 1 − E_push / pre_all_to_all (negative: fused_both loses to the exchange)
};

// `R_push_bytes_per_ns`: the pusher beside the kernel, all of its SMs together; `in_bytes`: bytes per Q, K, V element;
// `ranks`: P >= 2. Throws InputError for non-positive rates or sizes, or P < 2.
std::vector<PushPoint> audit_push(const PlatformPoint& p, const AttentionAudit& audit, double R_push_bytes_per_ns, int in_bytes,
                                  int ranks);

}  // namespace xstage::model
