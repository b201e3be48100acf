// The MoE audit from the kernel's injection (audit_schedule: the lockstep simulation of every CTA's own walk,
// then model::simulate_combine) and the schedule rule (choose_schedule, auto_schedule.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "model/moe.hpp"
#include "model/units.hpp"
#include "moe/schedule/auto_schedule.hpp"
#include "moe/schedule/schedule_host.hpp"
#include "test_util.hpp"

namespace xstage::moe {
namespace {

using test::first_rows_from_counts;
using test::random_expert_rows;

MoeProblem layer(int h, int I, int E, int k, int T, DType dtype = DType::bf16, int b_n = 256, int P = 2) {
  MoeProblem p = test::layer_problem(h, I, E, k, T, dtype, b_n, P);
  validate(p);
  return p;
}

ScheduleAuditConfig config_for(const MoeProblem& pr, double tflops, int K_SM = 132) {
  const model::MoeMainloopTimes t = model::moe_mainloop_times(128, pr.b_n, pr.h_hidden, pr.h_inter, tflops, K_SM);
  ScheduleAuditConfig c;
  c.T_L1_ns = t.T_L1_ns;
  c.T_L2_ns = t.T_L2_ns;
  c.platform = h200_nvlink4_point(pr);
  c.ticks_per_tile = 16;
  return c;
}

// The timeline the audit reads is the simulation the dependency checks run on: the same tiles, each CTA's in
// its walk order, never overlapping, and the plain call unchanged by it.
TEST(MoeAudit, TimelineIsTheCtaSimulation) {
  std::mt19937_64 rng(20261205);
  for (int trial = 0; trial < 30; ++trial) {
    CtaLaunch l;
    l.problem = test::small_problem(2, 8, 2, 256);
    const int kind = trial % 3;
    if (kind == 2) l.problem.b_m = 256;
    l.expert_rows = random_expert_rows(rng, l.problem.E_local(), l.problem.b_m, 3);
    l.cluster_n = kind == 1 ? 2 : 1;
    l.cluster_m = kind == 2 ? 2 : 1;
    l.ctas = 2 * (1 + static_cast<int>(rng() % 9));
    l.D_rows = 1 + static_cast<int>(rng() % 3);
    l.wave_experts = 1 + static_cast<int>(rng() % l.problem.E_local());
    SimulationConfig cfg;
    cfg.l1_time = 3;
    cfg.l2_time = 2;
    CtaTimeline timeline;
    const CtaSimulationResult a = simulate_ctas<InterleavedSchedule>(l, cfg, &timeline);
    const CtaSimulationResult b = simulate_ctas<InterleavedSchedule>(l, cfg);
    ASSERT_TRUE(a.finished) << a.deadlock;
    EXPECT_EQ(a.makespan, b.makespan);
    EXPECT_EQ(a.wait_time, b.wait_time);
    ASSERT_EQ(static_cast<int>(timeline.size()), l.ctas);
    long tiles = 0;
    for (const auto& runs : timeline) {
      for (std::size_t i = 0; i < runs.size(); ++i) {
        EXPECT_EQ(runs[i].end - runs[i].start, runs[i].tile.stage == Stage::L1 ? 3 : 2);
        if (i > 0) EXPECT_GE(runs[i].start, runs[i - 1].end);
        EXPECT_LE(runs[i].end, a.makespan);
      }
      tiles += static_cast<long>(runs.size());
    }
    EXPECT_EQ(tiles, a.cta_tiles_run);
  }
}

TEST(MoeAudit, JitterIsSeededAndOffByDefault) {
  CtaLaunch l;
  l.problem = test::small_problem(2, 8, 2, 512);
  l.expert_rows = std::vector<int>(4, 300);
  l.ctas = 16;
  l.D_rows = 2;
  l.wave_experts = 2;
  SimulationConfig cfg;
  cfg.l1_time = 40;
  cfg.l2_time = 20;
  const CtaSimulationResult plain = simulate_ctas<ExpertWaveSchedule>(l, cfg);
  cfg.time_jitter = 0.2;
  const CtaSimulationResult a = simulate_ctas<ExpertWaveSchedule>(l, cfg), b = simulate_ctas<ExpertWaveSchedule>(l, cfg);
  EXPECT_EQ(a.makespan, b.makespan);
  EXPECT_EQ(a.wait_time, b.wait_time);
  EXPECT_NE(a.makespan, plain.makespan);
  cfg.seed = 2;
  const CtaSimulationResult c = simulate_ctas<ExpertWaveSchedule>(l, cfg);
  EXPECT_TRUE(c.finished);
  EXPECT_TRUE(c.violation.empty());
}

// The audit's bookkeeping on the DeepSeek-V3-like headline (bf16, 4096 tokens per rank, P = 2): every CTA tile
// in the lockstep, every Linear-2 CTA tile a combine burst, and the aligned closed form beside it.
TEST(MoeAudit, HeadlineBookkeeping) {
  const MoeProblem pr = layer(7168, 2048, 256, 8, 4096);
  const std::vector<int> rows = balanced_expert_rows(pr);
  ASSERT_EQ(static_cast<int>(rows.size()), 128);
  EXPECT_EQ(rows.front(), 256);
  ScheduleAuditConfig c = config_for(pr, 550.0);
  c.keep_tiles = true;
  for (const ScheduleVariant& v : kernel_variants(pr, 132, true)) {
    const ScheduleAudit a = audit_schedule(pr, rows, 132, v, c);
    const std::string name = describe(v);
    EXPECT_EQ(a.l1_tiles, 256 * 16) << name;  // 256 rows of 128, P1 = 16
    EXPECT_EQ(a.l2_tiles, 256 * 28) << name;  // P2 = 28
    EXPECT_EQ(static_cast<long>(a.combine.tiles.size()), a.l2_tiles) << name;
    EXPECT_EQ(a.staging_slots, 1) << name;
    EXPECT_DOUBLE_EQ(a.B_tile_bytes, 32 * model::KiB) << name;
    // Busy time is the work: (4096·16·T_L1 + 7168·T_L2 ... per CTA), within a tick's rounding.
    const double work = (a.l1_tiles * c.T_L1_ns + a.l2_tiles * c.T_L2_ns) / 132;
    EXPECT_NEAR(a.busy_ns_per_cta, work, 0.02 * work) << name;
    EXPECT_GE(a.makespan_ns + 1.0, a.busy_ns_per_cta) << name;
    EXPECT_GE(a.combine.K_act.max, a.combine.K_act.mean) << name;
    EXPECT_GE(a.combine.K_act.mean, 1.0) << name;
    EXPECT_LE(a.combine.K_act.max, 132.0) << name;
    // On H200 the headline's Linear-2 tiles drain well inside one mainloop: no MMA stall (the kernel measured
    // 0.3-1.0% staging waits here on 2 × H200).
    EXPECT_LT(a.combine.T_RS_ns.max, a.combine.T_cover_ns.min) << name;
    EXPECT_DOUBLE_EQ(a.combine.stall_ns_per_cta, 0.0) << name;
    ASSERT_TRUE(a.aligned.has_value()) << name;
    EXPECT_EQ(a.aligned->kernel.K_act, 132) << name;
    EXPECT_DOUBLE_EQ(a.aligned->B_bytes, 64.0 * 256 * 2) << name;  // the 64 remote rows of a 128-row tile
    ASSERT_TRUE(a.at_K_act.has_value()) << name;
    EXPECT_NEAR(a.at_K_act->kernel.K_act, a.combine.K_act.mean, 0.5) << name;
    // The aligned closed form says "shrink the burst" (132 × 32 KiB overflows Q); the kernel's injection does not
    // align all 132.
    EXPECT_EQ(a.aligned->verdict, model::Verdict::shrink_burst) << name;
    EXPECT_LT(a.combine.K_act.mean, 132.0) << name;
  }
}

// Fine-grained experts (h_inter = 256: a Linear-2 mainloop of ~4 us at 550 TFLOP/s) are where the X-Stage
// reaches the MMA: back-to-back Linear-2 tiles under waves stall on the staging slot, and interleaving puts
// Linear-1 mainloops between them (the paper's case for Algorithm 1).
TEST(MoeAudit, FineGrainedExpertsStallUnderWavesAndInterleavingRelievesIt) {
  const MoeProblem pr = layer(4096, 256, 64, 8, 4096);
  const std::vector<int> rows = balanced_expert_rows(pr);
  const ScheduleAuditConfig c = config_for(pr, 550.0);
  const ScheduleAudit wave = audit_schedule(pr, rows, 132, ScheduleVariant{false, 0, 1, 1}, c);
  const ScheduleAudit inter = audit_schedule(pr, rows, 132, ScheduleVariant{true, 0, 2, 1}, c);
  EXPECT_GT(wave.combine.stall_ns_per_cta, 0.0);
  EXPECT_GT(wave.combine.stalled_fraction, 0.1);
  EXPECT_NE(wave.combine.binds, model::StallCause::none);
  // Only one Linear-1 tile per eight Linear-2 tiles (P1 = 2, P2 = 16): interleaving relieves part of it (Eq. 13-15:
  // min(n1, n2) of every n2 Linear-2 tiles get a Linear-1 mainloop as cover).
  EXPECT_LT(inter.combine.stall_ns_per_cta, 0.7 * wave.combine.stall_ns_per_cta);
  EXPECT_LT(inter.combine.stalled_fraction, wave.combine.stalled_fraction);
  ASSERT_TRUE(wave.aligned.has_value());
  EXPECT_GT(wave.aligned->stall_wave_ns, 0.0);  // the closed form agrees that waves stall
}

TEST(MoeAudit, VariantsTheKernelBuilds) {
  // DiT-like h = 1152 with 256-wide tiles: a half-full last Linear-2 block, so no pairs of either kind.
  const MoeProblem dit = layer(1152, 4608, 8, 2, 2048, DType::fp8_e4m3);
  std::string why;
  EXPECT_FALSE(variant_applies(dit, 132, ScheduleVariant{true, 0, 2, 1}, &why));
  EXPECT_NE(why.find("half-full"), std::string::npos) << why;
  const auto v = kernel_variants(dit, 132, true);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(describe(v[2]), "interleaved");
  // 128-wide tiles: N-pairs where P1 and P2 are even, never M-pairs.
  const MoeProblem narrow = layer(1152, 4608, 8, 2, 2048, DType::bf16, 128);
  EXPECT_FALSE(variant_applies(narrow, 132, ScheduleVariant{false, 0, 1, 2}, &why));
  EXPECT_EQ(kernel_variants(narrow, 132, true).size(), 3u);
  const auto full = kernel_variants(layer(7168, 2048, 256, 8, 4096), 132, true);
  ASSERT_EQ(full.size(), 6u);
  EXPECT_EQ(describe(full[0]), "expert-wave");
  EXPECT_EQ(describe(full[1]), "pipelined waves");
  EXPECT_EQ(describe(full[2]), "interleaved pairs");
  EXPECT_EQ(describe(full[5]), "interleaved m-pairs");
  EXPECT_FALSE(variant_applies(layer(7168, 2048, 256, 8, 4096), 131, full[2]));  // odd K_SM
  EXPECT_THROW(audit_schedule(narrow, balanced_expert_rows(narrow), 132, ScheduleVariant{false, 0, 1, 2}, config_for(narrow, 550.0)),
               InputError);
}

TEST(MoeAudit, OneRankSendsNothing) {
  const MoeProblem pr = layer(2048, 768, 16, 4, 1024, DType::bf16, 256, 1);
  const ScheduleAudit a = audit_schedule(pr, balanced_expert_rows(pr), 132, ScheduleVariant{true, 0, 2, 1}, config_for(pr, 550.0));
  EXPECT_DOUBLE_EQ(a.B_tile_bytes, 0.0);
  EXPECT_FALSE(a.aligned.has_value());
  EXPECT_DOUBLE_EQ(a.combine.stall_ns_per_cta, 0.0);
  EXPECT_DOUBLE_EQ(a.combine.q_peak_bytes, 0.0);
}

TEST(MoeAudit, BadInput) {
  const MoeProblem pr = layer(2048, 768, 16, 4, 1024);
  ScheduleAuditConfig c = config_for(pr, 550.0);
  EXPECT_THROW(audit_schedule(pr, {1, 2}, 132, ScheduleVariant{}, c), InputError);
  c.T_L2_ns = 0.0;
  EXPECT_THROW(audit_schedule(pr, balanced_expert_rows(pr), 132, ScheduleVariant{}, c), InputError);
  c = config_for(pr, 550.0);
  c.time_jitter = 1.0;
  EXPECT_THROW(audit_schedule(pr, balanced_expert_rows(pr), 132, ScheduleVariant{}, c), InputError);
  c = config_for(pr, 550.0);
  EXPECT_THROW(audit_schedule(pr, balanced_expert_rows(pr), 132, ScheduleVariant{false, 0, 2, 2}, c), InputError);
}

// The pass model: the Mixtral-like experts' weights (235 MB of W1 each in bf16) stream once per wave under the
// grouped expert-wave order, but once per row pass under the interleaved one on single CTAs (not on M-pairs);
// experts whose weights fit in L2 are read once whatever the order.
TEST(MoeChoice, PassModelReadsBigExpertsAgainOnlyWhenInterleaved) {
  const MoeProblem mix = layer(4096, 14336, 8, 2, 2048);
  const std::vector<int> rows = balanced_expert_rows(mix);
  const double weights = 4.0 * 3.0 * 4096 * 14336 * 2;  // 4 local experts, W1 + W2
  const double l2 = ScheduleRule{}.l2_bytes;
  EXPECT_DOUBLE_EQ(hbm_weight_bytes(mix, rows, 132, ScheduleVariant{false, 0, 1, 1}, l2), weights);
  EXPECT_GT(hbm_weight_bytes(mix, rows, 132, ScheduleVariant{true, 0, 2, 1}, l2), 3.0 * weights);
  EXPECT_DOUBLE_EQ(hbm_weight_bytes(mix, rows, 132, ScheduleVariant{true, 0, 1, 2}, l2), weights);
  const MoeProblem small = layer(2048, 768, 128, 8, 2048);
  const std::vector<int> r2 = balanced_expert_rows(small);
  EXPECT_DOUBLE_EQ(hbm_weight_bytes(small, r2, 132, ScheduleVariant{true, 0, 2, 1}, l2),
                   hbm_weight_bytes(small, r2, 132, ScheduleVariant{false, 0, 1, 1}, l2));
}

ScheduleChoice choose(const MoeProblem& pr) { return choose_schedule(pr, 132); }

// What the rule picks on shapes of the committed grid (docs/MOE.md, "Choosing the schedule per layer", scores
// all of them).
TEST(MoeChoice, PicksPerLayer) {
  const ScheduleChoice head = choose(layer(7168, 2048, 256, 8, 4096));
  EXPECT_EQ(head.schedule, MoeScheduleKind::expert_wave);  // bf16: the waves' boundaries cost less than interleaving's L2 load
  EXPECT_EQ(head.wave_lag, 0);
  EXPECT_EQ(head.cluster_m, 2);  // 256 rows per expert fill a pair's rows
  EXPECT_EQ(head.rows_per_expert, 256);
  const ScheduleChoice head8 = choose(layer(7168, 2048, 256, 8, 4096, DType::fp8_e4m3));
  EXPECT_EQ(head8.schedule, MoeScheduleKind::interleaved);  // fp8: interleaving's mainloop is the cheaper one (0.970)
  EXPECT_EQ(head8.cluster_n, 1);
  EXPECT_EQ(head8.cluster_m, 2);
  const ScheduleChoice small8 = choose(layer(7168, 2048, 256, 8, 2048, DType::fp8_e4m3));
  EXPECT_EQ(small8.schedule, MoeScheduleKind::interleaved);
  EXPECT_EQ(small8.cluster_n, 2);
  EXPECT_EQ(small8.cluster_m, 1);  // 128 rows per expert: M-pairs would be a gamble on the routing
  const ScheduleChoice mixtral = choose(layer(4096, 14336, 8, 2, 8192));
  EXPECT_EQ(mixtral.schedule, MoeScheduleKind::expert_wave);
  EXPECT_EQ(mixtral.cluster_m, 2);
  const ScheduleChoice big = choose(layer(5120, 1536, 160, 8, 8192, DType::fp8_e4m3));
  EXPECT_EQ(big.schedule, MoeScheduleKind::interleaved);
  for (const ScheduleChoice* c : {&head, &head8, &small8, &mixtral, &big}) {
    EXPECT_FALSE(c->reason.empty());
    EXPECT_GT(c->chosen.predicted_ns, 0.0);
    EXPECT_LE(c->chosen.predicted_ns, c->runner_up.predicted_ns);
    EXPECT_TRUE(c->cluster_n == 1 || c->cluster_n == 2);
    EXPECT_TRUE(c->cluster_m == 1 || c->cluster_m == 2);
    EXPECT_FALSE(c->cluster_n == 2 && c->cluster_m == 2);
    EXPECT_EQ(c->schedule == MoeScheduleKind::interleaved, c->chosen.variant.interleaved);
  }
}

TEST(MoeChoice, MPairsOnlyWhenEveryExpertFillsAPair) {
  const ScheduleRule rule;
  for (int T : {1024, 2048, 4096, 8192}) {
    const MoeProblem pr = layer(7168, 2048, 256, 8, T);
    const ScheduleChoice c = choose(pr);
    for (const ScheduleCandidate& x : c.candidates)
      if (x.variant.cluster_m == 2) EXPECT_EQ(x.applies, T * 8 / 128 >= rule.m_pairs_min_rows) << T;
    if (c.cluster_m == 2) EXPECT_GE(c.rows_per_expert, rule.m_pairs_min_rows);
  }
}

TEST(MoeChoice, DeterministicAndTheDefaultPointIsTheH200s) {
  const MoeProblem pr = layer(4096, 1536, 128, 8, 2048, DType::fp8_e4m3);
  const ScheduleChoice a = choose_schedule(pr, 132), b = choose_schedule(pr, 132, h200_nvlink4_point(pr));
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_DOUBLE_EQ(a.chosen.predicted_ns, b.chosen.predicted_ns);
  // The default point keeps the calibrated per-CTA issue rate for any tile size.
  const MoeProblem narrow = layer(1152, 4608, 8, 2, 2048, DType::bf16, 128);
  EXPECT_NEAR(h200_nvlink4_point(narrow).T_iss0_ns, kH200NvLink4Point.T_iss0_ns / 2, 1e-9);
  EXPECT_DOUBLE_EQ(h200_nvlink4_point(pr).T_iss0_ns, kH200NvLink4Point.T_iss0_ns);
  EXPECT_THROW(choose_schedule(pr, 0), InputError);
  EXPECT_THROW(choose_schedule(pr, 132, model::PlatformPoint{}), InputError);
  MoeProblem bad = pr;
  bad.E_experts = 3;
  EXPECT_THROW(choose_schedule(bad, 132), InputError);
}

}  // namespace
}  // namespace xstage::moe
