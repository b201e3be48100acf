// `xstage attention check` and `xstage attention bench`: correctness and speed of the Hopper
// FlashAttention forward kernel (src/attention/).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "common/gpu_timing.hpp"
#include "common/stats.hpp"
#include "common/turn_order.hpp"
#include "attention/device_fill.hpp"
#include "attention/flash_fwd.hpp"
#include "attention/reference.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "common/run_info.hpp"

namespace xstage::cli {
namespace {

using attention::BmhdStrides;
using attention::FlashFwdArgs;
using attention::FlashFwdProblem;

constexpr double kMaxRelativeError = 1e-2;  // ||out - ref|| / ||ref||, bf16 output
constexpr double kMaxLseError = 1e-3;       // absolute, natural log

// Elements a [batch, seq, heads, d] view with these strides reaches (highest offset + 1).
int64_t extent_elements(const BmhdStrides& s, int batch, int seqlen, int heads, int d) {
  return attention::bmhd_offset(s, batch - 1, seqlen - 1, heads - 1, d - 1) + 1;
}

enum class Layout { kPacked, kPackedQkv, kPaddedO };

struct CheckCase {
  CheckCase(int b, int mq, int mk, int h, int d, float scale_ = 0.f, bool cpu = false, Layout layout_ = Layout::kPacked)
      : batch(b), seqlen_q(mq), seqlen_k(mk), heads(h), head_dim(d), scale(scale_), cpu_reference(cpu), layout(layout_) {}
  int batch, seqlen_q, seqlen_k, heads, head_dim;
  float scale;  // 0: 1/sqrt(d)
  bool cpu_reference;
  Layout layout;
  std::optional<attention::FwdTileConfigId> tile_config;  // default: the launcher's choice
  std::vector<int32_t> key_lengths;  // per batch (FlashFwdArgs::seqlen_k_per_batch); empty: every key
  attention::KeySplitMode key_split = attention::KeySplitMode::automatic;
};

// The same case with per-sequence key lengths (one per batch; values outside [1, seqlen_k] are clamped).
CheckCase with_key_lengths(CheckCase c, std::vector<int32_t> lengths) {
  c.key_lengths = std::move(lengths);
  return c;
}

// The same case, forced onto d=64's 192-row configuration (the launcher's pick at check sizes is
// mostly the 128-row one, and both must be right).
CheckCase rows192(CheckCase c) {
  c.tile_config = attention::FwdTileConfigId::kHdim64Rows192;
  return c;
}

// The same case with its last partial wave split by key range over every SM wherever there is one (key_split.hpp;
// the launcher's rule splits only where it predicts a gain, mostly at larger sizes than a check can afford).
CheckCase split_tail(CheckCase c) {
  c.key_split = attention::KeySplitMode::always;
  return c;
}

std::string describe(const CheckCase& c) {
  std::ostringstream os;
  os << "b=" << c.batch << " Mq=" << c.seqlen_q << " Mk=" << c.seqlen_k << " h=" << c.heads << " d=" << c.head_dim;
  if (c.scale != 0.f) os << " scale=" << c.scale;
  if (c.layout == Layout::kPackedQkv) os << " qkv-packed";
  if (c.layout == Layout::kPaddedO) os << " O-padded";
  if (c.tile_config) os << " " << attention::describe(attention::fwd_tile_shape(*c.tile_config));
  for (size_t b = 0; b < c.key_lengths.size(); ++b) os << (b ? "," : " Mk_b=") << c.key_lengths[b];
  if (c.key_split == attention::KeySplitMode::always) os << " split-tail";
  return os.str();
}

struct ErrorStats {
  double rel_l2 = 0, max_abs = 0, lse_max_abs = 0;
  int64_t nan_count = 0;
};

// Compares the kernel's bf16 output (strided, host copy) against a packed reference.
template <class Ref>
ErrorStats compare(const FlashFwdProblem& p, const std::vector<uint16_t>& out, const std::vector<float>& lse,
                   const std::vector<Ref>& o_ref, const std::vector<Ref>& lse_ref) {
  ErrorStats st;
  double diff2 = 0, ref2 = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int m = 0; m < p.seqlen_q; ++m)
      for (int h = 0; h < p.heads; ++h)
        for (int c = 0; c < p.head_dim; ++c) {
          const double o = attention::bf16_bits_to_float(out[attention::bmhd_offset(p.o, b, m, h, c)]);
          const double r = double(o_ref[((size_t(b) * p.seqlen_q + m) * p.heads + h) * p.head_dim + c]);
          if (std::isnan(o)) {
            ++st.nan_count;
            continue;
          }
          diff2 += (o - r) * (o - r);
          ref2 += r * r;
          st.max_abs = std::max(st.max_abs, std::fabs(o - r));
        }
  st.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isnan(lse[i])) {
      ++st.nan_count;
      continue;
    }
    st.lse_max_abs = std::max(st.lse_max_abs, std::fabs(double(lse[i]) - double(lse_ref[i])));
  }
  return st;
}

