// Ulysses sequence parallelism over P ranks as index math (paper §4.3), shared by the fused epilogue, the
// layer's host side and the CPU tests. Plain C++ (XSTAGE_HD).
//
// Rank r holds rows [r·Ms, (r+1)·Ms) of the sequence for all H heads ("sequence-sharded", [B][Ms][H][d]), with
// Ms = M / P. The pre-attention all-to-all makes it hold all M rows of heads [r·Hp, (r+1)·Hp) ("head-sharded",
// [B][M][Hp][d], Hp = H / P); attention runs there; the post-attention all-to-all sends row m of local head
// h back to rank m / Ms, as its row m mod Ms and head r·Hp + h. The fused epilogue does that last step from
// each finished output tile: a tile of b_m rows lands on one rank, or straddles two or more when Ms is not a
// multiple of b_m.
#pragma once

#include <cstdint>

#include "attention/tile_shapes.hpp"
#include "comm/peer_map.hpp"
#include "common/host_device.hpp"

namespace xstage::attention {

struct UlyssesShape {
  int batch = 1;
  int seqlen = 0;   // M, the whole sequence
  int heads = 0;    // H, all heads
  int head_dim = 128;
  int ranks = 1;    // P

  XSTAGE_HD constexpr int shard_rows() const { return seqlen / ranks; }   // Ms
  XSTAGE_HD constexpr int local_heads() const { return heads / ranks; }   // Hp
  // Where row m of the sequence lives, and its row there.
  XSTAGE_HD constexpr int owner_of_row(int m) const { return m / shard_rows(); }
  XSTAGE_HD constexpr int row_in_owner(int m) const { return m - owner_of_row(m) * shard_rows(); }
  // Global head of local head h on rank r (head-sharded).
  XSTAGE_HD constexpr int global_head(int r, int h) const { return r * local_heads() + h; }
  // Row-heads a rank receives per call in the post-attention all-to-all: all of its Ms rows, every head,
  // every batch (from every rank including itself): what its arrival counter grows by per call.
  XSTAGE_HD constexpr std::uint32_t arrivals_per_call() const {
    return static_cast<std::uint32_t>(batch) * static_cast<std::uint32_t>(shard_rows()) * static_cast<std::uint32_t>(heads);
  }
};

// The part of an output tile (rows [m0, m0 + rows) of the sequence) that goes to one rank.
struct RowSegment {
  int rank = 0;
  int first = 0;  // first row, of the sequence
  int rows = 0;
};

// Calls f(RowSegment) for the tile rows [m0, min(m0 + b_m, M)) split by owner, in rank order (a tile spans at most
// ceil(b_m / Ms) + 1 ranks). The fused epilogue counts each rank's rows this way, with no array of segments in
// registers; its TMA store takes the first segment (the owner of row m0, up to the end of its shard).
template <class F>
XSTAGE_HD inline void for_each_tile_segment(const UlyssesShape& s, int m0, int b_m, F&& f) {
  const int end = m0 + b_m < s.seqlen ? m0 + b_m : s.seqlen;
  for (int m = m0; m < end;) {
    const int r = s.owner_of_row(m);
    const int stop = (r + 1) * s.shard_rows() < end ? (r + 1) * s.shard_rows() : end;
    f(RowSegment{r, m, stop - m});
    m = stop;
  }
}

// The inputs of the path that hides both all-to-alls (UlyssesPath::fused_both), as chunks of one head: source rank j's
// Ms rows of one batch are cut into `per_source` chunks of `rows` rows (its last one may be shorter). Chunk c of source
// j covers the sequence rows [j·Ms + c·rows, min(j·Ms + (c+1)·rows, (j+1)·Ms)); its Q, K and V rows of one of the
// receiver's Hp heads arrive together, counted on the arrival flag flags[flag(b, h, in_batch(j, c))], so the attention
// kernel waits per chunk and head, not per tile, and a wave of tiles on one head needs that head's inputs only. At
// most 64 chunks per batch: the kernel's producer keeps one bit per chunk of its current (batch, head).
//
// The pusher moves a chunk in units: each of its three tensors (the chunk's rows of one head, row_pieces 16-byte
// pieces a row, contiguous in the receiver's head-major inbox [B][Hp][M][d]) cut into runs of kPushUnitPieces pieces,
// the last run of a tensor possibly shorter. Every unit adds 1 to the chunk's flag (its warp adds its units of the
// chunk at once), so a chunk is there when its flag reaches arrival_target(c): the one number the pusher and the
// kernel's waits share.
inline constexpr int kPushUnitPieces = 256;  // one warp's 16-byte pieces per round: 32 lanes x 8 loads in flight

struct InputChunks {
  int shard_rows = 1;  // Ms
  int ranks = 1;       // P
  int heads = 1;       // Hp, the receiver's heads
  int rows = 1;
  int per_source = 1;
  int row_pieces = 1;  // 16-byte pieces of one row of one head: d·2 / 16

