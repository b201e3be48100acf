// `xstage plan`: Burst–Gap verdicts (paper §4.1) for a burst pattern, a MegaMoE kernel or a fused
// FlashAttention–A2A kernel, against a platform file (M_X per store path).
//
//   xstage plan pattern   --producers K (--burst B | --volume V) --gap G[,G...] [--simulate ...]
//   xstage plan moe       --producers K_act --tile 128x128 (--t-l1 T --t-l2 T | --hidden h --inter h_i --tflops X)
//   xstage plan moe       --hidden h --inter h_i --experts E --top-k k --tokens T [--ranks P --dtype fp8 --choose]
//   xstage plan moe       --grid configs/moe_grid.json [--choose]   (every configuration of a bench grid)
//   xstage plan attention --seq-len M[,M...] (--sigma T | --tflops X) [--tile 128x128 --head-dim 128 ...]
//
// Common: --platform FILE (default: the shipped platforms/h200_nvlink4.json), --store-path, --json.
// All arithmetic lives in src/model; this file parses, validates, and prints.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/commands.hpp"
#include "cli/moe_grid.hpp"
#include "cli/options.hpp"
#include "cli/shipped_files.hpp"
#include "common/error.hpp"
#include "common/result_check.hpp"
#include "common/run_info.hpp"
#include "model/attention.hpp"
#include "model/burst_gap.hpp"
#include "model/moe.hpp"
#include "model/platform.hpp"
#include "model/simulator.hpp"
#include "model/units.hpp"
#include "moe/plan.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/auto_schedule.hpp"
#include "moe/schedule/schedule_host.hpp"
#include "moe/weights.hpp"

namespace xstage::cli {

namespace {

using namespace xstage::model;
using nlohmann::json;

constexpr const char* kDefaultPlatform = "platforms/h200_nvlink4.json";

// ---------------------------------------------------------------------------------------------
// Options and their validation. Everything the user types is checked here, so a typo fails with a
// message naming the option (exit 2) before any arithmetic.
// ---------------------------------------------------------------------------------------------

// Limits beyond which an input is surely a typo (units confused, an extra zero or three). kMaxProducers (K, K_act)
// and kMaxSmCount (--sms) come with the platform file's ranges (model/platform.hpp).
constexpr double kMaxBurstBytes = 64.0 * MiB * KiB;  // 64 GiB aggregate
constexpr double kMaxTimeNs = 10e9;                  // 10 s: any gap, stagger, jitter, latency
constexpr double kMinTileTimeNs = 1.0;               // a mainloop or Q-loop step faster than 1 ns is a unit mistake
constexpr double kMaxRuleLatencyNs = 1e7;            // --rule latency_ns: 10 ms of fence latency
constexpr std::int64_t kMaxTileDim = 4096;
constexpr std::int64_t kMaxSeqLen = 1'000'000'000;
constexpr std::int64_t kMaxHeads = 65536, kMaxBatch = 65536;
constexpr double kMinTflops = 1e-3, kMaxTflops = 1e5;

struct CommonOptions {
  std::string platform_file;  // empty: the shipped default (an empty --platform is refused as it is read)
  std::string store_path = "st_global_16B";
  bool json = false;
};

struct SimulationOptions {
  bool simulate = false;
  std::string stagger = "0";
  std::string jitter = "0";
  int bursts = 100;
  std::uint64_t seed = 1;
};

struct PatternOptions {
  long K = 0;
  std::string burst, volume;
  std::vector<std::string> gaps;
  SimulationOptions sim;
};

struct MoeOptions {
  long K_act = 0;
  std::string tile = "128x128";
  bool tile_given = false;
  int out_bytes = 2;
  std::string t_l1, t_l2;
  long hidden = 0, inter = 0;
  double tflops = 0.0;
  std::string mix;
  long sms = 0;
  // The layer: the audit from the kernel's injection per schedule, and the schedule rule (--choose).
  long experts = 0, top_k = 0, tokens = 0, ranks = 2;
  std::string dtype = "bf16";
  std::string t_lat = "1us";
  bool t_lat_given = false;
  double jitter = 0.0;
  bool choose = false;
  std::string grid;
  std::vector<std::string> rule;  // NAME=VALUE overrides of moe::ScheduleRule (sensitivity studies)
};

struct AttentionOptions {
  std::string tile = "128x128";
  long head_dim = 128;
  int out_bytes = 2;
  long K = 0;
  std::string sigma;
  double tflops = 0.0;
  std::vector<std::int64_t> seq_lens;
  long heads = 1, batch = 1;
  long ranks = 0;  // Ulysses P; 0: every output row leaves the rank (the paper's worst case)
  std::string t_qk, t_lat = "1us";
  long sms = 0;
  double push_gbps = 0.0;  // fused_both: the pusher's rate beside the kernel (0: no fused_both audit)
  int in_bytes = 2;
};

// A tile or Q-loop time, given (`option`) or derived from throughput options (named in `option` too).
double tile_time(double ns, const std::string& option, const std::string& what) {
  require_in_range(ns, kMinTileTimeNs, kMaxTimeNs, option, what + " (ns)");
  return ns;
}

double positive_time(const std::string& text, const std::string& option) {
  return tile_time(parse_time_ns(text, option), option, "time");
}

double non_negative_time(const std::string& text, const std::string& option) {
  const double ns = parse_time_ns(text, option);
  require_in_range(ns, 0.0, kMaxTimeNs, option, "time (ns)");
  return ns;
}

// "128x128" -> {128, 128}
std::pair<int, int> parse_tile(const std::string& text, const std::string& option) {
  const auto x = text.find_first_of("xX");
  if (x == std::string::npos) throw InputError(option + ": expected b_m x b_n, e.g. 128x128 (got '" + text + "')");
  auto dim = [&](const std::string& part, const char* name) {
    const std::int64_t v = parse_decimal_integer(part, option + " " + name);
    require_in_range(static_cast<double>(v), 1, kMaxTileDim, option, name);
    return static_cast<int>(v);
  };
  return {dim(text.substr(0, x), "b_m"), dim(text.substr(x + 1), "b_n")};
}

// "1:2" -> {1, 2}
TileMix parse_mix(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) throw InputError("--mix: expected n1:n2, e.g. 3:8 (got '" + text + "')");
  auto part = [&](const std::string& s, const char* name) {
    const double v = parse_decimal(s, std::string("--mix ") + name);
    // Tile counts per steady cycle: a ratio beyond 1e6 (either way) is not a schedule.
    require_in_range(v, 1e-3, 1e3, "--mix", name);
    return v;
  };
  return {part(text.substr(0, colon), "n1"), part(text.substr(colon + 1), "n2")};
}

int checked_out_bytes(int out_bytes) {
  if (out_bytes != 1 && out_bytes != 2 && out_bytes != 4 && out_bytes != 8)
    throw InputError("--out-bytes: output element size must be 1, 2, 4 or 8 bytes (got " + std::to_string(out_bytes) + ")");
  return out_bytes;
}

// ---------------------------------------------------------------------------------------------
// The platform file.
// ---------------------------------------------------------------------------------------------

std::string default_platform_file() {
  try {
    return shipped_file(kDefaultPlatform);
  } catch (const InputError& e) {
    throw InputError(std::string("no --platform given and ") + e.what() + "; pass --platform FILE");
  }
}

struct Platform {
  std::string file;
  PlatformModel model;
  StorePath path = StorePath::st_global_16B;
  const PlatformTriple* triple = nullptr;
  int sm_count = 132;  // from provenance when present: the default K for attention, K_SM for MoE
};

Platform load_platform(const CommonOptions& o) {
  Platform p;
  p.file = o.platform_file.empty() ? default_platform_file() : o.platform_file;
  p.model = with_option_name("--platform", [&] { return read_platform_file(p.file); });
  p.path = with_option_name("--store-path", [&] { return store_path_from_string(o.store_path); });
  p.triple = with_option_name("--store-path", [&] { return &store_path_triple(p.model, p.path); });
  if (const int sms = platform_sm_count(p.model)) p.sm_count = sms;
  return p;
}

// M_X at (K, B) plus the interpolation warnings, printed on stderr so --json output stays parseable.
PlatformLookup lookup(const Platform& p, int K, double B_bytes) {
  PlatformLookup look = evaluate_platform(*p.triple, K, B_bytes);
  for (const std::string& w : look.warnings) std::fprintf(stderr, "xstage: warning: %s\n", w.c_str());
  return look;
}

void print_platform_header(const Platform& p, const PlatformPoint& pt) {
  std::printf("platform  %s  [%s]%s\n", p.file.c_str(), to_string(p.path),
              p.model.provisional ? "  PROVISIONAL: the paper's numbers, not measured here (run xstage calibrate)"
                                  : "");
  std::printf("  M_X     T_iss0 = %s   R = %s   Q = %s\n", format_time_ns(pt.T_iss0_ns).c_str(),
              format_rate(pt.R_bytes_per_ns).c_str(), format_bytes(pt.Q_bytes).c_str());
}

json platform_json(const Platform& p, const PlatformLookup& look) {
  return {{"file", p.file},
          {"provisional", p.model.provisional},
          {"store_path", to_string(p.path)},
          {"T_iss0_ns", look.point.T_iss0_ns},
          {"R_bytes_per_ns", look.point.R_bytes_per_ns},
          {"Q_bytes", look.point.Q_bytes},
          {"warnings", look.warnings}};
}

// ---------------------------------------------------------------------------------------------
// Printing one design test (Eq. 10).
// ---------------------------------------------------------------------------------------------

const char* holds(bool ok) { return ok ? "holds " : "BROKEN"; }

void print_design_test(const DesignTest& t) {
  const PlatformPoint& p = t.platform;
  std::printf("\nverdict   %s\n", to_string(t.verdict));
  std::printf("  rate bound      %s  V/(T_iss0+G) = %s  vs R = %s   (margin %s)\n", holds(t.rate_bound_holds),
              format_rate(t.injection_rate_bytes_per_ns).c_str(), format_rate(p.R_bytes_per_ns).c_str(),
              format_percent(t.rate_margin, true).c_str());
  std::printf("                          G = %s  vs G* = V/R - T_iss0 = %s   (margin %s)\n",
              format_time_ns(t.G_ns).c_str(), format_time_ns(t.G_star_ns).c_str(),
              format_time_ns(t.gap_margin_ns).c_str());
  std::printf("  capacity bound  %s  q_peak = V - R*T_iss0 = %s  vs Q = %s   (margin %s)\n",
              holds(t.capacity_bound_holds), format_bytes(t.q_peak_bytes).c_str(), format_bytes(p.Q_bytes).c_str(),
              format_bytes(t.capacity_margin_bytes).c_str());
  std::printf("  predicted       T_iss = %s (overhead %s)   T_period = %s   completion-coupled would be %s\n",
              format_time_ns(t.T_iss_ns).c_str(), format_time_ns(t.dT_iss_ns).c_str(),
              format_time_ns(t.T_period_ns).c_str(), format_time_ns(t.T_period_cc_ns).c_str());
  std::printf("\naction    %s\n", t.action.c_str());
}

json design_test_json(const DesignTest& t) {
  return {{"verdict", verdict_id(t.verdict)},
          {"action", t.action},
          {"V_bytes", t.V_bytes},
          {"G_ns", t.G_ns},
          {"G_star_ns", t.G_star_ns},
          {"gap_margin_ns", t.gap_margin_ns},
          {"rate_bound", {{"holds", t.rate_bound_holds},
                          {"injection_bytes_per_ns", t.injection_rate_bytes_per_ns},
                          {"R_bytes_per_ns", t.platform.R_bytes_per_ns},
                          {"margin", t.rate_margin},
                          {"V_max_bytes", t.V_max_rate_bytes}}},
          {"capacity_bound", {{"holds", t.capacity_bound_holds},
                              {"q_peak_bytes", t.q_peak_bytes},
                              {"Q_bytes", t.platform.Q_bytes},
                              {"margin_bytes", t.capacity_margin_bytes},
                              {"V_max_bytes", t.V_max_capacity_bytes}}},
          {"predicted", {{"T_iss_ns", t.T_iss_ns},
                         {"dT_iss_ns", t.dT_iss_ns},
                         {"T_period_ns", t.T_period_ns},
                         {"T_period_completion_coupled_ns", t.T_period_cc_ns},
                         {"T_iso_ns", t.T_iso_ns}}}};
}

json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"median", d.median}, {"p10", d.p10}, {"p90", d.p90},
          {"mean", d.mean},   {"min", d.min},       {"max", d.max}};
}