template <class T>
std::vector<T> to_host(const void* src, int64_t count) {
  std::vector<T> h(count);
  XSTAGE_CUDA_CHECK(cudaMemcpy(h.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

struct CaseResult {
  std::string name;
  ErrorStats kernel;
  double ref_vs_cpu_rel = -1;  // GPU reference against the float64 CPU reference (CPU cases)
  bool passed = false;
};

CaseResult run_check_case(const CheckCase& c, uint64_t seed) {
  const int d = c.head_dim;
  FlashFwdProblem p;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.heads = c.heads;
  p.head_dim = d;
  p.softmax_scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(float(d));

  DeviceBuffer qkv_buf, q_buf, k_buf, v_buf;
  FlashFwdArgs args;
  if (c.layout == Layout::kPackedQkv) {
    // One [batch, seq, 3, heads, d] tensor, as a fused QKV projection writes it (seqlen_q == seqlen_k).
    const int64_t row = 3LL * c.heads * d;
    const BmhdStrides s{int64_t(c.seqlen_q) * row, row, d};
    const int64_t n = int64_t(c.batch) * c.seqlen_q * row;
    qkv_buf = DeviceBuffer(n * 2);
    attention::fill_uniform_bf16(qkv_buf.get(), n, seed, -1.f, 1.f);
    p.q = p.k = p.v = s;
    args.q = qkv_buf.get<uint16_t>();
    args.k = qkv_buf.get<uint16_t>() + int64_t(c.heads) * d;
    args.v = qkv_buf.get<uint16_t>() + 2LL * c.heads * d;
  } else {
    p.q = attention::packed_bmhd_strides(c.seqlen_q, c.heads, d);
    p.k = p.v = attention::packed_bmhd_strides(c.seqlen_k, c.heads, d);
    const int64_t nq = extent_elements(p.q, c.batch, c.seqlen_q, c.heads, d);
    const int64_t nk = extent_elements(p.k, c.batch, c.seqlen_k, c.heads, d);
    q_buf = DeviceBuffer(nq * 2);
    k_buf = DeviceBuffer(nk * 2);
    v_buf = DeviceBuffer(nk * 2);
    attention::fill_uniform_bf16(q_buf.get(), nq, seed, -1.f, 1.f);
    attention::fill_uniform_bf16(k_buf.get(), nk, seed + 1, -1.f, 1.f);
    attention::fill_uniform_bf16(v_buf.get(), nk, seed + 2, -1.f, 1.f);
    args.q = q_buf.get();
    args.k = k_buf.get();
    args.v = v_buf.get();
  }
  if (c.layout == Layout::kPaddedO) {
    const int64_t head = d + 8;  // gaps between heads and rows must stay poisoned, unread
    p.o = {int64_t(c.seqlen_q) * c.heads * head + 64, c.heads * head, head};
  } else {
    p.o = attention::packed_bmhd_strides(c.seqlen_q, c.heads, d);
  }
  const int64_t no = extent_elements(p.o, c.batch, c.seqlen_q, c.heads, d);
  const int64_t nlse = int64_t(c.batch) * c.heads * c.seqlen_q;
  const int64_t nref = int64_t(c.batch) * c.seqlen_q * c.heads * d;
  DeviceBuffer o_buf(no * 2), lse_buf(nlse * 4), o_ref_buf(nref * 4), lse_ref_buf(nlse * 4), lengths_buf;
  args.problem = p;
  args.tile_config = c.tile_config;
  args.key_split = c.key_split;
  if (!c.key_lengths.empty()) {
    XSTAGE_REQUIRE(int(c.key_lengths.size()) == c.batch, "check case " + describe(c) + ": one key length per batch");
    lengths_buf = DeviceBuffer(c.key_lengths.size() * sizeof(int32_t));
    XSTAGE_CUDA_CHECK(cudaMemcpy(lengths_buf.get(), c.key_lengths.data(), lengths_buf.bytes(), cudaMemcpyHostToDevice));
    args.seqlen_k_per_batch = lengths_buf.get<int32_t>();
  }
  args.o = o_buf.get();
  args.lse = lse_buf.get<float>();

  attention::fill_u16(o_buf.get(), no, 0xFFFF);  // bf16 NaN: any element the kernel misses fails
  attention::fill_f32(args.lse, nlse, NAN);
  attention::flash_attention_forward(args);
  attention::reference_attention_gpu(args, o_ref_buf.get<float>(), lse_ref_buf.get<float>());
  XSTAGE_CUDA_CHECK(cudaDeviceSynchronize());

  const auto out = to_host<uint16_t>(o_buf.get(), no);
  const auto lse = to_host<float>(lse_buf.get(), nlse);
  const auto o_ref = to_host<float>(o_ref_buf.get(), nref);
  const auto lse_ref = to_host<float>(lse_ref_buf.get(), nlse);

  CaseResult res;
  res.name = describe(c);
  if (c.cpu_reference) {
    const auto hq = to_host<uint16_t>(args.q, extent_elements(p.q, c.batch, c.seqlen_q, c.heads, d));
    const auto hk = to_host<uint16_t>(args.k, extent_elements(p.k, c.batch, c.seqlen_k, c.heads, d));
    const auto hv = to_host<uint16_t>(args.v, extent_elements(p.v, c.batch, c.seqlen_k, c.heads, d));
    std::vector<double> o64, lse64;
    attention::reference_attention_cpu(p, hq.data(), hk.data(), hv.data(), o64, lse64,
                                       c.key_lengths.empty() ? nullptr : c.key_lengths.data());
    res.kernel = compare(p, out, lse, o64, lse64);
    // The GPU reference itself against float64.
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < o64.size(); ++i) {
      diff2 += (o_ref[i] - o64[i]) * (o_ref[i] - o64[i]);
      ref2 += o64[i] * o64[i];
    }
    res.ref_vs_cpu_rel = std::sqrt(diff2 / std::max(ref2, 1e-300));
  } else {
    res.kernel = compare(p, out, lse, o_ref, lse_ref);
  }
  res.passed = res.kernel.nan_count == 0 && res.kernel.rel_l2 <= kMaxRelativeError &&
               res.kernel.lse_max_abs <= kMaxLseError && (res.ref_vs_cpu_rel < 0 || res.ref_vs_cpu_rel <= 1e-5);
  return res;
}

std::vector<CheckCase> check_cases(bool quick) {
  if (quick) {  // small enough for compute-sanitizer
    return {{1, 200, 200, 2, 64, 0.f, true}, rows192({1, 200, 250, 2, 64, 0.f, true}), {2, 130, 300, 1, 128},
            with_key_lengths({2, 130, 300, 1, 128, 0.f, true}, {1, 129}), split_tail({1, 200, 900, 2, 64, 0.f, true}),
            split_tail(rows192({2, 130, 1000, 1, 64})), split_tail({2, 130, 700, 1, 128})};
  }
  return {
      // float64 CPU reference
      {1, 1, 1, 1, 64, 0.f, true},
      {2, 17, 17, 3, 128, 0.f, true},
      {1, 130, 130, 2, 64, 0.f, true},
      {1, 200, 200, 1, 128, 1.0f, true},  // large scale: peaky softmax
      {1, 64, 300, 2, 64, 0.f, true},     // seqlen_q != seqlen_k
      {1, 300, 64, 2, 128, 0.f, true},
      // fp32 GPU reference
      {2, 1000, 1000, 3, 64},
      {3, 333, 333, 5, 128},
      {1, 4096, 4096, 4, 128},
      {1, 8192, 8192, 2, 64},
      {1, 8193, 8193, 1, 128},
      {1, 300, 5000, 2, 128},
      {2, 777, 777, 4, 128, 0.f, false, Layout::kPackedQkv},
      {2, 640, 640, 3, 64, 0.f, false, Layout::kPackedQkv},
      {1, 1025, 1025, 2, 64, 0.f, false, Layout::kPaddedO},
      {2, 257, 257, 2, 128, 0.f, false, Layout::kPaddedO},
      // d=64 on its second (192-row, 3-consumer-warpgroup) configuration
      rows192({1, 1, 1, 1, 64, 0.f, true}),
      rows192({1, 130, 130, 2, 64, 0.f, true}),
      rows192({1, 64, 300, 2, 64, 0.f, true}),
      rows192({1, 200, 200, 1, 64, 1.0f, true}),
      rows192({2, 1000, 1000, 3, 64}),
      rows192({1, 8192, 8192, 2, 64}),
      rows192({1, 300, 5000, 2, 64}),
      rows192({2, 640, 640, 3, 64, 0.f, false, Layout::kPackedQkv}),
      rows192({1, 1025, 1025, 2, 64, 0.f, false, Layout::kPaddedO}),
      // per-sequence key lengths (a key-padding mask): 1, one past a key block (b_n = 128 or 192), a block
      // exactly, every key, lengths that differ within the batch, and values the kernel clamps (0, -5, > seqlen_k)
      with_key_lengths({3, 70, 300, 2, 64, 0.f, true}, {1, 193, 300}),
      with_key_lengths({2, 130, 257, 3, 128, 0.f, true}, {129, 256}),
      with_key_lengths({3, 100, 300, 2, 128, 0.f, true}, {0, -5, 1000}),
      with_key_lengths({4, 1000, 2000, 3, 128}, {1, 127, 128, 2000}),
      with_key_lengths({3, 2048, 4096, 2, 64}, {4096, 191, 385}),
      with_key_lengths({2, 777, 777, 4, 128, 0.f, false, Layout::kPackedQkv}, {500, 777}),
      rows192(with_key_lengths({3, 70, 300, 2, 64, 0.f, true}, {1, 129, 300})),
      rows192(with_key_lengths({3, 2048, 4096, 2, 64}, {4096, 127, 257})),
      // the split tail (key_split.hpp): fewer steps than SMs (most CTAs without a unit), a partial last key block in
      // one part, parts of every size, batch > 1, both d = 64 configurations, O with gaps, peaky softmax; then shapes
      // where the launcher's rule splits by itself
      split_tail({1, 1, 1, 1, 64, 0.f, true}),
      split_tail({2, 17, 17, 3, 128, 0.f, true}),
      split_tail({1, 300, 64, 2, 128, 0.f, true}),
      split_tail({1, 200, 200, 1, 128, 1.0f, true}),
      split_tail({1, 130, 3000, 2, 64, 0.f, true}),
      split_tail({3, 333, 333, 5, 128}),
      split_tail({1, 300, 5000, 2, 128}),
      split_tail({2, 1000, 1000, 3, 64}),
      split_tail({2, 257, 9000, 2, 128, 0.f, false, Layout::kPaddedO}),
      split_tail(rows192({2, 1000, 1000, 3, 64})),
      split_tail(rows192({1, 1025, 7777, 2, 64, 0.f, false, Layout::kPaddedO})),
      split_tail(rows192({1, 8192, 8192, 2, 64})),
      {2, 4250, 4250, 24, 64},
      {1, 24576, 24576, 4, 128},
  };
}

// An sm_90 GPU 0 (the kernels are sm_90a code), else PlatformError saying what there is.
void require_gpu() { require_sm90(0); }

nlohmann::json gpu_json() {
  cudaDeviceProp prop{};
  XSTAGE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, clock_khz = 0, mem_clock_khz = 0;
  XSTAGE_CUDA_CHECK(cudaDriverGetVersion(&driver));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  XSTAGE_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0));
  return {{"name", prop.name},
          {"sm_count", prop.multiProcessorCount},
          {"driver_version", driver},
          {"max_sm_clock_mhz", clock_khz / 1000},
          {"memory_clock_mhz", mem_clock_khz / 1000}};
}

