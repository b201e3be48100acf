// The combine from the kernel's injection (model::simulate_combine): every Linear-2 tile a burst through its
// CTA's staging slots, storers and the fluid X-Stage. Checked against the closed forms where they apply
// (Eq. 6 for aligned bursts, Eq. 15 for one CTA), and for the kernel's protocol (slots, fences, propagation).
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.hpp"
#include "model/moe.hpp"
#include "model/units.hpp"

namespace xstage::model {
namespace {

constexpr PlatformPoint kPaper{760.0, 717.0, 4.25 * MiB};

CombineInjection one_cta(const std::vector<double>& ready, double bytes, int slots, double latency_ns) {
  CombineInjection in;
  in.ctas.resize(1);
  for (double t : ready) in.ctas[0].push_back({t, bytes});
  in.staging_slots = slots;
  in.B_ref_bytes = bytes;
  in.latency_ns = latency_ns;
  return in;
}

TEST(MoeInjection, OneTileAloneIssuesInTiss0AndDrainsAtOnce) {
  const CombineAudit a = simulate_combine(kPaper, one_cta({1000.0}, 32 * KiB, 1, 500.0));
  ASSERT_EQ(a.tiles.size(), 1u);
  const CombineTileTiming& t = a.tiles[0];
  EXPECT_DOUBLE_EQ(t.staged_ns, 1000.0);
  EXPECT_DOUBLE_EQ(t.start_ns, 1000.0);
  EXPECT_NEAR(t.issued_ns - t.start_ns, kPaper.T_iss0_ns, 1e-6);  // one CTA offers B/T_iss0 << R: q stays 0
  EXPECT_NEAR(t.drained_ns - t.issued_ns, 500.0, 1e-6);           // nothing ahead of it: the latency alone
  EXPECT_EQ(t.draining_at_start, 1);
  EXPECT_DOUBLE_EQ(t.stall_ns, 0.0);
  EXPECT_FALSE(t.throttled);
  EXPECT_EQ(a.binds, StallCause::none);
  EXPECT_DOUBLE_EQ(a.q_peak_bytes, 0.0);
}

// K CTAs staging one tile each at the same instant: the aligned burst of Eq. 6, T_iso = max(T_iss0, (V - Q)/R),
// and the last fence returns once all of V has drained.
TEST(MoeInjection, AlignedBurstsReproduceEq6) {
  for (int K : {4, 66, 148}) {
    CombineInjection in;
    in.ctas.assign(K, {{0.0, 48 * KiB}});
    in.B_ref_bytes = 48 * KiB;
    in.latency_ns = 0.0;
    const CombineAudit a = simulate_combine(kPaper, in);
    const double V = K * 48 * KiB;
    for (std::size_t i = 0; i < a.tiles.size(); ++i) {
      const CombineTileTiming& t = a.tiles[i];
      EXPECT_NEAR(t.issued_ns, isolated_issue_time_ns(kPaper, V), 1e-6 * V) << K;
      // Simultaneous starts count 1, 2, ..., K, as the kernel's atomic counter does.
      EXPECT_EQ(t.draining_at_start, static_cast<int>(i) + 1);
      EXPECT_DOUBLE_EQ(t.spread_ns, 0.0);
    }
    if (V - kPaper.Q_bytes > kPaper.R_bytes_per_ns * kPaper.T_iss0_ns) {
      // Overflowing: throttled at Q, everything accepted at (V - Q)/R and drained at V/R.
      EXPECT_TRUE(a.tiles[0].throttled) << K;
      EXPECT_NEAR(a.tiles[0].drained_ns, V / kPaper.R_bytes_per_ns, 1e-6 * V) << K;
      EXPECT_NEAR(a.q_peak_bytes, kPaper.Q_bytes, 1.0) << K;
    } else {
      EXPECT_FALSE(a.tiles[0].throttled) << K;
    }
    EXPECT_NEAR(a.K_act.mean, (K + 1) / 2.0, 1e-12);
    EXPECT_DOUBLE_EQ(a.K_act.max, K);
  }
}

// One CTA, one slot, an idle storer, no fence latency, no back-pressure: Δt = [T_RS - T_cover]+ with
// T_RS = T_iss0 and T_cover = the gap between the tiles' mainloop ends (Eq. 15).
TEST(MoeInjection, OneCtaOneSlotIsEq15) {
  for (double gap : {200.0, 500.0, 760.0, 1500.0}) {
    const CombineAudit a = simulate_combine(kPaper, one_cta({0.0, gap, 2 * gap, 3 * gap}, 32 * KiB, 1, 0.0));
    const double expect = critical_path_stall_ns(kPaper.T_iss0_ns, gap);
    for (std::size_t i = 1; i < a.tiles.size(); ++i) {
      // With propagation a stall pushes the next tile out by the same amount, so every later tile sees the
      // same cover again: the same stall per tile.
      EXPECT_NEAR(a.tiles[i].stall_ns, expect, 1e-6) << gap << " tile " << i;
      if (expect > 0.0) EXPECT_EQ(a.tiles[i].cause, StallCause::issue);
    }
    EXPECT_DOUBLE_EQ(a.tiles[0].stall_ns, 0.0);
    EXPECT_NEAR(a.T_cover_ns.mean, gap, 1e-6) << gap;
  }
}

TEST(MoeInjection, TwoSlotsHideWhatOneSlotStalls) {
  // Tiles every 500 ns, T_iss0 = 760 ns: one slot stalls 260 ns a tile; with two, the MMA is two tiles ahead
  // and the storer's 760 ns per tile is the bottleneck only at a rate of 1/760 ns: still stalls, but less.
  std::vector<double> ready;
  for (int i = 0; i < 20; ++i) ready.push_back(500.0 * i);
  const CombineAudit one = simulate_combine(kPaper, one_cta(ready, 32 * KiB, 1, 0.0));
  const CombineAudit two = simulate_combine(kPaper, one_cta(ready, 32 * KiB, 2, 0.0));
  EXPECT_GT(one.stall_ns_per_cta, two.stall_ns_per_cta);
  EXPECT_GT(two.stall_ns_per_cta, 0.0);  // 20 tiles at 500 ns, drained at 760 ns each: the storer falls behind
  // Every tile is issued back to back by the storers in the end: the span is set by 20 × T_iss0.
  EXPECT_NEAR(two.tiles.back().issued_ns, 20 * kPaper.T_iss0_ns, 1e-6);
  // Tiles far apart never stall, whatever the slots.
  const CombineAudit far = simulate_combine(kPaper, one_cta({0.0, 5000.0, 10000.0}, 32 * KiB, 1, 1000.0));
  EXPECT_DOUBLE_EQ(far.stall_ns_per_cta, 0.0);
  EXPECT_EQ(far.binds, StallCause::none);
}

TEST(MoeInjection, TheStorerWaitsForThePreviousFence) {
  // Fence latency 3 us, tiles 1 us apart, two slots: the storers take tile i+1 only after tile i's fence, so
  // the slots fill up and the stall is the fence chain's (drain), not the issue's.
  std::vector<double> ready;
  for (int i = 0; i < 8; ++i) ready.push_back(1000.0 * i);
  const CombineAudit a = simulate_combine(kPaper, one_cta(ready, 32 * KiB, 2, 3000.0));
  for (std::size_t i = 1; i < a.tiles.size(); ++i)
    EXPECT_GE(a.tiles[i].start_ns + 1e-9, a.tiles[i - 1].drained_ns) << i;  // one tile at a time
  EXPECT_GT(a.stall_ns_per_cta, 0.0);
  EXPECT_EQ(a.binds, StallCause::drain);
  // Without propagation the stalls accumulate against the original ready times instead.
  CombineInjection fixed = one_cta(ready, 32 * KiB, 2, 3000.0);
  fixed.propagate_stalls = false;
  const CombineAudit b = simulate_combine(kPaper, fixed);
  EXPECT_GT(b.stall_ns_per_cta, a.stall_ns_per_cta);
}

TEST(MoeInjection, ThrottledIssueIsCapacityOrRateBound) {
  // 148 CTAs stage a 64 KiB tile at once into an empty X-Stage: 9.25 MiB overflows Q, every issue is throttled,
  // and each CTA's next tile, 2 us later, finds its one slot still held: capacity (their own aligned burst).
  CombineInjection in;
  in.ctas.assign(148, {{0.0, 64 * KiB}, {2000.0, 64 * KiB}});
  in.B_ref_bytes = 64 * KiB;
  in.latency_ns = 0.0;
  const CombineAudit a = simulate_combine(kPaper, in);
  EXPECT_TRUE(a.tiles[0].throttled);
  EXPECT_DOUBLE_EQ(a.tiles[0].q_at_start, 0.0);
  EXPECT_GT(a.stall_ns_per_cta, 0.0);
  EXPECT_EQ(a.binds, StallCause::capacity);
  EXPECT_GT(a.throttled_fraction, 0.0);
  EXPECT_LE(a.q_peak_bytes, kPaper.Q_bytes + 1.0);
  // Aligned, each round starts from an empty X-Stage again (every storer waits for its fence, so q drains
  // between rounds): still capacity. Staggered over the 2 us instead, the CTAs' tiles start behind other CTAs'
  // bytes: the injection (4.7 TB/s offered against R = 717 GB/s) outruns the drain (rate), or the storers wait
  // on fences that do (drain).
  for (std::size_t c = 0; c < in.ctas.size(); ++c) {
    in.ctas[c].clear();
    for (int i = 0; i < 6; ++i) in.ctas[c].push_back({2000.0 * i + 2000.0 * c / 148, 64 * KiB});
  }
  const CombineAudit b = simulate_combine(kPaper, in);
  EXPECT_GT(b.stall_by_cause_ns[static_cast<int>(StallCause::rate)] + b.stall_by_cause_ns[static_cast<int>(StallCause::drain)],
            b.stall_by_cause_ns[static_cast<int>(StallCause::capacity)]);
  EXPECT_TRUE(b.binds == StallCause::rate || b.binds == StallCause::drain) << to_string(b.binds);
  EXPECT_GT(b.injection_bytes_per_ns, 0.0);
}

TEST(MoeInjection, KactCountsTheDrainingCtasAndTheirPhaseSpread) {
  // Three CTAs, 1 us apart, each draining for T_iss0 + 5 us: the third starts while both others drain.
  CombineInjection in;
  in.ctas = {{{0.0, 8 * KiB}}, {{1000.0, 8 * KiB}}, {{2000.0, 8 * KiB}}};
  in.B_ref_bytes = 8 * KiB;
  in.latency_ns = 5000.0;
  const CombineAudit a = simulate_combine(kPaper, in);
  EXPECT_EQ(a.tiles[0].draining_at_start, 1);
  EXPECT_EQ(a.tiles[1].draining_at_start, 2);
  EXPECT_EQ(a.tiles[2].draining_at_start, 3);
  EXPECT_DOUBLE_EQ(a.tiles[2].spread_ns, 2000.0);
  EXPECT_DOUBLE_EQ(a.K_act.mean, 2.0);
  EXPECT_DOUBLE_EQ(a.K_act.max, 3.0);
}

// ---------------------------------------------------------------------------------------------
// The storer's own rate (StorerCosts) beside the X-Stage's.
// ---------------------------------------------------------------------------------------------

// One CTA, tiles of local rows only (EP = 1): only the storer's own costs remain.
CombineInjection local_only(const std::vector<double>& ready, double local_bytes, const StorerCosts& storer, double latency_ns) {
  CombineInjection in = one_cta(ready, 0.0, 1, latency_ns);
  for (CombineBurst& b : in.ctas[0]) b.local_bytes = local_bytes;
  in.B_ref_bytes = 1.0;
  in.storer = storer;
  return in;
}

TEST(MoeInjection, AtEp1TheStorersOwnRateBindsTheSpan) {
  const StorerCosts storer{62.5, 600.0, 1500.0};
  const CombineAudit a = simulate_combine(kPaper, local_only({1000.0}, 64 * KiB, storer, 1100.0));
  ASSERT_EQ(a.tiles.size(), 1u);
  const CombineTileTiming& t = a.tiles[0];
  // T_RS = T_load + (L + B)/R_S, T_fence adds the fence, the release follows it; nothing entered the X-Stage.
  EXPECT_NEAR(t.issued_ns - t.staged_ns, 600.0 + 64 * KiB / 62.5, 1e-6);
  EXPECT_NEAR(t.drained_ns - t.issued_ns, 1100.0, 1e-6);
  EXPECT_NEAR(t.released_ns - t.drained_ns, 1500.0, 1e-6);
  EXPECT_NEAR(t.T_S_ns, 600.0 + 64 * KiB / 62.5, 1e-9);
  EXPECT_DOUBLE_EQ(t.T_iss0_ns, 0.0);
  EXPECT_DOUBLE_EQ(a.storer_bound_fraction, 1.0);
  EXPECT_DOUBLE_EQ(a.q_peak_bytes, 0.0);
  EXPECT_NEAR(a.T_RS_ns.median, 600.0 + 64 * KiB / 62.5, 1e-6);
  EXPECT_NEAR(a.T_issue_ns.median, 600.0 + 64 * KiB / 62.5, 1e-6);
  EXPECT_NEAR(a.T_drain_ns.median, 600.0 + 64 * KiB / 62.5 + 1100.0, 1e-6);
  // The storer that is never the bound (no storer section): local stores are free, as the audit had them.
  const CombineAudit free = simulate_combine(kPaper, local_only({1000.0}, 64 * KiB, StorerCosts{}, 1100.0));
  EXPECT_DOUBLE_EQ(free.tiles[0].issued_ns, 1000.0);
  EXPECT_DOUBLE_EQ(free.T_RS_ns.max, 0.0);
  EXPECT_DOUBLE_EQ(free.storer_bound_fraction, 0.0);
}

TEST(MoeInjection, TheStorersCycleMakesTheMmaWait) {
  // One slot, tiles 2 us apart, a storer cycle of T_load + L/R_S + T_lat + T_release = 500 + 1024 + 200 + 2000 ns:
  // from the third tile on, each waits for the slot the previous one holds while its storers still release the tile
  // before; in steady state Δt = cycle - gap per tile, charged to the storer.
  const StorerCosts storer{64.0, 500.0, 2000.0};
  std::vector<double> ready;
  for (int i = 0; i < 8; ++i) ready.push_back(2000.0 * i);
  const CombineAudit a = simulate_combine(kPaper, local_only(ready, 64 * KiB, storer, 200.0));
  const double cycle = 500.0 + 64 * KiB / 64.0 + 200.0 + 2000.0;
  EXPECT_DOUBLE_EQ(a.tiles[1].stall_ns, 0.0);
  EXPECT_NEAR(a.tiles.back().stall_ns, cycle - 2000.0, 1e-6);
  EXPECT_EQ(a.binds, StallCause::storer);
  // The storers' own span (from their start, as the kernel's trace stamps it) stays T_load + L/R_S + T_lat; the
  // span the MMA sees (from staging) also holds the wait for the previous tile's release.
  EXPECT_NEAR(a.T_drain_ns.max, 500.0 + 64 * KiB / 64.0 + 200.0, 1e-6);
  EXPECT_GT(a.T_RS_ns.max, a.T_issue_ns.max + 1000.0);
  EXPECT_GT(a.stall_by_cause_ns[static_cast<int>(StallCause::storer)], 0.0);
  EXPECT_DOUBLE_EQ(a.stall_by_cause_ns[static_cast<int>(StallCause::drain)], 0.0);
  for (std::size_t i = 1; i < a.tiles.size(); ++i)
    EXPECT_GE(a.tiles[i].start_ns + 1e-9, a.tiles[i - 1].released_ns) << i;  // one tile at a time, release included
  // A storer slower than the gap on its own issue (no fence, no release): the issue binds, charged to the storer too.
  const CombineAudit slow = simulate_combine(kPaper, local_only(ready, 64 * KiB, StorerCosts{16.0, 0.0, 0.0}, 0.0));
  EXPECT_NEAR(slow.tiles.back().stall_ns, 64 * KiB / 16.0 - 2000.0, 1e-6);
  EXPECT_EQ(slow.binds, StallCause::storer);
}

TEST(MoeInjection, UnhinderedIssueIsTheLargerOfTheTwoBounds) {
  // One CTA, 32 KiB remote and 32 KiB local: issue = max((L + B)/R_S, B·T_iss0/B_ref), no X-Stage back-pressure.
  for (double R_S : {20.0, 50.0, 200.0, 1e4}) {
    CombineInjection in = one_cta({0.0}, 32 * KiB, 1, 0.0);
    in.ctas[0][0].local_bytes = 32 * KiB;
    in.storer = StorerCosts{R_S, 0.0, 0.0};
    const CombineAudit a = simulate_combine(kPaper, in);
    const double expect = std::max(64 * KiB / R_S, kPaper.T_iss0_ns);
    EXPECT_NEAR(a.tiles[0].issued_ns, expect, 1e-6 * expect) << R_S;
    EXPECT_EQ(a.storer_bound_fraction, 64 * KiB / R_S > kPaper.T_iss0_ns ? 1.0 : 0.0) << R_S;
    EXPECT_FALSE(a.tiles[0].throttled);
  }
}

TEST(MoeInjection, AFastStorerLeavesTheXStageBound) {
  // 148 CTAs, each 48 KiB remote and 16 KiB local at once, a storer far faster than the X-Stage: the remote bytes
  // overflow Q and the issue ends at Eq. 6's T_iso for them (the local bytes go along in proportion); the next tiles,
  // 2 us later, find the slots held: capacity, as without the storer.
  CombineInjection in;
  in.ctas.assign(148, {{0.0, 48 * KiB, 16 * KiB}, {2000.0, 48 * KiB, 16 * KiB}});
  in.B_ref_bytes = 48 * KiB;
  in.latency_ns = 0.0;
  in.storer = StorerCosts{1e4, 0.0, 0.0};
  const CombineAudit a = simulate_combine(kPaper, in);
  const double V = 148 * 48 * KiB;
  EXPECT_NEAR(a.tiles[0].issued_ns, isolated_issue_time_ns(kPaper, V), 1e-6 * V);
  EXPECT_TRUE(a.tiles[0].throttled);
  EXPECT_NEAR(a.q_peak_bytes, kPaper.Q_bytes, 1.0);
  EXPECT_EQ(a.binds, StallCause::capacity);
  EXPECT_DOUBLE_EQ(a.storer_bound_fraction, 0.0);
  // A storer slow enough to pace the injection below R (148 x 0.75 x 6 B/ns = 666 < 717 B/ns) never fills the
  // X-Stage: no throttling, each tile issues at its own rate, and what holds the slots is the storer.
  in.storer = StorerCosts{6.0, 0.0, 0.0};
  const CombineAudit paced = simulate_combine(kPaper, in);
  EXPECT_FALSE(paced.tiles[0].throttled);
  EXPECT_DOUBLE_EQ(paced.throttled_fraction, 0.0);
  EXPECT_NEAR(paced.tiles[0].issued_ns, 64 * KiB / 6.0, 1e-6 * 64 * KiB);
  EXPECT_EQ(paced.binds, StallCause::storer);
}

TEST(MoeInjection, ThrottledShareIsMaxMinFair) {
  // Two CTAs at once into an X-Stage of tiny Q: one offers little remote (a mostly local tile through a slow
  // storer), the other a full remote tile. The small offer is met in full, the other gets the rest of R.
  const PlatformPoint p{100.0, 100.0, 1.0};
  CombineInjection in;
  in.ctas = {{{0.0, 1000.0, 9000.0}}, {{0.0, 100000.0, 0.0}}};
  in.B_ref_bytes = 100000.0;  // rate 1000 B/ns per CTA
  in.latency_ns = 0.0;
  in.storer = StorerCosts{200.0, 0.0, 0.0};  // CTA 0 offers 0.1 x 200 = 20 B/ns remote; CTA 1 min(200, 1000)
  const CombineAudit a = simulate_combine(p, in);
  EXPECT_NEAR(a.tiles[0].issued_ns, 10000.0 / 200.0, 1e-3);  // CTA 0 at its own storer rate throughout
  // CTA 1: 80 B/ns while CTA 0 issues (50 ns, plus the first instant filling Q), then all of R.
  EXPECT_NEAR(a.tiles[1].issued_ns, 50.0 + (100000.0 - 80.0 * 50.0 - 1.0) / 100.0, 0.1);
}

TEST(MoeInjection, EmptyAndBadInput) {
  CombineInjection in;
  in.B_ref_bytes = 1.0;
  EXPECT_TRUE(simulate_combine(kPaper, in).tiles.empty());  // no tiles: nothing to do
  in.ctas = {{{0.0, 0.0}}};  // a tile with no remote rows: only the fence
  in.latency_ns = 700.0;
  const CombineAudit z = simulate_combine(kPaper, in);
  EXPECT_DOUBLE_EQ(z.tiles[0].issued_ns, 0.0);
  EXPECT_DOUBLE_EQ(z.tiles[0].drained_ns, 700.0);
  in.staging_slots = 0;
  EXPECT_THROW(simulate_combine(kPaper, in), InputError);
  in.staging_slots = 1;
  in.ctas = {{{1000.0, 1.0}, {500.0, 1.0}}};
  EXPECT_THROW(simulate_combine(kPaper, in), InputError);  // out of walk order
  in.ctas = {{{-1.0, 1.0}}};
  EXPECT_THROW(simulate_combine(kPaper, in), InputError);
  in.ctas = {{{0.0, 1.0}}};
  in.latency_ns = -1.0;
  EXPECT_THROW(simulate_combine(kPaper, in), InputError);
  in.latency_ns = 0.0;
  in.B_ref_bytes = 0.0;
  EXPECT_THROW(simulate_combine(kPaper, in), InputError);
  EXPECT_THROW(simulate_combine(PlatformPoint{0.0, 1.0, 1.0}, one_cta({0.0}, 1.0, 1, 0.0)), InputError);
  EXPECT_STREQ(to_string(StallCause::capacity), "capacity");
  EXPECT_STREQ(to_string(StallCause::rate), "rate");
  EXPECT_STREQ(to_string(StallCause::storer), "storer");
  // Bad storer costs and negative local bytes are refused by name.
  for (const StorerCosts& bad : {StorerCosts{0.0, 0.0, 0.0}, StorerCosts{-5.0, 0.0, 0.0}, StorerCosts{10.0, -1.0, 0.0},
                                 StorerCosts{10.0, 0.0, std::nan("")}}) {
    CombineInjection b = one_cta({0.0}, 1.0, 1, 0.0);
    b.storer = bad;
    EXPECT_THROW(simulate_combine(kPaper, b), InputError);
  }
  CombineInjection neg = one_cta({0.0}, 1.0, 1, 0.0);
  neg.ctas[0][0].local_bytes = -1.0;
  EXPECT_THROW(simulate_combine(kPaper, neg), InputError);
}

}  // namespace
}  // namespace xstage::model
