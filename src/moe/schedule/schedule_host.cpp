#include "moe/schedule/schedule_host.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"
#include "model/moe.hpp"
#include "moe/problem/layout.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

long D_knee_rows(const MoeProblem& problem, int K_SM) {
  validate(problem);
  return model::anti_starvation_lead_rows(problem.b_n, K_SM, problem.h_inter);
}

long interleave_lead_rows(const MoeProblem& pr, int K_SM) {
  return std::max<long>(D_knee_rows(pr, K_SM), ceil_div(K_SM, pr.P2_l2_n_blocks()));
}

int required_ring_slots(const InterleavedSchedule& s) { return std::max(1, s.D_rows); }

int required_ring_slots(const ExpertWaveSchedule& s) {
  // A wave's rows and the next λ waves' rows are all live at once: their L1 tiles come before its L2 tiles.
  int most = 1;
  for (int w = 0; w < s.num_waves(); ++w)
    most = std::max(most, s.rows_before_wave(w + 1 + s.l2_lag_waves) - s.rows_before_wave(w));
  return most;
}

namespace {

template <class Schedule>
std::vector<Tile> sequence_of(const Schedule& schedule, int g) {
  std::vector<Tile> out;
  for (auto step = schedule.next(schedule.start(g)); step.tile.valid(); step = schedule.next(step.next))
    out.push_back(step.tile);
  return out;
}

template <class Schedule>
void check_schedule(const Schedule& s) {
  XSTAGE_REQUIRE(s.Gs >= 1, "schedule: needs at least one instance (Gs = " + std::to_string(s.Gs) + ")");
  XSTAGE_REQUIRE(s.streams.P1 >= 1 && s.streams.P2 >= 1, "schedule: P1 and P2 must be positive");
  XSTAGE_REQUIRE(s.streams.rows.first_row != nullptr && s.streams.rows.E_local >= 1, "schedule: no scheduler rows");
}

// The lockstep simulation shared by both schedules (see the header).
template <class Schedule>
SimulationResult simulate_impl(const Schedule& s, const SimulationConfig& cfg) {
  check_schedule(s);
  XSTAGE_REQUIRE(cfg.l1_time >= 1 && cfg.l2_time >= 1, "simulation: tile times must be >= 1");
  const TileStreams& st = s.streams;
  const int rows = st.rows.num_rows();
  const int S = cfg.ring_slots > 0 ? cfg.ring_slots : std::max(rows, 1);
  std::vector<std::uint32_t> l1_done(S, 0), l2_done(S, 0);     // the kernel's counters
  std::vector<int> row_l1(rows, 0), row_l2(rows, 0);           // independent tallies for the check

  SimulationResult res;
  res.runs.resize(s.Gs);
  std::vector<typename Schedule::State> state(s.Gs);
  std::vector<Tile> head(s.Gs);
  std::vector<long> busy_until(s.Gs, -1);
  std::vector<Tile> running(s.Gs);
  std::vector<char> head_stalled(s.Gs, 0);
  for (int g = 0; g < s.Gs; ++g) {
    const auto step = s.next(s.start(g));
    head[g] = step.tile;
    state[g] = step.next;
  }
  auto ready = [&](const Tile& t) {
    const int slot = t.row % S;
    if (t.stage == Stage::L2) return l1_done[slot] >= l1_done_target(t.row, S, st.P1);
    return l2_done[slot] >= slot_free_target(t.row, S, st.P2);
  };
  for (long now = 0; now <= cfg.max_time; ++now) {
    // Completions at `now` take effect before anything starts at `now`.
    for (int g = 0; g < s.Gs; ++g)
      if (busy_until[g] == now) {
        const Tile& t = running[g];
        if (t.stage == Stage::L1) ++l1_done[t.row % S], ++row_l1[t.row];
        else ++l2_done[t.row % S], ++row_l2[t.row];
        busy_until[g] = -1;
      }
    bool any_busy = false, all_done = true, moved = false;
    for (int g = 0; g < s.Gs; ++g) {
      if (busy_until[g] >= 0) { any_busy = true; all_done = false; continue; }
      if (!head[g].valid()) continue;
      all_done = false;
      const Tile t = head[g];
      if (!ready(t)) {
        if (t.stage == Stage::L2) ++res.l2_stall_time, head_stalled[g] = true;
        else ++res.l1_stall_time;
        continue;
      }
      // The independent check: L2 (p) after all of row p's L1 tiles; L1 (p) into a slot whose previous row
      // p - S has finished all its L2 tiles.
      if (t.stage == Stage::L2 && row_l1[t.row] != st.P1) res.dependencies_held = false;
      if (t.stage == Stage::L1 && t.row >= S && row_l2[t.row - S] != st.P2) res.dependencies_held = false;
      const long dur = t.stage == Stage::L1 ? cfg.l1_time : cfg.l2_time;
      if (head_stalled[g]) ++res.l2_stalled_tiles, head_stalled[g] = false;
      res.runs[g].push_back(TileRun{t, now, now + dur});
      running[g] = t;
      busy_until[g] = now + dur;
      any_busy = moved = true;
      ++res.tiles_run;
      const auto step = s.next(state[g]);
      head[g] = step.tile;
      state[g] = step.next;
    }
    if (all_done) {
      res.finished = true;
      res.makespan = now;
      return res;
    }
    if (!any_busy && !moved) {
      for (int g = 0; g < s.Gs; ++g)
        if (head[g].valid())
          res.deadlock += "instance " + std::to_string(g) + " waits at " + (head[g].stage == Stage::L1 ? "L1" : "L2") +
                          "(row " + std::to_string(head[g].row) + ", n " + std::to_string(head[g].n_block) + "); ";
      res.makespan = now;
      return res;
    }
  }
  res.deadlock = "simulation ran past max_time";
  return res;
}

}  // namespace