  XSTAGE_HD constexpr int per_batch() const { return ranks * per_source; }
  // Every chunk of one (batch, head), as the bits of the kernel's producer (InputWaits::arrived).
  XSTAGE_HD constexpr std::uint64_t all_chunks() const { return per_batch() >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << per_batch()) - 1; }
  // Chunk c of source j as an index within its batch, and that chunk's flag for head h of batch b.
  XSTAGE_HD constexpr int in_batch(int j, int c) const { return j * per_source + c; }
  XSTAGE_HD constexpr int flag(int b, int h, int index_in_batch) const { return (b * heads + h) * per_batch() + index_in_batch; }
  XSTAGE_HD constexpr int flags(int batch) const { return batch * heads * per_batch(); }  // of one receiver
  // The chunk that holds sequence row m (index within its batch).
  XSTAGE_HD constexpr int index_of_row(int m) const {
    const int j = m / shard_rows;
    return in_batch(j, (m - j * shard_rows) / rows);
  }
  // Whose flag flags[f] is (a timeout names the rank that did not push).
  struct FlagOwner {
    int batch, head, source, chunk;
  };
  XSTAGE_HD constexpr FlagOwner owner_of_flag(int f) const {
    const int g = f % per_batch(), bh = f / per_batch();
    return {bh / heads, bh % heads, g / per_source, g % per_source};
  }
  // The first row after the chunk that holds row m.
  XSTAGE_HD constexpr int next_chunk_row(int m) const {
    const int j = m / shard_rows, end_of_shard = (j + 1) * shard_rows;
    const int next = j * shard_rows + ((m - j * shard_rows) / rows + 1) * rows;
    return next < end_of_shard ? next : end_of_shard;
  }
  // Rows of chunk c of source j: the first (a sequence row) and the count.
  XSTAGE_HD constexpr int first_row(int j, int c) const { return j * shard_rows + c * rows; }
  XSTAGE_HD constexpr int rows_of(int c) const {
    const int left = shard_rows - c * rows;
    return left < rows ? left : rows;
  }
  // The pusher's units of one tensor of chunk c, and the value chunk c's flag reaches when all three have arrived.
  XSTAGE_HD constexpr int units_per_tensor(int c) const { return (rows_of(c) * row_pieces + kPushUnitPieces - 1) / kPushUnitPieces; }
  XSTAGE_HD constexpr std::uint32_t arrival_target(int c) const { return 3u * static_cast<std::uint32_t>(units_per_tensor(c)); }
};

inline constexpr int kMaxInputChunksPerBatch = 64;
// About `target` chunks per batch in all (the first chunk, which every tile of the first wave waits for, as
// small as the producer's 64 bits allow), at least one per source.
XSTAGE_HD constexpr InputChunks make_input_chunks(const UlyssesShape& s, int target = 64) {
  const int Ms = s.shard_rows(), P = s.ranks;
  int per_source = (target + P - 1) / P;
  if (per_source > kMaxInputChunksPerBatch / P) per_source = kMaxInputChunksPerBatch / P;
  if (per_source > Ms) per_source = Ms;
  if (per_source < 1) per_source = 1;
  const int rows = (Ms + per_source - 1) / per_source;
  return InputChunks{Ms, P, s.local_heads(), rows, (Ms + rows - 1) / rows, s.head_dim * 2 / 16};
}

// The receiver's own rows, read where they lie (fused_both): rank r's rows [r·Ms, (r+1)·Ms) of its own heads are in its
// own sequence-sharded input already, so the attention kernel reads every Q tile (b_m rows) and K/V block (b_n rows)
// that lies within them straight from there, and only the others from the inbox. A tile or block that straddles the
// shard's boundary (b_m and b_n need not divide Ms) reads the inbox, so the own chunks it overlaps are still pushed;
// every other own chunk is never pushed and never waited for. (P = 1: every row is the rank's own, nothing moves.)
struct InPlaceRows {
  int block_m = 0, block_n = 0;  // the attention kernel's tile and key-block rows; 0: nothing is read in place
  int seqlen = 0;                // M
  int shard_rows = 1;            // Ms

