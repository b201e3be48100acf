// GPU tests of the fused MegaMoE layer's call protocol: many calls in a row, CUDA-graph capture and replay
// (which also proves a call never synchronises the host: capture fails on any synchronising call), bad
// router input (dropped, reported, and the layer goes on), a timeout that ends the layer, a missing peer, a
// capacity overflow. (Correctness on awkward shapes against the float64 reference is `xstage moe check`.)
// Runs on 1 GPU (P = 1) or more joined by NVLink; the peer tests need 2.
// Run by scripts/gpu/moe.sh, never by ctest (CI has no GPU).
//
// Started without RANK in the environment, the program starts one local rank of itself per visible GPU;
// every rank runs the same tests in the same order so that the collectives inside them pair up.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/runtime.hpp"
#include "common/cuda_check.hpp"
#include "common/device_facts.hpp"
#include "common/error.hpp"
#include "moe/harness/layer.hpp"
#include "moe/megamoe.hpp"
#include "moe/plan.hpp"
#include "moe/problem/routing.hpp"
#include "moe/reference/reference.hpp"
#include "rank_test_main.hpp"

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

// The plan of a layer of `problem` on this rank's GPU with a named schedule (moe/plan.hpp).
MoeLayerPlan plan_for(const MoeProblem& problem, const comm::Runtime& rt, const char* schedule, double timeout_s = 10.0,
                      double capacity_slack = 0.0) {
  MoeLayerRequest r;
  r.problem = problem;
  r.set_schedule(schedule);
  r.timeout_s = timeout_s;
  r.capacity_slack = capacity_slack;
  return plan_layer(r, device_facts(rt.device()));
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

// One call, waited for: the message of the error of type E that poll() throws, or "" when there is none.
template <class E = PlatformError>
std::string error_of(MoeLayerImpl& layer, const MoeLayerViews& views, cudaStream_t stream) {
  try {
    layer.enqueue(views, stream);
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
    layer.poll();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

void run_and_wait(MoeLayerImpl& layer, const MoeLayerViews& views, cudaStream_t stream) {
  layer.enqueue(views, stream);
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream));
  layer.poll();
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
  for (const char* kind : {"expert_wave", "interleaved"}) {
    FusedMoeLayer layer(plan_for(pr, rt, kind), rt);
    LayerOutput out = make_layer_output(pr);
    std::vector<std::uint16_t> first;
    for (int call = 0; call < 30; ++call) {
      poison_output(out, rt.stream());
      run_and_wait(layer, in.views(out), rt.stream());
      const auto got = output_bits(out, static_cast<std::int64_t>(in.tokens) * pr.h_hidden);
      if (call == 0) {
        EXPECT_LT(rel_l2(got, want), 1e-2) << kind;
        first = got;
        // Every CTA tile ran once: this rank's scheduler rows times P1 (Linear-1) and P2 (Linear-2).
        const Routing routing = build_routing(pr, data.topk);
        const int rows = routing.scheduler_rows(rt.rank());
        const auto tiles = layer.read_tiles_run();
        EXPECT_EQ(tiles.l1, static_cast<std::uint32_t>(rows * pr.P1_l1_n_blocks())) << kind;
        EXPECT_EQ(tiles.l2, static_cast<std::uint32_t>(rows * pr.P2_l2_n_blocks())) << kind;
      } else {
        EXPECT_EQ(got, first) << kind << " call " << call;
      }
    }
    rt.barrier();
  }
}

// Rank 0 calls the layer alone: its wait for the other ranks' send_ready must end after the bound and name
// the peer; the CUDA context stays usable (the NCCL barrier below runs) and the layer refuses more calls.
TEST(FusedMoeGpu, MissingPeerTimesOutAndNamesIt) {
  comm::Runtime& rt = *g_rt;
  if (rt.world_size() < 2) GTEST_SKIP() << "needs a peer";
  const MoeProblem pr = tiny_problem(rt.world_size(), 64);
  LayerData data;
  data.seed = 5;
  data.topk = balanced_routing(pr, 5);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  FusedMoeLayer layer(plan_for(pr, rt, "interleaved", 0.3), rt);
  LayerOutput out = make_layer_output(pr);
  if (rt.rank() == 0) {
    const std::string message = error_of(layer, in.views(out), rt.stream());
    EXPECT_NE(message.find("timed out after"), std::string::npos) << message;
    EXPECT_NE(message.find("send_ready of peer rank[1]"), std::string::npos) << message;
    EXPECT_TRUE(layer.ended());
    EXPECT_THROW(layer.enqueue(in.views(out), rt.stream()), PlatformError);
  }
  rt.barrier();
}

// A dispatch capacity below what the routing needs (slack 1.0, top-1, one hot expert taking most tokens of
// every rank): the owning rank reports the overflow with the rows it needed and runs nothing; the other
// ranks time out waiting for its rows.
TEST(FusedMoeGpu, CapacityOverflowIsReportedNotWritten) {
  comm::Runtime& rt = *g_rt;
  if (rt.world_size() < 2) GTEST_SKIP() << "one rank never receives more than its balanced share plus padding";
  const MoeProblem pr = tiny_problem(rt.world_size(), 2048, 1);
  LayerData data;
  data.seed = 9;
  data.topk = skewed_routing(pr, 4.0, 9);
  const Routing routing = build_routing(pr, data.topk);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  FusedMoeLayer layer(plan_for(pr, rt, "interleaved", 0.3, 1.0), rt);
  const bool overflows = routing.rows_used(rt.rank()) > layer.window().dispatch.capacity_rows;
  int overflowing_ranks = 0;
  for (int r = 0; r < pr.P_ranks; ++r) overflowing_ranks += routing.rows_used(r) > layer.window().dispatch.capacity_rows;
  ASSERT_GE(overflowing_ranks, 1) << "the routing must overflow some rank for this test to mean anything";
  LayerOutput out = make_layer_output(pr);
  const std::string message = error_of(layer, in.views(out), rt.stream());
  if (overflows) {
    EXPECT_NE(message.find("dispatch capacity exceeded on rank " + std::to_string(rt.rank())), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(routing.rows_used(rt.rank()))), std::string::npos) << message;
  } else {
    EXPECT_FALSE(message.empty()) << "a rank whose peer ran nothing must not finish quietly";
  }
  rt.barrier();
}

