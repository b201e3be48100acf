// GPU tests of the fused MegaMoE layer's call protocol: many calls in a row, a missing peer, a capacity
// overflow. (Correctness on awkward shapes against the float64 reference is `xstage moe check`.) Needs 2+
// GPUs joined by NVLink; run by scripts/gpu/moe.sh, never by ctest (CI has no GPU).
//
// Started without RANK in the environment, the program starts one local rank of itself per visible GPU;
// every rank runs the same tests in the same order so that the collectives inside them pair up.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/runtime.hpp"
#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "rank_test_main.hpp"
#include "moe/layer.hpp"
#include "moe/megamoe.hpp"
#include "moe/reference.hpp"
#include "moe/routing.hpp"

namespace xstage::moe {
namespace {

comm::Runtime* g_rt = nullptr;

MoeProblem tiny_problem(int P, int T, int top_k = 2) {
  MoeProblem pr;
  pr.P_ranks = P;
  pr.E_experts = 4 * P;
  pr.top_k = top_k;
  pr.h_hidden = 256;
  pr.h_inter = 128;
  pr.T_tokens = T;
  validate(pr);
  return pr;
}

std::vector<std::uint16_t> output_bits(const LayerOutput& out, std::int64_t elems) {
  std::vector<std::uint16_t> v(elems);
  XSTAGE_CUDA_CHECK(cudaMemcpy(v.data(), out.out_bf16.get(), elems * 2, cudaMemcpyDeviceToHost));
  return v;
}

double rel_l2(const std::vector<std::uint16_t>& got, const std::vector<float>& want) {
  double e2 = 0, r2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(got[i]) << 16;
    float g;
    std::memcpy(&g, &u, 4);
    e2 += (g - want[i]) * (g - want[i]);
    r2 += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(e2 / r2);
}

// The message of the PlatformError that forward + finish throw, or "" when they do not.
std::string platform_error_of(FusedMoeLayer& layer, const LayerInputs& in, LayerOutput& out, cudaStream_t stream) {
  try {
    layer.forward(in, out, stream);
    layer.finish(stream);
  } catch (const PlatformError& e) {
    return e.what();
  }
  return "";
}

// Thirty calls of one layer: each rank's output matches the reference and is bitwise the same every call
// (the epoch handshakes let a rank start its next call while a slower peer still finishes this one).
TEST(FusedMoeGpu, ManyCallsStayCorrectAndIdentical) {
  comm::Runtime& rt = *g_rt;
  const MoeProblem pr = tiny_problem(rt.world_size(), 300);
  LayerData data;
  data.seed = 11;
  data.topk = skewed_routing(pr, 1.0, 11);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  const std::vector<float> want =
      reference_moe_layer(pr, make_reference_inputs(pr, data), StorageRounding::bf16).out[rt.rank()];
  for (MoeScheduleKind kind : {MoeScheduleKind::expert_wave, MoeScheduleKind::interleaved}) {
    FusedMoeOptions opt;
    opt.schedule = kind;
    FusedMoeLayer layer(pr, rt, opt);
    LayerOutput out = make_layer_output(pr);
    std::vector<std::uint16_t> first;
    for (int call = 0; call < 30; ++call) {
      poison_output(out, rt.stream());
      layer.forward(in, out, rt.stream());
      layer.finish(rt.stream());
      const auto got = output_bits(out, static_cast<std::int64_t>(in.tokens) * pr.h_hidden);
      if (call == 0) {
        EXPECT_LT(rel_l2(got, want), 1e-2) << to_string(kind);
        first = got;
      } else {
        EXPECT_EQ(got, first) << to_string(kind) << " call " << call;
      }
    }
    rt.barrier();
  }
}

// Rank 0 calls the layer alone: its wait for the other ranks' send_ready must end after the bound and name
// the peer; the CUDA context stays usable (the NCCL barrier below runs) and the layer refuses more calls.
TEST(FusedMoeGpu, MissingPeerTimesOutAndNamesIt) {
  comm::Runtime& rt = *g_rt;
  const MoeProblem pr = tiny_problem(rt.world_size(), 64);
  LayerData data;
  data.seed = 5;
  data.topk = balanced_routing(pr, 5);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  FusedMoeOptions opt;
  opt.timeout_s = 0.3;
  FusedMoeLayer layer(pr, rt, opt);
  LayerOutput out = make_layer_output(pr);
  if (rt.rank() == 0) {
    const std::string message = platform_error_of(layer, in, out, rt.stream());
    EXPECT_NE(message.find("timed out after"), std::string::npos) << message;
    EXPECT_NE(message.find("send_ready of peer rank[1]"), std::string::npos) << message;
    EXPECT_THROW(layer.forward(in, out, rt.stream()), PlatformError);
  }
  rt.barrier();
}

// A dispatch capacity below what the routing needs (slack 1.0, top-1, one hot expert taking most tokens of
// every rank): the owning rank reports the overflow with the rows it needed and runs nothing; the other
// ranks time out waiting for its rows.
TEST(FusedMoeGpu, CapacityOverflowIsReportedNotWritten) {
  comm::Runtime& rt = *g_rt;
  const MoeProblem pr = tiny_problem(rt.world_size(), 2048, 1);
  LayerData data;
  data.seed = 9;
  data.topk = skewed_routing(pr, 4.0, 9);
  const Routing routing = build_routing(pr, data.topk);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  FusedMoeOptions opt;
  opt.capacity_slack = 1.0;
  opt.timeout_s = 0.3;
  FusedMoeLayer layer(pr, rt, opt);
  const bool overflows = routing.rows_used(rt.rank()) > layer.window().dispatch.capacity_rows;
  int overflowing_ranks = 0;
  for (int r = 0; r < pr.P_ranks; ++r) overflowing_ranks += routing.rows_used(r) > layer.window().dispatch.capacity_rows;
  ASSERT_GE(overflowing_ranks, 1) << "the routing must overflow some rank for this test to mean anything";
  LayerOutput out = make_layer_output(pr);
  const std::string message = platform_error_of(layer, in, out, rt.stream());
  if (overflows) {
    EXPECT_NE(message.find("dispatch capacity exceeded on rank " + std::to_string(rt.rank())), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(routing.rows_used(rt.rank()))), std::string::npos) << message;
  } else {
    EXPECT_FALSE(message.empty()) << "a rank whose peer ran nothing must not finish quietly";
  }
  rt.barrier();
}

}  // namespace
}  // namespace xstage::moe

int main(int argc, char** argv) {
  return xstage::test::run_rank_tests(argc, argv, "xstage_moe_gpu_tests", &xstage::moe::g_rt);
}