struct CheckOptions {
  bool quick = false;
  uint64_t seed = 0;
  std::string out;  // results as JSON
};

void run_check(const CheckOptions& opt) {
  require_gpu();
  uint64_t seed = opt.seed != 0 ? opt.seed : uint64_t(std::random_device{}()) << 20;
  std::printf("attention check: seed %llu, pass if rel L2 <= %.0e, |lse err| <= %.0e, no NaN\n",
              (unsigned long long)seed, kMaxRelativeError, kMaxLseError);
  std::printf("%-44s %-5s %11s %11s %11s %11s  %s\n", "case", "ref", "rel_l2", "max_abs", "lse_err", "ref_vs_f64",
              "result");
  nlohmann::json cases = nlohmann::json::array();
  int failures = 0;
  for (const CheckCase& c : check_cases(opt.quick)) {
    const CaseResult r = run_check_case(c, seed);
    seed += 7919;
    failures += r.passed ? 0 : 1;
    std::printf("%-44s %-5s %11.3e %11.3e %11.3e %11.3e  %s%s\n", r.name.c_str(), c.cpu_reference ? "f64" : "gpu",
                r.kernel.rel_l2, r.kernel.max_abs, r.kernel.lse_max_abs, r.ref_vs_cpu_rel, r.passed ? "ok" : "FAIL",
                r.kernel.nan_count ? (" (" + std::to_string(r.kernel.nan_count) + " NaN)").c_str() : "");
    cases.push_back({{"case", r.name},
                     {"reference", c.cpu_reference ? "cpu_float64" : "gpu_float32"},
                     {"rel_l2", r.kernel.rel_l2},
                     {"max_abs", r.kernel.max_abs},
                     {"lse_max_abs", r.kernel.lse_max_abs},
                     {"nan_count", r.kernel.nan_count},
                     {"gpu_reference_vs_float64_rel_l2", r.ref_vs_cpu_rel},
                     {"passed", r.passed}});
  }
  if (!opt.out.empty()) {
    write_json_file(opt.out, {{"command", command_line()},
                                    {"timestamp", utc_timestamp()},
                                    {"gpu", gpu_json()},
                                    {"seed", seed},
                                    {"cases", cases},
                                    {"failures", failures}});
  }
  if (failures > 0) throw Error(std::to_string(failures) + " attention check case(s) failed");
  std::printf("all %zu cases passed\n", cases.size());
}

