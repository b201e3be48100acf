// The kernel audits: MegaMoE interleaving (Eq. 12–15, D_knee) and FlashAttention–A2A (Eq. 16–18, M_ub*).
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.hpp"
#include "model/attention.hpp"
#include "model/moe.hpp"
#include "model/units.hpp"

namespace xstage::model {
namespace {

constexpr PlatformPoint kPaper{760.0, 717.0, 4.25 * MiB};

AttentionKernel paper_attention() {
  AttentionKernel k;
  k.b_m = 128;
  k.b_n = 128;
  k.head_dim = 128;
  k.out_bytes = 2;
  k.K = 148;
  k.sigma_ns = 790.0;  // the paper's 0.79 us per KV tile
  k.G_QK_ns = 395.0;
  k.T_lat_ns = 1000.0;
  k.heads = 24;
  k.batch = 1;
  return k;
}

TEST(AttentionAudit, PaperSufficientLengthIsAboutOneKTokens) {
  // B_t = 128·128·2 = 32 KiB, V = 148·32 KiB, G* ≈ 6.0 us, M_ub* = 128·ceil(6003.8/790) = 128·8 = 1024.
  EXPECT_DOUBLE_EQ(attention_tile_bytes(128, 128, 2), 32 * KiB);
  const AttentionAudit a = audit_attention(kPaper, paper_attention(), {512, 1024, 8192});
  EXPECT_DOUBLE_EQ(a.V_bytes, 148 * 32 * KiB);
  EXPECT_NEAR(a.G_star_ns, 6003.8, 0.1);
  EXPECT_EQ(a.M_ub, 1024);
  EXPECT_NEAR(a.M_ub / 1000.0, 1.0, 0.05);
  EXPECT_TRUE(a.capacity_bound_holds);
  // M = 512 (4 KV tiles, 3.16 us) is below M_ub*, M = 1024 (8 tiles, 6.32 us) and 8K are above.
  EXPECT_EQ(a.points[0].test.verdict, Verdict::reshape);
  EXPECT_NEAR(a.points[0].dt_ns, 6003.8 - 4 * 790.0, 0.1);
  EXPECT_EQ(a.points[1].test.verdict, Verdict::piggyback);
  EXPECT_EQ(a.points[2].test.verdict, Verdict::piggyback);
  EXPECT_DOUBLE_EQ(a.points[2].G_Qloop_ns, 64 * 790.0);
  EXPECT_EQ(a.verdict, Verdict::reshape);  // the worst over the requested lengths
  // Every M at or past M_ub* passes, every M below it fails (tile-aligned bound is tight).
  for (std::int64_t M = 128; M <= 4096; M += 128) {
    const AttentionAudit b = audit_attention(kPaper, paper_attention(), {M});
    EXPECT_EQ(b.points[0].test.rate_bound_holds, M >= a.M_ub) << "M=" << M;
  }
}

TEST(AttentionAudit, DrainResidualStaysFlatWhileCompletionCoupledGrowsWithM) {
  const AttentionAudit a = audit_attention(kPaper, paper_attention(), {8192, 16384, 32768, 65536});
  for (const AttentionPoint& pt : a.points) {
    EXPECT_DOUBLE_EQ(pt.E_drain_ns, 0.0) << pt.M;  // X-Stage: the Q-loop drains each burst
    // N_t = ceil(ceil(M/128)·24 / 148) output-tile waves.
    EXPECT_EQ(pt.N_t, (pt.M / 128 * 24 + 147) / 148);
    EXPECT_NEAR(pt.dt_cc_ns, 4849664.0 / 717.0 + 1000.0 - 395.0, 1e-6);
    EXPECT_NEAR(pt.E_cc_ns, pt.N_t * pt.dt_cc_ns, 1e-6);
  }
  // E_cc doubles with M (N_t ∝ M).
  EXPECT_NEAR(a.points[3].E_cc_ns / a.points[2].E_cc_ns, 2.0, 0.01);
  EXPECT_EQ(a.verdict, Verdict::piggyback);
  // The predicted residual is the last wave's drain plus the completion latency: the same at every M.
  for (const AttentionPoint& pt : a.points) EXPECT_NEAR(pt.E_res_ns, 4849664.0 / 717.0 + 1000.0, 1e-6) << pt.M;
}

// Under Ulysses over P ranks (P-1)/P of the output rows leave the rank: the aligned remote burst, its tail and the
// counterfactual shrink with it; with one rank nothing leaves and only the completion latency remains.
TEST(AttentionAudit, RemoteFractionScalesTheBurst) {
  AttentionKernel k = paper_attention();
  k.remote_fraction = 0.5;
  const AttentionAudit half = audit_attention(kPaper, k, {65536});
  EXPECT_NEAR(half.V_bytes, 4849664.0 / 2, 1e-6);
  EXPECT_NEAR(half.points[0].E_tail_ns, 4849664.0 / 2 / 717.0 + 1000.0, 1e-6);
  k.remote_fraction = 0.0;
  EXPECT_NEAR(audit_attention(kPaper, k, {65536}).points[0].E_res_ns, 1000.0, 1e-6);
  k.remote_fraction = 1.5;
  EXPECT_THROW(audit_attention(kPaper, k, {65536}), InputError);
}

TEST(AttentionAudit, ShortSequencesLeaveADrainResidualOnTheCriticalPath) {
  AttentionKernel k = paper_attention();
  const AttentionAudit a = audit_attention(kPaper, k, {256});  // 2 KV tiles: G = 1.58 us
  const AttentionPoint& pt = a.points[0];
  EXPECT_NEAR(pt.dt_ns, 6003.8 - 1580.0, 0.1);
  EXPECT_NEAR(pt.dt_critical_ns, pt.dt_ns - 395.0, 1e-9);
  EXPECT_NEAR(pt.E_drain_ns, pt.N_t * pt.dt_critical_ns, 1e-9);
  EXPECT_EQ(pt.tiles, 2 * 24);
  EXPECT_EQ(pt.N_t, 1);
}

TEST(AttentionAudit, SigmaFromThroughputAndBadInput) {
  // 4·128·128·128 FLOP per KV tile on one of 132 SMs at 600 TFLOP/s: 8.39e6·132/6e5 ns.
  EXPECT_NEAR(sigma_from_throughput_ns(128, 128, 128, 600.0, 132), 4.0 * 128 * 128 * 128 * 132 / 6e5, 1e-9);
  EXPECT_THROW(audit_attention(kPaper, paper_attention(), {}), InputError);
  EXPECT_THROW(audit_attention(kPaper, paper_attention(), {0}), InputError);
  AttentionKernel k = paper_attention();
  k.sigma_ns = 0.0;
  EXPECT_THROW(audit_attention(kPaper, k, {1024}), InputError);
  k = paper_attention();
  k.head_dim = -128;
  EXPECT_THROW(audit_attention(kPaper, k, {1024}), InputError);
}

// fused_both by hand: P = 2, 4 heads per rank, d = 128, b_m = b_n = 128, K = 128 CTAs, σ = 1 us, R = 717 B/ns.
TEST(PushAudit, HeadStartAndPerWaveStallByHand) {
  AttentionKernel k = paper_attention();
  k.K = 128;
  k.sigma_ns = 1000.0;
  k.heads = 4;
  k.remote_fraction = 0.5;
  const AttentionAudit a = audit_attention(kPaper, k, {16384, 4096});
  const double per_head_16k = 3.0 * 2 * 128 * 16384;  // one head's Q, K, V rows of all 16384 positions
  // A fast pusher: 128 m-blocks per head, so the first wave holds one head; after it one head per wave, 128 KV tiles
  // (128 us) per wave, the other rank's half of a head, 6.3 MB per wave, in 6.3 us at 1000 B/ns: no stall.
  const std::vector<PushPoint> fast = audit_push(kPaper, a, 1000.0, 2, 2);
  ASSERT_EQ(fast.size(), 2u);
  EXPECT_EQ(fast[0].first_wave_heads, 1);
  EXPECT_DOUBLE_EQ(fast[0].head_start_bytes, per_head_16k / 2);
  EXPECT_DOUBLE_EQ(fast[0].head_start_ns, per_head_16k / 2 / 717.0);
  EXPECT_DOUBLE_EQ(fast[0].wave_ns, 128 * 1000.0);
  EXPECT_DOUBLE_EQ(fast[0].wave_bytes, per_head_16k / 2);  // the receiver's own half is read in place
  EXPECT_DOUBLE_EQ(fast[0].stall_per_wave_ns, 0.0);
  EXPECT_DOUBLE_EQ(fast[0].E_push_ns, fast[0].head_start_ns);
  EXPECT_DOUBLE_EQ(fast[0].pre_all_to_all_ns, 4 * per_head_16k / 2 / 717.0);
  EXPECT_DOUBLE_EQ(fast[0].hidden_fraction, 0.75);  // one head of four exposed
  // At M = 4096 the first wave (32 m-blocks per head) holds every head: the head start is the whole exchange.
  EXPECT_EQ(fast[1].first_wave_heads, 4);
  EXPECT_NEAR(fast[1].hidden_fraction, 0.0, 1e-12);
  // A slow pusher: 6.3 MB per 128 us wave at 20 B/ns takes 314.6 us, a 186.6 us stall on each of the 3 later waves.
  const std::vector<PushPoint> slow = audit_push(kPaper, a, 20.0, 2, 2);
  EXPECT_DOUBLE_EQ(slow[0].stall_per_wave_ns, per_head_16k / 2 / 20.0 - 128000.0);
  EXPECT_DOUBLE_EQ(slow[0].E_push_ns, slow[0].head_start_ns + 3 * slow[0].stall_per_wave_ns);
  EXPECT_LT(slow[0].hidden_fraction, 0.0);  // worse than exchanging before the kernel
  EXPECT_THROW(audit_push(kPaper, a, 0.0, 2, 2), InputError);
  EXPECT_THROW(audit_push(kPaper, a, 100.0, 2, 1), InputError);
  EXPECT_THROW(audit_push(kPaper, a, 100.0, 0, 2), InputError);
}

TEST(MoeInterleave, UsefulWorkCancelsIssueOverheadOneForOne) {
  const double V = 132 * 16 * KiB;  // ≈ 3016 ns of drain; G* = 2256 ns
  const double G_star = recovery_gap_ns(kPaper, V);
  const InterleaveTest t = interleave_test(kPaper, V, 600.0, 500.0, 1.0, 2.0);
  EXPECT_DOUBLE_EQ(t.G_wave_ns, 500.0);
  EXPECT_DOUBLE_EQ(t.G_int_ns, 500.0 + 0.5 * 600.0);                        // Eq. 12
  EXPECT_NEAR(t.dT_iss_wave_ns, G_star - 500.0, 1e-9);                      // Eq. 9
  EXPECT_NEAR(t.dT_iss_int_ns, G_star - 500.0 - 300.0, 1e-9);               // Eq. 13
  EXPECT_NEAR(t.dT_iss_int_ns, issue_overhead_ns(kPaper, V, t.G_int_ns), 1e-9);
  EXPECT_FALSE(t.sufficient);
  // Eq. 14 is the rate bound at G_int: sufficient exactly when G_int ≥ G*.
  for (double T_L1 : {1000.0, 3000.0, 3512.0, 3513.0, 6000.0}) {
    const InterleaveTest u = interleave_test(kPaper, V, T_L1, 500.0, 1.0, 2.0);
    EXPECT_EQ(u.sufficient, u.G_int_ns >= G_star) << T_L1;
    EXPECT_EQ(u.sufficient, u.dT_iss_int_ns == 0.0) << T_L1;
  }
}

TEST(MoeInterleave, AntiStarvationLeadAndStall) {
  // D_knee = ceil(b_n·K_SM / (2·h_inter)).
  EXPECT_EQ(anti_starvation_lead_rows(128, 132, 768), 11);   // 16896/1536 = 11 exactly
  EXPECT_EQ(anti_starvation_lead_rows(128, 132, 1024), 9);   // 8.25 -> 9
  EXPECT_EQ(anti_starvation_lead_rows(256, 148, 2048), 10);  // 9.25 -> 10
  EXPECT_THROW(anti_starvation_lead_rows(128, 132, 0), InputError);
  // Eq. 15.
  EXPECT_DOUBLE_EQ(critical_path_stall_ns(3000.0, 1000.0), 2000.0);
  EXPECT_DOUBLE_EQ(critical_path_stall_ns(800.0, 1000.0), 0.0);
  EXPECT_NEAR(remote_store_span_ns(kPaper, 148 * 32 * KiB, 1000.0), 6003.8 - 1000.0 + 760.0, 0.1);
}

TEST(MoeAudit, FineGrainedExpertsNeedInterleaving) {
  // h = 4096, fine-grained h_inter = 256, 128x128 bf16 tiles, 800 TFLOP/s on 132 SMs:
  // T_L1 ≈ 22.1 us (reduces over h), T_L2 ≈ 1.38 us (reduces over h_inter).
  const MoeMainloopTimes times = moe_mainloop_times(128, 128, 4096, 256, 800.0, 132);
  EXPECT_NEAR(times.T_L1_ns, 2.0 * 128 * 128 * 4096 * 132 / 8e5, 1e-9);
  EXPECT_NEAR(times.T_L2_ns, 2.0 * 128 * 128 * 256 * 132 / 8e5, 1e-9);
  MoeKernel k;
  k.b_m = 128;
  k.b_n = 128;
  k.out_bytes = 2;
  k.K_act = 66;
  k.T_L1_ns = times.T_L1_ns;
  k.T_L2_ns = times.T_L2_ns;
  k.mix = natural_tile_mix(4096, 256);
  k.K_SM = 132;
  k.h_inter = 256;
  EXPECT_DOUBLE_EQ(k.mix.n1 / k.mix.n2, 512.0 / 4096.0);
  const MoeAudit a = audit_moe(kPaper, k);
  EXPECT_DOUBLE_EQ(a.V_bytes, 66 * 32 * KiB);
  // G* = 66·32 KiB / 717 − 760 ≈ 2256 ns > G_wave = T_L2 ≈ 1384 ns; G_int = T_L2 + T_L1/8 ≈ 4152 ns.
  EXPECT_FALSE(a.wave.rate_bound_holds);
  EXPECT_TRUE(a.interleave.sufficient);
  EXPECT_EQ(a.verdict, Verdict::reshape);
  ASSERT_TRUE(a.D_knee_rows.has_value());
  EXPECT_EQ(*a.D_knee_rows, 33);  // ceil(128·132 / 512)
  EXPECT_NEAR(a.T_RS_wave_ns, 760.0 + (66 * 32 * KiB / 717.0 - 760.0 - times.T_L2_ns), 1e-6);
  EXPECT_NEAR(a.stall_wave_ns, a.T_RS_wave_ns - k.T_L2_ns, 1e-9);
  EXPECT_GT(a.stall_wave_ns, 0.0);
  EXPECT_DOUBLE_EQ(a.interleave.dT_iss_int_ns, 0.0);
  EXPECT_DOUBLE_EQ(a.stall_int_ns, 0.0);
  EXPECT_NE(a.action.find("D_knee = 33"), std::string::npos) << a.action;

  // Few aligned producers: the wave schedule already passes.
  k.K_act = 8;
  EXPECT_EQ(audit_moe(kPaper, k).verdict, Verdict::piggyback);
  // All 132 aligned: capacity holds (q_peak ≈ 3.6 MiB) but G_int ≈ 4152 ns < G* ≈ 5272 ns, so
  // interleaving alone is not enough and the burst must shrink as well.
  k.K_act = 132;
  const MoeAudit big = audit_moe(kPaper, k);
  EXPECT_TRUE(big.wave.capacity_bound_holds);
  EXPECT_FALSE(big.interleave.sufficient);
  EXPECT_GT(big.interleave.dT_iss_int_ns, 0.0);
  EXPECT_EQ(big.verdict, Verdict::shrink_burst);
  EXPECT_NE(big.action.find("also shrink"), std::string::npos) << big.action;
  // Wider tiles overflow Q on their own.
  k.b_n = 256;
  const MoeAudit huge = audit_moe(kPaper, k);
  EXPECT_FALSE(huge.wave.capacity_bound_holds);
  EXPECT_EQ(huge.verdict, Verdict::shrink_burst);
  EXPECT_NE(huge.action.find("overflows Q"), std::string::npos) << huge.action;
  // Bad input.
  k.K_act = 200;
  EXPECT_THROW(audit_moe(kPaper, k), InputError);
  k.K_act = 8;
  k.mix = {0.0, 1.0};
  EXPECT_THROW(audit_moe(kPaper, k), InputError);
}

}  // namespace
}  // namespace xstage::model
