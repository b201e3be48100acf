// `xstage moe check` and `xstage moe bench`: correctness and speed of the MoE layer on GPUs (src/moe/), for
// every MoeLayerImpl: the unfused NCCL + cuBLAS baseline (moe/unfused.hpp, two GEMM paths) and the fused
// MegaMoE kernel (moe/megamoe.hpp, two schedules), side by side in the same run (--impl).
//
// Like calibrate: without RANK/WORLD_SIZE it starts --gpus local ranks of itself; under torchrun/Slurm it
// runs as the rank it is given. Rank 0 prints and writes.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu_timing.hpp"
#include "common/stats.hpp"
#include "cli/commands.hpp"
#include "cli/moe_grid.hpp"
#include "cli/options.hpp"
#include "cli/shipped_files.hpp"
#include "comm/device_info.hpp"
#include "comm/launcher.hpp"
#include "comm/runtime.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/run_info.hpp"
#include "moe/harness/layer.hpp"
#include "moe/harness/weight_stream.hpp"
#include "moe/megamoe.hpp"
#include "moe/plan.hpp"
#include "moe/reference/reference.hpp"
#include "moe/problem/routing.hpp"
#include "moe/baseline/unfused.hpp"
#include "moe/weights.hpp"

namespace xstage::cli {
namespace {

// ||out - ref|| / ||ref|| against the float64 reference of the same precision (fp8: the W8A8 layer, with exact
// code products per 128-K block). 1e-2 for every bf16 layer. The fused fp8 kernel's rounding points are the
// W8A8 reference's; what differs is the fp32 promotion sums and Hopper's fp8 wgmma, which accumulates a 128-K
// block with about 14 significant bits (DeepSeek-V3 report, §3.3.2): where an activation lies that close to a
// rounding boundary its requantized e4m3 code flips by one (6-12% of the value). Over many rows the flips
// average out: <= 5.6e-3 on every case with >= 64 tokens per rank (144 results over six runs). With 1 or 3
// tokens one flip weighs ~5e-3: up to 1.9e-2 over 12 fresh seeds on the 1-token case, an earlier binary's
// 1.1e-2 failure reproduced bit for bit (docs/MOE.md, "Check"). The unfused fp8 layer also rounds
// Linear-1 to bf16 before SwiGLU and the requantization, as users run it, which moves many more codes: up to
// 1.75e-2 (>= 64 tokens) and 2.5e-2 (< 64). Hence 1e-2 (fused) and 3e-2 (unfused) from 64 tokens on, 4e-2
// below; a misindexed scale or K block moves the layer by >= 1e-1.
constexpr double kMaxRelativeL2 = 1e-2;
constexpr double kMaxRelativeL2Fp8Unfused = 3e-2;
constexpr double kMaxRelativeL2Fp8FewTokens = 4e-2;
constexpr int kFewTokens = 64;

double check_tolerance(moe::DType dtype, const moe::MoeLayerImpl& layer, int tokens_per_rank) {
  if (dtype != moe::DType::fp8_e4m3) return kMaxRelativeL2;
  if (tokens_per_rank < kFewTokens) return kMaxRelativeL2Fp8FewTokens;
  return dynamic_cast<const moe::UnfusedMoeLayer*>(&layer) ? kMaxRelativeL2Fp8Unfused : kMaxRelativeL2;
}

struct MoeArgs {
  int gpus = 0;
  std::optional<std::uint64_t> seed;  // none: fresh random
  std::uint64_t seed_value = 0;       // --seed as read
  std::string impl;  // comma-separated implementation names; empty: the command's default
  std::string dtypes = "bf16,fp8";  // comma-separated: bf16, fp8 (W8A8)
  int D_rows = 0;            // megamoe-interleaved lead (0 = D_knee)
  int wave_experts = 0;      // megamoe-wave size (0 = heuristic)
  double device_timeout_s = 10;
  int tile_n = 0;            // 0 = auto (256 where the shape allows it)
  int cluster_m = 1;         // fused kernel: 2 = M-pairs (scheduler.hpp's MixedPairTiling)
  int cluster_n = 0;         // fused kernel: CTAs sharing A by multicast (0 = the plan's automatic choice)
  std::string cases;   // check: comma-separated substrings of case names
  std::string config;  // bench
  std::string filter;  // bench: comma-separated substrings of config names
  std::string out;
  int trials = 20;
  double warmup_ms = 1500;
  bool warm_each = false;   // bench: the warm-up before every implementation of every configuration, not once
  double trial_gap_ms = 0;  // bench: host sleep before each timed trial (0: back to back, the paper's protocol)
  std::string trace_dir;    // bench: the fused kernel's per-tile trace of each configuration's last trial (instrumented builds)
  bool hbm_reference = false;  // bench: time a streaming read of each configuration's expert weights after its layers
};

bool matches(const std::string& name, const std::string& filter, const std::string& option) {
  if (filter.empty()) return true;
  for (const std::string& part : split_list(filter, option))
    if (name.find(part) != std::string::npos) return true;
  return false;
}

// The implementations `--impl` names: the unfused baseline with either GEMM path, and the fused kernel
// with either schedule.
const std::vector<std::string> kImplNames = {"unfused-loop", "unfused-grouped", "megamoe-wave", "megamoe-wave-pipelined",
                                             "megamoe-interleaved", "megamoe-auto"};

std::vector<std::string> impl_list(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& part : split_list(s, "--impl")) {
    XSTAGE_REQUIRE(std::find(kImplNames.begin(), kImplNames.end(), part) != kImplNames.end(),
                   "--impl: unknown implementation '" + part + "' (choose from unfused-loop, unfused-grouped, megamoe-wave, "
                   "megamoe-wave-pipelined, megamoe-interleaved, megamoe-auto)");
    out.push_back(part);
  }
  return out;
}

// The dtypes `--dtype` names: bf16, and fp8 (W8A8 e4m3 with 1×128 / 128×128 block scales).
std::vector<moe::DType> dtype_list(const std::string& s) {
  std::vector<moe::DType> out;
  for (const std::string& part : split_list(s, "--dtype")) {
    XSTAGE_REQUIRE(part == "bf16" || part == "fp8", "--dtype: unknown dtype '" + part + "' (choose from bf16, fp8)");
    const moe::DType t = part == "bf16" ? moe::DType::bf16 : moe::DType::fp8_e4m3;
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

bool wanted(moe::DType t, const MoeArgs& args) {
  const auto list = dtype_list(args.dtypes);
  return std::find(list.begin(), list.end(), t) != list.end();
}

std::unique_ptr<moe::MoeLayerImpl> make_impl(const std::string& name, const moe::MoeProblem& pr, comm::Runtime& rt,
                                             const MoeArgs& args) {
  if (name == "unfused-loop") return std::make_unique<moe::UnfusedMoeLayer>(pr, rt.rank(), rt.comm(), moe::GemmPath::per_expert_loop);
  if (name == "unfused-grouped") return std::make_unique<moe::UnfusedMoeLayer>(pr, rt.rank(), rt.comm(), moe::GemmPath::grouped);
  moe::MoeLayerRequest request;  // the plan decides (moe/plan.hpp); megamoe-auto ignores --cluster and --cluster-m
  request.problem = pr;
  request.set_schedule(name == "megamoe-auto"             ? "auto"
                       : name == "megamoe-interleaved"     ? "interleaved"
                       : name == "megamoe-wave-pipelined" ? "pipelined_waves"
                                                          : "expert_wave");
  request.D_rows = args.D_rows;
  request.wave_experts = args.wave_experts;
  request.timeout_s = args.device_timeout_s;
  request.cluster_n = args.cluster_n;
  request.cluster_m = args.cluster_m;
  return std::make_unique<moe::FusedMoeLayer>(moe::plan_layer(request, device_facts(rt.device())), rt);
}

// One call, then wait for it and report a device-side failure (the op interface's enqueue and poll).
void run_and_wait(moe::MoeLayerImpl& layer, const moe::MoeLayerViews& views, cudaStream_t stream) {
  layer.enqueue(views, stream);
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  layer.poll();
}

// Rows this rank's experts receive and how many of them receive none, from the host routing.
struct OwnerLoad {
  std::int64_t rows = 0;
  int empty_experts = 0;
};
OwnerLoad owner_load(const moe::MoeProblem& pr, const moe::LayerData& data, int rank) {
  const moe::Routing routing = moe::build_routing(pr, data.topk);
  OwnerLoad load;
  for (int e = 0; e < pr.E_local(); ++e) {
    const int rows = routing.expert_rows[pr.global_expert(rank, e)];
    load.rows += rows;
    load.empty_experts += rows == 0;
  }
  return load;
}

// The same seed on every rank: rank 0's choice (given or fresh), all-gathered.
std::uint64_t agree_on_seed(comm::Runtime& rt, const std::optional<std::uint64_t>& given) {
  std::uint64_t seed = 0;
  if (given) seed = *given;
  else seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  const auto all = rt.all_gather_bytes(&seed, sizeof(seed));
  std::memcpy(&seed, all.data(), sizeof(seed));
  return seed;
}

// Tile width b_n: moe::default_tile_n (weights.hpp), or `tile_n` forces one. Every implementation of a run gets the same problem (W1's tile-interleaved storage depends on
// b_n; the unfused layer reads it with any b_n).
moe::MoeProblem make_problem(int P, int E, int k, int h, int I, int T, int tile_n, moe::DType dtype) {
  moe::MoeProblem pr;
  pr.P_ranks = P;
  pr.E_experts = E;
  pr.top_k = k;
  pr.h_hidden = h;
  pr.h_inter = I;
  pr.T_tokens = T;
  pr.b_n = tile_n ? tile_n : moe::default_tile_n(dtype, h, I);
  pr.dtype = dtype;
  moe::validate(pr);
  return pr;
}

moe::LayerData make_data(const moe::MoeProblem& pr, std::uint64_t seed, double zipf_s) {
  moe::LayerData d;
  d.seed = seed;
  d.topk = zipf_s < 0 ? moe::balanced_routing(pr, seed) : moe::skewed_routing(pr, zipf_s, seed);
  return d;
}

std::vector<std::uint16_t> copy_out(const moe::LayerOutput& out, std::int64_t elems, cudaStream_t stream) {
  std::vector<std::uint16_t> host(elems);
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (elems > 0) XSTAGE_CUDA_CHECK(cudaMemcpy(host.data(), out.out_bf16.get(), elems * 2, cudaMemcpyDeviceToHost));
  return host;
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- check ----------------------------------------------------------------------------------------

struct CheckCase {
  const char* name;
  int E, k, h, I, T;
  double zipf_s;  // < 0: balanced
};

// Small shapes (the CPU reference is float64), tokens per rank never a multiple of 128, top-k 1..8,
// balanced and skewed routing, experts with no tokens, a hot expert, one token per rank. fp8 needs h and
// h_inter multiples of 128 (its scale block); the cases with h a multiple of 256 and h_inter of 128 (the
// fused fp8 kernel's b_n = 256) cover all of the above for fp8 too: k1..k8 (k4-skewed-i256,
// k5-empty-experts-i128 and k7-skewed-i128 stand in for the three bf16-only ones); k3-h384-half-block gives
// the fp8 kernel (b_n = 256) a half-full last Linear-2 block in every row. The *-pairs cases have even Linear-1
// and Linear-2 n-block counts at b_n = 256 (h a multiple of 512, h_inter of 256), which mixed CTA pairs
// (--cluster-m 2) need, and experts whose last 256-row block has rows in one half only (N-rows) or in both.
const std::vector<CheckCase> kCheckCases = {
    {"k1-skewed", 8, 1, 256, 128, 77, 1.5},   {"k2-balanced", 8, 2, 256, 128, 200, -1},
    {"k3-one-token", 16, 3, 256, 128, 1, 1.0}, {"k4-skewed-i192", 16, 4, 384, 192, 130, 1.2},
    {"k5-empty-experts", 64, 5, 256, 64, 3, -1}, {"k6-balanced", 24, 6, 256, 256, 257, -1},
    {"k7-skewed", 8, 7, 256, 64, 129, 1.2},   {"k8-skewed-e64", 64, 8, 256, 128, 333, 1.0},
    {"k2-hot-expert", 16, 2, 256, 128, 255, 4.0},
    {"k4-skewed-i256", 16, 4, 512, 256, 130, 1.2}, {"k5-empty-experts-i128", 64, 5, 256, 128, 3, -1},
    {"k7-skewed-i128", 8, 7, 256, 128, 129, 1.2},
    {"k3-h384-half-block", 16, 3, 384, 128, 150, 1.0},  // fp8 (b_n = 256): each row's last Linear-2 block half full
    {"k6-pairs-balanced", 8, 6, 512, 256, 200, -1},     // 300 rows per expert: one full 256-row block, one N-row
    {"k8-pairs-skewed", 32, 8, 512, 256, 257, 1.2},
    {"k3-pairs-hot", 8, 3, 512, 512, 190, 3.0},
};

struct CheckRankResult {
  double rel_l2 = 0, ref_norm = 0;
  std::int64_t nan = 0;
  std::int32_t bitwise_identical = 1, empty_local_experts = 0;
  std::int64_t rows_received = 0;
};

int run_check(comm::Runtime& rt, const MoeArgs& args) {
  const bool lead = rt.rank() == 0;
  const std::uint64_t seed = agree_on_seed(rt, args.seed);
  const cudaStream_t stream = rt.stream();
  if (lead)
    std::printf("xstage moe check: %d ranks, seed %llu (rerun with --seed %llu)\n", rt.world_size(),
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  int failures = 0, ran = 0;
  nlohmann::json results = nlohmann::json::array();
  for (std::size_t ci = 0; ci < kCheckCases.size(); ++ci) {
    const CheckCase& c = kCheckCases[ci];
    if (!matches(c.name, args.cases, "--cases")) continue;
    const int P = rt.world_size();
    if (c.E % P != 0) {
      if (lead) std::printf("  %-26s skipped: E = %d is not divisible by %d ranks\n", c.name, c.E, P);
      continue;
    }
    for (const moe::DType dtype : dtype_list(args.dtypes)) {
      const std::string label = std::string(c.name) + "/" + dtype_name(dtype);
      if (dtype == moe::DType::fp8_e4m3 && (c.h % 128 != 0 || c.I % 128 != 0)) {
        if (lead)
          std::printf("  %-26s skipped: fp8 needs h and h_inter multiples of 128 (its scale block), here h = %d, "
                      "h_inter = %d\n",
                      label.c_str(), c.h, c.I);
        continue;
      }
      const moe::MoeProblem pr = make_problem(P, c.E, c.k, c.h, c.I, c.T, args.tile_n, dtype);
      const moe::LayerData data = make_data(pr, seed + 1000003ull * ci, c.zipf_s);
      const moe::LayerInputs in = moe::make_layer_inputs(pr, rt.rank(), data, stream);
      // fp8: the W8A8 reference (pr.dtype), combine rows rounded to bf16 as every implementation stores them.
      const moe::MoeReferenceOutput ref =
          moe::reference_moe_layer(pr, moe::make_reference_inputs(pr, data), moe::StorageRounding::bf16);
      const std::vector<float>& want = ref.out[rt.rank()];
      const std::int64_t elems = static_cast<std::int64_t>(in.tokens) * pr.h_hidden;
      const OwnerLoad load = owner_load(pr, data, rt.rank());
      for (const std::string& impl : impl_list(args.impl)) {
        // An implementation that cannot run this case says so with an InputError from its constructor (the
        // same on every rank); anything else is a failure.
        std::unique_ptr<moe::MoeLayerImpl> layer;
        try {
          layer = make_impl(impl, pr, rt, args);
        } catch (const InputError& e) {
          if (lead) std::printf("  %-26s %-34s skipped: %s\n", label.c_str(), impl.c_str(), e.what());
          continue;
        }
        moe::LayerOutput out = moe::make_layer_output(pr);
        CheckRankResult r;
        std::vector<std::uint16_t> first;
        for (int run = 0; run < 3; ++run) {
          moe::poison_output(out, stream);
          rt.barrier();
          run_and_wait(*layer, in.views(out), stream);
          auto got = copy_out(out, elems, stream);
          if (run == 0) {
            double err2 = 0, ref2 = 0;
            for (std::int64_t i = 0; i < elems; ++i) {
              const double g = bf16_to_float(got[i]), w = want[i];
              if (!std::isfinite(g)) ++r.nan;
              err2 += (g - w) * (g - w);
              ref2 += w * w;
            }
            r.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
            r.ref_norm = std::sqrt(ref2);
            first = std::move(got);
          } else if (got != first) {
            r.bitwise_identical = 0;
          }
        }
        r.empty_local_experts = load.empty_experts;
        r.rows_received = load.rows;
        const auto bytes = rt.all_gather_bytes(&r, sizeof(r));
        std::vector<CheckRankResult> all(P);
        std::memcpy(all.data(), bytes.data(), sizeof(CheckRankResult) * P);
        double worst = 0;
        std::int64_t nans = 0, rows_min = INT64_MAX, rows_max = 0;
        int empty = 0;
        bool identical = true;
        for (const auto& a : all) {
          worst = std::max(worst, std::isfinite(a.rel_l2) ? a.rel_l2 : INFINITY);
          nans += a.nan;
          empty += a.empty_local_experts;
          identical = identical && a.bitwise_identical;
          rows_min = std::min(rows_min, a.rows_received);
          rows_max = std::max(rows_max, a.rows_received);
        }
        const double tolerance = check_tolerance(dtype, *layer, c.T);
        const bool ok = worst <= tolerance && nans == 0 && identical;
        failures += !ok;
        ++ran;
        if (lead) {
          std::printf("  %-26s %-34s E=%-3d k=%d h=%-4d I=%-4d T=%-4d %-13s rel L2 %.2e  NaN %lld  runs %s  "
                      "empty experts %d/%d  rows/rank %lld..%lld  %s\n",
                      label.c_str(), layer->name().c_str(), c.E, c.k, c.h, c.I, c.T,
                      c.zipf_s < 0 ? "balanced" : ("zipf " + std::to_string(c.zipf_s).substr(0, 3)).c_str(), worst,
                      static_cast<long long>(nans), identical ? "identical" : "DIFFER", empty, c.E,
                      static_cast<long long>(rows_min), static_cast<long long>(rows_max), ok ? "ok" : "FAIL");
          results.push_back({{"case", c.name}, {"dtype", dtype_name(dtype)}, {"impl", layer->name()}, {"E", c.E},
                             {"k", c.k}, {"h", c.h}, {"h_inter", c.I}, {"tokens_per_rank", c.T}, {"zipf_s", c.zipf_s},
                             {"rel_l2_max", worst}, {"tolerance", tolerance}, {"nan", nans},
                             {"bitwise_identical_3_runs", identical}, {"empty_experts", empty}, {"pass", ok}});
        }
      }
    }
  }
  if (lead) {
    std::printf("xstage moe check: %d case(s), %d failure(s) (tolerance rel L2 <= %.0e, unfused fp8 %.0e, fp8 below %d "
                "tokens %.0e; no NaN, bitwise identical runs)\n",
                ran, failures, kMaxRelativeL2, kMaxRelativeL2Fp8Unfused, kFewTokens, kMaxRelativeL2Fp8FewTokens);
    if (!args.out.empty())
      write_json_file(args.out, {{"command", command_line()}, {"date", utc_timestamp()}, {"seed", seed},
                                 {"world_size", rt.world_size()}, {"device", comm::describe_device(rt.device())},
                                 {"results", results}, {"failures", failures}});
  }
  if (ran == 0)
    throw InputError("moe check: nothing was checked: every case matching --cases '" + args.cases +
                     "' was skipped for the chosen --dtype and --impl (reasons above)");
  return failures;
}

// ---- bench ----------------------------------------------------------------------------------------

// The fused kernel's per-tile trace of its last call (instrumented builds, kernel/stats.hpp) as compact JSON
// arrays per CTA: anchors [start_ns, start_clock, end_ns, end_clock], tiles [stage, row, mainloop_start,
// mainloop_end, epilogue_end, staging_wait, l1_stored, l1_fenced] and drains, per Linear-2 tile each storer warp's
// phase stamps in turn [staged, loaded, issued, drained, released] (warp 0's, then warp 1's as staged_w1, ...), in SM
// cycles.
void write_trace(const moe::FusedMoeLayer& layer, const std::string& path, const nlohmann::json& about) {
  const auto trace = layer.read_trace();
  if (!trace) return;
  nlohmann::json ctas = nlohmann::json::array();
  for (std::size_t c = 0; c < trace->anchors.size(); ++c) {
    const moe::MoeCtaAnchor& a = trace->anchors[c];
    nlohmann::json tiles = nlohmann::json::array(), drains = nlohmann::json::array();
    const std::size_t n = std::min<std::size_t>(a.tiles, trace->capacity), m = std::min<std::size_t>(a.l2_tiles, trace->capacity);
    for (std::size_t i = 0; i < n; ++i) {
      const moe::MoeTileRecord& t = trace->tiles[c * trace->capacity + i];
      tiles.push_back({t.stage, t.row, t.mainloop_start, t.mainloop_end, t.epilogue_end, t.staging_wait, t.l1_stored, t.l1_fenced});
    }
    for (std::size_t j = 0; j < m; ++j) {
      nlohmann::json row = nlohmann::json::array();
      for (int w = 0; w < moe::kTracedStorerWarps; ++w) {
        const moe::MoeDrainRecord& d = trace->drains[(c * trace->capacity + j) * moe::kTracedStorerWarps + w];
        for (const long long t : {d.staged, d.staged + d.loaded, d.staged + d.issued, d.staged + d.drained, d.staged + d.released})
          row.push_back(t);
      }
      drains.push_back(row);
    }
    ctas.push_back({{"anchors", {a.start_ns, a.start_clock, a.end_ns, a.end_clock}}, {"tiles", tiles}, {"drains", drains}});
  }
  nlohmann::json drain_columns = nlohmann::json::array();
  for (int w = 0; w < moe::kTracedStorerWarps; ++w)
    for (const char* name : {"staged", "loaded", "issued", "drained", "released"})
      drain_columns.push_back(w == 0 ? std::string(name) : std::string(name) + "_w" + std::to_string(w));
  nlohmann::json doc = about;
  doc["columns"] = {{"anchors", {"start_ns", "start_clock", "end_ns", "end_clock"}},
                    {"tiles", {"stage", "row", "mainloop_start", "mainloop_end", "epilogue_end", "staging_wait", "l1_stored", "l1_fenced"}},
                    {"drains", drain_columns}};
  doc["ctas"] = ctas;
  write_json_file(path, doc, -1);  // compact: a trace holds every tile of every CTA
}

// The fused kernel's own account of the last forward (clock64 totals over CTAs, per CTA in µs at the SM
// clock measured after the trials); null for the unfused layer.
nlohmann::json kernel_stats_json(const moe::MoeLayerImpl& layer, double clock_mhz) {
  const auto* fused = dynamic_cast<const moe::FusedMoeLayer*>(&layer);
  if (!fused || clock_mhz <= 0) return nullptr;
  const std::optional<moe::MoeKernelStats> stats = fused->read_stats();
  if (!stats) return nullptr;  // a build without the kernel's counters (CMake -DXSTAGE_MOE_STATS=ON has them)
  const moe::MoeKernelStats& st = *stats;
  const auto tiles = fused->read_tiles_run();
  const int ctas = fused->plan().grid;
  const double per_cta_us = 1.0 / (ctas * clock_mhz);
  return {{"ctas", ctas}, {"sm_clock_mhz", clock_mhz},
          {"consumer_us_per_cta", st.consumer_cycles * per_cta_us},
          {"staging_wait_fraction", st.consumer_cycles ? double(st.staging_wait_cycles) / st.consumer_cycles : 0.0},
          {"staging_wait_us_per_cta", st.staging_wait_cycles * per_cta_us},
          {"producer_wait_us_per_cta", st.producer_wait_cycles * per_cta_us},
          {"storer_drain_us_per_cta", st.storer_drain_cycles * per_cta_us},
          {"tail_us_per_cta", st.tail_cycles * per_cta_us},
          {"l1_tiles", tiles.l1}, {"l2_tiles", tiles.l2},
          {"K_act_mean", tiles.l2 ? double(st.burst_overlap_sum) / tiles.l2 : 0.0},
          {"K_act_max", st.burst_overlap_max},
          // %globaltimer: earliest CTA entry -> earliest first tile -> last tile end -> kernel end
          {"head_us", (double(~st.first_tile_not_ns) - double(~st.kernel_start_not_ns)) / 1e3},
          {"tiles_us", (double(st.last_tile_end_ns) - double(~st.first_tile_not_ns)) / 1e3},
          {"consumer_timer_us_per_cta", double(st.consumer_ns) / 1e3 / ctas},
          {"cta_finish_spread_us", (double(st.last_tile_end_ns) - double(~st.first_cta_done_not_ns)) / 1e3},
          {"tail_us", (double(st.kernel_end_ns) - double(st.last_tile_end_ns)) / 1e3},
          {"kernel_us", (double(st.kernel_end_ns) - double(~st.kernel_start_not_ns)) / 1e3}};
}

struct BenchConfig {
  std::string name;
  int h, I, E, k, T;
  double zipf_s;  // < 0: balanced
  moe::DType dtype;
};

// Configurations in run order (moe_grid.hpp): the headline ("extra") ones first, then shapes × tokens, each in
// every routing and every dtype of the file; names end in "/bf16" or "/fp8".
std::vector<BenchConfig> read_grid(const std::string& path) {
  const MoeGrid grid = read_moe_grid(path);
  std::vector<BenchConfig> out;
  for (const GridLayer& l : grid.layers)
    for (const std::string& routing : l.routings)
      for (const moe::DType dtype : grid.dtypes) {
        BenchConfig c{"", l.h, l.h_inter, l.E, l.k, l.T, routing == "balanced" ? -1.0 : grid.skewed_zipf_s, dtype};
        c.name = l.prefix + "h" + std::to_string(c.h) + "-i" + std::to_string(c.I) + "-e" + std::to_string(c.E) + "-k" +
                 std::to_string(c.k) + "/t" + std::to_string(c.T) + "/" + routing + "/" + dtype_name(dtype);
        out.push_back(c);
      }
  return out;
}

// --config, or the shipped grid.
std::string bench_config_file(const MoeArgs& args) {
  return args.config.empty() ? shipped_file("configs/moe_grid.json") : args.config;
}

// The configurations a bench runs: matching --filter, in a dtype of --dtype.
bool selected(const BenchConfig& c, const MoeArgs& args) { return matches(c.name, args.filter, "--filter") && wanted(c.dtype, args); }

// One trial of the paper's protocol: every rank lines up at a barrier, then one event-timed enqueue on `stream`; its
// milliseconds once the `stop` event has completed. The layer's forwards and --hbm-reference's reads are timed by it.
template <class Enqueue>
float barrier_aligned_ms(comm::Runtime& rt, cudaEvent_t start, cudaEvent_t stop, cudaStream_t stream, Enqueue&& enqueue) {
  rt.barrier();
  XSTAGE_CUDA_CHECK(cudaEventRecord(start, stream));
  enqueue();
  XSTAGE_CUDA_CHECK(cudaEventRecord(stop, stream));
  XSTAGE_CUDA_CHECK(cudaEventSynchronize(stop));
  float elapsed_ms = 0;
  XSTAGE_CUDA_CHECK(cudaEventElapsedTime(&elapsed_ms, start, stop));
  return elapsed_ms;
}

// --hbm-reference: after a configuration's layers, a streaming read of the same expert weight buffers on each rank
// (moe/harness/weight_stream.hpp), timed like the layer (warm-up, then trials of {barrier, event-timed read},
// the median), as the bandwidth a layer bound by reading its weights once could reach on that GPU.
struct HbmReference {
  std::int64_t weight_bytes = 0;   // per rank: W1 + W2 + scales of its E_local experts (the same on every rank)
  std::vector<double> read_GBps;   // per rank; NaN (JSON null) where the weights are under kHbmMinL2Multiple × L2
  bool every_expert_has_rows = true;  // on every rank; else the layer need not read every weight it holds
  // The layer's time is the slowest rank's, so its bound is the slowest rank's read; NaN if any rank's is.
  double slowest_GBps() const {
    double v = std::numeric_limits<double>::infinity();
    for (const double g : read_GBps) {
      if (std::isnan(g)) return g;
      v = std::min(v, g);
    }
    return v;
  }
};

// The reads keep the GPU busy this long before the first timed one (its clocks are up already, after the layers).
constexpr int kHbmReadWarmupMs = 100;

HbmReference measure_hbm_reference(comm::Runtime& rt, const moe::MoeProblem& pr, const moe::LayerInputs& in,
                                   int empty_experts, int trials, cudaEvent_t start, cudaEvent_t stop) {
  const int P = rt.world_size();
  const cudaStream_t stream = rt.stream();
  auto span = [](const DeviceBuffer& b) { return moe::DeviceSpan{b.get(), static_cast<std::int64_t>(b.bytes())}; };
  const moe::StreamRead read({span(in.W1), span(in.W2), span(in.W1_scales), span(in.W2_scales)});
  HbmReference ref;
  ref.weight_bytes = moe::expert_weight_bytes(pr).total();
  // Whether to time is decided on every rank from everyone's facts: the trials below hold barriers.
  struct Facts {
    std::int64_t bytes, l2_bytes;
    int empty_experts;
  } mine{read.bytes(), read.l2_bytes(), empty_experts};
  const auto all_facts = rt.all_gather_bytes(&mine, sizeof(mine));
  std::vector<Facts> facts(P);
  std::memcpy(facts.data(), all_facts.data(), sizeof(Facts) * P);
  bool from_hbm = true;
  for (const Facts& f : facts) {
    from_hbm = from_hbm && moe::read_streams_from_hbm(f.bytes, f.l2_bytes);
    ref.every_expert_has_rows = ref.every_expert_has_rows && f.empty_experts == 0;
  }
  double GBps = std::numeric_limits<double>::quiet_NaN();
  if (from_hbm) {
    auto launch = [&] { read.enqueue(stream); };
    warm_up(launch, kHbmReadWarmupMs, stream);
    std::vector<double> ms(trials);
    for (int t = 0; t < trials; ++t) ms[t] = barrier_aligned_ms(rt, start, stop, stream, launch);
    GBps = static_cast<double>(read.bytes()) / (median(ms) * 1e-3) / 1e9;
  }
  const auto all_GBps = rt.all_gather_bytes(&GBps, sizeof(GBps));
  ref.read_GBps.resize(P);
  std::memcpy(ref.read_GBps.data(), all_GBps.data(), sizeof(double) * P);
  return ref;
}

int run_bench(comm::Runtime& rt, const MoeArgs& args) {
  const bool lead = rt.rank() == 0;
  const int P = rt.world_size();
  const cudaStream_t stream = rt.stream();
  const std::string config = bench_config_file(args);
  std::vector<BenchConfig> grid;
  for (const auto& c : read_grid(config))
    if (selected(c, args)) grid.push_back(c);
  // validate_args has checked the filter, the dtypes and the trial count before any rank started.
  const std::uint64_t seed = agree_on_seed(rt, args.seed);
  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  nlohmann::json doc = {{"command", command_line()}, {"date", utc_timestamp()}, {"world_size", P}, {"seed", seed},
                        {"config_file", config}, {"device", comm::describe_device(rt.device())},
                        {"cublas", std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + "." +
                                       std::to_string(cublas_patch)},
                        {"protocol", "untimed first run; " +
                                         std::string(args.warm_each ? "each implementation warmed for " + std::to_string(args.warmup_ms) + " ms; " : "") +
                                         std::to_string(args.trials) + " trials of {" +
                                         (args.trial_gap_ms > 0 ? "idle " + std::to_string(args.trial_gap_ms) + " ms, " : "") +
                                         "barrier, event-timed forward}; per trial the max over ranks; median of the maxima"},
                        {"trial_gap_ms", args.trial_gap_ms}, {"warm_each", args.warm_each}};
  if (args.hbm_reference)
    doc["hbm_reference"] =
        "per configuration, after its implementations: per rank a read of its expert weight buffers (W1, W2, fp8 "
        "scales), 16-B loads, one launch filling the GPU; " + std::to_string(kHbmReadWarmupMs) + " ms of reads, then " +
        std::to_string(args.trials) + " trials of {barrier, event-timed read}, median; hbm_read_GBps = the slowest "
        "rank's; null where the weights are under " + std::to_string(moe::kHbmMinL2Multiple) + "x the L2 size; "
        "weight_stream_fraction = weight_bytes / median_ms / hbm_read_GBps, null also where a local expert gets no rows";
  if (lead) {
    std::printf("xstage moe bench: %d ranks, %zu configuration(s), seed %llu\n", P, grid.size(),
                static_cast<unsigned long long>(seed));
    std::printf("%-52s %-34s %10s %10s %9s %9s %13s\n", "config", "impl", "median ms", "min ms", "TFLOP/s", "NVLink GB/s",
                "rows/rank");
  }
  cudaEvent_t start, stop;
  XSTAGE_CUDA_CHECK(cudaEventCreate(&start));
  XSTAGE_CUDA_CHECK(cudaEventCreate(&stop));
  bool warmed = false;
  for (std::size_t ci = 0; ci < grid.size(); ++ci) {
    const BenchConfig& c = grid[ci];
    const moe::MoeProblem pr = make_problem(P, c.E, c.k, c.h, c.I, c.T, args.tile_n, c.dtype);
    const moe::LayerData data = make_data(pr, seed + 7919ull * (ci + 1), c.zipf_s);  // fresh inputs per config
    const moe::LayerInputs in = moe::make_layer_inputs(pr, rt.rank(), data, stream);
    const OwnerLoad load = owner_load(pr, data, rt.rank());
    bool fused_ran = false;  // on every rank alike (an implementation is skipped on all ranks or none)
    struct FusedResult {
      std::size_t index;  // into doc["results"]
      std::string impl;
      double median_ms;
    };
    std::vector<FusedResult> fused_results;  // rank 0's
    for (const std::string& impl : impl_list(args.impl)) {
      std::unique_ptr<moe::MoeLayerImpl> layer;
      try {
        layer = make_impl(impl, pr, rt, args);
      } catch (const InputError& e) {  // this implementation cannot run this configuration (same on every rank)
        if (lead) std::printf("%-52s %-34s skipped: %s\n", c.name.c_str(), impl.c_str(), e.what());
        continue;
      }
      const auto* fused = dynamic_cast<const moe::FusedMoeLayer*>(layer.get());
      fused_ran = fused_ran || fused;
      const std::string schedule_reason = fused ? fused->plan().reason : "";
      if (lead && impl == "megamoe-auto") std::printf("    %s, because %s\n", layer->name().c_str(), schedule_reason.c_str());
      moe::LayerOutput out = moe::make_layer_output(pr);
      const moe::MoeLayerViews views = in.views(out);
      auto launch = [&] { layer->enqueue(views, stream); };
      auto finish = [&] {
        XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
        layer->poll();
      };
      launch();  // untimed first run
      finish();
      // One trial of the paper protocol: all ranks line up, then one event-timed forward.
      std::vector<double> enqueue_us;  // host time to enqueue one forward (the GPU runs meanwhile)
      auto barrier_aligned_forward_ms = [&] {
        const float elapsed_ms = barrier_aligned_ms(rt, start, stop, stream, [&] {
          const auto t0 = std::chrono::steady_clock::now();
          launch();
          enqueue_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        });
        finish();
        return elapsed_ms;
      };
      double clock_mhz = 0;
      if (!warmed || args.warm_each) {
        // Every forward holds collectives, so all ranks must run the same number: rank 0's count, from
        // the slowest rank's time for one forward.
        const float one_ms = barrier_aligned_forward_ms();
        const auto all = rt.all_gather_bytes(&one_ms, sizeof(one_ms));
        float slowest = 0;
        for (int r = 0; r < P; ++r) {
          float v;
          std::memcpy(&v, all.data() + r * sizeof(float), sizeof(float));
          slowest = std::max(slowest, v);
        }
        const int iterations = std::clamp(static_cast<int>(args.warmup_ms / std::max(slowest, 1e-3f)), 1, 2000);
        for (int i = 0; i < iterations; ++i) launch();
        finish();
        warmed = true;
      }
      std::vector<double> ms(args.trials);
      for (int t = 0; t < args.trials; ++t) {
        if (args.trial_gap_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(args.trial_gap_ms));
        ms[t] = barrier_aligned_forward_ms();
      }
      clock_mhz = measure_sm_clock_mhz();
      const nlohmann::json kernel = kernel_stats_json(*layer, clock_mhz);
      if (!args.trace_dir.empty() && rt.rank() == 0)
        if (const auto* fused = dynamic_cast<const moe::FusedMoeLayer*>(layer.get())) {
          std::string file = c.name + "__" + layer->name();
          for (char& ch : file)
            if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
          write_trace(*fused, args.trace_dir + "/" + file + ".json",
                      {{"config", c.name}, {"impl", layer->name()}, {"rank", rt.rank()}, {"sm_clock_mhz_after", clock_mhz}});
        }
      struct RankStats {
        double clock_mhz;
        std::int64_t peer_bytes, rows_received;
      } mine{clock_mhz, moe::peer_bytes_per_call(pr, data, rt.rank()), load.rows};
      const auto all_ms = rt.all_gather_bytes(ms.data(), ms.size() * sizeof(double));
      const auto all_stats = rt.all_gather_bytes(&mine, sizeof(mine));
      if (!lead) continue;
      std::vector<double> max_ms(args.trials, 0.0);
      std::vector<std::vector<double>> per_rank(P, std::vector<double>(args.trials));
      for (int r = 0; r < P; ++r) {
        std::memcpy(per_rank[r].data(), all_ms.data() + r * ms.size() * sizeof(double), ms.size() * sizeof(double));
        for (int t = 0; t < args.trials; ++t) max_ms[t] = std::max(max_ms[t], per_rank[r][t]);
      }
      std::vector<RankStats> stats(P);
      std::memcpy(stats.data(), all_stats.data(), sizeof(RankStats) * P);
      const double med = median(max_ms);
      const double flop = 6.0 * c.h * c.I * static_cast<double>(c.T) * c.k;  // per rank: 2·3·H·I·T·k
      double peer_bytes = 0;
      std::int64_t rows_min = INT64_MAX, rows_max = 0;
      std::vector<double> clocks;
      for (const auto& s : stats) {
        peer_bytes += static_cast<double>(s.peer_bytes) / P;
        rows_min = std::min(rows_min, s.rows_received);
        rows_max = std::max(rows_max, s.rows_received);
        clocks.push_back(s.clock_mhz);
      }
      const double tflops = flop / (med * 1e-3) / 1e12, gbps = peer_bytes / (med * 1e-3) / 1e9;
      std::printf("%-52s %-34s %10.3f %10.3f %9.1f %9.1f %6lld..%lld\n", c.name.c_str(), layer->name().c_str(), med,
                  *std::min_element(max_ms.begin(), max_ms.end()), tflops, gbps, static_cast<long long>(rows_min),
                  static_cast<long long>(rows_max));
      std::fflush(stdout);
      doc["results"].push_back({{"config", c.name}, {"impl", layer->name()}, {"schedule_reason", schedule_reason}, {"h", c.h}, {"h_inter", c.I}, {"E", c.E},
                                {"k", c.k}, {"tokens_per_rank", c.T}, {"dtype", dtype_name(c.dtype)},
                                {"routing", c.zipf_s < 0 ? "balanced" : "skewed"}, {"zipf_s", c.zipf_s},
                                {"median_ms", med}, {"trial_max_over_ranks_ms", max_ms}, {"per_rank_ms", per_rank},
                                {"tflops_per_rank", tflops}, {"flop_per_rank", flop},
                                {"peer_bytes_per_rank_mean", peer_bytes}, {"nvlink_gbps_per_rank", gbps},
                                {"rows_received_min", rows_min}, {"rows_received_max", rows_max},
                                {"sm_clock_mhz_after", clocks}, {"kernel_stats_rank0_last_trial", kernel},
                                {"host_enqueue_us_median_rank0", median(enqueue_us)}});
      if (fused) fused_results.push_back({doc["results"].size() - 1, layer->name(), med});
      if (!kernel.is_null())
        std::printf("    rank 0 kernel: consumer busy %.0f us/CTA (%%globaltimer: %.0f), of it staging wait %.2f%%; producer waits %.0f us/CTA; "
                    "storer drain %.0f us/CTA; tail %.0f us/CTA; K_act mean %.1f max %llu of %d CTAs; "
                    "kernel %.0f us = head %.0f + tiles %.0f + tail %.0f; CTAs finish within %.0f us; host enqueue %.0f us\n",
                    kernel["consumer_us_per_cta"].get<double>(), kernel["consumer_timer_us_per_cta"].get<double>(),
                    100 * kernel["staging_wait_fraction"].get<double>(),
                    kernel["producer_wait_us_per_cta"].get<double>(), kernel["storer_drain_us_per_cta"].get<double>(),
                    kernel["tail_us_per_cta"].get<double>(), kernel["K_act_mean"].get<double>(),
                    kernel["K_act_max"].get<unsigned long long>(), kernel["ctas"].get<int>(), kernel["kernel_us"].get<double>(),
                    kernel["head_us"].get<double>(), kernel["tiles_us"].get<double>(), kernel["tail_us"].get<double>(),
                    kernel["cta_finish_spread_us"].get<double>(), median(enqueue_us));
      if (!args.out.empty()) write_json_file(args.out, doc);  // after every configuration: a cut-off run keeps its results
    }
    if (args.hbm_reference && fused_ran) {
      const HbmReference ref = measure_hbm_reference(rt, pr, in, load.empty_experts, args.trials, start, stop);
      if (!lead) continue;
      const double GBps = ref.slowest_GBps();
      char line[512];
      if (std::isnan(GBps))
        std::snprintf(line, sizeof line, "    HBM reference: %.3f GB of expert weights per rank, under %lldx the L2 size: not measured",
                      ref.weight_bytes / 1e9, static_cast<long long>(moe::kHbmMinL2Multiple));
      else
        std::snprintf(line, sizeof line, "    HBM reference: %.3f GB of expert weights per rank, read at %.0f GB/s (slowest rank)%s",
                      ref.weight_bytes / 1e9, GBps, ref.every_expert_has_rows ? "" : "; a local expert gets no rows: no fraction");
      std::string text = line;
      for (const FusedResult& f : fused_results) {
        const double weight_GBps = static_cast<double>(ref.weight_bytes) / (f.median_ms * 1e-3) / 1e9;
        const double fraction = ref.every_expert_has_rows ? weight_GBps / GBps : std::numeric_limits<double>::quiet_NaN();
        nlohmann::json& r = doc["results"][f.index];
        r["weight_bytes"] = ref.weight_bytes;
        r["hbm_read_GBps"] = number_or_null(GBps);
        r["hbm_read_GBps_per_rank"] = nlohmann::json::array();
        for (const double g : ref.read_GBps) r["hbm_read_GBps_per_rank"].push_back(number_or_null(g));
        r["weight_stream_fraction"] = number_or_null(fraction);
        if (!std::isnan(fraction)) {
          std::snprintf(line, sizeof line, "; %s weights at %.0f GB/s = %.3f of it", f.impl.c_str(), weight_GBps, fraction);
          text += line;
        }
      }
      std::printf("%s\n", text.c_str());
      std::fflush(stdout);
      if (!args.out.empty()) write_json_file(args.out, doc);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (lead && !args.out.empty()) {
    write_json_file(args.out, doc);
    std::printf("wrote %s\n", args.out.c_str());
  }
  return 0;
}

// Everything about the arguments that can be wrong is checked here (the numbers as they were read), before any
// rank or GPU exists.
void validate_args(const MoeArgs& args, bool check) {
  impl_list(args.impl);
  dtype_list(args.dtypes);
  if (!check) {
    const std::string config = bench_config_file(args);
    const auto grid = with_option_name("--config", [&] { return read_grid(config); });
    XSTAGE_REQUIRE(std::any_of(grid.begin(), grid.end(), [&](const BenchConfig& c) { return selected(c, args); }),
                   "moe bench: no configuration in " + config + " matches --filter '" + args.filter + "' with --dtype '" +
                       args.dtypes + "'");
  } else {
    XSTAGE_REQUIRE(std::any_of(kCheckCases.begin(), kCheckCases.end(), [&](const CheckCase& c) { return matches(c.name, args.cases, "--cases"); }),
                   "moe check: no case matches --cases '" + args.cases + "'");
  }
}

void spawn_or_run(const MoeArgs& args, bool check) {
  validate_args(args, check);
  if (const auto env = comm::rank_env_from_environment()) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows through pipes (tee) as it happens
    comm::Runtime rt(*env);
    const int failures = check ? run_check(rt, args) : run_bench(rt, args);
    if (failures > 0) throw ExitStatus(1);
    return;
  }
  const int visible = comm::visible_gpu_count();
  const int gpus = args.gpus ? args.gpus : visible;
  if (gpus > visible)
    throw PlatformError("--gpus " + std::to_string(gpus) + " but only " + std::to_string(visible) + " GPU(s) are visible");
  if (gpus > 1) comm::require_peer_access(gpus);
  const int rc = comm::run_local_ranks(gpus);
  if (rc != 0) throw ExitStatus(rc);
}

}  // namespace

void add_moe_command(CLI::App& app) {
  CLI::App* moe = app.add_subcommand("moe", "Expert-parallel MoE layer on GPUs: correctness check and benchmark.\n"
                                            "Starts one process per GPU itself, or runs under torchrun/Slurm.");
  moe->require_subcommand(1);
  auto args = std::make_shared<MoeArgs>();
  auto common = [&](CLI::App* cmd) {
    add_integer(cmd, "--gpus", args->gpus, 1, 1024, "local GPUs (ranks) to use (default: all visible)");
    add_integer(cmd, "--seed", args->seed_value, 0, INT64_MAX, "input seed (default: fresh, printed)");
    cmd->add_option("--impl", args->impl,
                    "comma-separated implementations: unfused-loop (NCCL + cublasGemmEx per expert), unfused-grouped\n"
                    "(NCCL + cublasGemmGroupedBatchedEx; bf16 only), megamoe-wave, megamoe-wave-pipelined,\n"
                    "megamoe-interleaved (the fused kernel with the expert-wave schedule, the same with each wave's\n"
                    "Linear-2 after the next wave's Linear-1, or the interleaved schedule), megamoe-auto (the fused\n"
                    "kernel with the schedule and CTA pairing chosen per layer, as `xstage plan moe --choose` says).\n"
                    "Default: all but megamoe-auto for check; unfused-loop, megamoe-wave, megamoe-wave-pipelined,\n"
                    "megamoe-interleaved, megamoe-auto for bench");
    add_integer(cmd, "--lead", args->D_rows, 1, 1 << 20, "megamoe-interleaved: lead D of Linear-1 over Linear-2 in scheduler rows "
                                                        "(default: max(D_knee, K_SM / P2), schedule_host.hpp)");
    add_integer(cmd, "--wave", args->wave_experts, 1, kMaxMoeExperts,
                "megamoe-wave(-pipelined): experts per wave (default: the wave-size heuristic)");
    add_number(cmd, "--device-timeout-s", args->device_timeout_s, 1e-3, 86400, "bound of every device-side wait (default 10 s)");
    add_integer(cmd, "--tile-n", args->tile_n, 128, 256, "tile width b_n, 128 or 256 (default: 256 where h and 2·h_inter allow it)")
        ->each([](const std::string& v) {
          XSTAGE_REQUIRE(v == "128" || v == "256", "--tile-n: the kernel's tile width is 128 or 256 (got " + v + ")");
        });
    add_integer(cmd, "--cluster", args->cluster_n, 1, 2,
                "fused kernel: 1 = one CTA per tile, 2 = CTA pairs (2x1 clusters sharing each A k-block by TMA\n"
                "multicast; needs even Linear-1 and Linear-2 n-block counts). Default: pairs for megamoe-interleaved\n"
                "wherever they fit, one CTA per tile for the wave schedules (measured: docs/MOE.md)");
    add_integer(cmd, "--cluster-m", args->cluster_m, 1, 2,
                "fused kernel: 2 = M-pairs (2x1 clusters on the two 128-row halves of 256-row blocks of one expert,\n"
                "sharing each weight k-block by TMA multicast; an expert's last block with rows in one half only\n"
                "shares the activation k-blocks instead; 128x256 tiles, even n-block counts). Default 1");
    cmd->add_option("--dtype", args->dtypes,
                    "comma-separated dtypes: bf16, fp8 (W8A8: e4m3 codes, 1x128 activation and 128x128 weight\n"
                    "scales; tokens quantized inside the forward). Default: both");
    add_path(cmd, "--out", args->out, "write the results as JSON to this file");
  };
  CLI::App* check = moe->add_subcommand("check", "Compare the layer with the float64 CPU reference on small, awkward shapes\n"
                                                 "(rel L2 <= 1e-2, unfused fp8 3e-2, fp8 below 64 tokens 4e-2, no NaN, bitwise identical\n"
                                                 "over 3 runs); exit 1 on failure.");
  common(check);
  check->add_option("--cases", args->cases, "only cases whose name contains one of these comma-separated strings");
  check->callback([args, check] {
    if (check->count("--seed")) args->seed = args->seed_value;
    if (args->impl.empty()) args->impl = "unfused-loop,unfused-grouped,megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved";
    spawn_or_run(*args, true);
  });
  CLI::App* bench = moe->add_subcommand("bench", "Time the layer over a grid (the paper's protocol: untimed first run, barrier-aligned\n"
                                                 "trials, max over ranks, median), TFLOP/s and NVLink GB/s per rank.");
  common(bench);
  add_path(bench, "--config", args->config, "grid file (default: the shipped configs/moe_grid.json)");
  bench->add_option("--filter", args->filter, "only configurations whose name contains one of these comma-separated strings");
  add_integer(bench, "--trials", args->trials, 1, 100000, "timed trials per configuration (default 20)");
  add_number(bench, "--warmup-ms", args->warmup_ms, 0, 600000, "GPU warm-up before the first timed configuration (default 1500;\n"
                                                               "the same number of forwards on every rank)");
  bench->add_flag("--warm-each", args->warm_each,
                  "the warm-up before every implementation of every configuration, not only the first: the GPU idles\n"
                  "while the next implementation is built, so without it each implementation's trials start from a\n"
                  "cooler, faster GPU than the one before's ended on");
  add_number(bench, "--trial-gap-ms", args->trial_gap_ms, 0, 10000,
             "idle time before each timed trial (default 0: back to back, the paper's protocol). A gap lets the GPU's power\n"
             "draw fall below its limit between trials, so the trials run at a higher clock: how much of a\n"
             "layer's time the power limit sets");
  bench->add_flag("--hbm-reference", args->hbm_reference,
                  "after each configuration's implementations, time a streaming read of the rank's expert weight\n"
                  "buffers (W1, W2, fp8 scales; 16-B loads, read only, no compute): " + std::to_string(kHbmReadWarmupMs) +
                      " ms of reads, then --trials\n"
                      "barrier-aligned timed reads, the median. Adds to each fused result weight_bytes, hbm_read_GBps (the\n"
                      "slowest rank's read) and weight_stream_fraction = weight_bytes / median time / hbm_read_GBps: how\n"
                      "close the layer streams its weights to HBM speed, which bounds it with few rows per expert. Null\n"
                      "where the weights are under " + std::to_string(moe::kHbmMinL2Multiple) +
                      "x the L2 size (the L2 would serve the read)");
  add_path(bench, "--trace", args->trace_dir,
           "write the fused kernel's per-tile trace of each configuration's last trial to this folder (a build\n"
           "with the kernel's statistics: CMake -DXSTAGE_MOE_STATS=ON; tools/moe/trace_figures.py plots it)");
  bench->callback([args, bench] {
    if (bench->count("--seed")) args->seed = args->seed_value;
    if (args->impl.empty()) args->impl = "unfused-loop,megamoe-wave,megamoe-wave-pipelined,megamoe-interleaved,megamoe-auto";
    spawn_or_run(*args, false);
  });
}

}  // namespace xstage::cli