  XSTAGE_HD constexpr int first(int r) const { return r * shard_rows; }
  XSTAGE_HD constexpr int end(int r) const { return (r + 1) * shard_rows; }
  // The blocks of `rows` rows (block n: rows [n·rows, min((n+1)·rows, M))) that rank r reads from its own input, those
  // within its shard: [first, last], empty without in-place reads. The kernel takes them once per tile, so that a load
  // costs one comparison.
  struct Blocks {
    int first = 1, last = 0;
    XSTAGE_HD constexpr bool holds(int n) const { return n >= first && n <= last; }
  };
  XSTAGE_HD constexpr Blocks blocks_within(int r, int rows) const {
    if (block_m <= 0) return {};
    const int last = end(r) >= seqlen ? (seqlen + rows - 1) / rows - 1 : end(r) / rows - 1;
    return {(first(r) + rows - 1) / rows, last};
  }
  // Whether rows [a, b) of rank r's shard overlap a block of `rows` rows that is not read in place (blocks_within):
  // one that straddles the shard's boundary.
  XSTAGE_HD constexpr bool straddled(int r, int a, int b, int rows) const {
    const Blocks own = blocks_within(r, rows);
    return a / rows < own.first || (b - 1) / rows > own.last;
  }
  // Whether rank r's own chunk `chunk` (of InputChunks c) is pushed into its inbox: always without in-place reads,
  // else only where a straddling Q tile or K/V block reads some of its rows there.
  XSTAGE_HD constexpr bool pushes_own(const InputChunks& c, int r, int chunk) const {
    if (block_m <= 0) return true;
    const int a = c.first_row(r, chunk), b = a + c.rows_of(chunk);
    return straddled(r, a, b, block_m) || straddled(r, a, b, block_n);
  }
  // Rank r's chunks that are never pushed to it, as the bits of the kernel's producer (InputWaits::arrived): read in
  // place, they count as there from the start.
  XSTAGE_HD constexpr std::uint64_t read_in_place(const InputChunks& c, int r) const {
    std::uint64_t bits = 0;
    for (int k = 0; k < c.per_source; ++k)
      if (!pushes_own(c, r, k)) bits |= std::uint64_t{1} << c.in_batch(r, k);
    return bits;
  }
};

// The pusher's work (fused_both): one item is one chunk of one source for one head of one receiver, its Q, K and V
// rows. Items go in the order the receivers' kernels need them, whose tiles walk m-blocks fastest, then heads, then
// batches (tile_scheduler.hpp's arrival_order). With virtual ranks (every rank's inputs in this process, the ranks'
// kernels one after another) the items of receiver r come as one set, by (batch, head), each from the sequence's
// last chunk to its first; with real ranks (this process pushes its own rows) one set holds every receiver's items,
// by (batch, head), its chunks from the last, to every receiver in turn. A set's first `head_start_heads` (batch,
// head)s are what its kernel's first wave needs: the layer pushes them on every SM just before that kernel (the head
// start), so the items of every set's head start come first, then the rest of every set, set by set (what the pusher
// beside the attention kernels moves).
struct PushItem {
  int receiver = 0;
  int batch = 0;
  int head = 0;  // of the receiver's Hp
  int source = 0;
  int chunk = 0;  // of the source's chunks
};

struct PushOrder {
  UlyssesShape shape;
  InputChunks chunks;
  int source = -1;           // real ranks: this rank; -1: virtual ranks (every rank is a source)
  int head_start_heads = 0;  // per set (first_wave_heads)
  InPlaceRows in_place;      // the receivers' own rows that are not pushed
  // By receiver: its own chunks that are never pushed (InPlaceRows::read_in_place), taken once here so that the
  // pusher's test per item (moves) is one bit rather than the divisions of pushes_own.
  std::uint64_t never_pushed[comm::kMaxFusedOpRanks] = {};

  PushOrder() = default;
  constexpr PushOrder(const UlyssesShape& s, const InputChunks& c, int source_rank, int start_heads_per_set, const InPlaceRows& rows = {})
      : shape(s), chunks(c), source(source_rank), head_start_heads(start_heads_per_set), in_place(rows) {
    for (int r = 0; r < s.ranks && r < comm::kMaxFusedOpRanks; ++r) never_pushed[r] = rows.read_in_place(c, r);
  }