struct BenchOptions {
  std::vector<int> head_dims{128, 64};
  std::vector<int> heads{4, 12};
  std::vector<int> seqlens{4096, 8192, 16384, 32768, 65536};
  int batch = 1;
  int trials = 20;
  double warmup_ms = 200;
  std::vector<std::string> tile_configs;  // empty: the launcher's choice; else each, timed in turn
  std::vector<std::string> key_splits{"auto"};  // each, timed in turn (auto, off, always)
  std::string out;  // results as JSON
};

attention::KeySplitMode key_split_mode(const std::string& name) {
  if (name == "auto") return attention::KeySplitMode::automatic;
  if (name == "off") return attention::KeySplitMode::off;
  if (name == "always") return attention::KeySplitMode::always;
  throw InputError("--key-splits: unknown mode '" + name + "' (choose from auto, off, always)");
}

// The configurations named on the command line (tile_shapes.hpp's names), or the launcher's choice (nullopt).
std::vector<std::optional<attention::FwdTileConfigId>> bench_configs(const std::vector<std::string>& names) {
  if (names.empty()) return {std::nullopt};
  std::vector<std::optional<attention::FwdTileConfigId>> out;
  for (const std::string& n : names) {
    int id = 0;
    while (id < attention::kNumFwdTileConfigs && n != attention::kFwdTileConfigNames[id]) ++id;
    if (id == attention::kNumFwdTileConfigs) {
      std::string all;
      for (const char* c : attention::kFwdTileConfigNames) all += std::string(all.empty() ? "" : ", ") + c;
      throw InputError("--tile-configs: unknown configuration '" + n + "' (choose from " + all + ")");
    }
    out.push_back(static_cast<attention::FwdTileConfigId>(id));
  }
  return out;
}