std::vector<Tile> instance_sequence(const InterleavedSchedule& s, int g) { check_schedule(s); return sequence_of(s, g); }
std::vector<Tile> instance_sequence(const ExpertWaveSchedule& s, int g) { check_schedule(s); return sequence_of(s, g); }

std::string format_sequence(const std::vector<Tile>& tiles) {
  std::string out;
  for (const Tile& t : tiles) {
    if (!out.empty()) out += ' ';
    out += (t.stage == Stage::L1 ? "L1(" : "L2(") + std::to_string(t.row) + "," + std::to_string(t.n_block) + ")";
  }
  return out;
}

L2GapStats l2_gap_stats(const std::vector<std::vector<Tile>>& sequences) {
  L2GapStats st;
  long l1_total = 0, back_to_back = 0;
  for (const auto& seq : sequences) {
    int last_l2 = -1;
    for (int i = 0; i < static_cast<int>(seq.size()); ++i) {
      if (seq[i].stage != Stage::L2) continue;
      if (last_l2 >= 0) {
        const int between = i - last_l2 - 1;  // everything between two L2 tiles is L1
        ++st.l2_pairs;
        l1_total += between;
        if (between == 0) ++back_to_back;
      }
      last_l2 = i;
    }
  }
  if (st.l2_pairs > 0) {
    st.mean_l1_between = static_cast<double>(l1_total) / st.l2_pairs;
    st.back_to_back_fraction = static_cast<double>(back_to_back) / st.l2_pairs;
  }
  return st;
}

// D = 0 is simulated as given (it deadlocks: that is how the tests show the simulation can fail);
// make_interleaved_schedule is what refuses it for the kernel.
SimulationResult simulate(const InterleavedSchedule& s, const SimulationConfig& c) {
  XSTAGE_REQUIRE(s.D_rows >= 0, "interleaved schedule: the lead D must be >= 0 rows");
  return simulate_impl(s, c);
}
SimulationResult simulate(const ExpertWaveSchedule& s, const SimulationConfig& c) {
  XSTAGE_REQUIRE(s.wave_experts >= 1, "expert-wave schedule: wave size must be >= 1 expert");
  return simulate_impl(s, c);
}