void emit_json(const json& doc) { std::cout << doc.dump(2) << '\n'; }

// "1.5e+12": a count of work units in a refusal.
std::string format_count(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// plan pattern
// ---------------------------------------------------------------------------------------------

struct PatternInput {
  int K = 0;
  double B_bytes = 0.0;
  std::vector<double> gaps_ns;
  SimulationConfig sim;  // platform, G filled per gap
};

PatternInput validate_pattern(const PatternOptions& o) {
  PatternInput in;
  in.K = static_cast<int>(o.K);
  if (o.burst.empty() == o.volume.empty())
    throw InputError("give exactly one of --burst (bytes per producer) and --volume (aggregate bytes V = K*B)");
  if (!o.burst.empty()) {
    in.B_bytes = parse_bytes(o.burst, "--burst");
    require_in_range(in.B_bytes, 1.0, kMaxBurstBytes / in.K, "--burst", "bytes per producer (with K = " + std::to_string(in.K) + ")");
  } else {
    const double V = parse_bytes(o.volume, "--volume");
    require_in_range(V, in.K, kMaxBurstBytes, "--volume", "aggregate burst bytes (>= 1 byte per producer)");
    in.B_bytes = V / in.K;
  }
  for (const std::string& g : o.gaps) in.gaps_ns.push_back(non_negative_time(g, "--gap"));

  in.sim.K = in.K;
  in.sim.B_bytes = in.B_bytes;
  in.sim.bursts = o.sim.bursts;
  in.sim.stagger_ns = non_negative_time(o.sim.stagger, "--stagger");
  in.sim.jitter_ns = non_negative_time(o.sim.jitter, "--jitter");
  in.sim.seed = o.sim.seed;
  if (!o.sim.simulate && (in.sim.stagger_ns > 0.0 || in.sim.jitter_ns > 0.0))
    throw InputError("--stagger and --jitter only apply with --simulate");
  if (o.sim.simulate) {
    const double work = simulation_work(in.K, in.sim.bursts) * static_cast<double>(in.gaps_ns.size());
    if (work > kMaxSimulationWork)
      throw InputError("--simulate: " + std::to_string(in.K) + " producers x " + std::to_string(in.sim.bursts) + " bursts x " +
                       std::to_string(in.gaps_ns.size()) + " gap(s) is " + format_count(work) +
                       " producer-steps, over the planner's budget of " + format_count(kMaxSimulationWork) +
                       " (docs/MODEL.md); use fewer --bursts, --producers or gaps");
  }
  return in;
}

void print_simulation(const SimulationResult& s, const SimulationConfig& c, const DesignTest& t) {
  std::printf("\nsimulated %d producers x %d bursts (first %d left out), stagger %s, jitter +-%s, seed %llu\n",
              c.K, c.bursts, c.bursts / 2, format_time_ns(c.stagger_ns).c_str(), format_time_ns(c.jitter_ns).c_str(),
              static_cast<unsigned long long>(c.seed));
  std::printf("  T_iss     median %s   p10 %s   p90 %s   mean %s   (aligned closed form %s)\n",
              format_time_ns(s.T_iss_ns.median).c_str(), format_time_ns(s.T_iss_ns.p10).c_str(),
              format_time_ns(s.T_iss_ns.p90).c_str(), format_time_ns(s.T_iss_ns.mean).c_str(),
              format_time_ns(t.T_iss_ns).c_str());
  std::printf("  T_period  median %s   p10 %s   p90 %s   mean %s   (aligned closed form %s)\n",
              format_time_ns(s.T_period_ns.median).c_str(), format_time_ns(s.T_period_ns.p10).c_str(),
              format_time_ns(s.T_period_ns.p90).c_str(), format_time_ns(s.T_period_ns.mean).c_str(),
              format_time_ns(t.T_period_ns).c_str());
  std::printf("  peak outstanding %s of Q = %s; throttled at Q %s of the time\n",
              format_bytes(s.max_outstanding_bytes).c_str(), format_bytes(t.platform.Q_bytes).c_str(),
              format_percent(s.throttled_fraction).c_str());
}

void run_pattern(const CommonOptions& common, const PatternOptions& o) {
  PatternInput in = validate_pattern(o);
  const Platform platform = load_platform(common);
  const PlatformLookup look = lookup(platform, in.K, in.B_bytes);
  const double V = in.K * in.B_bytes;
  in.sim.platform = look.point;

  json rows = json::array();
  std::vector<DesignTest> tests;
  std::vector<std::optional<SimulationResult>> sims;
  for (double G : in.gaps_ns) {
    tests.push_back(design_test(look.point, V, G));
    std::optional<SimulationResult> sim;
    if (o.sim.simulate) {
      in.sim.G_ns = G;
      sim = simulate(in.sim);
    }
    sims.push_back(sim);
    json row = design_test_json(tests.back());
    if (sim)
      row["simulation"] = {{"T_iss_ns", distribution_json(sim->T_iss_ns)},
                           {"T_period_ns", distribution_json(sim->T_period_ns)},
                           {"max_outstanding_bytes", sim->max_outstanding_bytes},
                           {"throttled_fraction", sim->throttled_fraction},
                           {"stagger_ns", in.sim.stagger_ns},
                           {"jitter_ns", in.sim.jitter_ns},
                           {"bursts", in.sim.bursts},
                           {"seed", in.sim.seed}};
    rows.push_back(std::move(row));
  }

  const json doc = {{"kind", "pattern"},
                    {"platform", platform_json(platform, look)},
                    {"pattern", {{"K", in.K}, {"B_bytes", in.B_bytes}, {"V_bytes", V}}},
                    {"gaps", rows}};
  require_sane_result(doc);
  if (common.json) return emit_json(doc);

  print_platform_header(platform, look.point);
  std::printf("pattern   K = %d producers x B = %s = V = %s per aligned burst\n", in.K,
              format_bytes(in.B_bytes).c_str(), format_bytes(V).c_str());
  if (tests.size() == 1) {
    std::printf("          G = %s of useful work between bursts\n", format_time_ns(tests[0].G_ns).c_str());
    print_design_test(tests[0]);
    if (sims[0]) print_simulation(*sims[0], in.sim, tests[0]);
    return;
  }
  // A gap sweep: one row per G, in the order given.
  std::printf("          G* = %s, q_peak = %s vs Q = %s (capacity bound %s)\n\n",
              format_time_ns(tests[0].G_star_ns).c_str(), format_bytes(tests[0].q_peak_bytes).c_str(),
              format_bytes(look.point.Q_bytes).c_str(), tests[0].capacity_bound_holds ? "holds" : "BROKEN");
  std::printf("%10s %11s %11s %11s %13s %11s  %-16s", "G", "T_iss", "overhead", "T_period", "T_period(cc)",
              "V/(T0+G)", "verdict");
  if (o.sim.simulate) std::printf(" %11s %11s %11s %11s", "sim T_iss", "p10", "p90", "T_per mean");
  std::printf("\n");
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const DesignTest& t = tests[i];
    std::printf("%10s %11s %11s %11s %13s %11s  %-16s", format_time_ns(t.G_ns).c_str(),
                format_time_ns(t.T_iss_ns).c_str(), format_time_ns(t.dT_iss_ns).c_str(),
                format_time_ns(t.T_period_ns).c_str(), format_time_ns(t.T_period_cc_ns).c_str(),
                format_rate(t.injection_rate_bytes_per_ns).c_str(), to_string(t.verdict));
    if (sims[i])
      std::printf(" %11s %11s %11s %11s", format_time_ns(sims[i]->T_iss_ns.median).c_str(),
                  format_time_ns(sims[i]->T_iss_ns.p10).c_str(), format_time_ns(sims[i]->T_iss_ns.p90).c_str(),
                  format_time_ns(sims[i]->T_period_ns.mean).c_str());
    std::printf("\n");
  }
  std::printf("\naction at G = %s: %s\n", format_time_ns(tests[0].G_ns).c_str(), tests[0].action.c_str());
}

