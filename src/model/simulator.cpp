#include "model/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "common/error.hpp"

namespace xstage::model {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Producer {
  bool issuing = false;
  bool done = false;
  double remaining_bytes = 0.0;  // of the current burst
  double next_start_ns = 0.0;    // when not issuing: the end of the current gap
  double burst_start_ns = 0.0;
  double last_start_ns = -1.0;   // previous burst start, for the period
  int started = 0;               // bursts started so far
};

// Uniform in [-1, 1] from a 64-bit engine, defined here so the result does not depend on the standard
// library's distribution implementation.
double symmetric_unit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

void validate(const SimulationConfig& c) {
  validate_platform_point(c.platform, "simulator platform");
  if (c.K <= 0) throw InputError("simulator: K must be positive (got " + std::to_string(c.K) + ")");
  if (!std::isfinite(c.B_bytes) || c.B_bytes <= 0.0) throw InputError("simulator: B must be positive");
  if (!std::isfinite(c.G_ns) || c.G_ns < 0.0) throw InputError("simulator: G must not be negative");
  if (c.bursts < 1) throw InputError("simulator: at least one burst per producer is needed");
  if (c.warmup_bursts >= c.bursts)
    throw InputError("simulator: warm-up (" + std::to_string(c.warmup_bursts) +
                     " bursts) leaves nothing to measure out of " + std::to_string(c.bursts));
  if (!std::isfinite(c.stagger_ns) || c.stagger_ns < 0.0) throw InputError("simulator: stagger must not be negative");
  if (!std::isfinite(c.jitter_ns) || c.jitter_ns < 0.0) throw InputError("simulator: jitter must not be negative");
  if (simulation_work(c.K, c.bursts) > kMaxSimulationWork)
    throw InputError("simulator: K = " + std::to_string(c.K) + " producers x " + std::to_string(c.bursts) + " bursts is " +
                     std::to_string(simulation_work(c.K, c.bursts)) + " producer-steps, over the limit of " +
                     std::to_string(kMaxSimulationWork));
}

double percentile(const std::vector<double>& sorted, double fraction) {
  const double pos = fraction * static_cast<double>(sorted.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// The whole event loop; one instance per simulate() call.
class FluidXStage {
 public:
  explicit FluidXStage(const SimulationConfig& c)
      : c_(c),
        warmup_(c.warmup_bursts >= 0 ? c.warmup_bursts : c.bursts / 2),
        rate_(c.B_bytes / c.platform.T_iss0_ns),
        producers_(static_cast<std::size_t>(c.K)),
        rng_(c.seed) {
    for (int i = 0; i < c.K; ++i) producers_[i].next_start_ns = c.stagger_ns * i / c.K;
    // Tolerances scaled to the problem so that simultaneous events (aligned producers) coincide.
    eps_bytes_ = 1e-9 * c.B_bytes;
    eps_ns_ = 1e-9 * (c.platform.T_iss0_ns + c.G_ns + c.B_bytes * c.K / c.platform.R_bytes_per_ns);
  }

  SimulationResult run() {
    // Every event ends a burst, ends a gap or moves q to a bound, so a run needs a few events per burst;
    // the guard turns a logic error into a message instead of a hang.
    const double max_events = 8.0 * c_.K * c_.bursts + 1e6;
    while (finished_ < c_.K) {
      step();
      if (static_cast<double>(events_) > max_events)
        throw Error("simulator: no progress after " + std::to_string(events_) + " events (internal error)");
    }
    SimulationResult r;
    r.T_iss_ns = summarize(std::move(T_iss_));
    r.T_period_ns = summarize(std::move(T_period_));
    r.max_outstanding_bytes = q_max_;
    r.makespan_ns = t_;
    r.throttled_fraction = t_ > 0.0 ? throttled_ns_ / t_ : 0.0;
    r.events = events_;
    return r;
  }

 private:
  void step() {
    const int active = issuing_;
    const double offered = active * rate_;  // what the producers would inject unhindered
    const double R = c_.platform.R_bytes_per_ns, Q = c_.platform.Q_bytes;
    const bool at_cap = q_ >= Q - eps_bytes_;
    const bool throttled = at_cap && offered > R;
    // Acceptance per issuing producer, and how q moves meanwhile.
    const double per_producer = throttled ? R / active : rate_;
    double dq = 0.0;
    if (!throttled && !(q_ <= eps_bytes_ && offered <= R)) dq = offered - R;

    // The next event: a burst ends, a gap ends, q reaches Q, or q empties.
    double dt = kInf;
    for (const Producer& p : producers_) {
      if (p.done) continue;
      dt = std::min(dt, p.issuing ? p.remaining_bytes / per_producer : p.next_start_ns - t_);
    }
    if (dq > 0.0) dt = std::min(dt, (Q - q_) / dq);
    if (dq < 0.0) dt = std::min(dt, q_ / -dq);
    dt = std::max(dt, 0.0);

    t_ += dt;
    q_ = std::clamp(q_ + dq * dt, 0.0, Q);
    if (dq > 0.0 && Q - q_ <= eps_bytes_) q_ = Q;  // snap, so the cap test above is exact next step
    if (dq < 0.0 && q_ <= eps_bytes_) q_ = 0.0;
    q_max_ = std::max(q_max_, q_);
    if (throttled) throttled_ns_ += dt;
    for (Producer& p : producers_)
      if (p.issuing) p.remaining_bytes -= per_producer * dt;

    finish_bursts();
    start_bursts();
    ++events_;
  }

  void finish_bursts() {
    for (Producer& p : producers_) {
      if (!p.issuing || p.remaining_bytes > eps_bytes_) continue;
      p.issuing = false;
      --issuing_;
      if (p.started > warmup_) T_iss_.push_back(t_ - p.burst_start_ns);
      if (p.started == c_.bursts) {
        p.done = true;
        ++finished_;
        continue;
      }
      const double jitter = c_.jitter_ns > 0.0 ? c_.jitter_ns * symmetric_unit(rng_) : 0.0;
      p.next_start_ns = t_ + std::max(0.0, c_.G_ns + jitter);
    }
  }

  void start_bursts() {
    for (Producer& p : producers_) {
      if (p.done || p.issuing || p.next_start_ns > t_ + eps_ns_) continue;
      p.issuing = true;
      ++issuing_;
      p.remaining_bytes = c_.B_bytes;
      p.burst_start_ns = t_;
      ++p.started;
      // The period from burst n to n+1 counts once burst n is past the warm-up.
      if (p.last_start_ns >= 0.0 && p.started - 1 > warmup_) T_period_.push_back(t_ - p.last_start_ns);
      p.last_start_ns = t_;
    }
  }

  const SimulationConfig& c_;
  const int warmup_;
  const double rate_;  // per-producer acceptance with no back-pressure: B / T_iss0
  std::vector<Producer> producers_;
  std::mt19937_64 rng_;
  double eps_bytes_ = 0.0, eps_ns_ = 0.0;
  double t_ = 0.0, q_ = 0.0, q_max_ = 0.0, throttled_ns_ = 0.0;
  int issuing_ = 0, finished_ = 0;
  std::size_t events_ = 0;
  std::vector<double> T_iss_, T_period_;
};

}  // namespace

Distribution summarize(std::vector<double> samples) {
  Distribution d;
  d.count = samples.size();
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  d.min = samples.front();
  d.max = samples.back();
  d.median = percentile(samples, 0.5);
  d.p10 = percentile(samples, 0.1);
  d.p90 = percentile(samples, 0.9);
  double sum = 0.0;
  for (double x : samples) sum += x;
  d.mean = sum / static_cast<double>(samples.size());
  return d;
}

double simulation_work(int K, int bursts) {
  // Up to 4 events per producer burst (burst ends, gap ends, q reaches Q, q empties) when staggered producers share
  // none, and every event visits every producer.
  return 4.0 * static_cast<double>(K) * static_cast<double>(K) * bursts;
}

SimulationResult simulate(const SimulationConfig& config) {
  validate(config);
  return FluidXStage(config).run();
}

}  // namespace xstage::model