namespace {

// A tile's time with SimulationConfig::time_jitter: base × (1 + j·u), u in [-1, 1) from a SplitMix64 hash of
// (seed, cluster, tile index), so a run is reproducible and independent of the standard library.
long jittered(long base, const SimulationConfig& cfg, int cluster, std::size_t tile) {
  std::uint64_t z = cfg.seed + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(cluster) * 1000003ull + tile + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  return std::max(1L, std::lround(static_cast<double>(base) * (1.0 + cfg.time_jitter * u)));
}

struct CtaTile {
  Tile tile;
  std::uint32_t l1_target = 0;  // what the kernel's L2 wait uses (walk.l1_target)
  int half = 0;                 // walk.half (M-pairs)
};

// Every tile CTA `cta` runs, with the kernel's targets: the walk the kernel's producer makes.
template <class Schedule, int kN, int kM>
std::vector<CtaTile> cta_walk(const Schedule& sched, const std::uint32_t* n_row_last, int cta, int slots) {
  std::vector<CtaTile> out;
  for (TileWalk<Schedule, kN, kM> walk(sched, n_row_last, cta); walk.next();)
    out.push_back({walk.tile, walk.tile.stage == Stage::L2 ? walk.l1_target(slots) : 0u, walk.half});
  return out;
}

template <class Schedule, int kN, int kM>
CtaSimulationResult simulate_ctas_impl(const CtaLaunch& l, const SimulationConfig& cfg, CtaTimeline* timeline) {
  const MoeProblem& pr = l.problem;
  const int EL = pr.E_local();
  XSTAGE_REQUIRE(static_cast<int>(l.expert_rows.size()) == EL, "CTA simulation: one row count per local expert");
  XSTAGE_REQUIRE(l.ctas >= 1 && l.ctas % (kN * kM) == 0, "CTA simulation: the CTAs must fill whole clusters");
  // The owner's scheduler rows and the mixed pairs' N-row bits, as the kernel computes them.
  std::vector<int> first_row(EL + 1, 0);
  std::vector<std::uint32_t> n_row_last((EL + 31) / 32 + 1, 0u);
  for (int e = 0; e < EL; ++e) {
    const int blocks = m_blocks(l.expert_rows[e], pr.b_m);
    first_row[e + 1] = first_row[e] + blocks;
    if (kM == 2 && blocks > 0 && !MixedPairTiling::m_row(l.expert_rows[e], blocks - 1)) n_row_last[e / 32] |= 1u << (e % 32);
  }
  const int rows = first_row[EL];
  const int S = l.ring_slots > 0 ? l.ring_slots : std::max(rows, 1);
  const Schedule sched = make_cluster_schedule<Schedule, kN, kM>(pr, first_row.data(), l.ctas, l.D_rows, l.wave_experts, l.wave_lag);
  std::vector<std::vector<CtaTile>> walks(l.ctas);
  std::vector<int> l1_total(rows, 0), l2_total(rows, 0);
  CtaSimulationResult res;
  for (int c = 0; c < l.ctas; ++c) {
    walks[c] = cta_walk<Schedule, kN, kM>(sched, n_row_last.data(), c, S);
    for (const CtaTile& t : walks[c]) ++(t.tile.stage == Stage::L1 ? l1_total : l2_total)[t.tile.row];
    res.cta_tiles_expected += static_cast<long>(walks[c].size());
  }
  const int clusters = l.ctas / (kN * kM), size = kN * kM;
  for (int g = 0; g < clusters; ++g)
    for (int c = 1; c < size; ++c)
      if (walks[g * size + c].size() != walks[g * size].size()) {
        res.violation = "the CTAs of cluster " + std::to_string(g) + " walk different numbers of tiles";
        return res;
      }
  std::vector<std::uint32_t> l1_done(S, 0), l2_done(S, 0);  // the kernel's counters
  std::vector<int> l1_finished(rows, 0), l2_finished(rows, 0);  // the truth
  std::vector<std::size_t> next(clusters, 0);
  std::vector<long> busy_until(clusters, -1);
  if (timeline) timeline->assign(l.ctas, {});
  auto cta_ready = [&](const CtaTile& t) {
    const int slot = t.tile.row % S;
    if (t.tile.stage == Stage::L2) return l1_done[slot] >= t.l1_target;
    return t.tile.row < S || l2_done[slot] >= slot_free_target(t.tile.row, S, pr.P2_l2_n_blocks());
  };
  auto check_start = [&](const CtaTile& t) {
    const int p = t.tile.row;
    if (t.tile.stage == Stage::L2 && l1_finished[p] != l1_total[p] && res.violation.empty())
      res.violation = "an L2 tile of row " + std::to_string(p) + " started after " + std::to_string(l1_finished[p]) + " of its " +
                      std::to_string(l1_total[p]) + " L1 CTA tiles (target " + std::to_string(t.l1_target) + ")";
    if (t.tile.stage == Stage::L1 && p >= S && l2_finished[p - S] != l2_total[p - S] && res.violation.empty())
      res.violation = "an L1 tile of row " + std::to_string(p) + " reused the slot of row " + std::to_string(p - S) + " after " +
                      std::to_string(l2_finished[p - S]) + " of its " + std::to_string(l2_total[p - S]) + " L2 CTA tiles";
  };
  for (long now = 0; now <= cfg.max_time; ++now) {
    for (int g = 0; g < clusters; ++g)
      if (busy_until[g] == now) {
        for (int c = 0; c < size; ++c) {
          const Tile& t = walks[g * size + c][next[g] - 1].tile;
          if (t.stage == Stage::L1) ++l1_done[t.row % S], ++l1_finished[t.row];
          else ++l2_done[t.row % S], ++l2_finished[t.row];
        }
        busy_until[g] = -1;
      }
    bool all_done = true, any_busy = false, moved = false;
    for (int g = 0; g < clusters; ++g) {
      if (busy_until[g] >= 0) { all_done = false; any_busy = true; continue; }
      if (next[g] >= walks[g * size].size()) continue;
      all_done = false;
      bool ready = true;
      for (int c = 0; c < size; ++c) ready = ready && cta_ready(walks[g * size + c][next[g]]);
      if (!ready) {
        ++res.wait_time;
        continue;
      }
      long dur = 0;
      for (int c = 0; c < size; ++c) {
        const CtaTile& t = walks[g * size + c][next[g]];
        check_start(t);
        dur = t.tile.stage == Stage::L1 ? cfg.l1_time : cfg.l2_time;
        if (cfg.time_jitter > 0.0) dur = jittered(dur, cfg, g, next[g]);
        ++res.cta_tiles_run;
        if (timeline) (*timeline)[g * size + c].push_back(CtaTileRun{t.tile, t.half, now, now + dur});
      }
      ++next[g];
      busy_until[g] = now + dur;
      any_busy = moved = true;
    }
    if (all_done) {
      res.finished = true;
      res.makespan = now;
      return res;
    }
    if (!any_busy && !moved) {
      for (int g = 0; g < clusters && res.deadlock.size() < 400; ++g)
        if (next[g] < walks[g * size].size()) {
          const Tile& t = walks[g * size][next[g]].tile;
          res.deadlock += "cluster " + std::to_string(g) + " waits at " + (t.stage == Stage::L1 ? "L1" : "L2") + "(row " +
                          std::to_string(t.row) + "); ";
        }
      res.makespan = now;
      return res;
    }
  }
  res.deadlock = "simulation ran past max_time";
  return res;
}

}  // namespace

