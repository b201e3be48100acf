// The symmetric window of one MegaMoE rank: every buffer as a type with its offset functions.
//
// All ranks allocate the same window (NCCL symmetric memory), so a byte offset computed here names the
// same buffer on every peer; a kernel adds it to its own base (local access) or to a peer's LSA base
// (remote access). Nothing here holds a pointer: the kernel gets SymmetricWindow by value.
//
//   region          shape                          who writes            who reads
//   tokens          [T][h] elem                    this rank (input)     owners, pulling (dispatch)
//   token scales    [T][h/128] fp32 (fp8 only)     this rank (quantize)  owners, with the rows
//   send_counts     [E] int32                      this rank (route)     owners: pairs per expert
//   send_lists      [E][T] int32                   this rank (route)     owners: which pairs to pull
//   dispatch        [capacity rows][h] elem        this rank's dispatch  L1 TMA loads (A operand)
//   dispatch scales [h/128][capacity rows] fp32    this rank's dispatch  L1 promotion (fp8 only)
//   row_sources     [capacity rows] RowSource      this rank's dispatch  L2 epilogue: where a row goes
//   ring            [S slots][b_m][h_inter] elem   L1 epilogue (SwiGLU)  L2 TMA loads (A operand)
//   ring scales     [h_inter/128][S·b_m] fp32      L1 epilogue (fp8)     L2 promotion (fp8 only)
//   combine         [T][k][h] out                  owners' L2 epilogues  this rank's top-k reduction
//   counters        uint32, see ReadinessCounters  local and remote      bounded spin-waits (zeroed per call)
//   epochs          uint32, see EpochFlags         this rank and peers   call-to-call handshakes (never zeroed)
//
// Alignment: every region starts on 128 B (TMA global addresses and whole cache lines); every row pitch is
// a multiple of 16 B (one st.global.v4 / TMA stride unit). Row pitches are h·elem, h_inter·elem and
// h·s_out, which problem validation already makes multiples of 128 B and 16·s_out B.
//
// fp8 W8A8 (quantize.hpp's conventions): the token rows carry one fp32 scale per 128 columns, stored
// row-major beside them so an owner pulls a row's scales with the row; the owner stores the scales of the
// GEMM A operands (dispatch, ring) MN-major, [K block][row], so the scales of one K block for a tile's rows
// are contiguous. For bf16 the scale regions are empty.
#pragma once

#include <cstdint>

#include "moe/problem/problem.hpp"
#include "moe/problem/routing.hpp"

