#include "calibration/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include "calibration/store_bench.hpp"
#include "comm/device_info.hpp"
#include "comm/signal_barrier.hpp"
#include "common/cuda_check.hpp"
#include "common/error.hpp"

namespace xstage::calibration {

namespace {

constexpr int kSlots = 2;
constexpr std::int64_t kSlotBytes = 1 << 20;  // one slot holds the largest burst of any path

// One rank's view of the sweep: where its stores go, and the benchmark scratch.
class SweepRunner {
 public:
  SweepRunner(comm::Runtime& rt, const SweepOptions& opt, int sm_count)
      : rt_(rt), opt_(opt), bench_(sm_count), window_(rt, static_cast<std::size_t>(sm_count) * kSlots * kSlotBytes) {
    XSTAGE_CUDA_CHECK(cudaMalloc(&local_dst_, window_.bytes()));
    stores_ = comm::stores_remotely(opt.pairing, rt.rank(), rt.world_size());
    receives_ = comm::receives_remotely(opt.pairing, rt.rank(), rt.world_size());
    // The windows of every rank some producer of this rank stores to, through their LSA mappings.
    window_by_rank_.assign(static_cast<std::size_t>(rt.world_size()), nullptr);
    for (int p = 0; p < sm_count && stores_; ++p) {
      const int target = comm::producer_target(opt.pairing, rt.rank(), rt.world_size(), p);
      if (!window_by_rank_[static_cast<std::size_t>(target)])
        window_by_rank_[static_cast<std::size_t>(target)] = window_.peer_pointer(target);
    }
    if (opt.verify) barrier_ = std::make_unique<comm::SignalBarrier>(rt);
    rt_.barrier();
  }
  ~SweepRunner() { cudaFree(local_dst_); }

  // Sustained stores into local memory until the SM clock has settled, so timing starts warm.
  double warm_up() {
    StoreBenchConfig cfg = base_config(StorePath::st_global_16B, Mode::periodic, bench_.max_K(), 64 * 1024, 0);
    cfg.producer_region = local_regions(local_dst_, cfg);
    cfg.max_bursts = bench_.burst_capacity(cfg.path, cfg.B_bytes);
    cfg.duration_ns = 20e6;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(opt_.warmup_ms);
    while (std::chrono::steady_clock::now() < until) clock_mhz_ = bench_.run(cfg, clock_mhz_, rt_.stream()).sm_clock_mhz;
    return clock_mhz_;
  }

  // Runs one point on every rank (ranks that do not store in this pairing only join the barriers).
  // Periodic points run for `length` ns, isolated points for `length` aligned bursts. Returns this
  // rank's sample, or nothing if it did not store.
  std::optional<BurstSample> measure(StorePath path, Mode mode, Destination dest, int K, std::int64_t B, double G_ns,
                                     double length) {
    StoreBenchConfig cfg = base_config(path, mode, K, B, G_ns);
    if (mode == Mode::periodic) {
      cfg.max_bursts = bench_.burst_capacity(path, B);
      cfg.duration_ns = length;
    } else {
      cfg.max_bursts = static_cast<int>(length);
    }
    const bool stores = dest == Destination::local || stores_;
    if (stores)
      cfg.producer_region = dest == Destination::local
                                ? local_regions(local_dst_, cfg)
                                : remote_regions(window_by_rank_, cfg, opt_.pairing, rt_.rank(), rt_.world_size());
    const bool verify = opt_.verify && dest == Destination::remote;
    std::optional<BurstSample> out;
    StoreBenchRaw raw;
    raw.bursts.assign(static_cast<std::size_t>(K), 0);
    // A launch whose producers filled their stamp capacity before the deadline is rerun shorter; every
    // rank takes part in each attempt so the barriers pair up.
    for (int attempt = 0;; ++attempt) {
      if (verify) XSTAGE_CUDA_CHECK(cudaMemsetAsync(window_.local(), 0xFF, window_.bytes(), rt_.stream()));  // poison
      rt_.barrier();  // ranks start together
      int retry = 0;
      if (stores) {
        raw = bench_.run(cfg, clock_mhz_, rt_.stream());
        clock_mhz_ = raw.sm_clock_mhz;
        retry = raw.hit_capacity(cfg) ? 1 : 0;
      }
      int any_retry = 0;
      for (std::byte b : rt_.all_gather_bytes(&retry, sizeof retry)) any_retry |= static_cast<int>(b);
      if (!any_retry || attempt == 3) break;
      cfg.duration_ns /= 2;
    }
    if (stores) out = summarize(cfg, raw, dest, rt_.rank());
    if (verify) check_received(cfg, raw.bursts);
    return out;
  }