template <class Schedule>
CtaSimulationResult simulate_ctas(const CtaLaunch& l, const SimulationConfig& cfg, CtaTimeline* timeline) {
  if (l.cluster_n == 1 && l.cluster_m == 1) return simulate_ctas_impl<Schedule, 1, 1>(l, cfg, timeline);
  if (l.cluster_n == 2 && l.cluster_m == 1) return simulate_ctas_impl<Schedule, 2, 1>(l, cfg, timeline);
  if (l.cluster_n == 1 && l.cluster_m == 2) return simulate_ctas_impl<Schedule, 1, 2>(l, cfg, timeline);
  throw InputError("CTA simulation: clusters of 1, 2 x 1 or 1 x 2 CTAs (the kernel's)");
}
template <class Schedule>
CtaSimulationResult simulate_ctas(const CtaLaunch& l, const SimulationConfig& cfg) {
  return simulate_ctas<Schedule>(l, cfg, nullptr);
}
template CtaSimulationResult simulate_ctas<InterleavedSchedule>(const CtaLaunch&, const SimulationConfig&);
template CtaSimulationResult simulate_ctas<ExpertWaveSchedule>(const CtaLaunch&, const SimulationConfig&);
template CtaSimulationResult simulate_ctas<InterleavedSchedule>(const CtaLaunch&, const SimulationConfig&, CtaTimeline*);
template CtaSimulationResult simulate_ctas<ExpertWaveSchedule>(const CtaLaunch&, const SimulationConfig&, CtaTimeline*);

TileStreams make_streams(const MoeProblem& pr, const int* first_row) {
  validate(pr);
  XSTAGE_REQUIRE(first_row != nullptr, "schedule: no scheduler rows (first_row is null)");
  return TileStreams{SchedulerRows{first_row, pr.E_local()}, pr.P1_l1_n_blocks(), pr.P2_l2_n_blocks()};
}

