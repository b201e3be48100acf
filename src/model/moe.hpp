// MegaMoE under the Burst–Gap model: reshape the injection (paper §4.2, BRIEF §3).
//
// Each Linear-2 tile's epilogue remote-stores its b_m×b_n output rows into the combine buffer; K_act
// producers align on one tile boundary, so the aggregate burst is V = K_act·b_m·b_n·s_out. Under the
// expert-wave schedule consecutive L2 tiles are separated only by one L2 mainloop (G_wave ≈ T_L2); the
// interleaved schedule inserts ready L1 tiles, G_int ≈ T_L2 + (n1/n2)·T_L1 (Eq. 12).
#pragma once

#include <optional>
#include <string>

#include "model/burst_gap.hpp"

namespace xstage::model {

// Interleaving test (Eq. 12–14) for n2 L2 and n1 L1 tiles per steady cycle.
struct InterleaveTest {
  double G_wave_ns = 0.0;                        // T_L2
  double G_int_ns = 0.0;                         // T_L2 + (n1/n2)·T_L1 (Eq. 12)
  double dT_iss_wave_ns = 0.0;                   // ΔT_iss at G_wave (Eq. 9)
  double dT_iss_int_ns = 0.0;                    // [ΔT_iss_wave − (n1/n2)·T_L1]+ (Eq. 13)
  double injection_rate_int_bytes_per_ns = 0.0;  // n2·V / (n2(T_iss0 + T_L2) + n1·T_L1)
  bool sufficient = false;                       // Eq. 14: that rate ≤ R, i.e. G_int ≥ G*
};
InterleaveTest interleave_test(const PlatformPoint& p, double V_bytes, double T_L1_ns, double T_L2_ns,
                               double n1, double n2);

// Anti-starvation lead of the interleaved scheduler, in scheduler rows (§4.2, condition 2):
//   D_knee = ceil(b_n·K_SM / (2·h_inter)).
// It comes from cross-SM data readiness, not from the X-Stage, so no M_X parameter appears.
long anti_starvation_lead_rows(int b_n, int K_SM, int h_inter);

// Sender-visible remote-store span of one epilogue (§4.2): T_RS ≈ T_iss0 + ΔT_iss(G).
double remote_store_span_ns(const PlatformPoint& p, double V_bytes, double G_ns);

// Per-tile critical-path stall through double-buffered staging (Eq. 15): Δt = [T_RS − T_cover]+.
double critical_path_stall_ns(double T_RS_ns, double T_cover_ns);

// Mainloop times of one tile from GEMM shapes and a whole-GPU throughput assumption:
// L1 tile b_m×b_n reduces over h (2·b_m·b_n·h FLOP), L2 tile b_m×b_n reduces over h_inter.
struct MoeMainloopTimes {
  double T_L1_ns = 0.0;
  double T_L2_ns = 0.0;
};
MoeMainloopTimes moe_mainloop_times(int b_m, int b_n, int h, int h_inter, double tflops, int K_SM);

// The natural tile mix per scheduler row: L1 has 2·h_inter/b_n N-tiles, L2 has h/b_n, so
// n1 : n2 = 2·h_inter : h.
struct TileMix {
  double n1 = 1.0;
  double n2 = 1.0;
};
TileMix natural_tile_mix(int h, int h_inter);

struct MoeKernel {
  int b_m = 0;                   // tile rows (tokens)
  int b_n = 0;                   // tile columns
  int out_bytes = 2;             // s_out, bytes per combine element (bf16 = 2)
  int K_act = 0;                 // producers whose L2 tile boundaries align in one burst
  double T_L1_ns = 0.0;          // Linear-1 mainloop per tile
  double T_L2_ns = 0.0;          // Linear-2 mainloop per tile
  TileMix mix;                   // n1 : n2 per steady cycle
  int K_SM = 0;                  // SMs running the persistent kernel (for D_knee)
  std::optional<int> h_inter;    // expert intermediate size; D_knee needs it
};

struct MoeAudit {
  MoeKernel kernel;
  double B_bytes = 0.0;    // V_t: combine bytes of one L2 tile on one producer
  double V_bytes = 0.0;    // K_act·V_t
  DesignTest wave;         // Eq. 10 at G = G_wave
  DesignTest interleaved;  // Eq. 10 at G = G_int
  InterleaveTest interleave;
  // Eq. 15 per L2 tile. Wave: covered by the next L2 mainloop. Interleaved: by the inserted L1 mainloop
  // for min(n1, n2) of every n2 L2 tiles, by an L2 mainloop for the rest; the mean over the cycle.
  double T_RS_wave_ns = 0.0;
  double stall_wave_ns = 0.0;
  double T_RS_int_ns = 0.0;
  double stall_int_ns = 0.0;
  std::optional<long> D_knee_rows;
  Verdict verdict = Verdict::piggyback;
  std::string action;
};

// Throws InputError for non-positive shapes, times or mix.
MoeAudit audit_moe(const PlatformPoint& p, const MoeKernel& kernel);

}  // namespace xstage::model
