// GPU tests of the runtime and the remote-store microbenchmarks. Needs 2 GPUs joined by NVLink; run by
// scripts/gpu/calibrate.sh on a GPU machine, never by ctest (CI has no GPU).
//
// Started without RANK in the environment, the program starts one local rank of itself per visible GPU
// (at least 2); each rank runs
// the same tests in the same order, so the collectives inside them pair up. Tests use EXPECT_* (not
// ASSERT_*) before collectives, so a failing check on one rank cannot strand its peer in a barrier.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "calibration/store_bench.hpp"
#include "comm/peer_map.hpp"
#include "comm/runtime.hpp"
#include "comm/signal_barrier.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "rank_test_main.hpp"

namespace xstage {
namespace {

comm::Runtime* g_rt = nullptr;
constexpr std::int64_t kSlotBytes = 256 * 1024;
constexpr int kSlots = 2;

struct Fixture : ::testing::Test {
  comm::Runtime& rt = *g_rt;
  int sm_count = 0;
  std::unique_ptr<comm::SymmetricBuffer> window;
  std::unique_ptr<comm::SignalBarrier> barrier;
  void* local = nullptr;

  void SetUp() override {
    sm_count = device_facts(rt.device()).sm_count;
    window = std::make_unique<comm::SymmetricBuffer>(rt, static_cast<std::size_t>(sm_count) * kSlots * kSlotBytes);
    barrier = std::make_unique<comm::SignalBarrier>(rt);
    XSTAGE_CUDA_CHECK(cudaMalloc(&local, window->bytes()));
  }
  void TearDown() override {
    rt.barrier();
    cudaFree(local);
  }

  calibration::StoreBenchConfig config(model::StorePath path, calibration::Mode mode, int K, std::int64_t B,
                                       std::uint32_t seed) const {
    calibration::StoreBenchConfig c;
    c.path = path;
    c.mode = mode;
    c.K = K;
    c.B_bytes = B;
    c.max_bursts = 8;
    c.duration_ns = 20'000;  // periodic: stops after ~20 µs, at least 2 bursts
    c.slot_bytes = kSlotBytes;
    c.slots = kSlots;
    c.pattern_seed = seed;
    return c;
  }