  std::int64_t verified_bytes() const { return verified_bytes_; }
  std::int64_t mismatched_words() const { return mismatched_words_; }

 private:
  StoreBenchConfig base_config(StorePath path, Mode mode, int K, std::int64_t B, double G_ns) const {
    StoreBenchConfig cfg;
    cfg.path = path;
    cfg.mode = mode;
    cfg.K = K;
    cfg.B_bytes = B;
    cfg.gap_ns = G_ns;
    cfg.slot_bytes = kSlotBytes;
    cfg.slots = kSlots;
    cfg.pattern_seed = seed_of(rt_.rank());
    return cfg;
  }

  // Device barrier (release/acquire at system scope) so the senders' stores are visible, then the
  // receiver checks every slot of every region its sources wrote.
  void check_received(const StoreBenchConfig& cfg, const std::vector<int>& my_bursts) {
    barrier_->sync_on_stream(rt_.stream());
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(rt_.stream()));
    barrier_->check();
    // The receiver needs to know how many bursts each sender's producer completed.
    const std::size_t K = my_bursts.size();
    const auto all = rt_.all_gather_bytes(my_bursts.data(), K * sizeof(int));
    if (!receives_) return;
    std::vector<ExpectedRegion> expected(K);
    for (std::size_t p = 0; p < K; ++p) {
      const int source = comm::producer_source(opt_.pairing, rt_.rank(), rt_.world_size(), static_cast<int>(p));
      expected[p].seed = seed_of(source);
      std::memcpy(&expected[p].bursts, all.data() + (static_cast<std::size_t>(source) * K + p) * sizeof(int), sizeof(int));
      verified_bytes_ += std::min(expected[p].bursts, cfg.slots) * cfg.B_bytes;
    }
    const std::int64_t bad = count_mismatches(window_.local(), cfg, expected, rt_.stream());
    mismatched_words_ += bad;
    if (bad)
      throw Error("rank " + std::to_string(rt_.rank()) + ": " + std::to_string(bad) +
                  " 16-byte words arrived wrong from its peers (" + model::to_string(cfg.path) + ", K=" +
                  std::to_string(cfg.K) + ", B=" + std::to_string(cfg.B_bytes) + ")");
  }

  static std::uint32_t seed_of(int rank) { return 0x5EED0000u + static_cast<std::uint32_t>(rank); }

  comm::Runtime& rt_;
  const SweepOptions& opt_;
  StoreBench bench_;
  comm::SymmetricBuffer window_;
  std::unique_ptr<comm::SignalBarrier> barrier_;
  void* local_dst_ = nullptr;
  std::vector<void*> window_by_rank_;
  bool stores_ = false, receives_ = false;
  double clock_mhz_ = 1500.0;  // replaced by the first measurement
  std::int64_t verified_bytes_ = 0, mismatched_words_ = 0;
};

static_assert(std::is_trivially_copyable_v<BurstSample>, "samples travel between ranks as bytes");

// Every rank's samples, on every rank (ranks may hold different counts under one-way pairing).
std::vector<BurstSample> gather_samples(comm::Runtime& rt, std::vector<BurstSample> mine) {
  const int count = static_cast<int>(mine.size());
  const auto counts_bytes = rt.all_gather_bytes(&count, sizeof count);
  std::vector<int> counts(static_cast<std::size_t>(rt.world_size()));
  std::memcpy(counts.data(), counts_bytes.data(), counts_bytes.size());
  mine.resize(static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end())));
  const auto bytes = rt.all_gather_bytes(mine.data(), mine.size() * sizeof(BurstSample));
  std::vector<BurstSample> all;
  for (int r = 0; r < rt.world_size(); ++r) {
    const auto* first = reinterpret_cast<const BurstSample*>(bytes.data() + r * mine.size() * sizeof(BurstSample));
    all.insert(all.end(), first, first + counts[static_cast<std::size_t>(r)]);
  }
  return all;
}

}  // namespace