// ---------------------------------------------------------------------------------------------
// plan moe
// ---------------------------------------------------------------------------------------------

MoeKernel validate_moe(const MoeOptions& o, int default_sms) {
  MoeKernel k;
  std::tie(k.b_m, k.b_n) = parse_tile(o.tile, "--tile");
  k.out_bytes = checked_out_bytes(o.out_bytes);
  k.K_SM = o.sms ? static_cast<int>(o.sms) : default_sms;
  k.K_act = static_cast<int>(o.K_act);
  if (k.K_act > k.K_SM)
    throw InputError("--producers: K_act = " + std::to_string(k.K_act) + " aligned epilogues cannot exceed the " +
                     std::to_string(k.K_SM) + " SMs running the kernel (--sms)");
  const bool times = !o.t_l1.empty() || !o.t_l2.empty();
  const bool shapes = o.hidden || o.inter || o.tflops != 0.0;
  if (times && shapes && o.tflops != 0.0)
    throw InputError("give either --t-l1/--t-l2 or --tflops (with --hidden/--inter), not both");
  if (o.inter) k.h_inter = static_cast<int>(o.inter);
  if (times) {
    if (o.t_l1.empty() || o.t_l2.empty()) throw InputError("give both --t-l1 and --t-l2 (mainloop time per tile)");
    k.T_L1_ns = positive_time(o.t_l1, "--t-l1");
    k.T_L2_ns = positive_time(o.t_l2, "--t-l2");
  } else {
    if (!o.hidden || !o.inter || o.tflops == 0.0)
      throw InputError("give the mainloop times (--t-l1 and --t-l2) or the GEMM shapes (--hidden, --inter and --tflops)");
    const MoeMainloopTimes t = moe_mainloop_times(k.b_m, k.b_n, static_cast<int>(o.hidden), *k.h_inter, o.tflops, k.K_SM);
    k.T_L1_ns = tile_time(t.T_L1_ns, "--tflops", "the Linear-1 mainloop time from --tile, --hidden, --tflops and the SM count");
    k.T_L2_ns = tile_time(t.T_L2_ns, "--tflops", "the Linear-2 mainloop time from --tile, --inter, --tflops and the SM count");
  }
  if (!o.mix.empty())
    k.mix = parse_mix(o.mix);
  else if (o.hidden && o.inter)
    k.mix = natural_tile_mix(static_cast<int>(o.hidden), static_cast<int>(o.inter));
  else
    throw InputError("give the tile mix --mix n1:n2 (L1 : L2 tiles per steady cycle), or --hidden and --inter to derive it");
  return k;
}

// ---------------------------------------------------------------------------------------------
// plan moe on a layer: the audit from the kernel's injection per schedule (moe::audit_schedule) and the
// schedule rule (moe::choose_schedule), for one layer or every configuration of a bench grid.
// ---------------------------------------------------------------------------------------------

bool layer_mode(const MoeOptions& o) { return !o.grid.empty() || o.experts || o.top_k || o.tokens; }

struct LayerSpec {
  std::string name;  // as `xstage moe bench` names it, without the routing: [name:]hH-iI-eE-kK/tT/dtype
  moe::MoeProblem problem;
};

moe::DType parse_moe_dtype(const std::string& d, const std::string& where) {
  if (d == "bf16") return moe::DType::bf16;
  if (d == "fp8") return moe::DType::fp8_e4m3;
  throw InputError(where + ": dtype must be bf16 or fp8 (got '" + d + "')");
}

// The problem as `xstage moe bench` builds it: b_m = 128, b_n = 256 where h and 2·h_inter allow it (or --tile).
// Every dimension is already in its range (moe_grid.hpp); what moe::validate refuses (divisibility, k <= E, E a
// multiple of P) is reported with `where`: the options or the grid entry it came from.
moe::MoeProblem layer_problem(long h, long I, long E, long k, long T, long P, moe::DType dtype, int tile_n,
                              const std::string& where) {
  moe::MoeProblem pr;
  pr.P_ranks = static_cast<int>(P);
  pr.E_experts = static_cast<int>(E);
  pr.top_k = static_cast<int>(k);
  pr.h_hidden = static_cast<int>(h);
  pr.h_inter = static_cast<int>(I);
  pr.T_tokens = static_cast<int>(T);
  pr.dtype = dtype;
  pr.b_m = 128;
  pr.b_n = tile_n ? tile_n : moe::default_tile_n(dtype, pr.h_hidden, pr.h_inter);
  with_option_name(where, [&] { moe::validate(pr); });
  return pr;
}

std::string layer_name(const moe::MoeProblem& pr, const std::string& prefix) {
  return prefix + "h" + std::to_string(pr.h_hidden) + "-i" + std::to_string(pr.h_inter) + "-e" + std::to_string(pr.E_experts) +
         "-k" + std::to_string(pr.top_k) + "/t" + std::to_string(pr.T_tokens) + "/" + (pr.dtype == moe::DType::bf16 ? "bf16" : "fp8");
}

// A grid file's layers (moe_grid.hpp), each in every dtype of the file. Routings are not read: the rule assumes
// the balanced load, and the audit runs on it.
std::vector<LayerSpec> read_layer_grid(const std::string& path, long P) {
  const MoeGrid grid = with_option_name("--grid", [&] { return read_moe_grid(path); });
  std::vector<LayerSpec> out;
  for (const GridLayer& l : grid.layers)
    for (const moe::DType d : grid.dtypes) {
      const moe::MoeProblem pr = layer_problem(l.h, l.h_inter, l.E, l.k, l.T, P, d, 0, "--grid: " + path + ": " + l.at);
      out.push_back({layer_name(pr, l.prefix), pr});
    }
  return out;
}

std::vector<LayerSpec> layer_specs(const MoeOptions& o) {
  if (!o.grid.empty()) {
    if (o.experts || o.top_k || o.tokens || o.hidden || o.inter)
      throw InputError("--grid takes the shapes from the file: leave out --hidden, --inter, --experts, --top-k and --tokens");
    return read_layer_grid(o.grid, o.ranks);
  }
  if (!o.experts || !o.top_k || !o.tokens || !o.hidden || !o.inter)
    throw InputError("describe the layer with all of --hidden, --inter, --experts, --top-k and --tokens (per rank)");
  int tile_n = 0;
  if (o.tile_given) {
    const auto [b_m, b_n] = parse_tile(o.tile, "--tile");
    if (b_m != 128 || (b_n != 128 && b_n != 256))
      throw InputError("--tile: the MegaMoE kernel runs 128x128 or 128x256 tiles (got '" + o.tile + "')");
    tile_n = b_n;
  }
  const moe::MoeProblem pr = layer_problem(o.hidden, o.inter, o.experts, o.top_k, o.tokens, o.ranks, parse_moe_dtype(o.dtype, "--dtype"),
                                           tile_n, "the layer (--hidden, --inter, --experts, --top-k, --tokens, --ranks, --dtype, --tile)");
  return {{layer_name(pr, ""), pr}};
}

json distribution_short(const Distribution& d) {
  return {{"mean", d.mean}, {"median", d.median}, {"p90", d.p90}, {"min", d.min}, {"max", d.max}};
}

json variant_json(const moe::ScheduleVariant& v) {
  return {{"name", moe::describe(v)},
          {"schedule", v.interleaved ? "interleaved" : "expert_wave"},
          {"wave_lag", v.wave_lag},
          {"cluster_n", v.cluster_n},
          {"cluster_m", v.cluster_m}};
}

json moe_audit_json(const MoeAudit& a) {
  return {{"K_act", a.kernel.K_act},
          {"V_bytes", a.V_bytes},
          {"verdict", verdict_id(a.verdict)},
          {"G_wave_ns", a.interleave.G_wave_ns},
          {"G_int_ns", a.interleave.G_int_ns},
          {"G_star_ns", a.wave.G_star_ns},
          {"rate_bound_holds_wave", a.wave.rate_bound_holds},
          {"capacity_bound_holds", a.wave.capacity_bound_holds},
          {"q_peak_bytes", a.wave.q_peak_bytes},
          {"interleaving_sufficient", a.interleave.sufficient},
          {"T_RS_wave_ns", a.T_RS_wave_ns},
          {"stall_wave_ns", a.stall_wave_ns},
          {"T_RS_int_ns", a.T_RS_int_ns},
          {"stall_int_ns", a.stall_int_ns}};
}

json by_cause_json(const CombineAudit& c) {
  json j = json::object();
  for (int k = 1; k < kStallCauses; ++k) j[to_string(static_cast<StallCause>(k))] = c.stall_by_cause_ns[k];
  return j;
}