InterleavedSchedule make_interleaved_schedule(const MoeProblem& pr, const int* first_row, int D_rows, int Gs) {
  XSTAGE_REQUIRE(D_rows >= 1, "interleaved schedule: the lead D must be >= 1 row (got " + std::to_string(D_rows) +
                                  "; with D = 0 an instance can run L2 (p) before its own L1 (p) tile and wait on itself)");
  XSTAGE_REQUIRE(Gs >= 1, "interleaved schedule: needs at least one persistent instance");
  return InterleavedSchedule{make_streams(pr, first_row), D_rows, Gs};
}

ExpertWaveSchedule make_expert_wave_schedule(const MoeProblem& pr, const int* first_row, int wave_experts, int Gs,
                                             int l2_lag_waves) {
  XSTAGE_REQUIRE(wave_experts >= 1 && wave_experts <= pr.E_local(),
                 "expert-wave schedule: wave size " + std::to_string(wave_experts) + " must be in [1, E_local = " +
                     std::to_string(pr.E_local()) + "]");
  XSTAGE_REQUIRE(Gs >= 1, "expert-wave schedule: needs at least one persistent instance");
  XSTAGE_REQUIRE(l2_lag_waves >= 0, "expert-wave schedule: the L2 lag must be >= 0 waves (got " + std::to_string(l2_lag_waves) + ")");
  return ExpertWaveSchedule{make_streams(pr, first_row), wave_experts, Gs, l2_lag_waves};
}

// ---------------------------------------------------------------------------------------------
// The MoE audit from the kernel's real injection.
// ---------------------------------------------------------------------------------------------

std::string describe(const ScheduleVariant& v) {
  std::string s = v.interleaved ? to_string(MoeScheduleKind::interleaved)
                  : v.wave_lag > 0 ? "pipelined waves"
                                   : to_string(MoeScheduleKind::expert_wave);
  if (!v.interleaved && v.wave_lag > 1) s += " (lag " + std::to_string(v.wave_lag) + ")";
  if (v.cluster_n == 2) s += " pairs";
  if (v.cluster_m == 2) s += " m-pairs";
  return s;
}

bool variant_applies(const MoeProblem& pr, int K_SM, const ScheduleVariant& v, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (v.cluster_n < 1 || v.cluster_n > 2 || v.cluster_m < 1 || v.cluster_m > 2) return no("clusters are 1 or 2 CTAs");
  if (v.cluster_n == 2 && v.cluster_m == 2) return no("CTA pairs along N and along M do not combine");
  if (v.wave_lag < 0 || (v.interleaved && v.wave_lag != 0)) return no("the L2 lag is a wave schedule's, >= 0");
  if (v.cluster_n * v.cluster_m == 1) return true;
  const bool half_l2 = pr.h_hidden % pr.b_n != 0;
  if (half_l2 || K_SM % 2 != 0 || pr.P1_l1_n_blocks() % 2 != 0 || pr.P2_l2_n_blocks() % 2 != 0)  // K_SM = 0 passes
    return no("CTA pairs need even Linear-1 and Linear-2 n-block counts (P1 = " + std::to_string(pr.P1_l1_n_blocks()) +
              ", P2 = " + std::to_string(pr.P2_l2_n_blocks()) + "), no half-full block and an even K_SM");
  if (v.cluster_m == 2 && pr.b_n != 256) return no("M-pairs need 128 x 256 tiles");
  return true;
}

int automatic_cluster_n(const MoeProblem& pr, int K_SM, MoeScheduleKind schedule) {
  return schedule == MoeScheduleKind::interleaved && variant_applies(pr, K_SM, ScheduleVariant{true, 0, 2, 1}) ? 2 : 1;
}

std::vector<ScheduleVariant> kernel_variants(const MoeProblem& pr, int K_SM, bool m_pairs) {
  std::vector<ScheduleVariant> out;
  out.push_back(ScheduleVariant{false, 0, 1, 1});
  out.push_back(ScheduleVariant{false, 1, 1, 1});
  out.push_back(ScheduleVariant{true, 0, automatic_cluster_n(pr, K_SM, MoeScheduleKind::interleaved), 1});
  if (m_pairs && variant_applies(pr, K_SM, ScheduleVariant{false, 0, 1, 2}))
    for (const ScheduleVariant& v : {ScheduleVariant{false, 0, 1, 2}, ScheduleVariant{false, 1, 1, 2}, ScheduleVariant{true, 0, 1, 2}})
      out.push_back(v);
  return out;
}

