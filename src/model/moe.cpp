#include "model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "common/error.hpp"
#include "model/units.hpp"

namespace xstage::model {

// Eq. 12–14
InterleaveTest interleave_test(const PlatformPoint& p, double V_bytes, double T_L1_ns, double T_L2_ns,
                               double n1, double n2) {
  validate_platform_point(p);
  require_positive(V_bytes, "burst volume V");
  require_positive(T_L1_ns, "Linear-1 mainloop time T_L1");
  require_positive(T_L2_ns, "Linear-2 mainloop time T_L2");
  require_positive(n1, "L1 tiles per cycle n1");
  require_positive(n2, "L2 tiles per cycle n2");
  InterleaveTest t;
  t.G_wave_ns = T_L2_ns;
  t.G_int_ns = T_L2_ns + (n1 / n2) * T_L1_ns;                                      // Eq. 12
  t.dT_iss_wave_ns = issue_overhead_ns(p, V_bytes, t.G_wave_ns);                   // Eq. 9
  t.dT_iss_int_ns = positive_part(t.dT_iss_wave_ns - (n1 / n2) * T_L1_ns);         // Eq. 13
  t.injection_rate_int_bytes_per_ns = n2 * V_bytes / (n2 * (p.T_iss0_ns + T_L2_ns) + n1 * T_L1_ns);
  t.sufficient = t.injection_rate_int_bytes_per_ns <= p.R_bytes_per_ns;            // Eq. 14
  return t;
}

long anti_starvation_lead_rows(int b_n, int K_SM, int h_inter) {
  require_positive(b_n, "tile width b_n");
  require_positive(K_SM, "SM count K_SM");
  require_positive(h_inter, "expert intermediate size h_inter");
  const long num = static_cast<long>(b_n) * K_SM, den = 2L * h_inter;
  return (num + den - 1) / den;  // ceil, in integers
}

double remote_store_span_ns(const PlatformPoint& p, double V_bytes, double G_ns) {
  return p.T_iss0_ns + issue_overhead_ns(p, V_bytes, G_ns);
}

// Eq. 15
double critical_path_stall_ns(double T_RS_ns, double T_cover_ns) { return positive_part(T_RS_ns - T_cover_ns); }

MoeMainloopTimes moe_mainloop_times(int b_m, int b_n, int h, int h_inter, double tflops, int K_SM) {
  require_positive(b_m, "tile rows b_m");
  require_positive(b_n, "tile width b_n");
  require_positive(h, "hidden size h");
  require_positive(h_inter, "expert intermediate size h_inter");
  const double tile = 2.0 * b_m * b_n;
  return {per_sm_time_ns(tile * h, tflops, K_SM), per_sm_time_ns(tile * h_inter, tflops, K_SM)};
}

TileMix natural_tile_mix(int h, int h_inter) {
  require_positive(h, "hidden size h");
  require_positive(h_inter, "expert intermediate size h_inter");
  // L1 tiles span 2·h_inter columns and L2 tiles h columns per row; reduce the ratio to lowest terms.
  const long g = std::gcd(2L * h_inter, static_cast<long>(h));
  return {2.0 * h_inter / g, static_cast<double>(h) / g};
}

namespace {

void validate_kernel(const MoeKernel& k) {
  require_positive(k.b_m, "tile rows b_m");
  require_positive(k.b_n, "tile width b_n");
  require_positive(k.out_bytes, "output element size s_out");
  require_positive(k.K_act, "aligned producers K_act");
  require_positive(k.T_L1_ns, "Linear-1 mainloop time T_L1");
  require_positive(k.T_L2_ns, "Linear-2 mainloop time T_L2");
  require_positive(k.mix.n1, "L1 tiles per cycle n1");
  require_positive(k.mix.n2, "L2 tiles per cycle n2");
  require_positive(k.K_SM, "SM count K_SM");
  if (k.K_act > k.K_SM)
    throw InputError("K_act (" + std::to_string(k.K_act) + ") cannot exceed the SMs running the kernel (" +
                     std::to_string(k.K_SM) + ")");
}

std::string moe_action(const MoeAudit& a) {
  const std::string lead = a.D_knee_rows ? " with a lead D >= D_knee = " + std::to_string(*a.D_knee_rows) +
                                               " rows (more only costs L2-cache locality)"
                                         : " with a lead D at or above D_knee (give --h-inter to compute it)";
  switch (a.verdict) {
    case Verdict::piggyback:
      return "keep the expert-wave schedule: one L2 mainloop (" + format_time_ns(a.interleave.G_wave_ns) +
             ") already covers the drain (G* = " + format_time_ns(a.wave.G_star_ns) +
             "); interleaving would only cost expert-weight locality.";
    case Verdict::reshape:
      return "reshape: interleave ready L1 tiles between L2 tiles" + lead + ". That widens the gap from " +
             format_time_ns(a.interleave.G_wave_ns) + " to " + format_time_ns(a.interleave.G_int_ns) +
             " >= G* = " + format_time_ns(a.wave.G_star_ns) + ", cutting the issue overhead from " +
             format_time_ns(a.interleave.dT_iss_wave_ns) + " to 0 and the critical-path stall per L2 tile from " +
             format_time_ns(a.stall_wave_ns) + " to " + format_time_ns(a.stall_int_ns) + ".";
    case Verdict::shrink_burst: {
      if (!a.interleaved.capacity_bound_holds)
        return "shrink the burst: one aligned combine burst of " + format_bytes(a.V_bytes) +
               " overflows Q on its own (q_peak = " + format_bytes(a.wave.q_peak_bytes) + " > Q = " +
               format_bytes(a.wave.platform.Q_bytes) + "); align at most " + format_bytes(a.wave.V_max_capacity_bytes) +
               " (fewer producers per boundary or smaller tiles), then re-check the rate bound.";
      return "interleave" + lead + " and also shrink the aligned burst: interleaving alone leaves " +
             format_time_ns(a.interleave.dT_iss_int_ns) + " of issue overhead per burst (G_int = " +
             format_time_ns(a.interleave.G_int_ns) + " < G* = " + format_time_ns(a.wave.G_star_ns) +
             "); at G_int the drain keeps up with at most " + format_bytes(a.interleaved.V_max_rate_bytes) +
             " per aligned burst (now " + format_bytes(a.V_bytes) + ").";
    }
  }
  return {};
}

}  // namespace

MoeAudit audit_moe(const PlatformPoint& p, const MoeKernel& k) {
  validate_platform_point(p);
  validate_kernel(k);
  MoeAudit a;
  a.kernel = k;
  a.B_bytes = static_cast<double>(k.b_m) * k.b_n * k.out_bytes;
  a.V_bytes = a.B_bytes * k.K_act;
  a.interleave = interleave_test(p, a.V_bytes, k.T_L1_ns, k.T_L2_ns, k.mix.n1, k.mix.n2);
  a.wave = design_test(p, a.V_bytes, a.interleave.G_wave_ns);
  a.interleaved = design_test(p, a.V_bytes, a.interleave.G_int_ns);

  // Eq. 15. Wave: every L2 tile is followed by an L2 mainloop.
  a.T_RS_wave_ns = p.T_iss0_ns + a.interleave.dT_iss_wave_ns;
  a.stall_wave_ns = critical_path_stall_ns(a.T_RS_wave_ns, k.T_L2_ns);
  // Interleaved: min(n1, n2) of the n2 L2 tiles are followed by an L1 mainloop, the rest by an L2 one.
  a.T_RS_int_ns = p.T_iss0_ns + a.interleave.dT_iss_int_ns;
  const double followed_by_l1 = std::min(k.mix.n1, k.mix.n2);
  a.stall_int_ns = (followed_by_l1 * critical_path_stall_ns(a.T_RS_int_ns, k.T_L1_ns) +
                    (k.mix.n2 - followed_by_l1) * critical_path_stall_ns(a.T_RS_int_ns, k.T_L2_ns)) /
                   k.mix.n2;
  if (k.h_inter) a.D_knee_rows = anti_starvation_lead_rows(k.b_n, k.K_SM, *k.h_inter);

  if (!a.wave.capacity_bound_holds || !a.interleave.sufficient)
    a.verdict = Verdict::shrink_burst;
  else if (!a.wave.rate_bound_holds)
    a.verdict = Verdict::reshape;
  else
    a.verdict = Verdict::piggyback;
  a.action = moe_action(a);
  return a;
}

// ---------------------------------------------------------------------------------------------
// The combine from the kernel's injection: an event-driven fluid simulation (see moe.hpp).
// ---------------------------------------------------------------------------------------------

const char* to_string(StallCause cause) {
  switch (cause) {
    case StallCause::none: return "none";
    case StallCause::issue: return "issue";
    case StallCause::capacity: return "capacity";
    case StallCause::drain: return "drain";
    case StallCause::rate: return "rate";
    case StallCause::storer: return "storer";
  }
  return "?";
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void validate_injection(const PlatformPoint& p, const CombineInjection& in) {
  validate_platform_point(p, "combine simulation platform");
  validate_storer_costs(in.storer, "combine simulation");
  if (in.staging_slots < 1) throw InputError("combine simulation: at least one staging slot per CTA");
  require_positive(in.B_ref_bytes, "combine simulation: reference burst B_ref");
  if (!std::isfinite(in.latency_ns) || in.latency_ns < 0.0)
    throw InputError("combine simulation: the fence latency must be a non-negative time");
  for (std::size_t c = 0; c < in.ctas.size(); ++c) {
    double last = 0.0;
    for (const CombineBurst& b : in.ctas[c]) {
      if (!std::isfinite(b.ready_ns) || b.ready_ns < 0.0 || !std::isfinite(b.bytes) || b.bytes < 0.0 ||
          !std::isfinite(b.local_bytes) || b.local_bytes < 0.0)
        throw InputError("combine simulation: CTA " + std::to_string(c) + " has a tile with a negative or non-finite time or size");
      if (b.ready_ns < last)
        throw InputError("combine simulation: CTA " + std::to_string(c) + "'s tiles must be ready in walk order");
      last = b.ready_ns;
    }
  }
}

// One CTA: its consumers' staging and its storers. The storers' tile goes loading (T_load) -> issuing -> fence
// and release (until released_ns) -> the next one.
enum class StorerPhase { idle, loading, issuing, closing };
struct CombineCta {
  const std::vector<CombineBurst>* tiles = nullptr;
  std::size_t base = 0;      // its first tile in CombineAudit::tiles
  int next_stage = 0;        // the next tile its consumers stage
  int next_store = 0;        // the next tile its storers take
  double shift = 0.0;        // Σ of its earlier stalls (when they propagate)
  StorerPhase phase = StorerPhase::idle;
  double loaded_at = 0.0;    // loading: when the issue begins
  double remaining = 0.0;    // issuing: bytes (local and remote) of the tile still to issue
  double remote_share = 0.0; // issuing: B / (L + B) of that tile
  double eps_bytes = 0.0;    // issuing: what counts as nothing left of it
  int draining = -1;         // the tile between its storers' start and their release, or -1
};

class CombineSimulation {
 public:
  CombineSimulation(const PlatformPoint& p, const CombineInjection& in)
      : p_(p), in_(in), rate_(in.B_ref_bytes / p.T_iss0_ns), R_S_(in.storer.R_S_bytes_per_ns), eps_bytes_(1e-9 * in.B_ref_bytes) {
    std::size_t n = 0;
    ctas_.resize(in.ctas.size());
    for (std::size_t c = 0; c < in.ctas.size(); ++c) {
      ctas_[c].tiles = &in.ctas[c];
      ctas_[c].base = n;
      n += in.ctas[c].size();
    }
    a_.tiles.resize(n);
    freed_.assign(n, kInf);
    for (std::size_t c = 0; c < in.ctas.size(); ++c)
      for (std::size_t i = 0; i < in.ctas[c].size(); ++i) {
        CombineTileTiming& t = a_.tiles[ctas_[c].base + i];
        t.cta = static_cast<int>(c);
        t.ready_ns = in.ctas[c][i].ready_ns;
        t.T_iss0_ns = in.ctas[c][i].bytes / rate_;
        t.T_S_ns = in.storer.T_load_ns + (in.ctas[c][i].bytes + in.ctas[c][i].local_bytes) / R_S_;  // 0 + x/inf = 0
        first_ready_ = std::min(first_ready_, t.ready_ns);
      }
    eps_ns_ = 1e-9 * std::max(1.0, p.T_iss0_ns);
  }

  CombineAudit run() {
    if (a_.tiles.empty()) return a_;
    t_ = first_ready_;
    const double max_events = 16.0 * static_cast<double>(a_.tiles.size()) + 1e5;
    for (;;) {
      transitions();
      const double dt = next_event();
      if (dt == kInf) break;
      advance(dt);
      if (static_cast<double>(++a_.events) > max_events)
        throw Error("combine simulation: no progress after " + std::to_string(a_.events) + " events (internal error)");
    }
    for (const CombineCta& c : ctas_)
      if (c.next_store < static_cast<int>(c.tiles->size()) || c.phase != StorerPhase::idle)
        throw Error("combine simulation: a CTA did not drain all its tiles (internal error)");
    summarize_run();
    return std::move(a_);
  }

 private:
  double slot_free_time(const CombineCta& c, int i) const {
    return i < in_.staging_slots ? -kInf : freed_[c.base + i - in_.staging_slots];
  }

  // Everything that happens at t_ without time passing: releases that end, loads that end, tiles staged,
  // storers starting.
  void transitions() {
    bool moved = true;
    while (moved) {
      moved = false;
      for (CombineCta& c : ctas_) {
        const int n = static_cast<int>(c.tiles->size());
        if (c.phase == StorerPhase::closing && a_.tiles[c.base + c.draining].released_ns <= t_ + eps_ns_) {
          starts_.erase(starts_.find(a_.tiles[c.base + c.draining].start_ns));
          c.draining = -1;
          c.phase = StorerPhase::idle;
          moved = true;
        }
        if (c.phase == StorerPhase::loading && c.loaded_at <= t_ + eps_ns_) begin_issue(c), moved = true;
        if (c.next_stage < n) {
          const int i = c.next_stage;
          const double ready = (*c.tiles)[i].ready_ns + c.shift;
          if (std::max(ready, slot_free_time(c, i)) <= t_ + eps_ns_) stage(c, i, ready), moved = true;
        }
        if (c.phase == StorerPhase::idle && c.next_store < c.next_stage) start(c, c.next_store++), moved = true;
      }
    }
  }

  void stage(CombineCta& c, int i, double ready) {
    CombineTileTiming& t = a_.tiles[c.base + i];
    t.ready_ns = ready;
    t.staged_ns = t_;
    t.stall_ns = std::max(0.0, t_ - ready);
    if (i >= in_.staging_slots) {
      CombineTileTiming& held = a_.tiles[c.base + i - in_.staging_slots];
      cover_.push_back(ready - held.staged_ns);
      if (t.stall_ns > 0.0) {
        // The held tile's span: its wait for the previous tile's fence and release (queue), its unhindered
        // issue (T_load and the larger of the storer's and the X-Stage's bounds), and the rest (throttled at Q).
        const double queue = held.start_ns - held.staged_ns,
                     issue = in_.storer.T_load_ns + std::max(held.T_S_ns - in_.storer.T_load_ns, held.T_iss0_ns),
                     throttle = held.issued_ns - held.start_ns - issue;
        if (queue >= issue && queue >= throttle) {
          // Waiting on the previous tile: its release is the storer's own, its fence the drain's.
          const int before = i - in_.staging_slots - 1;  // the tile the held one's storers waited for
          const double releasing =
              before < 0 ? 0.0 : std::min(queue, a_.tiles[c.base + before].released_ns - a_.tiles[c.base + before].drained_ns);
          t.cause = releasing > queue - releasing ? StallCause::storer : StallCause::drain;
        } else if (throttle < issue) {
          t.cause = held.T_S_ns > held.T_iss0_ns ? StallCause::storer : StallCause::issue;
        } else {
          t.cause = held.q_at_start > eps_bytes_ ? StallCause::rate : StallCause::capacity;
        }
      }
    }
    if (in_.propagate_stalls) c.shift += t.stall_ns;
    ++c.next_stage;
  }

  void start(CombineCta& c, int i) {
    CombineTileTiming& t = a_.tiles[c.base + i];
    t.start_ns = t_;
    t.q_at_start = q_;
    starts_.insert(t_);
    c.draining = i;
    t.draining_at_start = static_cast<int>(starts_.size());
    t.spread_ns = t_ - *starts_.begin();
    c.phase = StorerPhase::loading;
    c.loaded_at = t_ + in_.storer.T_load_ns;
    if (in_.storer.T_load_ns <= 0.0) begin_issue(c);
  }

  void begin_issue(CombineCta& c) {
    const CombineBurst& b = (*c.tiles)[c.draining];
    c.phase = StorerPhase::issuing;
    c.remaining = b.bytes + b.local_bytes;
    c.remote_share = c.remaining > 0.0 ? b.bytes / c.remaining : 0.0;
    c.eps_bytes = std::max(eps_bytes_, 1e-9 * c.remaining);
    // Nothing to store, or only local bytes and a storer that is never the bound: only the fence.
    if (c.remaining <= c.eps_bytes || (c.remote_share == 0.0 && std::isinf(R_S_))) finish_issue(c);
  }

  void finish_issue(CombineCta& c) {
    CombineTileTiming& t = a_.tiles[c.base + c.draining];
    c.phase = StorerPhase::closing;
    t.issued_ns = t_;
    t.drained_ns = t_ + q_ / p_.R_bytes_per_ns + in_.latency_ns;  // FIFO: the bytes ahead drain first, at R
    t.released_ns = t.drained_ns + in_.storer.T_release_ns;
    freed_[c.base + c.draining] = t_;
  }

  // Per issuing CTA, the rate its tile's bytes (local and remote) go out (progress_): R_S, or less where its
  // remote bytes cannot go faster (B_ref/T_iss0 per CTA, or the X-Stage's share while q = Q). The remote bytes go
  // out at remote_share times it.
  struct Rates {
    bool throttled = false;
    double dq = 0.0;
  };
  Rates rates() const {
    Rates r;
    progress_.assign(ctas_.size(), 0.0);
    offers_.clear();
    double offered = 0.0;
    for (std::size_t k = 0; k < ctas_.size(); ++k) {
      const CombineCta& c = ctas_[k];
      if (c.phase != StorerPhase::issuing) continue;
      // Unhindered: min(R_S, rate/f) overall, i.e. the remote bytes at min(f·R_S, rate).
      const double remote = c.remote_share > 0.0 ? std::min(c.remote_share * R_S_, rate_) : 0.0;
      progress_[k] = c.remote_share > 0.0 ? remote / c.remote_share : R_S_;
      if (remote > 0.0) offers_.emplace_back(remote, k), offered += remote;
    }
    const double R = p_.R_bytes_per_ns;
    r.throttled = q_ >= p_.Q_bytes - eps_bytes_ && offered > R;
    if (r.throttled) {
      // R shared max-min fairly: the smallest offers are met in full, the rest split what is left equally.
      std::sort(offers_.begin(), offers_.end());
      double left = R;
      for (std::size_t j = 0; j < offers_.size(); ++j) {
        const auto [offer, k] = offers_[j];
        const double share = std::min(offer, left / static_cast<double>(offers_.size() - j));
        progress_[k] = share / ctas_[k].remote_share;
        left -= share;
      }
    } else if (q_ > eps_bytes_ || offered > R) {
      r.dq = offered - R;
    }
    return r;
  }

  double next_event() const {
    const Rates r = rates();
    double dt = kInf;
    for (std::size_t k = 0; k < ctas_.size(); ++k) {
      const CombineCta& c = ctas_[k];
      if (c.phase == StorerPhase::issuing) dt = std::min(dt, c.remaining / progress_[k]);
      else if (c.phase == StorerPhase::loading) dt = std::min(dt, c.loaded_at - t_);
      else if (c.phase == StorerPhase::closing) dt = std::min(dt, a_.tiles[c.base + c.draining].released_ns - t_);
      if (c.next_stage < static_cast<int>(c.tiles->size())) {
        const int i = c.next_stage;
        const double at = std::max((*c.tiles)[i].ready_ns + c.shift, slot_free_time(c, i));
        if (at < kInf) dt = std::min(dt, at - t_);
      }
    }
    if (r.dq > 0.0) dt = std::min(dt, (p_.Q_bytes - q_) / r.dq);
    if (r.dq < 0.0) dt = std::min(dt, q_ / -r.dq);
    return dt == kInf ? kInf : std::max(dt, 0.0);
  }

  void advance(double dt) {
    const Rates r = rates();
    t_ += dt;
    q_ = std::clamp(q_ + r.dq * dt, 0.0, p_.Q_bytes);
    if (r.dq > 0.0 && p_.Q_bytes - q_ <= eps_bytes_) q_ = p_.Q_bytes;
    if (r.dq < 0.0 && q_ <= eps_bytes_) q_ = 0.0;
    a_.q_peak_bytes = std::max(a_.q_peak_bytes, q_);
    if (r.throttled && dt > 0.0) throttled_ns_ += dt;
    for (std::size_t k = 0; k < ctas_.size(); ++k) {
      CombineCta& c = ctas_[k];
      if (c.phase != StorerPhase::issuing) continue;
      if (r.throttled && dt > 0.0 && c.remote_share > 0.0) a_.tiles[c.base + c.draining].throttled = true;
      c.remaining -= progress_[k] * dt;
      if (c.remaining <= c.eps_bytes) finish_issue(c);
    }
  }

  void summarize_run() {
    std::vector<double> kact, spread, rs, fence, issue, drain, stall;
    double last = first_ready_, bytes = 0.0;
    std::size_t stalled = 0, storer_bound = 0;
    for (const CombineTileTiming& t : a_.tiles) {
      storer_bound += t.T_S_ns > t.T_iss0_ns;
      kact.push_back(t.draining_at_start);
      spread.push_back(t.spread_ns);
      rs.push_back(t.issued_ns - t.staged_ns);
      fence.push_back(t.drained_ns - t.staged_ns);
      issue.push_back(t.issued_ns - t.start_ns);
      drain.push_back(t.drained_ns - t.start_ns);
      stall.push_back(t.stall_ns);
      stalled += t.stall_ns > 0.0;
      a_.stall_by_cause_ns[static_cast<int>(t.cause)] += t.stall_ns;
      last = std::max(last, t.drained_ns);
    }
    for (std::size_t c = 0; c < ctas_.size(); ++c) {
      double sum = 0.0;
      for (std::size_t i = 0; i < ctas_[c].tiles->size(); ++i) {
        sum += a_.tiles[ctas_[c].base + i].stall_ns;
        bytes += (*ctas_[c].tiles)[i].bytes;  // the X-Stage's injection: remote bytes only
      }
      a_.stall_ns_per_cta += sum / static_cast<double>(ctas_.size());
      a_.stall_ns_max_cta = std::max(a_.stall_ns_max_cta, sum);
    }
    a_.K_act = summarize(std::move(kact));
    a_.spread_ns = summarize(std::move(spread));
    a_.T_RS_ns = summarize(std::move(rs));
    a_.T_fence_ns = summarize(std::move(fence));
    a_.T_issue_ns = summarize(std::move(issue));
    a_.T_drain_ns = summarize(std::move(drain));
    a_.T_cover_ns = summarize(std::move(cover_));
    a_.stall_ns = summarize(std::move(stall));
    a_.stalled_fraction = static_cast<double>(stalled) / static_cast<double>(a_.tiles.size());
    a_.storer_bound_fraction = static_cast<double>(storer_bound) / static_cast<double>(a_.tiles.size());
    a_.span_ns = last - first_ready_;
    a_.throttled_fraction = a_.span_ns > 0.0 ? throttled_ns_ / a_.span_ns : 0.0;
    a_.injection_bytes_per_ns = a_.span_ns > 0.0 ? bytes / a_.span_ns : 0.0;
    double most = 0.0;
    for (StallCause cause : {StallCause::issue, StallCause::capacity, StallCause::drain, StallCause::rate, StallCause::storer})
      if (a_.stall_by_cause_ns[static_cast<int>(cause)] > most) most = a_.stall_by_cause_ns[static_cast<int>(cause)], a_.binds = cause;
  }

  const PlatformPoint p_;
  const CombineInjection& in_;
  const double rate_;  // per-CTA acceptance of remote bytes with no back-pressure: B_ref / T_iss0
  const double R_S_;   // the storer's own rate per CTA, every byte (infinite: never the bound)
  const double eps_bytes_;
  double eps_ns_ = 0.0;
  std::vector<CombineCta> ctas_;
  std::vector<double> freed_;     // per tile: its slot is free (the last store issued), +inf until then
  std::multiset<double> starts_;  // storer start times of the tiles draining now
  std::vector<double> cover_;
  mutable std::vector<double> progress_;                         // rates()'s result per CTA (0: not issuing)
  mutable std::vector<std::pair<double, std::size_t>> offers_;  // rates()'s scratch: (remote offer, CTA)
  CombineAudit a_;
  double t_ = 0.0, q_ = 0.0, throttled_ns_ = 0.0, first_ready_ = kInf;
};

}  // namespace

CombineAudit simulate_combine(const PlatformPoint& p, const CombineInjection& injection) {
  validate_injection(p, injection);
  return CombineSimulation(p, injection).run();
}

}  // namespace xstage::model