json schedule_audit_json(const moe::ScheduleAudit& a) {
  const CombineAudit& c = a.combine;
  json j = {{"variant", variant_json(a.variant)},
            {"D_rows", a.D_rows},
            {"wave_experts", a.wave_experts},
            {"staging_slots", a.staging_slots},
            {"lockstep", {{"tile_phase_ns", a.makespan_ns},
                          {"busy_ns_per_cta", a.busy_ns_per_cta},
                          {"dependency_wait_ns_per_cta", a.wait_ns_per_cta},
                          {"idle_ns_per_cta", a.idle_ns_per_cta},
                          {"l1_cta_tiles", a.l1_tiles},
                          {"l2_cta_tiles", a.l2_tiles},
                          {"tick_ns", a.tick_ns}}},
            {"combine", {{"B_tile_bytes", a.B_tile_bytes},
                         {"K_act", distribution_short(c.K_act)},
                         {"phase_spread_ns", distribution_short(c.spread_ns)},
                         {"T_RS_ns", distribution_short(c.T_RS_ns)},
                         {"T_fence_ns", distribution_short(c.T_fence_ns)},
                         {"T_issue_ns", distribution_short(c.T_issue_ns)},
                         {"T_drain_ns", distribution_short(c.T_drain_ns)},
                         {"T_cover_ns", distribution_short(c.T_cover_ns)},
                         {"stall_ns", distribution_short(c.stall_ns)},
                         {"stalled_fraction", c.stalled_fraction},
                         {"stall_ns_per_cta", c.stall_ns_per_cta},
                         {"stall_ns_max_cta", c.stall_ns_max_cta},
                         {"stall_fraction_of_busy", a.stall_fraction},
                         {"stall_ns_by_cause", by_cause_json(c)},
                         {"binds", to_string(c.binds)},
                         {"storer_bound_fraction", c.storer_bound_fraction},
                         {"q_peak_bytes", c.q_peak_bytes},
                         {"throttled_fraction", c.throttled_fraction},
                         {"injection_bytes_per_ns", c.injection_bytes_per_ns}}},
            {"predicted_ns", a.predicted_ns}};
  j["aligned_closed_form"] = a.aligned ? moe_audit_json(*a.aligned) : json(nullptr);
  j["closed_form_at_predicted_K_act"] = a.at_K_act ? moe_audit_json(*a.at_K_act) : json(nullptr);
  return j;
}

json candidate_json(const moe::ScheduleCandidate& c) {
  json j = {{"variant", variant_json(c.variant)}, {"applies", c.applies}};
  if (!c.applies) {
    j["why_not"] = c.why_not;
    return j;
  }
  j.update({{"lockstep_ns", c.makespan_ns},
            {"dependency_wait_ns_per_cta", c.dependency_wait_ns},
            {"factor", c.factor},
            {"stall_ns_per_cta", c.stall_ns},
            {"hbm_weight_bytes", c.hbm_weight_bytes},
            {"reread_ns", c.reread_ns},
            {"predicted_ns", c.predicted_ns},
            {"K_act_mean", c.K_act_mean}});
  return j;
}

json choice_json(const moe::ScheduleChoice& c) {
  json cands = json::array();
  for (const auto& x : c.candidates) cands.push_back(candidate_json(x));
  return {{"schedule", moe::schedule_name(c.schedule)},
          {"wave_lag", c.wave_lag},
          {"cluster_n", c.cluster_n},
          {"cluster_m", c.cluster_m},
          {"name", moe::describe(c.chosen.variant)},
          {"predicted_ns", c.chosen.predicted_ns},
          {"runner_up", moe::describe(c.runner_up.variant)},
          {"runner_up_predicted_ns", c.runner_up.predicted_ns},
          {"rows_per_expert", c.rows_per_expert},
          {"reason", c.reason},
          {"candidates", cands}};
}

// --rule NAME=VALUE: one constant of the schedule rule replaced (tools/moe/rule_sensitivity.py uses it), each
// bounded to what the rule can use: a throughput, factor or cost outside its range is a typo, and the lockstep's
// resolution (ticks_per_tile) sets the planner's work.
struct RuleConstant {
  const char* name;
  double moe::ScheduleRule::*real;      // or
  int moe::ScheduleRule::*integer;      // or
  std::uint64_t moe::ScheduleRule::*seed;
  double lo, hi;
};

const RuleConstant kRuleConstants[] = {
    {"tflops_bf16", &moe::ScheduleRule::tflops_bf16, nullptr, nullptr, kMinTflops, kMaxTflops},
    {"tflops_fp8", &moe::ScheduleRule::tflops_fp8, nullptr, nullptr, kMinTflops, kMaxTflops},
    {"time_jitter", &moe::ScheduleRule::time_jitter, nullptr, nullptr, 0.0, 0.99},
    {"factor_interleaved_bf16", &moe::ScheduleRule::factor_interleaved_bf16, nullptr, nullptr, 0.1, 10.0},
    {"factor_interleaved_fp8", &moe::ScheduleRule::factor_interleaved_fp8, nullptr, nullptr, 0.1, 10.0},
    {"factor_pipelined", &moe::ScheduleRule::factor_pipelined, nullptr, nullptr, 0.1, 10.0},
    {"factor_m_pairs", &moe::ScheduleRule::factor_m_pairs, nullptr, nullptr, 0.1, 10.0},
    {"skew_hedge_waves", &moe::ScheduleRule::skew_hedge_waves, nullptr, nullptr, 0.0, 1.0},
    {"skew_hedge_m_pairs", &moe::ScheduleRule::skew_hedge_m_pairs, nullptr, nullptr, 0.0, 1.0},
    {"l2_bytes", &moe::ScheduleRule::l2_bytes, nullptr, nullptr, 1.0, 1e12},
    {"hbm_bytes_per_ns", &moe::ScheduleRule::hbm_bytes_per_ns, nullptr, nullptr, 1.0, 1e5},
    {"reread_cost", &moe::ScheduleRule::reread_cost, nullptr, nullptr, 0.0, 10.0},
    {"latency_ns", &moe::ScheduleRule::latency_ns, nullptr, nullptr, 0.0, kMaxRuleLatencyNs},
    {"m_pairs_min_rows", nullptr, &moe::ScheduleRule::m_pairs_min_rows, nullptr, 0.0, 2147483647.0},
    {"ticks_per_tile", nullptr, &moe::ScheduleRule::ticks_per_tile, nullptr, 1.0, 64.0},
    {"seed", nullptr, nullptr, &moe::ScheduleRule::seed, 0.0, 9.2e18},
};

moe::ScheduleRule rule_with(const std::vector<std::string>& overrides) {
  moe::ScheduleRule r;
  for (const std::string& kv : overrides) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw InputError("--rule: expected NAME=VALUE (got '" + kv + "')");
    const std::string name = kv.substr(0, eq), text = kv.substr(eq + 1), option = "--rule " + name;
    const RuleConstant* c = nullptr;
    std::string all;
    for (const RuleConstant& k : kRuleConstants) {
      if (name == k.name) c = &k;
      all += std::string(" ") + k.name;
    }
    if (!c) throw InputError("--rule: unknown constant '" + name + "' (known:" + all + ")");
    if (c->real) {
      const double v = parse_decimal(text, option);
      require_in_range(v, c->lo, c->hi, option, "the value");
      r.*(c->real) = v;
    } else {
      const std::int64_t v = parse_decimal_integer(text, option);
      require_in_range(static_cast<double>(v), c->lo, c->hi, option, "the value");
      if (c->integer) r.*(c->integer) = static_cast<int>(v);
      else r.*(c->seed) = static_cast<std::uint64_t>(v);
    }
  }
  return r;
}

// The tile times of a layer at `tflops` (named by `from` in a refusal).
struct LayerTimes {
  double tflops = 0.0;
  double T_L1_ns = 0.0, T_L2_ns = 0.0;
};

LayerTimes layer_times(const moe::MoeProblem& pr, int K_SM, double tflops, const std::string& from) {
  const MoeMainloopTimes m = moe_mainloop_times(128, pr.b_n, pr.h_hidden, pr.h_inter, tflops, K_SM);
  return {tflops, tile_time(m.T_L1_ns, from, "the Linear-1 mainloop time of " + layer_name(pr, "")),
          tile_time(m.T_L2_ns, from, "the Linear-2 mainloop time of " + layer_name(pr, ""))};
}

struct LayerResult {
  std::vector<moe::ScheduleAudit> audits;
  std::optional<moe::ScheduleChoice> choice;
  moe::ScheduleAuditConfig cfg;
  double tflops = 0.0;
  PlatformLookup look;
};

// The planner's work for one layer, counted before any of it is done (the budget below). The lockstep simulation
// steps every cluster through every tick of the tile phase, so it costs about the CTA tiles times their length in
// ticks, plus the ticks of one tile per CTA (the phase cannot be shorter; a tick costs several steps per cluster,
// whose state no longer fits in cache when there are many); the combine simulation visits every CTA at each of its
// events, a few per Linear-2 tile; every simulation also sets up and walks per-CTA state. Its memory holds every
// CTA tile twice over (timeline and combine), so the tile count is bounded on its own.
struct LayerWork {
  double tiles = 0.0;  // L1 + L2 CTA tiles
  double steps = 0.0;  // cluster-ticks and CTA-visits over every simulation the command runs on the layer
};

constexpr double kPerCtaSetup = 64.0;  // steps of per-CTA state per simulation (vectors allocated, walked, summed)