std::vector<int> balanced_expert_rows(const MoeProblem& pr) {
  validate(pr);
  const std::int64_t pairs = static_cast<std::int64_t>(pr.T_tokens) * pr.top_k;  // rows one owner receives
  const int EL = pr.E_local();
  std::vector<int> rows(EL, static_cast<int>(pairs / EL));
  for (int e = 0; e < static_cast<int>(pairs % EL); ++e) ++rows[e];
  return rows;
}

namespace {

template <class Schedule>
CtaSimulationResult run_timeline(const CtaLaunch& l, const SimulationConfig& cfg, CtaTimeline& timeline) {
  return simulate_ctas<Schedule>(l, cfg, &timeline);
}

// The closed form of model::audit_moe for this problem, with V_t = the remote rows' bytes.
std::optional<model::MoeAudit> closed_form(const MoeProblem& pr, int K_SM, int K_act, const ScheduleAuditConfig& c) {
  const int remote_rows = static_cast<int>(std::lround(static_cast<double>(pr.b_m > 128 ? 128 : pr.b_m) * (pr.P_ranks - 1) / pr.P_ranks));
  if (remote_rows < 1) return std::nullopt;
  model::MoeKernel k;
  k.b_m = remote_rows;
  k.b_n = pr.b_n;
  k.out_bytes = pr.out_bytes;
  k.K_act = std::clamp(K_act, 1, K_SM);
  k.T_L1_ns = c.T_L1_ns;
  k.T_L2_ns = c.T_L2_ns;
  k.mix = model::natural_tile_mix(pr.h_hidden, pr.h_inter);
  k.K_SM = K_SM;
  k.h_inter = pr.h_inter;
  return model::audit_moe(c.platform, k);
}

}  // namespace

