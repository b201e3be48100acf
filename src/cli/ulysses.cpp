// `xstage attention ulysses check` and `xstage attention ulysses bench`: the Ulysses sequence-parallel
// attention layer (src/attention/ulysses/) serial (the same core between NCCL all-to-alls), with its
// post-attention all-to-all fused into the attention epilogue (fused_post, paper §4.3), or with the
// pre-attention all-to-all hidden too (fused_both).
//
// Like `xstage moe`: without RANK/WORLD_SIZE it starts --gpus local ranks of itself (one rank per GPU), under
// torchrun/Slurm it runs as the rank it is given; `--virtual-ranks P` instead holds P ranks in one process on
// one GPU (their exchanges are copies, their windows and inboxes local buffers), which verifies the
// destination math, straddling tiles, chunk flags and completion counters for any P on a single GPU, and
// times the layer with every "remote" byte local.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attention/device_fill.hpp"
#include "attention/flash_fwd.hpp"
#include "attention/reference.hpp"
#include "attention/tile_shapes.hpp"
#include "attention/ulysses/layer.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/shipped_files.hpp"
#include "comm/launcher.hpp"
#include "comm/runtime.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/device_buffer.hpp"
#include "common/error.hpp"
#include "common/gpu_timing.hpp"
#include "common/run_info.hpp"
#include "common/stats.hpp"
#include "common/turn_order.hpp"
#include "model/attention.hpp"
#include "model/platform.hpp"