LayerWork layer_work(const moe::MoeProblem& pr, int K_SM, double T_L1_ns, double T_L2_ns, int audit_ticks, double audit_jitter,
                     int rule_ticks, bool choose) {
  const double rows_per_expert = static_cast<double>(pr.T_tokens) * pr.top_k / pr.E_local();
  const double row_blocks = std::ceil(rows_per_expert / pr.b_m) * pr.E_local();
  LayerWork w;
  const double l1 = row_blocks * pr.P1_l1_n_blocks(), l2 = row_blocks * pr.P2_l2_n_blocks();
  w.tiles = l1 + l2;
  const double variants = static_cast<double>(moe::kernel_variants(pr, K_SM, true).size());
  auto lockstep = [&](int ticks) {
    const double tick = std::min(T_L1_ns, T_L2_ns) / ticks;
    const double t1 = std::max(1.0, std::round(T_L1_ns / tick)), t2 = std::max(1.0, std::round(T_L2_ns / tick));
    return l1 * t1 + l2 * t2 + 4.0 * K_SM * (t1 + t2) + kPerCtaSetup * K_SM;
  };
  // Tile times that jitter share no events (up to 4 per tile instead of a few per aligned wave): up to 3x the visits.
  const double combine = 8.0 * l2 * K_SM;
  // The audit: a lockstep and a combine per variant; the rule (--choose): two locksteps and one (unjittered) combine
  // per variant.
  w.steps = variants * (lockstep(audit_ticks) + combine * (1.0 + 4.0 * audit_jitter));
  if (choose) w.steps += variants * (2.0 * lockstep(rule_ticks) + combine);
  return w;
}

// The budget of one `xstage plan moe` command on a layer or a whole grid (docs/MODEL.md): a few seconds and well
// under 1 GiB on one core at the limit; the shipped grid with --choose needs 2e9 steps.
constexpr double kMaxLayerTiles = 1.5e6;
constexpr double kMaxPlanSteps = 2.5e9;

LayerResult audit_layer(const Platform& platform, const moe::MoeProblem& pr, int K_SM, const MoeOptions& o,
                        const LayerTimes& times, double latency_ns, const std::optional<moe::ScheduleRule>& rule) {
  LayerResult r;
  r.tflops = times.tflops;
  const double B = 128.0 * pr.b_n * pr.out_bytes * (pr.P_ranks > 1 ? (pr.P_ranks - 1.0) / pr.P_ranks : 1.0);
  r.look = lookup(platform, K_SM, B);
  r.cfg.T_L1_ns = times.T_L1_ns;
  r.cfg.T_L2_ns = times.T_L2_ns;
  r.cfg.platform = r.look.point;
  r.cfg.latency_ns = latency_ns;
  if (platform.model.storer) r.cfg.storer = platform.model.storer->costs;
  r.cfg.time_jitter = o.jitter;
  const std::vector<int> rows = moe::balanced_expert_rows(pr);
  for (const moe::ScheduleVariant& v : moe::kernel_variants(pr, K_SM, true)) r.audits.push_back(moe::audit_schedule(pr, rows, K_SM, v, r.cfg));
  if (rule) r.choice = moe::choose_schedule(pr, K_SM, r.look.point, *rule);
  return r;
}

// The platform file's storer section as the audit used it (null: absent, the storer is never the bound).
json storer_json(const std::optional<StorerMeasurement>& s) {
  if (!s) return nullptr;
  return {{"R_S_bytes_per_ns", s->costs.R_S_bytes_per_ns}, {"T_load_ns", s->costs.T_load_ns}, {"T_fence_ns", s->T_fence_ns},
          {"T_release_ns", s->costs.T_release_ns}, {"source", s->source}};
}

json layer_json(const LayerSpec& spec, int K_SM, const LayerResult& r, const std::optional<StorerMeasurement>& platform_storer) {
  const moe::MoeProblem& pr = spec.problem;
  json audits = json::array();
  for (const auto& a : r.audits) audits.push_back(schedule_audit_json(a));
  json j = {{"config", spec.name},
            {"problem", {{"P", pr.P_ranks}, {"E", pr.E_experts}, {"k", pr.top_k}, {"h", pr.h_hidden}, {"h_inter", pr.h_inter},
                         {"tokens_per_rank", pr.T_tokens}, {"b_m", pr.b_m}, {"b_n", pr.b_n},
                         {"dtype", pr.dtype == moe::DType::bf16 ? "bf16" : "fp8"}, {"K_SM", K_SM},
                         {"rows_per_expert_balanced", moe::balanced_expert_rows(pr).front()}}},
            {"assumptions", {{"tflops", r.tflops}, {"T_L1_ns", r.cfg.T_L1_ns}, {"T_L2_ns", r.cfg.T_L2_ns},
                             {"latency_ns", r.cfg.latency_ns}, {"time_jitter", r.cfg.time_jitter},
                             {"storer", storer_json(platform_storer)},
                             {"platform_point", {{"T_iss0_ns", r.look.point.T_iss0_ns}, {"R_bytes_per_ns", r.look.point.R_bytes_per_ns},
                                                 {"Q_bytes", r.look.point.Q_bytes}}}}},
            {"schedules", audits}};
  j["choice"] = r.choice ? choice_json(*r.choice) : json(nullptr);
  return j;
}

void print_layer(const LayerSpec& spec, int K_SM, const LayerResult& r, bool first) {
  const moe::MoeProblem& pr = spec.problem;
  const std::vector<int> rows = moe::balanced_expert_rows(pr);
  std::printf("%sMoE layer %s  (%s; balanced load %d rows per expert, K_SM = %d)\n", first ? "" : "\n", spec.name.c_str(),
              moe::describe(pr).c_str(), rows.front(), K_SM);
  std::printf("          T_L1 = %s, T_L2 = %s per tile (%g TFLOP/s); V_t = %s remote per Linear-2 tile, %d staging slot%s;"
              " T_lat = %s, tile-time jitter %g%%\n",
              format_time_ns(r.cfg.T_L1_ns).c_str(), format_time_ns(r.cfg.T_L2_ns).c_str(), r.tflops,
              format_bytes(r.audits.front().B_tile_bytes).c_str(), r.audits.front().staging_slots, r.audits.front().staging_slots > 1 ? "s" : "",
              format_time_ns(r.cfg.latency_ns).c_str(), 100.0 * r.cfg.time_jitter);
  std::printf("From the kernel's injection (every CTA's walk in lockstep, then each Linear-2 tile through its staging slot, storers\n"
              "and the X-Stage at M_X(K_SM)); per tile: K_act draining at its start, phase spread, T_RS = staged -> slot free,\n"
              "T_fence = staged -> fence returned, T_cover = MMA time before the slot is needed again, dt = [T_RS - T_cover]+,\n"
              "storer = the tiles whose storers' own time T_load + (L + B)/R_S exceeds their X-Stage issue time T_iss0:\n");
  std::printf("%-24s %6s %9s %8s %9s %8s %15s %9s %16s %8s %7s %7s %8s\n", "schedule", "D/W", "tiles", "dep.wait", "K_act", "spread",
              "T_RS mean/p90", "T_fence", "T_cover min/mean", "dt/tile", "stalled", "storer", "binds");
  for (const auto& a : r.audits) {
    const CombineAudit& c = a.combine;
    const std::string dw = a.variant.interleaved ? "D=" + std::to_string(a.D_rows) : "W=" + std::to_string(a.wave_experts);
    char kact[32], rs[48], cover[48];
    std::snprintf(kact, sizeof kact, "%.1f/%.0f", c.K_act.mean, c.K_act.max);
    std::snprintf(rs, sizeof rs, "%s/%s", format_time_ns(c.T_RS_ns.mean).c_str(), format_time_ns(c.T_RS_ns.p90).c_str());
    std::snprintf(cover, sizeof cover, "%s/%s", format_time_ns(c.T_cover_ns.min).c_str(), format_time_ns(c.T_cover_ns.mean).c_str());
    std::printf("%-24s %6s %9s %8s %9s %8s %15s %9s %16s %8s %7s %7s %8s\n", moe::describe(a.variant).c_str(), dw.c_str(),
                format_time_ns(a.makespan_ns).c_str(), format_time_ns(a.wait_ns_per_cta).c_str(), kact,
                format_time_ns(c.spread_ns.mean).c_str(), rs, format_time_ns(c.T_fence_ns.mean).c_str(), cover,
                format_time_ns(c.stall_ns.mean).c_str(), format_percent(c.stalled_fraction).c_str(),
                format_percent(c.storer_bound_fraction).c_str(), to_string(c.binds));
  }
  const moe::ScheduleAudit& a0 = r.audits.front();
  if (a0.aligned) {
    const MoeAudit& al = *a0.aligned;
    std::printf("Aligned closed form (K_act = K_SM = %d epilogues at once, gap one mainloop; V = %s): G* = %s;"
                " expert-wave T_RS %s, stall %s; interleaved T_RS %s, stall %s; verdict %s\n",
                al.kernel.K_act, format_bytes(al.V_bytes).c_str(), format_time_ns(al.wave.G_star_ns).c_str(),
                format_time_ns(al.T_RS_wave_ns).c_str(), format_time_ns(al.stall_wave_ns).c_str(), format_time_ns(al.T_RS_int_ns).c_str(),
                format_time_ns(al.stall_int_ns).c_str(), to_string(al.verdict));
    for (const auto& a : r.audits)
      if (a.at_K_act)
        std::printf("  at %-22s predicted K_act = %3d: V = %s, q_peak %s vs Q %s, stall wave %s / interleaved %s, verdict %s\n",
                    moe::describe(a.variant).c_str(), a.at_K_act->kernel.K_act, format_bytes(a.at_K_act->V_bytes).c_str(),
                    format_bytes(a.at_K_act->wave.q_peak_bytes).c_str(), format_bytes(a.at_K_act->wave.platform.Q_bytes).c_str(),
                    format_time_ns(a.at_K_act->stall_wave_ns).c_str(), format_time_ns(a.at_K_act->stall_int_ns).c_str(),
                    to_string(a.at_K_act->verdict));
  }
  if (r.choice) {
    std::printf("choice    %s  (schedule %s, wave_lag %d, cluster_n %d, cluster_m %d)\n", moe::describe(r.choice->chosen.variant).c_str(),
                moe::schedule_name(r.choice->schedule), r.choice->wave_lag,
                r.choice->cluster_n, r.choice->cluster_m);
    std::printf("          %s\n", r.choice->reason.c_str());
  }
}

