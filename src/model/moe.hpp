// MegaMoE under the Burst–Gap model: reshape the injection (paper §4.2).
//
// Each Linear-2 tile's epilogue remote-stores its b_m×b_n output rows into the combine buffer; K_act
// producers align on one tile boundary, so the aggregate burst is V = K_act·b_m·b_n·s_out. Under the
// expert-wave schedule consecutive L2 tiles are separated only by one L2 mainloop (G_wave ≈ T_L2); the
// interleaved schedule inserts ready L1 tiles, G_int ≈ T_L2 + (n1/n2)·T_L1 (Eq. 12).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/burst_gap.hpp"
#include "model/platform.hpp"
#include "model/simulator.hpp"

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

// ---------------------------------------------------------------------------------------------
// The combine from the kernel's real injection (docs/MODEL.md, "The MoE audit from the kernel's
// injection"). audit_moe above assumes K_act producers whose Linear-2 epilogues align, periodically, with a
// gap of one mainloop: the worst case. Here every Linear-2 tile is its own burst, at the time the schedule's
// lockstep simulation of the kernel's walk ends its mainloop (moe/schedule/schedule_host.hpp builds the
// input), and each CTA's staging slots and storers follow the kernel's protocol (kernel/storer.cuh):
//   consumers  stage tile i at w_i = max(ready_i, free_{i-S}) with S staging slots (kStagingSlots: 1 at
//              b_n = 256, 2 at b_n = 128); the wait w_i - ready_i is the MMA stall Δt_i (the staging-slot
//              wait the kernel counts) and, by default, delays every later tile of the CTA;
//   storers    start tile i at s_i = max(w_i, released_{i-1}) (one tile at a time, each closed by a system
//              fence and the count releases); after T_load they issue all of its rows, L_i local and B_i remote
//              bytes in proportion, at no more than their own rate R_S per CTA, and the remote bytes at no more
//              than B_ref/T_iss0 per CTA nor than the X-Stage accepts; they free the slot when the last store is
//              issued (free_i); the fence returns at drained_i = free_i + q(free_i)/R + T_lat (the bytes ahead
//              of it drain first, at R; T_lat alone when only local stores were outstanding), and the storers
//              take the next tile at released_i = drained_i + T_release.
// The X-Stage is the fluid model of simulator.hpp: accepted bytes join q, which drains at R; while q = Q,
// acceptance is throttled to R, shared max-min fairly by the CTAs issuing remote bytes.
// Unhindered, a tile's issue takes max((L_i + B_i)/R_S, B_i/(B_ref/T_iss0)): the storer's own bound and the
// X-Stage's issue bound; the larger binds (the storer's at EP = 1, where B_i = 0).
// Per tile: T_RS = free_i - w_i, the sender-visible span the MMA can see (the paper's T_iss0 + ΔT_iss, plus
// T_load and any wait for the previous tile's fence and release), T_fence = drained_i - w_i (what the kernel's
// trace calls T_RS: staged -> fence returned), T_cover = ready_{i+S} - w_i (the MMA work before the slot is
// needed again: the next L2 mainloop under waves, the inserted L1 mainloop(s) and the next L2 mainloop under
// interleaving), and Δt_{i+S} = [T_RS - T_cover]+ (Eq. 15). With S = 1, an idle storer, no throttling and the
// storer never the bound (StorerCosts{}) this is exactly Eq. 15 with T_RS = T_iss0.
// ---------------------------------------------------------------------------------------------

struct CombineBurst {
  double ready_ns = 0.0;     // the tile's mainloop ended: its consumers want a staging slot
  double bytes = 0.0;        // B_i: the bytes its storers send through the X-Stage (rows of other ranks)
  double local_bytes = 0.0;  // L_i: the bytes its storers write to this rank's own combine buffer
};

struct CombineInjection {
  std::vector<std::vector<CombineBurst>> ctas;  // per CTA, its Linear-2 tiles in walk order (ready_ns ascending)
  int staging_slots = 1;                        // S
  double B_ref_bytes = 0.0;                     // the burst T_iss0 is quoted for (a full tile's remote bytes)
  double latency_ns = 1000.0;                   // T_lat: a fence's return after its bytes have drained
  StorerCosts storer;                           // R_S, T_load, T_release (default: never the bound)
  bool propagate_stalls = true;                 // a stall delays the CTA's later tiles
};