namespace xstage::moe {

inline constexpr std::int64_t kTmaAlignBytes = 128;   // region bases
inline constexpr std::int64_t kStoreAlignBytes = 16;  // row pitches: st.global.v4, TMA strides
inline constexpr int kScaleBlock = 128;               // fp8: one scale per 128 columns (fp8::kBlock)

struct Region {
  std::int64_t offset_bytes = 0;
  std::int64_t size_bytes = 0;
  XSTAGE_HD constexpr std::int64_t end_bytes() const { return offset_bytes + size_bytes; }
};

// The source rank's own tokens, read by the owners that pull them.
struct TokenBuffer {
  Region region;
  Region scales;                     // fp32 [T][scale_blocks] (fp8; empty for bf16)
  std::int64_t row_pitch_bytes = 0;  // h·elem
  int scale_blocks = 0;              // h/128 (fp8), else 0
  XSTAGE_HD constexpr std::int64_t token_offset(int token) const { return region.offset_bytes + token * row_pitch_bytes; }
  XSTAGE_HD constexpr std::int64_t scale_offset(int token, int k_block) const {
    return scales.offset_bytes + 4LL * (static_cast<std::int64_t>(token) * scale_blocks + k_block);
  }
};

// The source rank's routing as the owners read it: counts[e] pairs go to expert e, and row e of `lists`
// holds their indices t·k + j in token order (the first counts[e] entries; a token picks an expert at most
// once, so a row never holds more than T entries). An owner pulling expert e from source s reads
// lists[e][0 .. counts[e]) on s.
struct SendLists {
  Region counts;  // int32 [E]
  Region lists;   // int32 [E][T]
  int T_tokens = 0;
  XSTAGE_HD constexpr std::int64_t count_offset(int e) const { return counts.offset_bytes + 4LL * e; }
  XSTAGE_HD constexpr std::int64_t pair_offset(int e, int i) const {
    return lists.offset_bytes + 4LL * (static_cast<std::int64_t>(e) * T_tokens + i);
  }
};

// The owner's dispatch buffer: expert-major, each expert's rows contiguous and padded to b_m, so
// scheduler row p is rows [p·b_m, (p+1)·b_m). capacity_rows bounds Σ_e round_up(rows_e, b_m).
struct DispatchBuffer {
  Region region;
  Region row_sources;  // RowSource [capacity rows]
  Region scales;       // fp32 [h/128][capacity rows] (fp8; empty for bf16)
  std::int64_t capacity_rows = 0;
  std::int64_t row_pitch_bytes = 0;  // h·elem
  int b_m = 0;
  XSTAGE_HD constexpr int max_scheduler_rows() const { return static_cast<int>(capacity_rows / b_m); }
  XSTAGE_HD constexpr bool fits(std::int64_t rows_used) const { return rows_used <= capacity_rows; }
  XSTAGE_HD constexpr std::int64_t row_offset(std::int64_t row) const { return region.offset_bytes + row * row_pitch_bytes; }
  XSTAGE_HD constexpr std::int64_t m_block_offset(int p) const { return row_offset(static_cast<std::int64_t>(p) * b_m); }
  XSTAGE_HD constexpr std::int64_t row_source_offset(std::int64_t row) const {
    return row_sources.offset_bytes + row * static_cast<std::int64_t>(sizeof(RowSource));
  }
  XSTAGE_HD constexpr std::int64_t scale_offset(std::int64_t row, int k_block) const {
    return scales.offset_bytes + 4LL * (k_block * capacity_rows + row);
  }
};

// L1 output = L2 input: S slots of one scheduler row each (b_m × h_inter after SwiGLU). Row p lives in
// slot p mod S; L1 tile (p, n) writes columns [n·b_n/2, (n+1)·b_n/2). Reusing a slot waits for every L2
// tile of the row that held it (ReadinessCounters::l2_done); S = all rows makes the ring a plain buffer.
struct IntermediateRing {
  Region region;
  Region scales;                     // fp32 [h_inter/128][S·b_m] (fp8; empty for bf16)
  int slots = 0;                     // S, in scheduler rows
  int b_m = 0;
  std::int64_t row_pitch_bytes = 0;  // h_inter·elem
  std::int64_t l1_tile_cols = 0;     // b_n / 2
  int elem_bytes = 0;
  XSTAGE_HD constexpr int slot(int p) const { return p % slots; }
  // The occupant generation of p in its slot (0 for the first S rows): the epoch the slot counters count.
  XSTAGE_HD constexpr int generation(int p) const { return p / slots; }
  XSTAGE_HD constexpr std::int64_t row_offset(int p, int r) const {
    return region.offset_bytes + (static_cast<std::int64_t>(slot(p)) * b_m + r) * row_pitch_bytes;
  }
  XSTAGE_HD constexpr std::int64_t l1_tile_offset(int p, int n_block) const {
    return row_offset(p, 0) + n_block * l1_tile_cols * elem_bytes;
  }
  XSTAGE_HD constexpr std::int64_t scale_offset(int p, int r, int k_block) const {
    return scales.offset_bytes + 4LL * ((static_cast<std::int64_t>(k_block) * slots + slot(p)) * b_m + r);
  }
};

// The source rank's combine buffer [T][k][h]: pair (t, j) has exactly one writer (the owner of its
// expert), so no atomics on data, and the top-k reduction is a local sum over j.
struct CombineBuffer {
  Region region;
  int top_k = 0;
  std::int64_t row_pitch_bytes = 0;  // h·s_out
  XSTAGE_HD constexpr std::int64_t pair_offset(int pair) const { return region.offset_bytes + pair * row_pitch_bytes; }
  XSTAGE_HD constexpr std::int64_t row_offset(int token, int j) const { return pair_offset(token * top_k + j); }
};

// Device-side readiness counters, uint32, zeroed by their own rank at the start of every call (before it
// publishes send_ready, so no peer can touch them in between). Every wait on them is a bounded spin that
// reports which counter, which value and which target on timeout.
//   dispatch_ready[p]  local: rows of scheduler row p written (pulled rows and padding); L1 (p, *) waits for b_m.
//   l1_done[slot]      local: L1 tiles finished for the slot's rows; L2 (p, *) waits for P1·(gen(p)+1).
//   l2_done[slot]      local: L2 tiles finished; L1 (p, *) with gen(p) >= 1 waits for P2·gen(p) (slot free).
//   combine_arrived    remote adds from owners: combine rows × P2 n-blocks landed (fence, then add);
//                      the top-k reduction waits for (pairs routed)·P2, T_s·k for valid router input.
//   l1_tiles_run,      local: CTA tiles of each stage this rank ran in the call (each CTA adds its count at
//   l2_tiles_run       the end): a cheap invariant the host can check against the routing.
struct ReadinessCounters {
  Region region;
  int max_rows = 0;  // dispatch_ready entries (capacity_rows / b_m)
  int slots = 0;     // ring slots S
  XSTAGE_HD constexpr std::int64_t dispatch_ready(int p) const { return region.offset_bytes + 4LL * p; }
  XSTAGE_HD constexpr std::int64_t l1_done(int slot) const { return region.offset_bytes + 4LL * (max_rows + slot); }
  XSTAGE_HD constexpr std::int64_t l2_done(int slot) const { return region.offset_bytes + 4LL * (max_rows + slots + slot); }
  XSTAGE_HD constexpr std::int64_t combine_arrived() const { return region.offset_bytes + 4LL * (max_rows + 2 * slots); }
  XSTAGE_HD constexpr std::int64_t l1_tiles_run() const { return combine_arrived() + 4; }
  XSTAGE_HD constexpr std::int64_t l2_tiles_run() const { return combine_arrived() + 8; }
  XSTAGE_HD constexpr int count() const { return max_rows + 2 * slots + 3; }
};

// Call epochs (1, 2, ...), monotone for the life of the window, so no rank ever has to reset a flag a peer
// writes:
//   send_ready         this rank: its tokens and send lists of call `epoch` are published.
//   peer_finished[s]   written by peer s: s has finished every read of this rank's call-`epoch` data, so
//                      the next call may overwrite it.
struct EpochFlags {
  Region region;
  int P_ranks = 0;
  XSTAGE_HD constexpr std::int64_t send_ready() const { return region.offset_bytes; }
  XSTAGE_HD constexpr std::int64_t peer_finished(int s) const { return region.offset_bytes + 4LL * (1 + s); }
  XSTAGE_HD constexpr int count() const { return 1 + P_ranks; }
};

// Targets of the waits above, in one place (the kernel and the CPU simulation share them).
XSTAGE_HD constexpr std::uint32_t l1_done_target(int p, int slots, int P1) { return static_cast<std::uint32_t>(P1) * (p / slots + 1); }
XSTAGE_HD constexpr std::uint32_t slot_free_target(int p, int slots, int P2) { return static_cast<std::uint32_t>(P2) * (p / slots); }

struct SymmetricWindow {
  TokenBuffer tokens;
  SendLists send;
  DispatchBuffer dispatch;
  IntermediateRing ring;
  CombineBuffer combine;
  ReadinessCounters counters;
  EpochFlags epochs;
  std::int64_t total_bytes = 0;
};

// Pure arithmetic: lays the regions out in the order of the table above, each on a 128 B boundary.
// capacity_rows must be a multiple of b_m and ring_slots >= 1 (plan_window checks both on the host).
XSTAGE_HD inline Region take_region(std::int64_t& at, std::int64_t bytes) {
  const Region r{at, bytes};
  at = round_up(at + bytes, kTmaAlignBytes);
  return r;
}

XSTAGE_HD inline SymmetricWindow window_layout(const MoeProblem& pr, std::int64_t capacity_rows, int ring_slots) {
  SymmetricWindow w;
  std::int64_t at = 0;
  const std::int64_t T = pr.T_tokens, k = pr.top_k, eb = pr.elem_bytes();
  const bool fp8 = pr.dtype == DType::fp8_e4m3;
  w.tokens.row_pitch_bytes = pr.h_hidden * eb;
  w.tokens.region = take_region(at, T * w.tokens.row_pitch_bytes);
  w.tokens.scale_blocks = fp8 ? pr.h_hidden / kScaleBlock : 0;
  w.tokens.scales = take_region(at, 4LL * T * w.tokens.scale_blocks);
  w.send.T_tokens = pr.T_tokens;
  w.send.counts = take_region(at, 4LL * pr.E_experts);
  w.send.lists = take_region(at, 4LL * pr.E_experts * T);
  w.dispatch.capacity_rows = capacity_rows;
  w.dispatch.row_pitch_bytes = pr.h_hidden * eb;
  w.dispatch.b_m = pr.b_m;
  w.dispatch.region = take_region(at, capacity_rows * w.dispatch.row_pitch_bytes);
  w.dispatch.row_sources = take_region(at, capacity_rows * static_cast<std::int64_t>(sizeof(RowSource)));
  w.dispatch.scales = take_region(at, fp8 ? 4LL * (pr.h_hidden / kScaleBlock) * capacity_rows : 0);
  w.ring.slots = ring_slots;
  w.ring.b_m = pr.b_m;
  w.ring.row_pitch_bytes = pr.h_inter * eb;
  w.ring.l1_tile_cols = pr.l1_out_cols_per_tile();
  w.ring.elem_bytes = static_cast<int>(eb);
  w.ring.region = take_region(at, static_cast<std::int64_t>(ring_slots) * pr.b_m * w.ring.row_pitch_bytes);
  w.ring.scales = take_region(at, fp8 ? 4LL * (pr.h_inter / kScaleBlock) * ring_slots * pr.b_m : 0);
  w.combine.top_k = pr.top_k;
  w.combine.row_pitch_bytes = static_cast<std::int64_t>(pr.h_hidden) * pr.out_bytes;
  w.combine.region = take_region(at, T * k * w.combine.row_pitch_bytes);
  w.counters.max_rows = w.dispatch.max_scheduler_rows();
  w.counters.slots = ring_slots;
  w.counters.region = take_region(at, 4LL * w.counters.count());
  w.epochs.P_ranks = pr.P_ranks;
  w.epochs.region = take_region(at, 4LL * w.epochs.count());
  w.total_bytes = at;
  return w;
}

// ---- host side -------------------------------------------------------------------------------------

// Rows an owner can ever need: every token of every source routed here min(k, E_local) times, plus
// b_m - 1 padding rows per local expert. Never overflows, but large (DeepSeek-V3 shape, P = 8: 2.3 GiB).
std::int64_t worst_case_capacity_rows(const MoeProblem& problem);
// The balanced load (T·k rows per owner: P·T·k pairs over P owners) times `slack` (>= 1), plus the
// padding bound E_local·(b_m - 1), rounded up to b_m. Skewed routing can exceed it: check_capacity says so and by how much.
std::int64_t expected_capacity_rows(const MoeProblem& problem, double slack);

// Validates and lays out the window. Throws InputError for a capacity that is not a positive multiple of
// b_m or a ring with no slots.
SymmetricWindow plan_window(const MoeProblem& problem, std::int64_t capacity_rows, int ring_slots);

// Throws InputError naming the first owner whose dispatched rows (padded to b_m per expert) exceed the
// dispatch capacity, with the rows it needs and the worst-case capacity that would always fit.
void check_capacity(const Routing& routing, const SymmetricWindow& window);

}  // namespace xstage::moe

namespace xstage::moe {

// Linear-1 weight rows as the kernel stores them: tile-interleaved, so that one L1 tile of b_n output
// columns holds b_n/2 gate and the matching b_n/2 up columns and SwiGLU runs in that tile's epilogue.
// Kernel column c of n-block n is logical W1 row (gate rows [0, h_inter), up rows [h_inter, 2·h_inter)):
XSTAGE_HD constexpr int l1_logical_row(int n_block, int c, int b_n, int h_inter) {
  return c < b_n / 2 ? n_block * (b_n / 2) + c : h_inter + n_block * (b_n / 2) + (c - b_n / 2);
}

}  // namespace xstage::moe