void run_moe_layers(const CommonOptions& common, const MoeOptions& o) {
  if (!o.t_l1.empty() || !o.t_l2.empty() || !o.mix.empty())
    throw InputError("on a layer the tile times and mix come from the shapes and --tflops: leave out --t-l1, --t-l2 and --mix");
  if (o.K_act) throw InputError("on a layer K_act is what the audit predicts: leave out --producers");
  if (!o.rule.empty() && !o.choose) throw InputError("--rule changes the schedule rule: give --choose too");
  const Platform platform = load_platform(common);
  const int K_SM = o.sms ? static_cast<int>(o.sms) : platform.sm_count;
  // T_lat: --t-lat when given, else the fence the platform file measured for the storer, else --t-lat's default.
  const double latency_ns =
      !o.t_lat_given && platform.model.storer ? platform.model.storer->T_fence_ns : non_negative_time(o.t_lat, "--t-lat");
  require_in_range(latency_ns, 0.0, kMaxRuleLatencyNs, "--t-lat", "fence latency (ns)");
  // The audit's tile times come from --tflops or the shipped rule's throughput; the rule's own (--choose) from its
  // constants after --rule, --tflops and --t-lat replaced them.
  const moe::ScheduleRule shipped;
  std::optional<moe::ScheduleRule> rule;
  if (o.choose) {
    rule = rule_with(o.rule);
    if (o.tflops != 0.0) rule->tflops_bf16 = rule->tflops_fp8 = o.tflops;
    if (o.t_lat_given) rule->latency_ns = latency_ns;
  }
  const std::vector<LayerSpec> specs = layer_specs(o);

  // Every layer's times and work first: a command over the budget is refused before any of it is done.
  std::vector<LayerTimes> times;
  double steps = 0.0;
  for (const LayerSpec& spec : specs) {
    const moe::MoeProblem& pr = spec.problem;
    const bool fp8 = pr.dtype == moe::DType::fp8_e4m3;
    times.push_back(o.tflops != 0.0 ? layer_times(pr, K_SM, o.tflops, "--tflops")
                                    : layer_times(pr, K_SM, fp8 ? shipped.tflops_fp8 : shipped.tflops_bf16, "the shipped rule's throughput"));
    if (rule)  // the rule derives its own tile times: they must be in range too
      layer_times(pr, K_SM, fp8 ? rule->tflops_fp8 : rule->tflops_bf16, o.tflops != 0.0 ? "--tflops" : "--rule tflops");
    const LayerWork w = layer_work(pr, K_SM, times.back().T_L1_ns, times.back().T_L2_ns, moe::ScheduleAuditConfig{}.ticks_per_tile,
                                   o.jitter, rule ? rule->ticks_per_tile : 1, rule.has_value());
    if (w.tiles > kMaxLayerTiles)
      throw InputError((o.grid.empty() ? std::string("the layer (--tokens, --top-k, --experts, --hidden, --inter)") : "--grid: " + spec.name) +
                       " has " + format_count(w.tiles) + " CTA tiles, over the planner's limit of " + format_count(kMaxLayerTiles) +
                       " per layer (docs/MODEL.md)");
    steps += w.steps;
  }
  if (steps > kMaxPlanSteps)
    throw InputError(std::string(o.grid.empty() ? "the layer (--hidden, --inter, --experts, --top-k, --tokens, --sms) needs "
                                                : "--grid: the " + std::to_string(specs.size()) + " layers need ") +
                     format_count(steps) + " simulation steps, over the planner's budget of " + format_count(kMaxPlanSteps) +
                     " (docs/MODEL.md)" + (o.choose ? "; --choose doubles the work" : ""));

  std::vector<LayerResult> results;
  json all = json::array();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    results.push_back(audit_layer(platform, specs[i].problem, K_SM, o, times[i], latency_ns, rule));
    all.push_back(layer_json(specs[i], K_SM, results.back(), platform.model.storer));
  }
  const json platform_doc = {{"file", platform.file}, {"provisional", platform.model.provisional}, {"store_path", to_string(platform.path)}};
  json doc;
  if (o.grid.empty()) {
    doc = all.front();
    doc["kind"] = "moe";
    doc["platform"] = platform_doc;
  } else {
    doc = {{"kind", "moe"}, {"grid", o.grid}, {"platform", platform_doc}, {"configs", all}};
  }
  require_sane_result(doc);
  if (common.json) return emit_json(doc);

  std::printf("platform  %s  [%s]%s\n", platform.file.c_str(), to_string(platform.path),
              platform.model.provisional ? "  PROVISIONAL: the paper's numbers, not measured here" : "");
  const PlatformPoint& m = results.front().look.point;
  std::printf("  M_X at K = %d for one tile's remote bytes: T_iss0 = %s   R = %s   Q = %s\n", K_SM, format_time_ns(m.T_iss0_ns).c_str(),
              format_rate(m.R_bytes_per_ns).c_str(), format_bytes(m.Q_bytes).c_str());
  if (const auto& s = platform.model.storer)
    std::printf("  storer  R_S = %s per CTA, T_load = %s, T_release = %s, fence T_fence = %s (the audit's T_lat unless --t-lat)\n"
                "          from %s\n",
                format_rate(s->costs.R_S_bytes_per_ns).c_str(), format_time_ns(s->costs.T_load_ns).c_str(),
                format_time_ns(s->costs.T_release_ns).c_str(), format_time_ns(s->T_fence_ns).c_str(), s->source.c_str());
  else
    std::printf("  storer  not in the platform file: its own rate is not a bound (only the X-Stage's is)\n");
  for (std::size_t i = 0; i < specs.size(); ++i) print_layer(specs[i], K_SM, results[i], i == 0);
}

void run_moe(const CommonOptions& common, const MoeOptions& o) {
  if (layer_mode(o)) return run_moe_layers(common, o);
  if (!o.rule.empty()) throw InputError("--rule changes the schedule rule: it needs --choose on a layer or --grid");
  if (o.choose) throw InputError("--choose needs the layer: --hidden, --inter, --experts, --top-k and --tokens, or --grid");
  if (!o.K_act)
    throw InputError("--producers: give K_act for the aligned closed form, or describe the layer (--experts, --top-k, --tokens"
                     " with --hidden and --inter) for the audit from the kernel's injection");
  const Platform platform = load_platform(common);
  const MoeKernel k = validate_moe(o, platform.sm_count);
  const double B = static_cast<double>(k.b_m) * k.b_n * k.out_bytes;
  const PlatformLookup look = lookup(platform, k.K_act, B);
  const MoeAudit a = audit_moe(look.point, k);

  {
    json kernel = {{"b_m", k.b_m},         {"b_n", k.b_n},     {"out_bytes", k.out_bytes}, {"K_act", k.K_act},
                   {"T_L1_ns", k.T_L1_ns}, {"T_L2_ns", k.T_L2_ns}, {"n1", k.mix.n1},       {"n2", k.mix.n2},
                   {"K_SM", k.K_SM}};
    if (k.h_inter) kernel["h_inter"] = *k.h_inter;
    const json doc = {{"kind", "moe"},
               {"platform", platform_json(platform, look)},
               {"kernel", kernel},
               {"V_t_bytes", a.B_bytes},
               {"V_bytes", a.V_bytes},
               {"verdict", verdict_id(a.verdict)},
               {"action", a.action},
               {"wave", design_test_json(a.wave)},
               {"interleaved", design_test_json(a.interleaved)},
               {"interleave_test", {{"G_wave_ns", a.interleave.G_wave_ns},
                                    {"G_int_ns", a.interleave.G_int_ns},
                                    {"dT_iss_wave_ns", a.interleave.dT_iss_wave_ns},
                                    {"dT_iss_int_ns", a.interleave.dT_iss_int_ns},
                                    {"injection_bytes_per_ns", a.interleave.injection_rate_int_bytes_per_ns},
                                    {"sufficient", a.interleave.sufficient}}},
               {"critical_path", {{"T_RS_wave_ns", a.T_RS_wave_ns},
                                  {"stall_wave_ns", a.stall_wave_ns},
                                  {"T_RS_int_ns", a.T_RS_int_ns},
                                  {"stall_int_ns", a.stall_int_ns}}},
               {"D_knee_rows", a.D_knee_rows ? json(*a.D_knee_rows) : json(nullptr)}};
    require_sane_result(doc);
    if (common.json) return emit_json(doc);
  }

  print_platform_header(platform, look.point);
  std::printf("MoE       K_act = %d aligned L2 epilogues x V_t = %dx%dx%d B = %s -> V = %s\n", k.K_act, k.b_m, k.b_n,
              k.out_bytes, format_bytes(a.B_bytes).c_str(), format_bytes(a.V_bytes).c_str());
  std::printf("          T_L1 = %s, T_L2 = %s per tile, mix n1:n2 = %g:%g, K_SM = %d\n", format_time_ns(k.T_L1_ns).c_str(),
              format_time_ns(k.T_L2_ns).c_str(), k.mix.n1, k.mix.n2, k.K_SM);
  std::printf("\n%-12s %10s %10s %12s %10s %12s %10s\n", "schedule", "gap G", "G*", "V/(T0+G)", "overhead", "T_RS",
              "stall");
  std::printf("%-12s %10s %10s %12s %10s %12s %10s\n", "expert-wave", format_time_ns(a.interleave.G_wave_ns).c_str(),
              format_time_ns(a.wave.G_star_ns).c_str(), format_rate(a.wave.injection_rate_bytes_per_ns).c_str(),
              format_time_ns(a.interleave.dT_iss_wave_ns).c_str(), format_time_ns(a.T_RS_wave_ns).c_str(),
              format_time_ns(a.stall_wave_ns).c_str());
  std::printf("%-12s %10s %10s %12s %10s %12s %10s\n", "interleaved", format_time_ns(a.interleave.G_int_ns).c_str(),
              format_time_ns(a.wave.G_star_ns).c_str(), format_rate(a.interleave.injection_rate_int_bytes_per_ns).c_str(),
              format_time_ns(a.interleave.dT_iss_int_ns).c_str(), format_time_ns(a.T_RS_int_ns).c_str(),
              format_time_ns(a.stall_int_ns).c_str());
  std::printf("  (rate bound V/(T0+G) <= R = %s; Eq. 14 interleaving %s; capacity q_peak = %s vs Q = %s %s)\n",
              format_rate(look.point.R_bytes_per_ns).c_str(), a.interleave.sufficient ? "sufficient" : "NOT sufficient",
              format_bytes(a.wave.q_peak_bytes).c_str(), format_bytes(look.point.Q_bytes).c_str(),
              a.wave.capacity_bound_holds ? "holds" : "BROKEN");
  if (a.D_knee_rows) std::printf("  anti-starvation lead D_knee = %ld scheduler rows\n", *a.D_knee_rows);
  std::printf("\nverdict   %s\naction    %s\n", to_string(a.verdict), a.action.c_str());
}