void run_bench(const BenchOptions& opt) {
  for (int d : opt.head_dims) XSTAGE_REQUIRE(d == 64 || d == 128, "--head-dims: the kernel takes 64 and/or 128 (got " + std::to_string(d) + ")");
  const auto configs = bench_configs(opt.tile_configs);
  std::vector<attention::KeySplitMode> splits;
  for (const std::string& n : opt.key_splits) splits.push_back(key_split_mode(n));
  require_gpu();
  nlohmann::json points = nlohmann::json::array();
  std::printf("attention bench: batch %d, median of %d CUDA-event timings after warm-up\n", opt.batch, opt.trials);
  std::printf("%5s %6s %7s %12s %10s  %s\n", "d", "heads", "M", "time_ms", "TFLOP/s", "tile");
  bool first = true;
  const int num_sms = device_facts(0).sm_count;
  for (int d : opt.head_dims) {
    for (int h : opt.heads) {
      for (int m : opt.seqlens) {
        FlashFwdArgs args;
        FlashFwdProblem& p = args.problem;
        p.batch = opt.batch;
        p.seqlen_q = p.seqlen_k = m;
        p.heads = h;
        p.head_dim = d;
        p.softmax_scale = 1.f / std::sqrt(float(d));
        p.q = p.k = p.v = p.o = attention::packed_bmhd_strides(m, h, d);
        const int64_t n = int64_t(opt.batch) * m * h * d;
        DeviceBuffer q(n * 2), k(n * 2), v(n * 2), o(n * 2);
        attention::fill_uniform_bf16(q.get(), n, 11, -1.f, 1.f);
        attention::fill_uniform_bf16(k.get(), n, 12, -1.f, 1.f);
        attention::fill_uniform_bf16(v.get(), n, 13, -1.f, 1.f);
        args.q = q.get();
        args.k = k.get();
        args.v = v.get();
        args.o = o.get();
        // Each configuration of this head dim (or the launcher's choice), timed in turn: trial by trial, every
        // configuration once, in common/turn_order.hpp's balanced order, so clock and power drift land in all alike.
        std::vector<FlashFwdArgs> variants;
        std::vector<std::string> split_names;  // of each variant, for the report
        for (const auto& c : configs)
          if (!c || attention::fwd_tile_shape(*c).head_dim == d)
            for (std::size_t s = 0; s < splits.size(); ++s) {
              variants.push_back(args);
              variants.back().tile_config = c;
              variants.back().key_split = splits[s];
              split_names.push_back(opt.key_splits[s]);
            }
        if (variants.empty()) continue;
        auto launcher = [&](std::size_t i) { return [&, i] { attention::flash_attention_forward(variants[i]); }; };
        warm_up(launcher(0), first ? 1000.0 : opt.warmup_ms, nullptr);
        first = false;
        const double estimate = median(time_launches_ms(launcher(0), 3, 1, nullptr));
        const int inner = std::max(1, int(std::ceil(2.0 / std::max(estimate, 1e-3))));  // >= ~2 ms per timing
        std::vector<std::vector<double>> times(variants.size());
        for (int t = 0; t < opt.trials; ++t)
          for (const int i : turn_order(static_cast<int>(variants.size()), t))
            times[i].push_back(time_launches_ms(launcher(i), 1, inner, nullptr)[0]);
        for (std::size_t i = 0; i < variants.size(); ++i) {
          const double t_ms = median(times[i]);
          const double flops = 4.0 * double(m) * double(m) * d * h * opt.batch;
          const double tflops = flops / (t_ms * 1e-3) / 1e12;
          const attention::FwdTileConfigId id = variants[i].tile_config.value_or(attention::flash_fwd_tile_config(p, num_sms));
          const std::string tile = attention::describe(attention::fwd_tile_shape(id));
          const attention::KeySplit split = attention::flash_fwd_key_split(variants[i], id, num_sms);
          const double vs_first = median_ratio(times[0], times[i]);
          std::printf("%5d %6d %7d %12.4f %10.1f  %s (%s), split tail %d tiles%s\n", d, h, m, t_ms, tflops, tile.c_str(),
                      attention::kFwdTileConfigNames[int(id)], split.tail_tiles,
                      i ? (" speed vs the first: " + std::to_string(vs_first)).c_str() : "");
          std::fflush(stdout);
          points.push_back({{"head_dim", d},
                            {"heads", h},
                            {"seqlen", m},
                            {"batch", opt.batch},
                            {"time_ms", t_ms},
                            {"tflops", tflops},
                            {"launches_per_timing", inner},
                            {"times_ms", times[i]},
                            {"tile", tile},
                            {"tile_config", attention::kFwdTileConfigNames[int(id)]},
                            {"forced", variants[i].tile_config.has_value()},
                            {"key_split", split_names[i]},
                            {"split_tail_tiles", split.tail_tiles},
                            {"speed_vs_first_median_of_trials", vs_first}});
        }
      }
    }
  }
  const double clock_mhz = measure_sm_clock_mhz();
  std::printf("SM clock measured after the runs: %.0f MHz\n", clock_mhz);
  if (!opt.out.empty()) {
    write_json_file(opt.out, {{"command", command_line()},
                                    {"timestamp", utc_timestamp()},
                                    {"gpu", gpu_json()},
                                    {"sm_clock_mhz_measured", clock_mhz},
                                    {"kernel", "xstage FlashAttention forward (sm90, TMA + wgmma, warp-specialized)"},
                                    {"layout", "[batch, M, heads, d] bf16, non-causal"},
                                    {"flops_formula", "4 * M^2 * d * heads * batch"},
                                    {"points", points}});
  }
}

}  // namespace

