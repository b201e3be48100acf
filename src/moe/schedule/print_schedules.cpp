// Prints the worked example of docs/MOE.md: one owner's scheduler rows, each instance's sequence under
// both schedules, L2 gap statistics and a lockstep simulation. Arguments (all optional, in order):
// Gs D wave_experts. The problem is fixed and small on purpose.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "moe/problem/routing.hpp"
#include "moe/schedule/schedule_host.hpp"

using namespace xstage::moe;

int main(int argc, char** argv) try {
  const int Gs = argc > 1 ? std::atoi(argv[1]) : 3;
  const int D = argc > 2 ? std::atoi(argv[2]) : 2;
  const int W = argc > 3 ? std::atoi(argv[3]) : 1;
  // One owner (P = 1) with 3 experts of 200, 0 and 300 rows; h = 384, h_inter = 128, tile 128x128:
  // P1 = 2, P2 = 3; rows: expert 0 -> 2 m-blocks, expert 1 -> none, expert 2 -> 3 m-blocks.
  MoeProblem pr;
  pr.P_ranks = 1; pr.E_experts = 3; pr.top_k = 1; pr.h_hidden = 384; pr.h_inter = 128; pr.T_tokens = 500;
  RankTopK r;
  r.tokens = 500;
  for (int t = 0; t < 500; ++t) r.ids.push_back(t < 200 ? 0 : 2), r.weights.push_back(1.0f);
  const Routing routing = build_routing(pr, {r});
  const int* O = routing.owner_first_row(0);
  std::printf("problem: %s\n", describe(pr).c_str());
  std::printf("expert rows: 200, 0, 300 -> O_e = %d, %d, %d (rows %d); P1 = %d, P2 = %d\n", O[0], O[1], O[2], O[3],
              pr.P1_l1_n_blocks(), pr.P2_l2_n_blocks());
  const InterleavedSchedule inter = make_interleaved_schedule(pr, O, D, Gs);
  const ExpertWaveSchedule wave = make_expert_wave_schedule(pr, O, W, Gs);
  std::vector<std::vector<Tile>> si, sw;
  std::printf("\nexpert-wave, W = %d expert(s) per wave, Gs = %d:\n", W, Gs);
  for (int g = 0; g < Gs; ++g) {
    sw.push_back(instance_sequence(wave, g));
    std::printf("  g=%d: %s\n", g, format_sequence(sw.back()).c_str());
  }
  std::printf("\ninterleaved, D = %d, Gs = %d:\n", D, Gs);
  for (int g = 0; g < Gs; ++g) {
    si.push_back(instance_sequence(inter, g));
    std::printf("  g=%d: %s\n", g, format_sequence(si.back()).c_str());
  }
  const L2GapStats gw = l2_gap_stats(sw), gi = l2_gap_stats(si);
  std::printf("\nL1 tiles between consecutive L2 tiles of an instance: wave mean %.2f (back-to-back %.0f%%), "
              "interleaved mean %.2f (back-to-back %.0f%%)\n",
              gw.mean_l1_between, 100 * gw.back_to_back_fraction, gi.mean_l1_between, 100 * gi.back_to_back_fraction);
  SimulationConfig cfg;  // L1 tile 2 units, L2 tile 1 unit
  const SimulationResult rw = simulate(wave, cfg), ri = simulate(inter, cfg);
  std::printf("simulation (L1 = 2, L2 = 1 time units): wave makespan %ld, L2 stall %ld; interleaved makespan %ld, "
              "L2 stall %ld; both finished: %s\n",
              rw.makespan, rw.l2_stall_time, ri.makespan, ri.l2_stall_time, rw.finished && ri.finished ? "yes" : "no");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