namespace xstage::cli {
namespace {

using attention::A2AStorePath;
using attention::UlyssesAttention;
using attention::UlyssesPath;
using attention::UlyssesShape;
using attention::UlyssesViews;

constexpr double kMaxRelativeError = 1e-2;  // serial path against the fp32 reference of the whole sequence
constexpr int kLateInputsUs = 20;            // how late the inputs are put back before each checked call
constexpr const char* kDefaultPlatform = "platforms/h200_nvlink4.json";

struct UlyssesArgs {
  int gpus = 0;
  int virtual_ranks = 0;  // check: P ranks in this process on one GPU
  std::uint64_t seed = 0;
  int launches = 3;       // check: fused calls per case, output poisoned before each
  bool quick = false;     // check: the two smallest shapes only (for compute-sanitizer)
  std::vector<int> seqlens{4096, 8192, 16384, 32768, 49152, 65536};
  std::vector<int> heads_per_rank{4, 12};
  std::vector<int> head_dims{128, 64};
  int batch = 1;
  std::vector<std::string> store_paths{"tma", "st_global"};
  std::vector<std::string> fused_paths{"fused_post", "fused_both"};
  int trials = 20;
  int replays = 10;       // bench: calls per CUDA graph replay
  double warmup_ms = 1000;
  double device_timeout_s = 10;
  int push_ctas = attention::UlyssesOptions{}.push_ctas;
  std::string platform;
  std::string out;
};

std::vector<A2AStorePath> store_path_list(const std::vector<std::string>& names) {
  std::vector<A2AStorePath> out;
  for (const std::string& n : names) {
    XSTAGE_REQUIRE(n == "tma" || n == "st_global", "--store-path: unknown store path '" + n + "' (choose from tma, st_global)");
    out.push_back(n == "tma" ? A2AStorePath::tma : A2AStorePath::st_global);
  }
  XSTAGE_REQUIRE(!out.empty(), "--store-path: name at least one store path (tma, st_global)");
  return out;
}

std::vector<UlyssesPath> fused_path_list(const std::vector<std::string>& names) {
  std::vector<UlyssesPath> out;
  for (const std::string& n : names) {
    const UlyssesPath p = with_option_name("--paths", [&] { return attention::ulysses_path_from_name(n); });
    XSTAGE_REQUIRE(p != UlyssesPath::serial, "--paths: the fused paths to compare with serial: fused_post, fused_both (got serial)");
    out.push_back(p);
  }
  XSTAGE_REQUIRE(!out.empty(), "--paths: name at least one fused path (fused_post, fused_both)");
  return out;
}

// One rank's inputs and output: bf16 [B][Ms][H][d] each, packed.
struct RankTensors {
  DeviceBuffer q, k, v, out;
};

// Copies rows [r·Ms, (r+1)·Ms) of every batch of a full [B][M][H][d] tensor into rank r's packed shard.
void take_shard(const void* full, void* shard, const UlyssesShape& s, int r, cudaStream_t stream) {
  const std::size_t row = static_cast<std::size_t>(s.heads) * s.head_dim * 2;
  XSTAGE_CUDA_CHECK(cudaMemcpy2DAsync(shard, s.shard_rows() * row, static_cast<const char*>(full) + static_cast<std::size_t>(r) * s.shard_rows() * row,
                                      static_cast<std::size_t>(s.seqlen) * row, s.shard_rows() * row, s.batch, cudaMemcpyDeviceToDevice, stream));
}

// ---- check ----------------------------------------------------------------------------------------------

struct CheckShape {
  int batch, shard_rows, heads_per_rank, head_dim;
};

// Awkward on purpose: shards that are not multiples of the 128- or 192-row tile (tiles straddle two or more
// ranks), several batches, one to twenty heads per rank (40 heads in all at P = 2, as Wan-14B has), both head dims.
std::vector<CheckShape> check_shapes(bool quick) {
  if (quick) return {{2, 100, 3, 128}, {3, 37, 2, 64}};
  return {{1, 256, 1, 128}, {2, 100, 3, 128}, {3, 37, 2, 64}, {1, 1000, 2, 64}, {2, 300, 1, 128}, {1, 4096, 2, 128}, {1, 150, 20, 64}};
}

struct HeldRanks {
  std::unique_ptr<UlyssesAttention> layer;
  std::vector<RankTensors> tensors;  // per held rank
  std::vector<int> global;           // the rank each holds
};

std::vector<UlyssesViews> views_of(HeldRanks& h, bool fused_out, std::vector<DeviceBuffer>& fused_outs) {
  std::vector<UlyssesViews> v;
  for (std::size_t i = 0; i < h.tensors.size(); ++i)
    v.push_back({h.tensors[i].q.get(), h.tensors[i].k.get(), h.tensors[i].v.get(), fused_out ? fused_outs[i].get() : h.tensors[i].out.get()});
  return v;
}

// One fused path with one store path, against the serial output.
struct FusedCheck {
  UlyssesPath path;
  A2AStorePath store;
  unsigned long long differences = 0;  // words differing from serial over all launches, + 1 per miscounted call
  std::int64_t pushed_remote_bytes = -1, all_to_all_bytes = -1;  // fused_both: pushed by the held ranks, and the volume
  std::int64_t pushed_own_bytes = -1, own_bytes = -1;             // fused_both: pushed into their own inboxes, of their own rows
};

struct CheckResult {
  std::string name;
  double rel_l2 = 0;  // serial vs reference, worst held rank
  std::vector<FusedCheck> fused;
  bool passed = false;
};

CheckResult run_check_shape(const CheckShape& cs, int P, comm::Runtime* rt, const UlyssesArgs& args, std::uint64_t seed,
                            const std::vector<A2AStorePath>& paths, const std::vector<UlyssesPath>& fused_paths, cudaStream_t stream) {
  const UlyssesShape s{cs.batch, cs.shard_rows * P, cs.heads_per_rank * P, cs.head_dim, P};
  CheckResult res;
  res.name = "B=" + std::to_string(s.batch) + " M=" + std::to_string(s.seqlen) + " H=" + std::to_string(s.heads) + " d=" +
             std::to_string(s.head_dim) + " P=" + std::to_string(P) + (rt ? "" : " (virtual)");
  const std::int64_t full_elems = static_cast<std::int64_t>(s.batch) * s.seqlen * s.heads * s.head_dim;
  const std::int64_t shard_elems = full_elems / P;
  // The whole sequence, the same on every rank (seeded), and its fp32 reference.
  DeviceBuffer q(full_elems * 2), k(full_elems * 2), v(full_elems * 2), ref(full_elems * 4),
      ref_lse(static_cast<std::size_t>(s.batch) * s.heads * s.seqlen * 4);
  attention::fill_uniform_bf16(q.get(), full_elems, seed, -1.f, 1.f, stream);
  attention::fill_uniform_bf16(k.get(), full_elems, seed + 1, -1.f, 1.f, stream);
  attention::fill_uniform_bf16(v.get(), full_elems, seed + 2, -1.f, 1.f, stream);
  attention::FlashFwdArgs full;
  full.problem.batch = s.batch;
  full.problem.seqlen_q = full.problem.seqlen_k = s.seqlen;
  full.problem.heads = s.heads;
  full.problem.head_dim = s.head_dim;
  full.problem.softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  full.problem.q = full.problem.k = full.problem.v = full.problem.o = attention::packed_bmhd_strides(s.seqlen, s.heads, s.head_dim);
  full.q = q.get();
  full.k = k.get();
  full.v = v.get();
  attention::reference_attention_gpu(full, ref.get<float>(), ref_lse.get<float>(), stream);

  attention::UlyssesOptions opt;
  opt.timeout_s = args.device_timeout_s;
  opt.push_ctas = args.push_ctas;
  HeldRanks h;
  h.layer = rt ? std::make_unique<UlyssesAttention>(s, *rt, opt) : std::make_unique<UlyssesAttention>(s, opt);
  for (int i = 0; i < h.layer->held_ranks(); ++i) {
    RankTensors t{DeviceBuffer(shard_elems * 2), DeviceBuffer(shard_elems * 2), DeviceBuffer(shard_elems * 2), DeviceBuffer(shard_elems * 2)};
    const int r = h.layer->rank_of(i);
    take_shard(q.get(), t.q.get(), s, r, stream);
    take_shard(k.get(), t.k.get(), s, r, stream);
    take_shard(v.get(), t.v.get(), s, r, stream);
    attention::fill_u16(t.out.get(), shard_elems, 0xFFFF, stream);  // NaN: rows nobody writes show up
    h.tensors.push_back(std::move(t));
    h.global.push_back(r);
  }
  std::vector<DeviceBuffer> fused_outs;
  for (int i = 0; i < h.layer->held_ranks(); ++i) fused_outs.emplace_back(shard_elems * 2);
  // Before every call the inputs are poisoned, then put back by a kernel that lets the call's first kernel start at
  // once and writes late (the layer's kernels start early, common/grid_dependency.cuh): a call whose kernels read
  // them before waiting for the work before them differs.
  std::vector<DeviceBuffer> pristine;
  std::vector<attention::LateCopy> put_back;
  for (int i = 0; i < h.layer->held_ranks(); ++i)
    for (DeviceBuffer* t : {&h.tensors[i].q, &h.tensors[i].k, &h.tensors[i].v}) {
      pristine.emplace_back(shard_elems * 2);
      XSTAGE_CUDA_CHECK(cudaMemcpyAsync(pristine.back().get(), t->get(), shard_elems * 2, cudaMemcpyDeviceToDevice, stream));
      put_back.push_back({t->get(), pristine.back().get(), shard_elems});
    }
  const auto inputs_arrive_late = [&] {
    for (const attention::LateCopy& c : put_back) attention::fill_u16(c.dst, c.words, 0xFFFF, stream);
    attention::copy_u16_late(put_back, kLateInputsUs, stream);
  };

  // Serial, against the reference of the whole sequence.
  inputs_arrive_late();
  h.layer->enqueue(views_of(h, false, fused_outs), UlyssesPath::serial, stream);
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  h.layer->poll();
  const std::vector<float> ref_h = [&] {
    std::vector<float> r(full_elems);
    XSTAGE_CUDA_CHECK(cudaMemcpy(r.data(), ref.get(), full_elems * 4, cudaMemcpyDeviceToHost));
    return r;
  }();
  const std::int64_t row_elems = static_cast<std::int64_t>(s.heads) * s.head_dim;
  for (int i = 0; i < h.layer->held_ranks(); ++i) {
    std::vector<std::uint16_t> got(shard_elems);
    XSTAGE_CUDA_CHECK(cudaMemcpy(got.data(), h.tensors[i].out.get(), shard_elems * 2, cudaMemcpyDeviceToHost));
    double e2 = 0, r2 = 0;
    const int r = h.global[i];
    for (int b = 0; b < s.batch; ++b)
      for (int m = 0; m < s.shard_rows(); ++m)
        for (std::int64_t c = 0; c < row_elems; ++c) {
          const double g = attention::bf16_bits_to_float(got[(static_cast<std::int64_t>(b) * s.shard_rows() + m) * row_elems + c]);
          const double w = ref_h[(static_cast<std::int64_t>(b) * s.seqlen + r * s.shard_rows() + m) * row_elems + c];
          e2 += std::isfinite(g) ? (g - w) * (g - w) : 1e30;
          r2 += w * w;
        }
    res.rel_l2 = std::max(res.rel_l2, std::sqrt(e2 / std::max(r2, 1e-30)));
  }

  // Each fused path by each store path, `launches` whole calls: the output poisoned and the inputs put back late
  // before every call, compared word for word with the serial output on the device (no host round trip between calls).
  DeviceBuffer differences(sizeof(unsigned long long));
  res.passed = res.rel_l2 <= kMaxRelativeError;
  for (UlyssesPath fused_path : fused_paths)
    for (A2AStorePath store : paths) {
      FusedCheck fc{fused_path, store};
      attention::UlyssesOptions fo = opt;
      fo.store_path = store;
      std::unique_ptr<UlyssesAttention> fused = rt ? std::make_unique<UlyssesAttention>(s, *rt, fo) : std::make_unique<UlyssesAttention>(s, fo);
      XSTAGE_CUDA_CHECK(cudaMemsetAsync(differences.get(), 0, differences.bytes(), stream));
      const auto views = views_of(h, true, fused_outs);
      for (int launch = 0; launch < args.launches; ++launch) {
        for (auto& o : fused_outs) attention::fill_u16(o.get(), shard_elems, 0xFFFF, stream);
        inputs_arrive_late();
        fused->enqueue(views, fused_path, stream);
        for (int i = 0; i < fused->held_ranks(); ++i)
          attention::count_differing_u16(fused_outs[i].get(), h.tensors[i].out.get(), shard_elems, differences.get<unsigned long long>(),
                                         stream);
      }
      XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
      fused->poll();
      XSTAGE_CUDA_CHECK(cudaMemcpy(&fc.differences, differences.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      for (int i = 0; i < fused->held_ranks(); ++i)  // each call counted once on the device
        if (fused->calls_done(i) != static_cast<std::uint32_t>(args.launches)) ++fc.differences;
      bool ok = fc.differences == 0;
      if (fused_path == UlyssesPath::fused_both) {
        // Every held rank sends (P - 1)/P of its Q, K and V: the all-to-all's volume, no byte twice.
        // Their own rows are read in place, but for the chunks that a tile or block straddling a shard boundary reads.
        const UlyssesAttention::PushedBytes& pushed = fused->pushed_bytes();
        fc.pushed_remote_bytes = pushed.remote;
        fc.pushed_own_bytes = pushed.own;
        fc.own_bytes = static_cast<std::int64_t>(fused->held_ranks()) * 3 * s.batch * s.shard_rows() * s.local_heads() * s.head_dim * 2;
        fc.all_to_all_bytes = static_cast<std::int64_t>(fused->held_ranks()) * 3 * s.batch * s.shard_rows() * (P - 1) * s.local_heads() *
                              s.head_dim * 2;
        ok = ok && fc.pushed_remote_bytes == fc.all_to_all_bytes;
      }
      res.passed = res.passed && ok;
      res.fused.push_back(fc);
    }
  return res;
}

int run_check(comm::Runtime* rt, const UlyssesArgs& args) {
  const int P = rt ? rt->world_size() : args.virtual_ranks;
  const bool lead = !rt || rt->rank() == 0;
  std::uint64_t seed = args.seed ? args.seed : (std::uint64_t(std::random_device{}()) << 20);
  if (rt) {  // every rank the same seed: rank 0's
    const auto all = rt->all_gather_bytes(&seed, sizeof seed);
    std::memcpy(&seed, all.data(), sizeof seed);
  }
  const auto paths = store_path_list(args.store_paths);
  const auto fused_paths = fused_path_list(args.fused_paths);
  cudaStream_t stream = rt ? rt->stream() : nullptr;
  if (!rt) XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (lead)
    std::printf("ulysses check: P = %d%s, seed %llu, %d fused launch(es) per case, fused path and store path; pass if serial rel L2 <= "
                "%.0e, every fused output equals the serial one bit for bit, and fused_both pushes exactly the all-to-all's bytes\n",
                P, rt ? "" : " virtual ranks on one GPU", static_cast<unsigned long long>(seed), args.launches, kMaxRelativeError);
  nlohmann::json doc = {{"command", command_line()}, {"timestamp", utc_timestamp()}, {"ranks", P}, {"virtual", rt == nullptr},
                        {"seed", seed}, {"launches", args.launches}, {"cases", nlohmann::json::array()}};
  int failures = 0;
  for (const CheckShape& cs : check_shapes(args.quick)) {
    const CheckResult r = run_check_shape(cs, P, rt, args, seed, paths, fused_paths, stream);
    seed += 7919;
    failures += !r.passed;
    std::string words;
    nlohmann::json fused = nlohmann::json::array();
    for (const FusedCheck& f : r.fused) {
      words += std::string(words.empty() ? "" : ", ") + to_string(f.path) + "/" + to_string(f.store) + " " + std::to_string(f.differences);
      nlohmann::json j = {{"path", to_string(f.path)}, {"store_path", to_string(f.store)}, {"differing_words", f.differences}};
      if (f.pushed_remote_bytes >= 0) {
        j["pushed_remote_bytes"] = f.pushed_remote_bytes;
        j["all_to_all_bytes"] = f.all_to_all_bytes;
        j["pushed_own_bytes"] = f.pushed_own_bytes;
        j["own_bytes"] = f.own_bytes;
        if (f.pushed_remote_bytes != f.all_to_all_bytes) words += " (pushed " + std::to_string(f.pushed_remote_bytes) + " B, not " +
                                                                   std::to_string(f.all_to_all_bytes) + ")";
      }
      fused.push_back(j);
    }
    if (lead) std::printf("  %-40s serial rel L2 %.2e   differing words: %s   %s\n", r.name.c_str(), r.rel_l2, words.c_str(), r.passed ? "ok" : "FAIL");
    doc["cases"].push_back({{"case", r.name}, {"serial_rel_l2", r.rel_l2}, {"fused", fused}, {"passed", r.passed}});
  }
  if (!rt) XSTAGE_CUDA_CHECK(cudaStreamDestroy(stream));
  if (lead) std::printf("%d case(s) failed\n", failures);
  if (lead && !args.out.empty()) write_json_file(args.out, doc);
  return failures;
}

// ---- bench ----------------------------------------------------------------------------------------------

// The paper's protocol for attention (the paper's evaluation protocol): sender-side steady state, back-to-back replay through a CUDA
// graph of `replays` calls; per trial all ranks line up, the time per call is the graph's time / replays, the
// trial's time the max over ranks; the median over trials is reported. The variants of one shape are captured
// first and then timed in turn within every trial (FA-only, fused, serial, ... each once per trial), so clock
// and thermal drift lands in every variant alike instead of in their differences. The order of each trial is
// common/turn_order.hpp's, so that whatever a variant inherits from the one before it (under the power cap, the clock
// a light or a heavy predecessor left) is every other variant's equally often.
class VariantTimer {
 public:
  // rt: real ranks (lined up before each timing, max over ranks); null: virtual ranks in this process.
  VariantTimer(comm::Runtime* rt, int trials, int replays) : rt_(rt), trials_(trials), replays_(replays) {
    XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    XSTAGE_CUDA_CHECK(cudaEventCreate(&start_));
    XSTAGE_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~VariantTimer() {
    for (cudaGraphExec_t e : execs_) cudaGraphExecDestroy(e);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }
  // Captures `replays` back-to-back calls of one variant; returns its index.
  template <class F>
  int add(F&& call) {
    cudaGraph_t graph{};
    cudaGraphExec_t exec{};
    XSTAGE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < replays_; ++i) call(stream_);
    XSTAGE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    XSTAGE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    XSTAGE_CUDA_CHECK(cudaGraphDestroy(graph));
    XSTAGE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));  // untimed
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    execs_.push_back(exec);
    return static_cast<int>(execs_.size()) - 1;
  }
  // Per variant, per trial: the max over ranks of the time per call, µs.
  std::vector<std::vector<double>> run() {
    const int n = static_cast<int>(execs_.size());
    std::vector<double> mine(static_cast<std::size_t>(n) * trials_);
    for (int t = 0; t < trials_; ++t)
      for (const int v : turn_order(n, t)) {
        if (rt_) rt_->barrier();
        XSTAGE_CUDA_CHECK(cudaEventRecord(start_, stream_));
        XSTAGE_CUDA_CHECK(cudaGraphLaunch(execs_[v], stream_));
        XSTAGE_CUDA_CHECK(cudaEventRecord(stop_, stream_));
        XSTAGE_CUDA_CHECK(cudaEventSynchronize(stop_));
        float ms = 0;
        XSTAGE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
        mine[static_cast<std::size_t>(v) * trials_ + t] = 1e3 * ms / replays_;
      }
    const auto all = rt_ ? rt_->all_gather_bytes(mine.data(), mine.size() * sizeof(double))
                         : std::vector<std::byte>(reinterpret_cast<const std::byte*>(mine.data()),
                                                  reinterpret_cast<const std::byte*>(mine.data() + mine.size()));
    std::vector<std::vector<double>> worst(n, std::vector<double>(trials_, 0.0));
    for (int r = 0; r < (rt_ ? rt_->world_size() : 1); ++r)
      for (std::size_t i = 0; i < mine.size(); ++i) {
        double x;
        std::memcpy(&x, all.data() + (static_cast<std::size_t>(r) * mine.size() + i) * sizeof(double), sizeof x);
        worst[i / trials_][i % trials_] = std::max(worst[i / trials_][i % trials_], x);
      }
    return worst;
  }

 private:
  comm::Runtime* rt_;
  int trials_, replays_;
  cudaStream_t stream_{};
  cudaEvent_t start_{}, stop_{};
  std::vector<cudaGraphExec_t> execs_;
};

int run_bench(comm::Runtime* rt, const UlyssesArgs& args) {
  const int P = rt ? rt->world_size() : args.virtual_ranks;
  const bool lead = !rt || rt->rank() == 0;
  const auto paths = store_path_list(args.store_paths);
  cudaStream_t stream = rt ? rt->stream() : nullptr;
  if (!rt) XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::string platform_file = args.platform.empty() ? shipped_file(kDefaultPlatform) : args.platform;
  const model::PlatformModel platform = model::read_platform_file(platform_file);
  const int sms = current_device_facts().sm_count;
  nlohmann::json doc = {{"command", command_line()}, {"timestamp", utc_timestamp()}, {"ranks", P}, {"virtual", rt == nullptr},
                        {"platform", platform_file},
                        {"protocol", "CUDA graph of " + std::to_string(args.replays) + " back-to-back calls per variant; per trial "
                                     "every variant in turn (common/turn_order.hpp's balanced order), all ranks lined up before each, time per call = graph time / calls, max "
                                     "over ranks; median over " + std::to_string(args.trials) + " trials" +
                                     (rt ? "" : "; virtual ranks: all P ranks' work in one process on one GPU, one after another")},
                        {"results", nlohmann::json::array()}};
  if (lead)
    std::printf("%-22s %9s %9s %9s %9s %9s %8s %7s %8s %8s %8s | %9s %9s %9s %7s %5s %9s %8s %7s %7s\n", "heads x M x d (/rank)", "T_FA", "T_A2A",
                "T_serial", "T_fused", "T_fusedSt", "E_res", "hiding", "speedup", "pred_E", "pred_Ecc", "L_serial", "L_fpost", "L_fboth",
                "Lfb/FA", "push", "push_GB/s", "-copy/FA", "copy", "hstarts");
  bool warmed = false;
  for (int d : args.head_dims)
    for (int hpr : args.heads_per_rank)
      for (int M : args.seqlens) {
        const UlyssesShape s{args.batch, M, hpr * P, d, P};
        attention::validate(s);
        attention::UlyssesOptions opt;
        opt.timeout_s = args.device_timeout_s;
        opt.push_ctas = args.push_ctas;
        auto make_layer = [&](A2AStorePath store) {
          attention::UlyssesOptions o = opt;
          o.store_path = store;
          return rt ? std::make_unique<UlyssesAttention>(s, *rt, o) : std::make_unique<UlyssesAttention>(s, o);
        };
        std::unique_ptr<UlyssesAttention> layer = make_layer(paths.front());
        const std::int64_t shard = static_cast<std::int64_t>(s.batch) * s.shard_rows() * s.heads * d;
        std::vector<RankTensors> tensors;
        std::vector<UlyssesViews> views;
        for (int i = 0; i < layer->held_ranks(); ++i) {
          const int r = layer->rank_of(i);
          RankTensors t{DeviceBuffer(shard * 2), DeviceBuffer(shard * 2), DeviceBuffer(shard * 2), DeviceBuffer(shard * 2)};
          attention::fill_uniform_bf16(t.q.get(), shard, 11 + 3 * r, -1.f, 1.f, stream);
          attention::fill_uniform_bf16(t.k.get(), shard, 12 + 3 * r, -1.f, 1.f, stream);
          attention::fill_uniform_bf16(t.v.get(), shard, 13 + 3 * r, -1.f, 1.f, stream);
          views.push_back({t.q.get(), t.k.get(), t.v.get(), t.out.get()});
          tensors.push_back(std::move(t));
        }
        layer->enqueue_pre_all_to_all(views, stream);  // the head-sharded inputs every kernel-level variant starts from
        if (!warmed) {
          warm_up([&] { layer->enqueue_attention_local(stream); }, args.warmup_ms, stream);
          warmed = true;
        }
        // Every kernel-level variant starts from the same head-sharded inputs; the fused layers each own their windows.
        std::vector<std::unique_ptr<UlyssesAttention>> fused;
        for (A2AStorePath path : paths) {
          fused.push_back(make_layer(path));
          fused.back()->enqueue_pre_all_to_all(views, stream);
        }
        std::unique_ptr<UlyssesAttention> both = make_layer(paths.front());
        XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
        VariantTimer timer(rt, args.trials, args.replays);
        const int v_fa = timer.add([&](cudaStream_t st) { layer->enqueue_attention_local(st); });
        const int v_a2a = timer.add([&](cudaStream_t st) { layer->enqueue_post_all_to_all(views, st); });
        const int v_serial = timer.add([&](cudaStream_t st) {
          layer->enqueue_attention_local(st);
          layer->enqueue_post_all_to_all(views, st);
        });
        std::vector<int> v_fused;
        for (auto& f : fused) v_fused.push_back(timer.add([&](cudaStream_t st) { f->enqueue_attention_fused(st); }));
        const int v_layer_serial = timer.add([&](cudaStream_t st) { layer->enqueue(views, UlyssesPath::serial, st); });
        const int v_layer_post = timer.add([&](cudaStream_t st) { fused.front()->enqueue(views, UlyssesPath::fused_post, st); });
        const int v_layer_both = timer.add([&](cudaStream_t st) { both->enqueue(views, UlyssesPath::fused_both, st); });
        // The pusher alone (virtual ranks): its rate with every SM but its own idle, against its rate inside the layer.
        const int v_push = rt ? -1 : timer.add([&](cudaStream_t st) { both->enqueue_push_alone(views, st); });
        // fused_both taken apart: the layer without its copy-out, the copy-out alone (every row of the calls before has
        // arrived) and (virtual ranks) the start of the call with the head starts alone.
        const int v_both_no_copy = timer.add([&](cudaStream_t st) { both->enqueue_attention_fused_both(views, st); });
        const int v_copy_out = timer.add([&](cudaStream_t st) { both->enqueue_copy_out(views, st); });
        const int v_head_starts = rt ? -1 : timer.add([&](cudaStream_t st) { both->enqueue_head_starts_alone(views, st); });
        const std::vector<std::vector<double>> trials = timer.run();
        for (auto& f : fused) f->poll();
        layer->poll();
        both->poll();
        const double t_fa = median(trials[v_fa]), t_a2a = median(trials[v_a2a]), t_serial = median(trials[v_serial]);
        double t_fused[2] = {NAN, NAN}, fused_over_fa[2] = {NAN, NAN};
        for (std::size_t i = 0; i < paths.size(); ++i) {
          const int pi = paths[i] == A2AStorePath::tma ? 0 : 1;
          t_fused[pi] = median(trials[v_fused[i]]);
          fused_over_fa[pi] = median_ratio(trials[v_fused[i]], trials[v_fa]);
        }
        const double t_layer_serial = median(trials[v_layer_serial]), t_layer_post = median(trials[v_layer_post]),
                     t_layer_both = median(trials[v_layer_both]), both_over_fa = median_ratio(trials[v_layer_both], trials[v_fa]);
        const double t_push = v_push < 0 ? NAN : median(trials[v_push]);
        const double t_both_no_copy = median(trials[v_both_no_copy]), t_copy_out = median(trials[v_copy_out]);
        const double both_no_copy_over_fa = median_ratio(trials[v_both_no_copy], trials[v_fa]);
        const double t_head_starts = v_head_starts < 0 ? NAN : median(trials[v_head_starts]);
        // Every byte the pusher moves: the other ranks' rows, and the own rows that straddling tiles read from the inbox.
        const double pushed_bytes = static_cast<double>(both->pushed_bytes().remote + both->pushed_bytes().own);
        const double best_fused = std::isnan(t_fused[0]) ? t_fused[1] : t_fused[0];
        const double e_res = best_fused - t_fa, hiding = (t_serial - best_fused) / (t_serial - t_fa), speedup = t_serial / best_fused;
        // The audit with the compute side measured: σ from T_FA (ceil(tiles / CTAs) waves of ceil(M / b_n) KV tiles);
        // with virtual ranks T_FA is every rank's kernel one after another, so per rank it is T_FA / P.
        const attention::FwdTileShape tile = attention::fwd_tile_shape(attention::choose_fwd_tile_config(d, std::int64_t(s.batch) * hpr, M, sms));
        const std::int64_t tiles = std::int64_t(s.batch) * hpr * ((M + tile.block_m() - 1) / tile.block_m());
        const int K = static_cast<int>(std::min<std::int64_t>(tiles, sms));
        const std::int64_t waves = (tiles + K - 1) / K, kv_tiles = (M + tile.block_n - 1) / tile.block_n;
        const double t_fa_rank = t_fa / layer->held_ranks();
        model::AttentionKernel kern;
        kern.b_m = tile.block_m();
        kern.b_n = tile.block_n;
        kern.head_dim = d;
        kern.K = K;
        kern.sigma_ns = 1e3 * t_fa_rank / static_cast<double>(waves * kv_tiles);
        kern.G_QK_ns = kern.sigma_ns / 2;
        kern.T_lat_ns = 1000;
        kern.heads = hpr;
        kern.batch = s.batch;
        kern.remote_fraction = static_cast<double>(P - 1) / P;
        const model::PlatformPoint pt =
            model::evaluate_platform(model::store_path_triple(platform, paths.front() == A2AStorePath::tma ? model::StorePath::tma_bulk
                                                                                                          : model::StorePath::st_global_16B),
                                     K, model::attention_tile_bytes(kern.b_m, d, 2))
                .point;
        const model::AttentionAudit audit = model::audit_attention(pt, kern, {M});
        const double pred_e = audit.points[0].E_res_ns / 1e3, pred_ecc = audit.points[0].E_cc_ns / 1e3;
        char name[64];
        std::snprintf(name, sizeof name, "%d x %d x %d", hpr, M, d);
        if (lead)
          std::printf("%-22s %9.1f %9.1f %9.1f %9.1f %9.1f %8.1f %6.1f%% %8.3f %8.1f %8.1f | %9.1f %9.1f %9.1f %7.3f %5d %9.1f %8.3f %7.1f %7.1f\n", name, t_fa, t_a2a,
                      t_serial, t_fused[0], t_fused[1], e_res, 100 * hiding, speedup, pred_e, pred_ecc, t_layer_serial, t_layer_post,
                      t_layer_both, both_over_fa, both->push_ctas(), pushed_bytes / (t_push * 1e3), both_no_copy_over_fa, t_copy_out,
                      t_head_starts);
        doc["results"].push_back({{"heads_per_rank", hpr}, {"heads", s.heads}, {"seqlen", M}, {"head_dim", d}, {"batch", s.batch},
                                  {"T_FA_us", t_fa}, {"T_A2A_us", t_a2a}, {"T_serial_us", t_serial},
                                  {"T_fused_tma_us", t_fused[0]}, {"T_fused_st_global_us", t_fused[1]},
                                  {"fused_tma_over_FA_median_of_trials", fused_over_fa[0]},
                                  {"fused_st_global_over_FA_median_of_trials", fused_over_fa[1]},
                                  {"E_res_us", e_res}, {"hiding", hiding}, {"speedup", speedup},
                                  {"T_layer_serial_us", t_layer_serial}, {"T_layer_fused_post_us", t_layer_post},
                                  {"T_layer_fused_both_us", t_layer_both}, {"layer_fused_both_over_FA_median_of_trials", both_over_fa},
                                  {"input_chunks_per_source", both->input_chunks().per_source}, {"input_chunk_rows", both->input_chunks().rows},
                                  {"push_ctas", both->push_ctas()}, {"pushed_bytes", pushed_bytes},
                                  {"T_push_alone_us", number_or_null(t_push)},
                                  {"push_alone_GB_per_s", number_or_null(pushed_bytes / (t_push * 1e3))},
                                  {"T_layer_fused_both_without_copy_out_us", t_both_no_copy},
                                  {"layer_fused_both_without_copy_out_over_FA_median_of_trials", both_no_copy_over_fa},
                                  {"T_copy_out_us", t_copy_out}, {"T_start_and_head_starts_us", number_or_null(t_head_starts)},
                                  {"ctas", K}, {"tile_b_m", kern.b_m}, {"tile_b_n", kern.b_n}, {"sigma_ns_measured", kern.sigma_ns},
                                  {"predicted", {{"E_res_us", pred_e}, {"E_drain_us", audit.points[0].E_drain_ns / 1e3},
                                                 {"E_tail_us", audit.points[0].E_tail_ns / 1e3}, {"E_cc_us", pred_ecc}, {"M_ub", audit.M_ub},
                                                 {"G_star_us", audit.G_star_ns / 1e3}, {"capacity_bound_holds", audit.capacity_bound_holds},
                                                 {"T_iss0_ns", pt.T_iss0_ns}, {"R_bytes_per_ns", pt.R_bytes_per_ns}, {"Q_bytes", pt.Q_bytes}}}});
        std::fflush(stdout);
      }
  if (!rt) XSTAGE_CUDA_CHECK(cudaStreamDestroy(stream));
  if (lead && !args.out.empty()) write_json_file(args.out, doc);
  return 0;
}

// The numbers were checked as they were read (ranges in add_ulysses_command); what is left is checked here, before
// any rank or GPU exists.
void validate_args(const UlyssesArgs& a, bool check) {
  store_path_list(a.store_paths);
  if (check) fused_path_list(a.fused_paths);
  if (!check) {
    for (int d : a.head_dims) XSTAGE_REQUIRE(d == 64 || d == 128, "--head-dims: 64 or 128, got " + std::to_string(d));
    if (!a.platform.empty()) with_option_name("--platform", [&] { return model::read_platform_file(a.platform); });
  }
}

void spawn_or_run(const UlyssesArgs& args, bool check) {
  validate_args(args, check);
  if (args.virtual_ranks > 0) {
    if (comm::visible_gpu_count() < 1) throw PlatformError("no CUDA GPU");
    if ((check ? run_check(nullptr, args) : run_bench(nullptr, args)) > 0) throw ExitStatus(1);
    return;
  }
  if (const auto env = comm::rank_env_from_environment()) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    comm::Runtime rt(*env);
    if ((check ? run_check(&rt, args) : run_bench(&rt, args)) > 0) throw ExitStatus(1);
    return;
  }
  const int visible = comm::visible_gpu_count();
  const int gpus = args.gpus ? args.gpus : visible;
  if (gpus > visible) throw PlatformError("--gpus " + std::to_string(gpus) + " but only " + std::to_string(visible) + " GPU(s) are visible");
  if (gpus > 1) comm::require_peer_access(gpus);
  const int rc = comm::run_local_ranks(gpus);
  if (rc != 0) throw ExitStatus(rc);
}

}  // namespace