void add_attention_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("attention", "Hopper FlashAttention forward: correctness check and benchmark");
  cmd->require_subcommand(1);

  auto check_opt = std::make_shared<CheckOptions>();
  CLI::App* check = cmd->add_subcommand(
      "check", "Compare the kernel with float64 (CPU) and float32 (GPU) references on fresh random inputs");
  check->add_flag("--quick", check_opt->quick, "Two small shapes only (for compute-sanitizer)");
  add_integer(check, "--seed", check_opt->seed, 1, INT64_MAX, "Random seed (default: a fresh one each run)");
  add_path(check, "--out", check_opt->out, "Write the results as JSON to this file");
  add_path(check, "--json", check_opt->out, "")->group("");  // the old name of --out, hidden
  check->callback([check_opt] { run_check(*check_opt); });

  auto bench_opt = std::make_shared<BenchOptions>();
  CLI::App* bench = cmd->add_subcommand("bench", "TFLOP/s of the forward kernel over M, heads and head dim");
  add_integer_list(bench, "--head-dims", bench_opt->head_dims, 64, 128, "Head dims (64, 128)");
  add_integer_list(bench, "--heads", bench_opt->heads, 1, 1024, "Head counts");
  add_integer_list(bench, "--seqlens", bench_opt->seqlens, 1, 1 << 22, "Sequence lengths M");
  add_integer(bench, "--batch", bench_opt->batch, 1, 4096, "Batch size (default 1)");
  add_integer(bench, "--trials", bench_opt->trials, 1, 100000, "Timed trials per point (median reported; default 20)");
  add_integer(bench, "--reps", bench_opt->trials, 1, 100000, "")->group("");  // the old name of --trials, hidden
  add_number(bench, "--warmup-ms", bench_opt->warmup_ms, 0, 600000, "Warm-up per point, ms (the first point warms 1 s)");
  add_path(bench, "--out", bench_opt->out, "Write the results as JSON to this file");
  add_path(bench, "--json", bench_opt->out, "")->group("");  // the old name of --out, hidden
  add_list(bench, "--tile-configs", bench_opt->tile_configs,
           "Tile configurations to time in turn, by name (src/attention/tile_shapes.hpp; default: the launcher's choice)");
  add_list(bench, "--key-splits", bench_opt->key_splits,
           "Split-tail modes to time in turn with each configuration: auto (the launcher's rule), off, always (default: auto)");
  bench->callback([bench_opt] { run_bench(*bench_opt); });

  add_ulysses_command(*cmd);
}

}  // namespace xstage::cli