// One call captured in a CUDA graph (global capture mode: any host-synchronising call inside the call fails
// the capture) and replayed 100 times, the output poisoned before each replay: every replay equals the eager
// call bit for bit, and each counts as a call on the device (the call counter lives there, so the peers'
// handshakes compare against a fresh epoch every replay; a counter baked into the kernel's parameters would
// replay the same epoch, and with peers a replay could read their buffers while they are being rewritten).
TEST(FusedMoeGpu, GraphReplaysMatchEagerCallsAndCountAsCalls) {
  comm::Runtime& rt = *g_rt;
  const MoeProblem pr = tiny_problem(rt.world_size(), 300);
  LayerData data;
  data.seed = 23;
  data.topk = skewed_routing(pr, 1.0, 23);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  const std::int64_t elems = static_cast<std::int64_t>(in.tokens) * pr.h_hidden;
  for (const char* kind : {"expert_wave", "interleaved"}) {
    FusedMoeLayer layer(plan_for(pr, rt, kind), rt);
    LayerOutput out = make_layer_output(pr);
    poison_output(out, rt.stream());
    run_and_wait(layer, in.views(out), rt.stream());
    const std::vector<std::uint16_t> eager = output_bits(out, elems);

    cudaStream_t capture = nullptr;
    XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    XSTAGE_CUDA_CHECK(cudaStreamBeginCapture(capture, cudaStreamCaptureModeGlobal));
    layer.enqueue(in.views(out), capture);
    XSTAGE_CUDA_CHECK(cudaStreamEndCapture(capture, &graph));
    XSTAGE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    constexpr int kReplays = 100;
    int identical = 0;
    for (int i = 0; i < kReplays; ++i) {
      poison_output(out, capture);
      rt.barrier();  // the ranks' replays pair up like eager calls do
      XSTAGE_CUDA_CHECK(cudaGraphLaunch(exec, capture));
      XSTAGE_CUDA_CHECK(cudaStreamSynchronize(capture));
      layer.poll();
      identical += output_bits(out, elems) == eager;
    }
    EXPECT_EQ(identical, kReplays) << kind;
    EXPECT_EQ(layer.calls_done(), 1u + kReplays) << kind;
    XSTAGE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    XSTAGE_CUDA_CHECK(cudaGraphDestroy(graph));
    XSTAGE_CUDA_CHECK(cudaStreamDestroy(capture));
    rt.barrier();
  }
}