ScheduleAudit audit_schedule(const MoeProblem& problem, const std::vector<int>& expert_rows, int K_SM,
                             const ScheduleVariant& variant, const ScheduleAuditConfig& c) {
  validate(problem);
  XSTAGE_REQUIRE(K_SM >= 1, "MoE audit: K_SM must be positive");
  XSTAGE_REQUIRE(static_cast<int>(expert_rows.size()) == problem.E_local(), "MoE audit: one row count per local expert");
  XSTAGE_REQUIRE(std::isfinite(c.T_L1_ns) && std::isfinite(c.T_L2_ns) && c.T_L1_ns > 0.0 && c.T_L2_ns > 0.0,
                 "MoE audit: the tile times T_L1 and T_L2 must be positive");
  XSTAGE_REQUIRE(c.ticks_per_tile >= 1, "MoE audit: ticks per tile must be >= 1");
  XSTAGE_REQUIRE(c.time_jitter >= 0.0 && c.time_jitter < 1.0, "MoE audit: the tile time jitter must be in [0, 1)");
  model::validate_platform_point(c.platform, "MoE audit platform point");
  std::string why;
  XSTAGE_REQUIRE(variant_applies(problem, K_SM, variant, &why), "MoE audit: " + describe(variant) + " does not apply: " + why);

  ScheduleAudit a;
  a.variant = variant;
  a.ctas = K_SM;
  a.staging_slots = problem.b_n == 128 ? 2 : 1;  // kernel/config.hpp's kStagingSlots
  // The layer's problem as FusedMoeLayer builds it: 256-row scheduler rows for M-pairs, the heuristics over
  // the instances.
  MoeProblem pr = problem;
  if (variant.cluster_m == 2) pr.b_m = 2 * problem.b_m;
  const int instances = K_SM / variant.cluster_m;
  a.D_rows = c.D_rows > 0 ? c.D_rows : static_cast<int>(interleave_lead_rows(pr, instances));
  a.wave_experts = c.wave_experts > 0 ? c.wave_experts : wave_size_experts(pr, instances);

  CtaLaunch l;
  l.problem = pr;
  l.expert_rows = expert_rows;
  l.ctas = K_SM;
  l.cluster_n = variant.cluster_n;
  l.cluster_m = variant.cluster_m;
  l.D_rows = a.D_rows;
  l.wave_experts = a.wave_experts;
  l.wave_lag = variant.interleaved ? 0 : variant.wave_lag;
  SimulationConfig cfg;
  a.tick_ns = std::min(c.T_L1_ns, c.T_L2_ns) / c.ticks_per_tile;
  cfg.l1_time = std::max(1, static_cast<int>(std::lround(c.T_L1_ns / a.tick_ns)));
  cfg.l2_time = std::max(1, static_cast<int>(std::lround(c.T_L2_ns / a.tick_ns)));
  cfg.max_time = 200'000'000;
  cfg.time_jitter = c.time_jitter;
  cfg.seed = c.seed;
  CtaTimeline timeline;
  const CtaSimulationResult sim = variant.interleaved ? run_timeline<InterleavedSchedule>(l, cfg, timeline)
                                                      : run_timeline<ExpertWaveSchedule>(l, cfg, timeline);
  if (!sim.finished || !sim.violation.empty())
    throw Error("MoE audit: the lockstep simulation of " + describe(variant) + " did not finish cleanly: " + sim.deadlock + sim.violation);

  // The tile phase, and each CTA's share of it.
  a.makespan_ns = static_cast<double>(sim.makespan) * a.tick_ns;
  const int size = variant.cluster_n * variant.cluster_m;
  a.wait_ns_per_cta = static_cast<double>(sim.wait_time) / (K_SM / size) * a.tick_ns;
  double busy = 0.0;
  for (const auto& runs : timeline)
    for (const CtaTileRun& r : runs) {
      busy += static_cast<double>(r.end - r.start);
      (r.tile.stage == Stage::L1 ? a.l1_tiles : a.l2_tiles) += 1;
    }
  a.busy_ns_per_cta = busy / K_SM * a.tick_ns;
  a.idle_ns_per_cta = std::max(0.0, a.makespan_ns - a.busy_ns_per_cta - a.wait_ns_per_cta);

  // The combine bursts: each CTA's Linear-2 tiles at their mainloop ends, with the bytes of their real rows (the
  // storers walk all 128 row slots, but a slot past the expert's last row stores nothing), split by source: at the
  // balanced load a row's token is on any of the P ranks alike, so (P-1)/P of them leave the rank (B_i) and 1/P are
  // this rank's own (L_i, stored locally by the same storers).
  const double remote = static_cast<double>(problem.P_ranks - 1) / problem.P_ranks, local = 1.0 / problem.P_ranks;
  a.B_tile_bytes = static_cast<double>(MixedPairTiling::kHalfRows) * problem.b_n * problem.out_bytes * remote;
  model::CombineInjection in;
  in.ctas.resize(K_SM);
  in.staging_slots = a.staging_slots;
  in.B_ref_bytes = a.B_tile_bytes > 0.0 ? a.B_tile_bytes : 1.0;
  in.latency_ns = c.latency_ns;
  in.storer = c.storer;
  for (int cta = 0; cta < K_SM; ++cta)
    for (const CtaTileRun& r : timeline[cta]) {
      if (r.tile.stage != Stage::L2) continue;
      const std::int64_t first = static_cast<std::int64_t>(r.tile.m_block) * pr.b_m + r.half * MixedPairTiling::kHalfRows;
      const std::int64_t rows = std::clamp<std::int64_t>(expert_rows[r.tile.expert] - first, 0, MixedPairTiling::kHalfRows);
      const double row_bytes = static_cast<double>(pr.l2_block_cols(r.tile.n_block)) * pr.out_bytes;
      in.ctas[cta].push_back({static_cast<double>(r.end) * a.tick_ns, rows * row_bytes * remote, rows * row_bytes * local});
    }
  if (!c.simulate_combine) return a;
  a.combine = model::simulate_combine(c.platform, in);
  if (!c.keep_tiles) a.combine.tiles.clear();
  a.stall_fraction = a.busy_ns_per_cta > 0.0 ? a.combine.stall_ns_per_cta / a.busy_ns_per_cta : 0.0;
  a.predicted_ns = a.makespan_ns + a.combine.stall_ns_per_cta;

  a.aligned = closed_form(problem, K_SM, K_SM, c);
  a.at_K_act = closed_form(problem, K_SM, static_cast<int>(std::lround(std::max(1.0, a.combine.K_act.mean))), c);
  return a;
}

}  // namespace xstage::moe
