// Host helpers around the schedules: the lead D_knee from the model, ring sizing, whole instance
// sequences, and a lockstep simulation of all instances with the kernel's readiness counters.
//
// The simulation is what the CPU tests and docs/MOE.md use to show that a schedule emits every tile
// once, never runs an L2 tile before its row's L1 tiles, and never deadlocks; and how many time units L2
// tiles stall on their dependencies for a given lead D.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/burst_gap.hpp"
#include "model/moe.hpp"
#include "moe/problem/problem.hpp"
#include "moe/schedule/schedule_kind.hpp"
#include "moe/schedule/scheduler.hpp"
#include "moe/schedule/tile_walk.hpp"

namespace xstage::moe {

// D_knee = ceil(b_n·K_SM / (2·h_inter)) (paper §4.2, condition 2), from src/model/moe.hpp. With one CTA
// per tile it is K_SM / P1 rounded up: the rows that K_SM strided L1 cursors span at any moment.
long D_knee_rows(const MoeProblem& problem, int K_SM);

// The lead the kernel uses by default: D_knee, raised to ceil(K_SM / P2) when the L2 stream is the
// narrower one. K_SM strided L2 cursors span K_SM / P2 rows; with D below that, instances ask for L2 rows
// whose L1 tiles other instances have not reached. D_knee covers only the L1 cursors' span K_SM / P1,
// enough when P1 <= P2 (the paper's shapes) but not for few, wide experts (DiT-MoE-like P1 = 72, P2 = 9:
// the lockstep simulation's makespan at D_knee = 2 is 2.9× that at D = 15, where no L2 tile stalls; the
// bench on 2 × H200 measured the layer 2.2× slower at D_knee; docs/MOE.md, "Lead D vs D_knee").
long interleave_lead_rows(const MoeProblem& problem, int K_SM);

// Validated constructors for the kernel's host side. `first_row` is one owner's O_e (E_local + 1
// entries, e.g. Routing::owner_first_row) and must outlive the schedule. D_rows >= 1, Gs >= 1,
// wave_experts in [1, E_local]; anything else is an InputError.
TileStreams make_streams(const MoeProblem& problem, const int* first_row);
InterleavedSchedule make_interleaved_schedule(const MoeProblem& problem, const int* first_row, int D_rows, int Gs);
ExpertWaveSchedule make_expert_wave_schedule(const MoeProblem& problem, const int* first_row, int wave_experts, int Gs,
                                             int l2_lag_waves = 0);

// Ring slots (scheduler rows) each schedule needs to be deadlock-free (proof in docs/MOE.md):
// interleaved: S >= D (an instance runs L1 at most D - 1 rows ahead of its pending L2 row);
// expert-wave: S >= the rows of the largest run of 1 + λ consecutive waves (a wave's L1 tiles and the next λ
// waves' all run before its L2 tiles).
int required_ring_slots(const InterleavedSchedule& schedule);
int required_ring_slots(const ExpertWaveSchedule& schedule);

// Every tile instance g runs, in order.
std::vector<Tile> instance_sequence(const InterleavedSchedule& schedule, int g);
std::vector<Tile> instance_sequence(const ExpertWaveSchedule& schedule, int g);

// Compact form for docs: "L1(0,0) L1(0,1) L2(0,0) ..." = stage(row p, n-block).
std::string format_sequence(const std::vector<Tile>& tiles);

// How evenly an instance spreads its L2 tiles (its combine bursts): the L1 tiles between consecutive L2
// tiles of one instance, over all instances.
struct L2GapStats {
  long l2_pairs = 0;                 // consecutive L2 pairs counted
  double mean_l1_between = 0.0;      // mean L1 tiles between them
  double back_to_back_fraction = 0;  // pairs with no L1 tile between (a burst right after a burst)
};
L2GapStats l2_gap_stats(const std::vector<std::vector<Tile>>& sequences);

struct SimulationConfig {
  int l1_time = 2;       // time units per L1 tile (its K is h)
  int l2_time = 1;       // time units per L2 tile (its K is h_inter)
  int ring_slots = 0;    // S; 0 = one slot per row (a plain buffer)
  long max_time = 10'000'000;
  // simulate_ctas only: each cluster's tile lasts its stage's time × (1 + j·u), u uniform in [-1, 1] from a hash
  // of (seed, cluster, tile), at least one unit (0: every tile of a stage alike, as before).
  double time_jitter = 0.0;
  std::uint64_t seed = 1;
};

struct TileRun {
  Tile tile;
  long start = 0;
  long end = 0;
};

struct SimulationResult {
  bool finished = false;            // every instance ran its whole sequence (no deadlock)
  long makespan = 0;
  long tiles_run = 0;
  long l2_stall_time = 0;           // instance-time units an L2 tile at an instance's head waited for L1
  long l2_stalled_tiles = 0;        // L2 tiles that waited at all
  long l1_stall_time = 0;           // waits of L1 tiles for a ring slot
  bool dependencies_held = true;    // checked against per-row tallies, independently of the counters
  std::string deadlock;             // when !finished: what each blocked instance waits for
  std::vector<std::vector<TileRun>> runs;  // per instance
};

// All Gs instances in lockstep: each time unit, finished tiles bump the counters (l1_done / l2_done per
// ring slot, exactly the kernel's), then every idle instance starts its next tile if the counters allow
// (L2 (p): l1_done[slot] >= P1·(gen+1); L1 (p): l2_done[slot] >= P2·gen), else it stalls. Dispatch is
// taken as complete at time 0. Ends when all finish, or reports a deadlock when nothing can move.
SimulationResult simulate(const InterleavedSchedule& schedule, const SimulationConfig& config);
SimulationResult simulate(const ExpertWaveSchedule& schedule, const SimulationConfig& config);

// The launch as the kernel runs it, CTA by CTA: every CTA walks the kernel's own TileWalk (tile_walk.hpp) over
// the schedule the kernel builds (make_cluster_schedule), and waits with the kernel's own targets: an L2 tile
// for l1_done[slot] >= walk.l1_target(S), an L1 tile of a reused ring slot for l2_done[slot] >=
// slot_free_target(P2); the CTAs of a cluster start each tile together (they share its operand loads), and
// each CTA's finished tile adds 1 to its row's counter, as the kernel's epilogues do. Independently of those
// targets, every start is checked against the true CTA tile counts of each row (every walk enumerated
// first): an L2 tile only after all its row's L1 CTA tiles, an L1 tile only into a slot whose previous row
// finished all its L2 CTA tiles. A target that is too low (the CTA-pair counter bug of 49b5497) shows up as a
// violation; one too high as a deadlock.
struct CtaLaunch {
  MoeProblem problem;          // b_m = 256 for M-pairs (their scheduler rows)
  std::vector<int> expert_rows;  // rows routed to each local expert
  int ctas = 1;
  int cluster_n = 1, cluster_m = 1;
  int D_rows = 1, wave_experts = 1, wave_lag = 0;
  int ring_slots = 0;          // 0 = one slot per row
};
struct CtaSimulationResult {
  bool finished = false;
  long makespan = 0;
  long cta_tiles_run = 0;
  long cta_tiles_expected = 0;   // every CTA walk enumerated
  std::string violation;         // the first start that broke a dependency, empty if none
  std::string deadlock;
  long wait_time = 0;            // Σ over clusters of the time units a cluster's next tile waited for a counter
};
template <class Schedule>
CtaSimulationResult simulate_ctas(const CtaLaunch& launch, const SimulationConfig& config);

// The same simulation, also keeping every CTA's tiles with their start and end (the audit below builds the
// combine injection from it). `timeline` may be null.
struct CtaTileRun {
  Tile tile;
  int half = 0;  // M-pairs: the 128-row half of the scheduler row the CTA ran (else 0)
  long start = 0, end = 0;
};
using CtaTimeline = std::vector<std::vector<CtaTileRun>>;  // per CTA, in walk order
template <class Schedule>
CtaSimulationResult simulate_ctas(const CtaLaunch& launch, const SimulationConfig& config, CtaTimeline* timeline);

// ---------------------------------------------------------------------------------------------
// The MoE audit from the kernel's real injection (docs/MODEL.md, "The MoE audit from the kernel's injection").
// One schedule variant of the kernel, on one owner's rows: the lockstep simulation of every CTA's own walk
// (simulate_ctas) with tile times from a throughput assumption gives each Linear-2 tile's mainloop end; those
// are the combine bursts, which model::simulate_combine runs through the kernel's staging slots, storers and
// the X-Stage (M_X). Beside it, the aligned closed form (model::audit_moe) at K_act = K_SM and at the
// predicted mean K_act.
// ---------------------------------------------------------------------------------------------

struct ScheduleVariant {
  bool interleaved = false;  // else expert-wave
  int wave_lag = 0;          // expert-wave λ: 1 = pipelined waves
  int cluster_n = 1;         // 2: CTA pairs along N (ClusterTiling)
  int cluster_m = 1;         // 2: M-pairs (MixedPairTiling; 256-row scheduler rows)
};
// "expert-wave", "pipelined waves", "interleaved" + " pairs" / " m-pairs".
std::string describe(const ScheduleVariant& variant);
// Whether the kernel runs it (the one pairing rule): CTA pairs need even P1, P2 and K_SM and no half-full
// Linear-2 block, M-pairs also 128 x 256 tiles; not both. K_SM = 0: not known yet (its parity is left out).
// When not, `why` (if given) says why.
bool variant_applies(const MoeProblem& problem, int K_SM, const ScheduleVariant& variant, std::string* why = nullptr);
// CTAs per cluster along N when the caller leaves it open: pairs for the interleaved schedule where they apply,
// else one. Same-run A/B over the grid (docs/MOE.md, "CTA pairs"): pairs made the interleaved schedule
// 4-6% faster on the DeepSeek-V3-like shapes and neutral elsewhere (geomean 0.995), but the waves 1-2% and the
// pipelined waves 2-12% slower: the two CTAs of a pair run in lockstep, so each waits for the other's
// dependencies as well as its own.
int automatic_cluster_n(const MoeProblem& problem, int K_SM, MoeScheduleKind schedule);
// The variants `xstage moe bench` measures with the layer's defaults: expert-wave and pipelined waves on
// single CTAs, interleaved on automatic_cluster_n; with `m_pairs`, the same three on M-pairs (when they apply).
std::vector<ScheduleVariant> kernel_variants(const MoeProblem& problem, int K_SM, bool m_pairs);

// Rows per local expert at the balanced load: T·k / E_local each (the remainder spread one row apiece).
std::vector<int> balanced_expert_rows(const MoeProblem& problem);

struct ScheduleAuditConfig {
  double T_L1_ns = 0.0, T_L2_ns = 0.0;  // mainloop of one CTA tile (model::moe_mainloop_times)
  model::PlatformPoint platform;         // M_X for one tile's remote bytes (the caller evaluates it, e.g. at K_SM)
  double latency_ns = 1000.0;            // T_lat: a fence's return after its bytes drained
  model::StorerCosts storer;             // the storers' own R_S, T_load, T_release (default: never the bound)
  int ticks_per_tile = 64;               // lockstep resolution: the shorter tile lasts this many time units
  double time_jitter = 0.0;              // SimulationConfig::time_jitter: tile times vary by ±this fraction
  std::uint64_t seed = 1;
  int D_rows = 0, wave_experts = 0;      // 0: the kernel's defaults (interleave_lead_rows, wave_size_experts)
  bool keep_tiles = false;               // keep every tile's timing in combine.tiles
  bool simulate_combine = true;          // false: the lockstep part only (combine left empty)
};

struct ScheduleAudit {
  ScheduleVariant variant;
  int D_rows = 0, wave_experts = 0, staging_slots = 1, ctas = 0;
  double tick_ns = 0.0;
  double B_tile_bytes = 0.0;  // remote bytes of a full Linear-2 tile: b_m·b_n·s_out·(P-1)/P
  long l1_tiles = 0, l2_tiles = 0;  // CTA tiles
  // The lockstep simulation: the tile phase, and per CTA (mean) its computing time, the time its next tile
  // waited for a counter (dependency waits: wave boundaries, L1 stragglers), and the rest (done early).
  double makespan_ns = 0.0;
  double busy_ns_per_cta = 0.0;
  double wait_ns_per_cta = 0.0;
  double idle_ns_per_cta = 0.0;
  // The combine from those tiles' mainloop ends.
  model::CombineAudit combine;
  double stall_fraction = 0.0;  // Σ Δt / Σ busy time: what the kernel reports as staging_wait_fraction
  double predicted_ns = 0.0;    // makespan + the mean CTA's Σ Δt (first order: a stall delays its CTA)
  // The aligned closed form with V_t = the remote rows of a tile ((P-1)/P·b_m) × b_n × s_out, at K_act = K_SM
  // and at the predicted mean K_act (absent for P = 1: nothing leaves the rank).
  std::optional<model::MoeAudit> aligned, at_K_act;
};

// Throws InputError for an invalid problem, a variant the kernel does not build, non-positive tile times or
// ticks, an invalid platform point, or expert_rows of the wrong length.
ScheduleAudit audit_schedule(const MoeProblem& problem, const std::vector<int>& expert_rows, int K_SM,
                             const ScheduleVariant& variant, const ScheduleAuditConfig& config);

}  // namespace xstage::moe