// ---------------------------------------------------------------------------------------------
// plan attention
// ---------------------------------------------------------------------------------------------

AttentionKernel validate_attention(const AttentionOptions& o, int default_sms) {
  AttentionKernel k;
  std::tie(k.b_m, k.b_n) = parse_tile(o.tile, "--tile");
  k.head_dim = static_cast<int>(o.head_dim);
  k.out_bytes = checked_out_bytes(o.out_bytes);
  const int sms = o.sms ? static_cast<int>(o.sms) : default_sms;
  k.K = o.K ? static_cast<int>(o.K) : sms;
  if (o.sigma.empty() == (o.tflops == 0.0))
    throw InputError("give exactly one of --sigma (Q-loop time per KV tile) and --tflops (attention throughput)");
  if (!o.sigma.empty()) {
    k.sigma_ns = positive_time(o.sigma, "--sigma");
  } else {
    k.sigma_ns = tile_time(sigma_from_throughput_ns(k.b_m, k.b_n, k.head_dim, o.tflops, sms), "--tflops",
                           "the Q-loop time per KV tile from --tile, --head-dim, --tflops and the SM count");
  }
  // One QK^T mainloop is half the work of a KV tile (QK^T and PV): the default cover window.
  k.G_QK_ns = o.t_qk.empty() ? k.sigma_ns / 2.0 : non_negative_time(o.t_qk, "--t-qk");
  k.T_lat_ns = non_negative_time(o.t_lat, "--t-lat");
  k.heads = static_cast<int>(o.heads);
  k.batch = static_cast<int>(o.batch);
  if (o.ranks != 0) k.remote_fraction = static_cast<double>(o.ranks - 1) / static_cast<double>(o.ranks);
  return k;
}