// Why a tile's slot was still held when the MMA needed it (the largest part of the span that outlasted
// the cover): T_iss0 alone outlasted the cover (issue); the storer's own time, T_load + (L + B)/R_S, did and
// exceeded T_iss0, or the storers were still releasing the previous tile's counts (storer); its issue was
// throttled at Q with the X-Stage empty when it started, so its own group of aligned bursts overflowed Q
// (capacity); throttled at Q behind bytes of earlier bursts still draining, so the injection outran R (rate); or
// the storers were still waiting for the previous tile's fence, which returns once the bytes ahead of it have
// drained at R (drain).
enum class StallCause { none, issue, capacity, drain, rate, storer };
inline constexpr int kStallCauses = 6;
const char* to_string(StallCause cause);

struct CombineTileTiming {
  int cta = 0;
  double ready_ns = 0.0;   // as given, plus the CTA's earlier stalls when they propagate
  double staged_ns = 0.0;  // w
  double start_ns = 0.0;   // s: the storers begin
  double issued_ns = 0.0;  // free: the last store issued, the slot is free
  double drained_ns = 0.0; // the fence returned
  double stall_ns = 0.0;   // Δt of this tile: staged - ready
  double T_iss0_ns = 0.0;  // its unhindered X-Stage issue time (remote bytes / per-CTA rate)
  double T_S_ns = 0.0;     // the storer's own time for it: T_load + (local + remote bytes) / R_S
  double released_ns = 0.0; // its counts released: the storers take the next tile
  bool throttled = false;  // its issue was throttled at Q
  double q_at_start = 0.0; // bytes in the X-Stage when its storers started
  int draining_at_start = 0;  // K_act as the kernel counts it: CTAs in [start, released), itself included
  double spread_ns = 0.0;     // start minus the earliest start among those draining at once (phase spread)
  StallCause cause = StallCause::none;  // of this tile's stall (attributed to the tile that held the slot)
};

struct CombineAudit {
  std::vector<CombineTileTiming> tiles;  // every tile (CTA by CTA, walk order)
  Distribution K_act;       // draining_at_start over tiles
  Distribution spread_ns;   // phase spread over tiles
  Distribution T_RS_ns;     // staged -> slot free
  Distribution T_fence_ns;  // staged -> drained
  // From the storers' start (the kernel's storers stamp "staged" when they take the tile, after the previous one's
  // release, so these are what its trace calls loads + store issue and T_RS): start -> last store issued, and
  // start -> drained.
  Distribution T_issue_ns;
  Distribution T_drain_ns;
  Distribution T_cover_ns;  // staged -> the MMA needs the slot again (tiles with a successor S later)
  Distribution stall_ns;    // Δt per tile
  double stalled_fraction = 0.0;    // tiles with Δt > 0
  double stall_ns_per_cta = 0.0;    // Σ Δt / CTAs
  double stall_ns_max_cta = 0.0;    // the most one CTA stalled
  double stall_by_cause_ns[kStallCauses] = {}; // Σ Δt by StallCause
  StallCause binds = StallCause::none;  // the cause with the largest Σ Δt (none: no tile stalled)
  double q_peak_bytes = 0.0;
  double throttled_fraction = 0.0;  // of the time from the first ready to the last fence
  double storer_bound_fraction = 0.0;  // tiles whose own storer time T_S exceeded their X-Stage issue time T_iss0
  double injection_bytes_per_ns = 0.0;  // all bytes over that time: the long-run rate against R
  double span_ns = 0.0;                 // first ready -> last fence returned
  std::size_t events = 0;
};

// Throws InputError for an invalid platform point or storer costs (validate_storer_costs), S < 1, B_ref <= 0, a
// negative latency, non-finite or negative ready times or bytes, or ready times that decrease within a CTA.
CombineAudit simulate_combine(const PlatformPoint& p, const CombineInjection& injection);

}  // namespace xstage::model