// Bad router input on rank 0 (an expert id outside [0, E), -1, then an expert repeated in one token's top-k),
// each between good calls of one layer: poll() names the token and the id as an InputError, within well under
// the device timeout (the route kernel drops the pair; the owners and the reduction agree on what is stored);
// the bad call's output is the layer without that pair; the next good call is bit for bit the first one; no
// other rank hears of it.
TEST(FusedMoeGpu, BadRouterIdsAreDroppedReportedAndTheLayerGoesOn) {
  comm::Runtime& rt = *g_rt;
  const MoeProblem pr = tiny_problem(rt.world_size(), 64);
  LayerData data;
  data.seed = 31;
  data.topk = balanced_routing(pr, 31);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  const std::int64_t elems = static_cast<std::int64_t>(in.tokens) * pr.h_hidden;
  // What every rank computes when token 3 of rank 0 loses its second pair (weight 0: it adds nothing).
  LayerData without = data;
  without.topk[0].weights[3 * pr.top_k + 1] = 0.0f;
  const std::vector<float> want_without =
      reference_moe_layer(pr, make_reference_inputs(pr, without), StorageRounding::bf16).out[rt.rank()];
  FusedMoeLayer layer(plan_for(pr, rt, "interleaved", 5.0), rt);
  LayerOutput out = make_layer_output(pr);
  run_and_wait(layer, in.views(out), rt.stream());
  const std::vector<std::uint16_t> good = output_bits(out, elems);
  struct Case {
    std::int32_t id;  // what token 3 picks as its second expert on rank 0; INT32_MIN: its first expert again
    const char* expect;
  };
  const Case cases[] = {{pr.E_experts + 7, "token 3 picks expert "}, {-1, "token 3 picks expert -1, outside [0, "}, {INT32_MIN, "more than once"}};
  std::int32_t* bad_slot = in.topk_ids.get<std::int32_t>() + 3 * pr.top_k + 1;
  for (const Case& c : cases) {
    if (rt.rank() == 0) {
      const std::int32_t id = c.id == INT32_MIN ? data.topk[0].ids[3 * pr.top_k] : c.id;
      XSTAGE_CUDA_CHECK(cudaMemcpy(bad_slot, &id, sizeof id, cudaMemcpyHostToDevice));
    }
    poison_output(out, rt.stream());
    rt.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const std::string message = error_of<InputError>(layer, in.views(out), rt.stream());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 2.0) << "the call must not wait for the timeout: " << message;
    if (rt.rank() == 0) {
      EXPECT_NE(message.find("bad router input on rank 0: 1 (token, expert) pair dropped"), std::string::npos) << message;
      EXPECT_NE(message.find(c.expect), std::string::npos) << message;
      EXPECT_EQ(message.find("timed out"), std::string::npos) << message;
      XSTAGE_CUDA_CHECK(cudaMemcpy(bad_slot, &data.topk[0].ids[3 * pr.top_k + 1], sizeof(std::int32_t), cudaMemcpyHostToDevice));
    } else {
      EXPECT_EQ(message, "") << "rank " << rt.rank() << " got rank 0's router error";
    }
    EXPECT_LT(rel_l2(output_bits(out, elems), want_without), 1e-2) << c.expect;
    EXPECT_FALSE(layer.ended());
    layer.poll();  // reported once
    poison_output(out, rt.stream());
    rt.barrier();
    EXPECT_EQ(error_of<Error>(layer, in.views(out), rt.stream()), "") << "the good call after " << c.expect;
    EXPECT_EQ(output_bits(out, elems), good) << "the good call after " << c.expect;
    rt.barrier();
  }
}

// A device-side wait that times out ends the layer. A bound of 1 us is shorter than any wait that does not
// succeed at its first try (the first rows' dispatch alone takes longer), so the call fails on every rank:
// poll() names the timeout and says how to recover, the layer refuses further calls, and a new layer on the
// same runtime is correct (the CUDA context stays usable).
TEST(FusedMoeGpu, ATimeoutEndsTheLayerAndANewOneIsCorrect) {
  comm::Runtime& rt = *g_rt;
  const MoeProblem pr = tiny_problem(rt.world_size(), 300);
  LayerData data;
  data.seed = 41;
  data.topk = skewed_routing(pr, 1.0, 41);
  const LayerInputs in = make_layer_inputs(pr, rt.rank(), data, rt.stream());
  LayerOutput out = make_layer_output(pr);
  {
    FusedMoeLayer layer(plan_for(pr, rt, "interleaved", 1e-6), rt);
    const std::string message = error_of(layer, in.views(out), rt.stream());
    EXPECT_NE(message.find("timed out after 1e-06 s"), std::string::npos) << message;
    EXPECT_NE(message.find("the layer has ended"), std::string::npos) << message;
    EXPECT_NE(message.find("destroy it on every rank and build a new one"), std::string::npos) << message;
    EXPECT_TRUE(layer.ended());
    try {
      layer.enqueue(in.views(out), rt.stream());
      ADD_FAILURE() << "an ended layer must refuse calls";
    } catch (const PlatformError& e) {
      EXPECT_NE(std::string(e.what()).find("an earlier call failed"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("build a new one"), std::string::npos) << e.what();
    }
    rt.barrier();
  }
  const std::vector<float> want = reference_moe_layer(pr, make_reference_inputs(pr, data), StorageRounding::bf16).out[rt.rank()];
  FusedMoeLayer layer(plan_for(pr, rt, "interleaved"), rt);
  poison_output(out, rt.stream());
  run_and_wait(layer, in.views(out), rt.stream());
  EXPECT_LT(rel_l2(output_bits(out, static_cast<std::int64_t>(in.tokens) * pr.h_hidden), want), 1e-2);
  rt.barrier();
}

}  // namespace
}  // namespace xstage::moe

int main(int argc, char** argv) {
  return xstage::test::run_rank_tests(argc, argv, "xstage_moe_gpu_tests", &xstage::moe::g_rt, /*min_gpus=*/1);
}