void run_attention(const CommonOptions& common, const AttentionOptions& o) {
  const Platform platform = load_platform(common);
  const AttentionKernel k = validate_attention(o, platform.sm_count);
  const double B = attention_tile_bytes(k.b_m, k.head_dim, k.out_bytes);
  const PlatformLookup look = lookup(platform, k.K, B);
  const AttentionAudit a = with_option_name(o.sigma.empty() ? "--tflops" : "--sigma", [&] { return audit_attention(look.point, k, o.seq_lens); });
  std::vector<PushPoint> push;
  if (o.push_gbps > 0.0) {
    if (o.ranks < 2) throw InputError("--push-gbps audits fused_both, which pushes to other ranks: give --ranks P >= 2");
    push = with_option_name("--push-gbps", [&] { return audit_push(look.point, a, o.push_gbps, o.in_bytes, static_cast<int>(o.ranks)); });
  }

  {
    json points = json::array();
    for (const AttentionPoint& pt : a.points)
      points.push_back({{"M", pt.M},
                        {"G_Qloop_ns", pt.G_Qloop_ns},
                        {"tiles", pt.tiles},
                        {"N_t", pt.N_t},
                        {"dt_ns", pt.dt_ns},
                        {"dt_critical_ns", pt.dt_critical_ns},
                        {"E_drain_ns", pt.E_drain_ns},
                        {"dt_cc_ns", pt.dt_cc_ns},
                        {"E_cc_ns", pt.E_cc_ns},
                        {"E_tail_ns", pt.E_tail_ns},
                        {"E_res_ns", pt.E_res_ns},
                        {"design_test", design_test_json(pt.test)}});
    json fused_both = json::array();
    for (const PushPoint& q : push)
      fused_both.push_back({{"M", q.M},
                            {"first_wave_heads", q.first_wave_heads},
                            {"head_start_bytes", q.head_start_bytes},
                            {"head_start_ns", q.head_start_ns},
                            {"wave_ns", q.wave_ns},
                            {"wave_bytes", q.wave_bytes},
                            {"stall_per_wave_ns", q.stall_per_wave_ns},
                            {"E_push_ns", q.E_push_ns},
                            {"pre_all_to_all_ns", q.pre_all_to_all_ns},
                            {"hidden_fraction", q.hidden_fraction}});
    json doc = {{"kind", "attention"},
               {"platform", platform_json(platform, look)},
               {"kernel", {{"b_m", k.b_m}, {"b_n", k.b_n}, {"head_dim", k.head_dim}, {"out_bytes", k.out_bytes},
                           {"K", k.K}, {"sigma_ns", k.sigma_ns}, {"G_QK_ns", k.G_QK_ns}, {"T_lat_ns", k.T_lat_ns},
                           {"heads", k.heads}, {"batch", k.batch}, {"remote_fraction", k.remote_fraction}}},
               {"B_t_bytes", a.B_bytes},
               {"V_bytes", a.V_bytes},
               {"G_star_ns", a.G_star_ns},
               {"q_peak_bytes", a.q_peak_bytes},
               {"capacity_bound_holds", a.capacity_bound_holds},
               {"M_ub_tokens", a.M_ub},
               {"verdict", verdict_id(a.verdict)},
               {"action", a.action},
               {"seq_lens", points}};
    if (!push.empty()) doc["fused_both"] = {{"push_GBps", o.push_gbps}, {"in_bytes", o.in_bytes}, {"seq_lens", fused_both}};
    require_sane_result(doc);
    if (common.json) return emit_json(doc);
  }

  print_platform_header(platform, look.point);
  std::printf("attention K = %d CTAs x B_t = %dx%dx%d B = %s -> aligned V = %s;  sigma = %s per KV tile (b_n = %d)\n",
              k.K, k.b_m, k.head_dim, k.out_bytes, format_bytes(a.B_bytes).c_str(), format_bytes(a.V_bytes).c_str(),
              format_time_ns(k.sigma_ns).c_str(), k.b_n);
  std::printf("          G* = %s  ->  M_ub* = b_n*ceil(G*/sigma) = %lld tokens;  capacity bound %s (q_peak = %s vs Q = %s)\n",
              format_time_ns(a.G_star_ns).c_str(), static_cast<long long>(a.M_ub),
              a.capacity_bound_holds ? "holds" : "BROKEN", format_bytes(a.q_peak_bytes).c_str(),
              format_bytes(look.point.Q_bytes).c_str());
  std::printf("          G_QK cover = %s, T_lat = %s (completion-coupled counterfactual), %lld heads x %lld batch\n\n",
              format_time_ns(k.G_QK_ns).c_str(), format_time_ns(k.T_lat_ns).c_str(), static_cast<long long>(k.heads),
              static_cast<long long>(k.batch));
  std::printf("%9s %11s %7s %10s %10s %12s %12s %12s  %s\n", "M", "G_Qloop", "N_t", "dt(M)", "dt'(M)", "E_drain",
              "E_res", "E_cc", "verdict");
  for (const AttentionPoint& pt : a.points)
    std::printf("%9lld %11s %7lld %10s %10s %12s %12s %12s  %s\n", static_cast<long long>(pt.M),
                format_time_ns(pt.G_Qloop_ns).c_str(), static_cast<long long>(pt.N_t), format_time_ns(pt.dt_ns).c_str(),
                format_time_ns(pt.dt_critical_ns).c_str(), format_time_ns(pt.E_drain_ns).c_str(),
                format_time_ns(pt.E_res_ns).c_str(), format_time_ns(pt.E_cc_ns).c_str(), to_string(pt.test.verdict));
  std::printf("\nE_res = E_drain + the last wave's drain V/R + T_lat (X-Stage: flat in M); E_cc = completion-coupled (grows with M)\n");
  std::printf("\nverdict   %s\naction    %s\n", to_string(a.verdict), a.action.c_str());
  if (push.empty()) return;
  std::printf("\nfused_both (the pre-attention all-to-all pushed head by head; pusher beside the kernel %s, P = %ld):\n",
              format_rate(o.push_gbps).c_str(), o.ranks);
  std::printf("%9s %6s %12s %11s %11s %11s %11s %12s %8s\n", "M", "heads1", "head start", "wave", "wave bytes", "stall/wave",
              "E_push", "pre-A2A", "hidden");
  for (const PushPoint& q : push)
    std::printf("%9lld %6lld %12s %11s %11s %11s %11s %12s %8s\n", static_cast<long long>(q.M), static_cast<long long>(q.first_wave_heads),
                format_time_ns(q.head_start_ns).c_str(), format_time_ns(q.wave_ns).c_str(), format_bytes(q.wave_bytes).c_str(),
                format_time_ns(q.stall_per_wave_ns).c_str(), format_time_ns(q.E_push_ns).c_str(),
                format_time_ns(q.pre_all_to_all_ns).c_str(), format_percent(q.hidden_fraction).c_str());
  std::printf("\nheads1: the first wave's heads, pushed on every SM before the kernel (remote part at R); E_push = head start +\n"
              "(N_t - 1) x stall; hidden = 1 - E_push / the exposed pre-attention all-to-all (remote bytes / R). Not modelled:\n"
              "the copy-out (fused_post pays it too) and the waits' cost inside the attention kernel.\n");
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

void add_common_options(CLI::App* cmd, CommonOptions& o) {
  add_path(cmd, "--platform", o.platform_file,
           "platform file from `xstage calibrate` (default: the shipped platforms/h200_nvlink4.json)");
  cmd->add_option("--store-path", o.store_path, "st_global_16B (plain 16-byte stores) or tma_bulk (TMA bulk stores)");
  cmd->add_flag("--json", o.json, "machine-readable output on stdout (warnings stay on stderr)");
}

void add_pattern(CLI::App* plan, std::shared_ptr<CommonOptions> common) {
  auto o = std::make_shared<PatternOptions>();
  CLI::App* cmd = plan->add_subcommand(
      "pattern", "A periodic burst pattern: K producers each store B bytes, then compute for a gap G (Eq. 3-10).");
  add_integer(cmd, "-K,--producers", o->K, 1, kMaxProducers, "concurrent producers K (CTAs or warps that store)")->required();
  cmd->add_option("-B,--burst", o->burst, "bytes per producer per burst, e.g. 32KiB");
  cmd->add_option("-V,--volume", o->volume, "aggregate burst V = K*B instead of --burst, e.g. 4.6MiB");
  add_list(cmd, "-G,--gap", o->gaps, "useful work between bursts, e.g. 2us; a list (0,2us,6us) prints a sweep")->required();
  cmd->add_flag("--simulate", o->sim.simulate, "also run the fluid X-Stage simulator (distributions of T_iss, T_period)");
  cmd->add_option("--stagger", o->sim.stagger, "simulator: spread producer start phases evenly over this time");
  cmd->add_option("--jitter", o->sim.jitter, "simulator: each gap varies uniformly by +- this much");
  add_integer(cmd, "--bursts", o->sim.bursts, 2, 100000, "simulator: bursts per producer (first half is warm-up; default 100)");
  add_integer(cmd, "--seed", o->sim.seed, 0, INT64_MAX, "simulator: seed for the jitter (default 1)");
  cmd->callback([common, o] { run_pattern(*common, *o); });
}

void add_moe(CLI::App* plan, std::shared_ptr<CommonOptions> common) {
  auto o = std::make_shared<MoeOptions>();
  CLI::App* cmd = plan->add_subcommand(
      "moe", "A MegaMoE layer: expert-wave vs interleaved L1/L2 schedule (paper §4.2, Eq. 12-15, D_knee).");
  add_integer(cmd, "-K,--producers", o->K_act, 1, kMaxProducers,
              "K_act: L2 epilogues whose tile boundaries align in one burst (the aligned closed form; not with a layer)");
  cmd->add_option("--tile", o->tile, "tile b_m x b_n (default 128x128; on a layer: the kernel's, 128x256 where the shapes allow)");
  add_integer(cmd, "--out-bytes", o->out_bytes, 1, 8, "bytes per combine element s_out (default 2, bf16)");
  cmd->add_option("--t-l1", o->t_l1, "Linear-1 mainloop time per tile, e.g. 3us");
  cmd->add_option("--t-l2", o->t_l2, "Linear-2 mainloop time per tile, e.g. 1.2us");
  add_integer(cmd, "--hidden", o->hidden, 1, kMaxMoeHidden, "hidden size h (with --inter and --tflops instead of --t-l1/--t-l2)");
  add_integer(cmd, "--inter", o->inter, 1, kMaxMoeHidden, "expert intermediate size h_inter (also gives D_knee and the tile mix)");
  add_number(cmd, "--tflops", o->tflops, kMinTflops, kMaxTflops, "whole-GPU GEMM throughput assumption, TFLOP/s");
  cmd->add_option("--mix", o->mix, "L1:L2 tiles per steady cycle n1:n2 (default 2*h_inter : h)");
  add_integer(cmd, "--sms", o->sms, 1, kMaxSmCount, "SMs running the persistent kernel K_SM (default: the platform's sm_count)");
  add_integer(cmd, "--experts", o->experts, 1, kMaxMoeExperts,
              "layer: experts E (all ranks); with --top-k and --tokens: the audit per schedule");
  add_integer(cmd, "--top-k", o->top_k, 1, kMaxMoeTopK, "layer: experts per token k");
  add_integer(cmd, "--tokens", o->tokens, 1, kMaxMoeTokens, "layer: tokens per rank T");
  add_integer(cmd, "--ranks", o->ranks, 1, kMaxMoeRanks, "layer: expert-parallel ranks P (default 2)");
  cmd->add_option("--dtype", o->dtype, "layer: bf16 (default) or fp8 (W8A8)");
  cmd->add_option("--t-lat", o->t_lat, "layer: fence latency after a tile's bytes drained (default: the platform file's storer T_fence_ns, else 1us)");
  add_number(cmd, "--jitter", o->jitter, 0.0, 0.99,
             "layer: tile times vary by +- this fraction in the lockstep simulation (default 0)");
  cmd->add_flag("--choose", o->choose, "layer: also the schedule rule's choice (moe::choose_schedule) with its terms");
  add_path(cmd, "--grid", o->grid, "every configuration of a bench grid (configs/moe_grid.json format), balanced load");
  cmd->add_option("--rule", o->rule, "with --choose: replace one constant of the schedule rule, NAME=VALUE (repeatable)");
  cmd->callback([common, o, cmd] {
    o->tile_given = cmd->count("--tile") > 0;
    o->t_lat_given = cmd->count("--t-lat") > 0;
    run_moe(*common, *o);
  });
}

void add_attention(CLI::App* plan, std::shared_ptr<CommonOptions> common) {
  auto o = std::make_shared<AttentionOptions>();
  CLI::App* cmd = plan->add_subcommand(
      "attention", "FlashAttention with the Ulysses all-to-all fused into its epilogue (paper §4.3, Eq. 16-18).");
  add_integer_list(cmd, "-M,--seq-len", o->seq_lens, 1, kMaxSeqLen,
                   "sequence length(s) M per rank after the first all-to-all, e.g. 1024,8192")
      ->required();
  cmd->add_option("--tile", o->tile, "b_m x b_n: query rows per output tile x KV rows per KV tile (default 128x128)");
  add_integer(cmd, "--head-dim", o->head_dim, 1, kMaxTileDim, "head dimension d (default 128)");
  add_integer(cmd, "--out-bytes", o->out_bytes, 1, 8, "bytes per output element s_out (default 2, bf16)");
  add_integer(cmd, "-K,--producers", o->K, 1, kMaxProducers,
              "concurrent persistent CTAs, all aligned in the worst case (default: SM count)");
  cmd->add_option("--sigma", o->sigma, "Q-loop time per KV tile, e.g. 0.79us");
  add_number(cmd, "--tflops", o->tflops, kMinTflops, kMaxTflops, "attention throughput assumption in TFLOP/s instead of --sigma");
  add_integer(cmd, "--heads", o->heads, 1, kMaxHeads, "heads on this rank (H/P under Ulysses; default 1)");
  add_integer(cmd, "--batch", o->batch, 1, kMaxBatch, "batch size (default 1)");
  add_integer(cmd, "--ranks", o->ranks, 1, 72,
              "Ulysses ranks P: (P-1)/P of the output rows leave the rank (default: all of them)");
  cmd->add_option("--t-qk", o->t_qk, "double-buffered cover window G_QK (default sigma/2, one QK^T mainloop)");
  cmd->add_option("--t-lat", o->t_lat, "fixed completion latency for the completion-coupled counterfactual (default 1us)");
  add_integer(cmd, "--sms", o->sms, 1, kMaxSmCount, "SM count for --tflops and the default K (default: the platform's sm_count)");
  add_number(cmd, "--push-gbps", o->push_gbps, 1.0, 1e5,
             "fused_both: also audit the pre-attention all-to-all pushed head by head, by a pusher moving this many GB/s "
             "beside the kernel (needs --ranks >= 2)");
  add_integer(cmd, "--in-bytes", o->in_bytes, 1, 8, "fused_both: bytes per Q, K, V element (default 2, bf16)");
  cmd->callback([common, o] { run_attention(*common, *o); });
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto common = std::make_shared<CommonOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Predict X-Stage back-pressure with the Burst-Gap model and say what to do: piggyback, reshape, or shrink\n"
      "the burst (paper §4.1). Describe the work as a burst pattern, a MegaMoE layer, or fused attention.");
  add_common_options(plan, *common);
  plan->fallthrough();  // --platform/--store-path/--json may also follow the kind
  plan->require_subcommand(1, 1);
  add_pattern(plan, common);
  add_moe(plan, common);
  add_attention(plan, common);
}

}  // namespace xstage::cli