void add_ulysses_command(CLI::App& attention) {
  CLI::App* ulysses = attention.add_subcommand(
      "ulysses", "Ulysses sequence-parallel attention: serial (NCCL all-to-alls), the post-attention all-to-all fused into\n"
                 "the attention epilogue (fused_post), or both all-to-alls hidden (fused_both). Starts one process per GPU\n"
                 "itself, or runs under torchrun/Slurm.");
  ulysses->require_subcommand(1);
  auto args = std::make_shared<UlyssesArgs>();
  auto common = [&](CLI::App* cmd) {
    add_integer(cmd, "--gpus", args->gpus, 1, 1024, "local GPUs (ranks) to use (default: all visible)");
    add_list(cmd, "--store-path", args->store_paths, "fused epilogue store paths: tma, st_global (default: both)");
    add_number(cmd, "--device-timeout-s", args->device_timeout_s, 1e-3, 86400, "bound of every device-side wait (default 10 s)");
    add_integer(cmd, "--push-ctas", args->push_ctas, 0, attention::kMaxPushCtas,
                "fused_both: SMs of the pusher, the attention kernel runs on the others (default 0: the most that leave the "
                "kernel's wave count at its least)");
    add_path(cmd, "--out", args->out, "write the results as JSON to this file");
    add_integer(cmd, "--virtual-ranks", args->virtual_ranks, 1, attention::kMaxUlyssesRanks,
                "hold P ranks in this process on one GPU instead (1 to " + std::to_string(attention::kMaxUlyssesRanks) + ")");
  };
  CLI::App* check = ulysses->add_subcommand("check", "Serial against the fp32 reference of the whole sequence (rel L2 <= 1e-2), and the fused\n"
                                                     "output bit-identical to the serial one, on awkward shapes; exit 1 on failure.");
  common(check);
  add_integer(check, "--seed", args->seed, 1, INT64_MAX, "input seed (default: fresh, printed)");
  add_integer(check, "--launches", args->launches, 1, 1000000,
              "fused calls per case and store path, output poisoned before each (default 3)");
  check->add_flag("--quick", args->quick, "the two smallest shapes only (for compute-sanitizer)");
  add_list(check, "--paths", args->fused_paths, "fused paths compared with serial: fused_post, fused_both (default: both)");
  check->callback([args] { spawn_or_run(*args, true); });
  CLI::App* bench = ulysses->add_subcommand("bench", "FA-only, A2A-only, serial, fused (each store path) and the whole layer by each path,\n"
                                                     "per M, heads per rank and head dim, with the X-Stage audit's predicted residual beside the\n"
                                                     "measured one.");
  common(bench);
  add_integer_list(bench, "--seqlens", args->seqlens, 1, 1 << 22, "sequence lengths M (whole sequence)");
  add_integer_list(bench, "--heads", args->heads_per_rank, 1, 1024, "heads per rank (H/P)");
  add_integer_list(bench, "--head-dims", args->head_dims, 64, 128, "head dims (64, 128)");
  add_integer(bench, "--batch", args->batch, 1, 4096, "batch (default 1)");
  add_integer(bench, "--trials", args->trials, 1, 100000, "timed trials per variant (default 20)");
  add_integer(bench, "--replays", args->replays, 1, 100000, "calls per CUDA graph (default 10)");
  add_number(bench, "--warmup-ms", args->warmup_ms, 0, 600000, "GPU warm-up before the first shape (default 1000)");
  add_path(bench, "--platform", args->platform, "platform file for the predictions (default: the shipped H200 calibration)");
  bench->callback([args] { spawn_or_run(*args, false); });
}

}  // namespace xstage::cli