  XSTAGE_HD constexpr int sets() const { return source < 0 ? shape.ranks : 1; }
  XSTAGE_HD constexpr int heads() const { return shape.batch * chunks.heads; }  // (batch, head)s of a set
  // The items of one (batch, head) of a set: for its receiver (virtual ranks) or for every receiver (real ranks).
  XSTAGE_HD constexpr int items_per_head() const { return source < 0 ? chunks.per_batch() : chunks.per_source * shape.ranks; }
  XSTAGE_HD constexpr int start_heads() const { return head_start_heads < heads() ? head_start_heads : heads(); }
  XSTAGE_HD constexpr int items() const { return sets() * heads() * items_per_head(); }
  // Set r's head start, items [head_start_first(r), head_start_first(r + 1)); the rest of every set after them all.
  XSTAGE_HD constexpr int head_start_first(int r) const { return r * start_heads() * items_per_head(); }
  XSTAGE_HD constexpr int head_starts_end() const { return head_start_first(sets()); }

  // Units: every (batch, head) block of a set has the same items, so the same units (a chunk's three tensors of one
  // head, InputChunks::units_per_tensor), and a launch covers whole blocks. The item at position `rest` of a block
  // (0 .. items_per_head()) is the shorter last chunk of a source first, then its full chunks (virtual ranks), or the
  // last chunk to every receiver first, then the full ones (real ranks).
  XSTAGE_HD constexpr int units_last() const { return 3 * chunks.units_per_tensor(chunks.per_source - 1); }
  XSTAGE_HD constexpr int units_full() const { return 3 * chunks.units_per_tensor(0); }
  XSTAGE_HD constexpr int units_per_block() const { return shape.ranks * (units_last() + (chunks.per_source - 1) * units_full()); }
  struct Position {
    int rest;  // the item within its block
    int unit;  // the unit within its item
    int units;  // the item's units
  };
  // Where unit `offset` (0 .. units_per_block()) of a block lies.
  XSTAGE_HD constexpr Position locate(int offset) const {
    const int last = units_last(), full = units_full();
    if (source < 0) {
      const int per_source = last + (chunks.per_source - 1) * full, group = offset / per_source, o = offset - group * per_source;
      if (o < last) return {group * chunks.per_source, o, last};
      const int q = (o - last) / full;
      return {group * chunks.per_source + 1 + q, o - last - q * full, full};
    }
    if (offset < shape.ranks * last) return {offset / last, offset % last, last};
    const int o = offset - shape.ranks * last, q = o / full;
    return {shape.ranks + q, o - q * full, full};
  }

  // A launch of items [first_item, end_item) (whole blocks): its units, and the part of an item from unit x of the
  // launch up to (not past) unit run_end, which is how a warp's run crosses items (pusher_kernel walks its runs so).
  // A call's units are counted in 32 bits (the layer refuses a shape with more than half of that, so that a warp's next
  // run never overflows: launch_units(0, items()) as 64 bits).
  XSTAGE_HD constexpr std::int64_t launch_units(int first_item, int end_item) const {
    return static_cast<std::int64_t>(end_item - first_item) / items_per_head() * units_per_block();
  }
  struct Span {
    PushItem item;
    int first, stop;  // its units [first, stop)
  };
  XSTAGE_HD constexpr Span span(int first_item, int x, int run_end) const {
    const int block = x / units_per_block();
    const Position at = locate(x - block * units_per_block());
    const int stop = run_end - x < at.units - at.unit ? at.unit + (run_end - x) : at.units;
    return {item(first_item + block * items_per_head() + at.rest), at.unit, stop};
  }

  // Whether the pusher moves item `it`: every other rank's chunk, and those of the receiver's own chunks that a
  // straddling tile or block reads from the inbox (InPlaceRows::pushes_own; never_pushed holds the others). The items
  // and their units stay numbered as if every item moved; the pusher's warps step over the units of the items that do
  // not.
  XSTAGE_HD constexpr bool moves(const PushItem& it) const {
    return it.source != it.receiver || ((never_pushed[it.receiver] >> chunks.in_batch(it.source, it.chunk)) & 1u) == 0;
  }

  XSTAGE_HD constexpr PushItem item(int i) const {
    const int per_start = start_heads() * items_per_head(), per_rest = (heads() - start_heads()) * items_per_head();
    int set, local;  // the item's set, and its index within the set in (batch, head), chunk order
    if (i < head_starts_end()) {
      set = i / per_start;
      local = i % per_start;
    } else {
      set = (i - head_starts_end()) / per_rest;
      local = per_start + (i - head_starts_end()) % per_rest;
    }
    const int bh = local / items_per_head(), rest = local % items_per_head();
    if (source < 0) {
      const int g = chunks.per_batch() - 1 - rest;
      return {set, bh / chunks.heads, bh % chunks.heads, g / chunks.per_source, g % chunks.per_source};
    }
    return {(source + 1 + rest % shape.ranks) % shape.ranks, bh / chunks.heads, bh % chunks.heads, source,
            chunks.per_source - 1 - rest / shape.ranks};
  }
};