SweepResult run_calibration_sweep(comm::Runtime& rt, const SweepOptions& opt,
                                  const std::function<void(const std::string&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  SweepResult result;
  result.device = comm::describe_device(rt.device());
  const int sm_count = result.device.at("sm_count").get<int>();
  for (StorePath path : opt.paths) {
    SweepGrid g = default_grid(sm_count, path, opt.quick);
    if (!opt.K_fit.empty()) g.K_fit = opt.K_fit;
    if (!opt.K_heldout.empty()) g.K_heldout = opt.K_heldout;
    if (!opt.B_bytes.empty()) g.B_bytes = opt.B_bytes;
    validate_grid(g, sm_count, path);
    result.grids[path] = g;
  }

  SweepRunner runner(rt, opt, sm_count);
  progress("warming up the GPU");
  result.warm_clock_mhz = runner.warm_up();

  std::vector<BurstSample> mine;
  // Every sample is tagged with its sweep, so the fit keeps gap-sweep points out of the fits.
  auto keep = [&](Sweep sweep, std::optional<BurstSample> s) {
    if (s) {
      s->sweep = sweep;
      mine.push_back(*s);
    }
    return s;
  };
  for (StorePath path : opt.paths) {
    const SweepGrid& g = result.grids.at(path);
    const std::string name = model::to_string(path);
    std::vector<BurstSample> zero_gap;
    int done = 0;
    const int n_zero = static_cast<int>(g.K_fit.size() * g.B_bytes.size());
    for (int K : g.K_fit) {
      for (auto B : g.B_bytes) {
        progress(name + " zero-gap sweep " + std::to_string(++done) + "/" + std::to_string(n_zero));
        // Before R is known: a generous 1000 bytes/ns keeps the stamp capacity safe.
        const double n = periodic_duration_ns(static_cast<double>(K) * static_cast<double>(B) / 1000.0);
        if (auto s = keep(Sweep::zero_gap, runner.measure(path, Mode::periodic, Destination::remote, K, B, 0, n))) zero_gap.push_back(*s);
        keep(Sweep::zero_gap, runner.measure(path, Mode::periodic, Destination::local, K, B, 0, n));
      }
    }
    // All ranks derive the gaps from the same rough R (one-way: only rank 0 has samples).
    const std::vector<BurstSample> all_zero_gap = gather_samples(rt, zero_gap);
    const double R_rough = rough_R_bytes_per_ns(all_zero_gap);

    done = 0;
    for (int K : g.K_fit) {
      for (auto B : g.B_bytes) {
        progress(name + " plateau sweep " + std::to_string(++done) + "/" + std::to_string(n_zero));
        const std::int64_t V = static_cast<std::int64_t>(K) * B;
        const double G = plateau_gap_ns(V, R_rough);
        keep(Sweep::plateau, runner.measure(path, Mode::periodic, Destination::remote, K, B, G,
                                            periodic_duration_ns(G + static_cast<double>(V) / R_rough)));
      }
    }

    std::vector<int> gap_K = g.K_fit;
    std::sort(gap_K.rbegin(), gap_K.rend());
    gap_K.resize(std::min<std::size_t>(gap_K.size(), 2));  // the two largest fit K ...
    gap_K.insert(gap_K.end(), g.K_heldout.begin(), g.K_heldout.end());  // ... and every held-out K
    done = 0;
    const int n_gap = static_cast<int>(gap_K.size()) * g.gap_points;
    for (int K : gap_K) {
      const std::int64_t V = static_cast<std::int64_t>(K) * g.gap_sweep_B_bytes;
      for (double G : gap_sweep_ns(V, R_rough, g.gap_points)) {
        progress(name + " gap sweep " + std::to_string(++done) + "/" + std::to_string(n_gap));
        const double n = periodic_duration_ns(G + static_cast<double>(V) / R_rough);
        keep(Sweep::gap, runner.measure(path, Mode::periodic, Destination::remote, K, g.gap_sweep_B_bytes, G, n));
        keep(Sweep::gap, runner.measure(path, Mode::periodic, Destination::local, K, g.gap_sweep_B_bytes, G, n));
      }
    }

    done = 0;
    for (int K : g.K_fit) {
      for (auto B : g.B_bytes) {
        progress(name + " isolated sweep " + std::to_string(++done) + "/" + std::to_string(n_zero));
        keep(Sweep::isolated, runner.measure(path, Mode::isolated, Destination::remote, K, B, 0, g.isolated_bursts));
        keep(Sweep::isolated, runner.measure(path, Mode::isolated, Destination::local, K, B, 0, g.isolated_bursts));
      }
    }
  }

  result.samples = gather_samples(rt, mine);
  const std::int64_t v[2] = {runner.verified_bytes(), runner.mismatched_words()};
  auto vs = rt.all_gather_bytes(v, sizeof v);
  for (int r = 0; r < rt.world_size(); ++r) {
    result.verified_bytes += reinterpret_cast<const std::int64_t*>(vs.data())[2 * r];
    result.mismatched_words += reinterpret_cast<const std::int64_t*>(vs.data())[2 * r + 1];
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace xstage::calibration