  // Every rank stores to all its peers (producers round-robin; for 2 ranks the same as the ring);
// returns the mismatches its sources left in its window.
  std::int64_t store_to_peer_and_check(model::StorePath path, calibration::Mode mode, int K, std::int64_t B,
                                       std::uint32_t check_seed_offset = 0) {
    XSTAGE_CUDA_CHECK(cudaMemsetAsync(window->local(), 0xFF, window->bytes(), rt.stream()));  // poison
    rt.barrier();
    const int world = rt.world_size();
    auto cfg = config(path, mode, K, B, 100u + static_cast<std::uint32_t>(rt.rank()));
    std::vector<void*> windows(static_cast<std::size_t>(world), nullptr);
    for (int r = 0; r < world; ++r)
      if (r != rt.rank()) windows[static_cast<std::size_t>(r)] = window->peer_pointer(r);
    cfg.producer_region = calibration::remote_regions(windows, cfg, comm::Pairing::all_peers, rt.rank(), world);
    calibration::StoreBench bench(sm_count);
    const auto raw = bench.run(cfg, 1500.0, rt.stream());
    barrier->sync_on_stream(rt.stream());
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(rt.stream()));
    barrier->check();
    // The receiver checks each region against the seed and burst count of the producer that wrote it.
    const auto all = rt.all_gather_bytes(raw.bursts.data(), raw.bursts.size() * sizeof(int));
    std::vector<calibration::ExpectedRegion> expected(static_cast<std::size_t>(K));
    for (int p = 0; p < K; ++p) {
      const int source = comm::producer_source(comm::Pairing::all_peers, rt.rank(), world, p);
      expected[p].seed = 100u + static_cast<std::uint32_t>(source) + check_seed_offset;
      std::memcpy(&expected[p].bursts, all.data() + (static_cast<std::size_t>(source) * K + p) * sizeof(int), sizeof(int));
      EXPECT_GE(expected[p].bursts, mode == calibration::Mode::isolated ? cfg.max_bursts : 2);
    }
    return calibration::count_mismatches(window->local(), cfg, expected, rt.stream());
  }
};

TEST_F(Fixture, StGlobalBurstsArriveIntactAtThePeer) {
  EXPECT_EQ(store_to_peer_and_check(model::StorePath::st_global_16B, calibration::Mode::periodic, 17, 36864), 0);
}

TEST_F(Fixture, TmaBurstsArriveIntactAtThePeer) {
  EXPECT_EQ(store_to_peer_and_check(model::StorePath::tma_bulk, calibration::Mode::periodic, 9, 20496), 0);
}

TEST_F(Fixture, IsolatedAlignedBurstsArriveIntact) {
  EXPECT_EQ(store_to_peer_and_check(model::StorePath::st_global_16B, calibration::Mode::isolated, sm_count, 8192), 0);
  EXPECT_EQ(store_to_peer_and_check(model::StorePath::tma_bulk, calibration::Mode::isolated, sm_count, 8192), 0);
}

TEST_F(Fixture, VerificationDetectsWrongData) {
  // The checker must be able to fail: checking against another seed finds every word wrong.
  const std::int64_t words = 33LL * kSlots * (16384 / 16);  // every producer completes >= 2 bursts
  EXPECT_EQ(store_to_peer_and_check(model::StorePath::st_global_16B, calibration::Mode::periodic, 33, 16384, 7), words);
}

TEST_F(Fixture, StampsAreSane) {
  calibration::StoreBench bench(sm_count);
  for (auto path : {model::StorePath::st_global_16B, model::StorePath::tma_bulk}) {
    auto cfg = config(path, calibration::Mode::periodic, 16, 16384, 1);
    cfg.max_bursts = 1024;
    cfg.duration_ns = 300'000;  // 300 µs of 3 µs gaps: about 90 bursts per producer
    cfg.gap_ns = 3000;
    cfg.producer_region = calibration::local_regions(local, cfg);
    rt.barrier();
    const double mhz = bench.run(cfg, 1500.0, rt.stream()).sm_clock_mhz;  // first launch measures the clock
    const auto raw = bench.run(cfg, mhz, rt.stream());
    EXPECT_GT(raw.sm_clock_mhz, 200.0);
    EXPECT_LT(raw.sm_clock_mhz, 2200.0);
    ASSERT_EQ(raw.bursts.size(), 16u);
    for (int p = 0; p < 16; ++p) {
      const int n = raw.bursts[p];
      EXPECT_GT(n, 60) << "producer " << p;
      EXPECT_LT(n, 110) << "producer " << p << ": the deadline must stop it";
      const std::uint64_t* s = raw.stamps.data() + p * cfg.max_bursts * 3;
      for (int b = 0; b < n; ++b) {
        EXPECT_LT(s[3 * b], s[3 * b + 1]) << "issue must end after it starts (producer " << p << ", burst " << b << ")";
        EXPECT_LE(s[3 * b + 1], s[3 * b + 2]);
        if (b + 1 < n) EXPECT_LE(s[3 * b + 2], s[3 * (b + 1)]) << "the next burst starts after the gap";
      }
    }
    const auto sample = calibration::summarize(cfg, raw, calibration::Destination::local, rt.rank());
    EXPECT_GT(sample.n_bursts, 50);
    EXPECT_GT(sample.gap_ns, 3000.0) << "the measured gap holds the requested spin plus the loop";
    EXPECT_LT(sample.gap_ns, 3400.0);
    EXPECT_NEAR(sample.T_period_ns, sample.T_iss_ns + sample.gap_ns, 1.0);
    EXPECT_GT(sample.T_iss_ns, 0.0);
    EXPECT_LE(sample.T_iss_p10_ns, sample.T_iss_p90_ns);
    EXPECT_NEAR(sample.wall_bytes_per_ns * sample.T_period_ns / (16.0 * 16384), 1.0, 0.1)
        << "wall-clock rate and aggregate period agree";
  }
}

TEST_F(Fixture, InvalidBenchmarkConfigsAreRejected) {
  calibration::StoreBench bench(sm_count);
  auto cfg = config(model::StorePath::st_global_16B, calibration::Mode::periodic, sm_count + 1, 16384, 1);
  cfg.producer_region = calibration::local_regions(local, cfg);
  EXPECT_THROW(bench.run(cfg, 1500.0, rt.stream()), InputError);
  cfg.K = 4;
  EXPECT_THROW(bench.run(cfg, 1500.0, rt.stream()), InputError) << "regions for 133 producers, K = 4";
  cfg.producer_region.resize(4);
  cfg.B_bytes = 1000;  // not a multiple of 16 * 256
  EXPECT_THROW(bench.run(cfg, 1500.0, rt.stream()), InputError);
  cfg.B_bytes = 4096;
  cfg.gap_ns = -1;
  EXPECT_THROW(bench.run(cfg, 1500.0, rt.stream()), InputError);
}

TEST_F(Fixture, DeviceBarrierReportsAMissingPeerInsteadOfHanging) {
  // Rank 0 waits (50 ms bound) for a peer that never arrives: the wait must end and name the peer.
  comm::SignalBarrier lonely(rt, 0.05);
  if (rt.rank() == 0) {
    lonely.sync_on_stream(rt.stream());
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(rt.stream()));
    try {
      lonely.check();
      ADD_FAILURE() << "the barrier did not report the missing peer";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the signal of peer rank[1]"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace xstage

int main(int argc, char** argv) {
  return xstage::test::run_rank_tests(argc, argv, "xstage_gpu_tests", &xstage::g_rt);
}