// The (batch, head)s whose tiles the first wave of an attention kernel of `ctas` persistent CTAs holds, its tiles
// walked m-blocks fastest (`m_blocks` per head).
XSTAGE_HD constexpr int first_wave_heads(int ctas, int m_blocks) { return (ctas + m_blocks - 1) / m_blocks; }

// How a launch of the pusher shares its units among its `warps` warps: the units of its items, in PushOrder's order,
// numbered on from 0, in runs of `run` consecutive units, run j to warp j mod warps. A warp signals a chunk when it
// moves on to another one (a fence that waits for all of its loads and stores in flight), so runs of several units
// pay that once per run · 4 KB instead of once per unit or two: kPushRunAlongside for the pusher beside the attention
// kernel. The head start, on every SM with few units per warp, takes runs of one (kPushRunHeadStart), so that all of
// its warps have loads in flight. A warp goes from one of its runs straight to the next (PushOrder::locate finds the
// item of a unit), never through the items in between: with one head's chunks as items a launch has thousands, and a
// walk over all of them by every warp took longer than the copies (results/h200/attention/2026-12-02-fused-both-by-head).
inline constexpr int kPushRunAlongside = 8;
inline constexpr int kPushRunHeadStart = 1;

struct PushRuns {
  int warps = 1;
  int run = kPushRunAlongside;

  XSTAGE_HD constexpr int cycle() const { return run * warps; }
  XSTAGE_HD constexpr int first_unit(int warp) const { return warp * run; }
};

// The pusher's CTAs (SMs), 1 to kMaxPushCtas, for the attention kernel of the layer (head_dim, batch x local heads,
// M) on the other SMs of `sms`, which runs the tile configuration chosen for those SMs: its time is its makespan there
// (fwd_makespan: waves x a tile's time), so SMs that leave the makespan where it is cost it nothing, and every one more
// moves the inputs sooner (the first wave's tiles each wait for all of their head's keys and values). So: the most SMs
// with the shortest makespan any N >= 1 allows. Where one SM already costs a wave of the best configuration, the other
// configuration may lose less (d = 64, 12 heads x 4096: 192-row tiles fill 132 SMs in 2 waves and 131 in 3; 128-row
// tiles take 3 on 128).
inline constexpr int kMaxPushCtas = 16;
constexpr double push_makespan(int head_dim, std::int64_t batch_heads, std::int64_t seqlen, int attention_sms) {
  return fwd_makespan(choose_fwd_tile_config(head_dim, batch_heads, seqlen, attention_sms), batch_heads, seqlen, attention_sms);
}
constexpr int choose_push_ctas(int head_dim, std::int64_t batch_heads, std::int64_t seqlen, int sms) {
  int best = 1;
  for (int n = 2; n <= kMaxPushCtas && n < sms; ++n)
    if (push_makespan(head_dim, batch_heads, seqlen, sms - n) <= push_makespan(head_dim, batch_heads, seqlen, sms - best)) best = n;
  return best;
}

// A lane's walk over the pieces of a unit: piece x is (row x / width, column x mod width) of a tensor whose rows are
// `width` pieces; the lane's next piece is 32 on. Stepping row and column saves a division per piece.
struct PieceWalk {
  int width = 1;
  int row_step = 0, col_step = 0;  // 32 pieces: row_step rows and col_step columns

  XSTAGE_HD constexpr explicit PieceWalk(int w) : width(w), row_step(32 / w), col_step(32 - (32 / w) * w) {}
  XSTAGE_HD constexpr void next(int& row, int& col) const {
    row += row_step;
    col += col_step;
    if (col >= width) {
      col -= width;
      ++row;
    }
  }
};

// Tile order for the fused epilogue (tile_scheduler.hpp's m_block_stride): consecutive tiles on m-blocks
// `stride` apart, so the CTAs working at one moment store to every rank rather than all to one or two
// (receiver-side incast at large M).
XSTAGE_HD constexpr int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }
// The smallest stride >= ceil(m_blocks / P) that is coprime with m_blocks (1 for P = 1).
XSTAGE_HD constexpr int destination_interleave_stride(int m_blocks, int P) {
  if (P <= 1 || m_blocks <= 1) return 1;
  int s = (m_blocks + P - 1) / P;
  while (gcd_int(s, m_blocks) != 1) ++s;
  return s;
}

}  // namespace xstage::attention
