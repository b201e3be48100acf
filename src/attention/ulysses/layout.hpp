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

// Splits tile rows [m0, min(m0 + b_m, M)) by owner, in rank order; returns the number of segments written
// to `out` (at most `max_out`; a tile spans at most ceil(b_m / Ms) + 1 ranks).
XSTAGE_HD inline int tile_segments(const UlyssesShape& s, int m0, int b_m, RowSegment* out, int max_out) {
  const int end = m0 + b_m < s.seqlen ? m0 + b_m : s.seqlen;
  int n = 0;
  for (int m = m0; m < end && n < max_out;) {
    const int r = s.owner_of_row(m);
    const int stop = (r + 1) * s.shard_rows() < end ? (r + 1) * s.shard_rows() : end;
    out[n++] = RowSegment{r, m, stop - m};
    m = stop;
  }
  return n;
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

  XSTAGE_HD constexpr int sets() const { return source < 0 ? shape.ranks : 1; }
  XSTAGE_HD constexpr int heads() const { return shape.batch * chunks.heads; }  // (batch, head)s of a set
  // The items of one (batch, head) of a set: for its receiver (virtual ranks) or for every receiver (real ranks).
  XSTAGE_HD constexpr int items_per_head() const { return source < 0 ? chunks.per_batch() : chunks.per_source * shape.ranks; }
  XSTAGE_HD constexpr int start_heads() const { return head_start_heads < heads() ? head_start_heads : heads(); }
  XSTAGE_HD constexpr int items() const { return sets() * heads() * items_per_head(); }
  // Set r's head start, items [head_start_first(r), head_start_first(r + 1)); the rest of every set after them all.
  XSTAGE_HD constexpr int head_start_first(int r) const { return r * start_heads() * items_per_head(); }
  XSTAGE_HD constexpr int head_starts_end() const { return head_start_first(sets()); }

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

// PushOrder's items from item i on, one step at a time with no division per step: each of the pusher's warps walks
// every item of its launch, and with one head's chunks as items (thousands a call) item(i)'s divisions cost more than
// the warp's share of the copies. Equal to item(i), item(i + 1), ... (a CPU test walks both).
struct PushCursor {
  PushItem it;
  int segment = 0;  // 0: the head starts, 1: the rest
  int set = 0, bh = 0, rest = 0;

  XSTAGE_HD constexpr static PushCursor at(const PushOrder& o, int i) {
    PushCursor c;
    c.it = o.item(i);
    c.segment = i < o.head_starts_end() ? 0 : 1;
    c.set = o.source < 0 ? c.it.receiver : 0;
    c.bh = c.it.batch * o.chunks.heads + c.it.head;
    c.rest = o.source < 0 ? o.chunks.per_batch() - 1 - o.chunks.in_batch(c.it.source, c.it.chunk)
                          : (o.chunks.per_source - 1 - c.it.chunk) * o.shape.ranks + (c.it.receiver - o.source - 1 + 2 * o.shape.ranks) % o.shape.ranks;
    return c;
  }

  XSTAGE_HD constexpr void next(const PushOrder& o) {
    const InputChunks& ch = o.chunks;
    if (++rest < o.items_per_head()) {
      if (o.source < 0) {  // the next chunk towards the sequence's start
        if (--it.chunk < 0) {
          it.chunk = ch.per_source - 1;
          --it.source;
        }
      } else {  // every receiver in turn, then the chunk before
        it.receiver = it.receiver + 1 == o.shape.ranks ? 0 : it.receiver + 1;
        if (it.receiver == first_receiver(o)) --it.chunk;
      }
      return;
    }
    rest = 0;
    ++bh;
    if (bh == (segment == 0 ? o.start_heads() : o.heads())) {
      ++set;
      bh = segment == 0 ? 0 : o.start_heads();
      if (segment == 0 && set == o.sets()) {
        segment = 1;
        set = 0;
        bh = o.start_heads();
      }
    }
    it.batch = bh / ch.heads;
    it.head = bh % ch.heads;
    if (o.source < 0) {
      it.receiver = set;
      it.source = o.shape.ranks - 1;
    } else {
      it.receiver = first_receiver(o);
    }
    it.chunk = ch.per_source - 1;
  }
  // Real ranks: the receiver of a chunk's first push (the rank after this one).
  XSTAGE_HD constexpr static int first_receiver(const PushOrder& o) { return o.source + 1 == o.shape.ranks ? 0 : o.source + 1; }
};

// The (batch, head)s whose tiles the first wave of an attention kernel of `ctas` persistent CTAs holds, its tiles
// walked m-blocks fastest (`m_blocks` per head).
XSTAGE_HD constexpr int first_wave_heads(int ctas, int m_blocks) { return (ctas + m_blocks - 1) / m_blocks; }

// How the pusher's `warps` warps share the units: the units of the items it pushes, in PushOrder's order, numbered
// on from 0 (an item's first unit is number `start`, the units of the items before it), in runs of `run` consecutive
// units, and run j goes to warp j mod warps. A warp signals a chunk when it moves on to another one (a fence that
// waits for all of its loads and stores in flight), so runs of several units pay that once per run · 4 KB instead of
// once per unit or two (with one unit a turn, a chunk's units over 128 warps gave each warp 1.5 of them):
// kPushRunAlongside for the pusher beside the attention kernel. The head start, on every SM with few units per
// warp, takes runs of one (kPushRunHeadStart), so that all of its warps have loads in flight. All warps still work on
// the same item or two at any moment (items arrive in order), and each gets an equal share within a run whatever the
// items' sizes. A warp walks the items keeping `start` modulo run · warps (the unit count of a call can pass 2^31 at
// large B·M), and needs, per item of n units, its first one, the next one after each, and how many it has.
inline constexpr int kPushRunAlongside = 8;
inline constexpr int kPushRunHeadStart = 1;

struct PushWarps {
  int warps = 1;
  int run = kPushRunAlongside;

  XSTAGE_HD constexpr int cycle() const { return run * warps; }
  // The index within an item (first unit number `start_mod`, in [0, cycle())) of warp w's first unit (>= n: none).
  XSTAGE_HD constexpr int first_unit(int w, int start_mod) const {
    const int d = w * run - start_mod;  // where warp w's run of this cycle starts, from the item's first unit: (-cycle, cycle)
    return d <= 0 && d > -run ? 0 : d > 0 ? d : d + cycle();
  }
  // Warp w's next unit of the item after its unit u.
  XSTAGE_HD constexpr int next_unit(int u, int start_mod) const {
    return (start_mod + u + 1) % run != 0 ? u + 1 : u + 1 + run * (warps - 1);
  }
  // Warp w's units of an item of n units.
  XSTAGE_HD constexpr int units_of(int w, int start_mod, int n) const {
    const int f = first_unit(w, start_mod);
    if (f >= n) return 0;
    const int first_run_end = f + run - (start_mod + f) % run;  // the item may begin inside warp w's run
    int count = (n < first_run_end ? n : first_run_end) - f;
    const int next_run = first_run_end + run * (warps - 1);
    if (next_run < n) {
      const int rest = n - next_run, partial = rest % cycle();
      count += rest / cycle() * run + (partial < run ? partial : run);
    }
    return count;
  }
  // The next item's start_mod after one of n units (a division only when n is a cycle or more).
  XSTAGE_HD constexpr int next_start(int start_mod, int n) const {
    const int s = start_mod + (n < cycle() ? n : n % cycle());
    return s < cycle() ? s : s - cycle();
  }
};

// The pusher's CTAs (SMs), 1 to kMaxPushCtas, for an attention kernel of `tiles` tiles on the other SMs of `sms`: the
// kernel's time is its wave count, ceil(tiles / (sms - N)), times a tile's time, so SMs that leave the wave count
// where it is cost it nothing, and every one more moves the inputs sooner (the first wave's tiles each wait for all
// of their head's keys and values). So: the most SMs with the fewest waves any N >= 1 allows.
inline constexpr int kMaxPushCtas = 16;
constexpr int choose_push_ctas(std::int64_t tiles, int sms) {
  int best = 1;
  for (int n = 2; n <= kMaxPushCtas && n < sms; ++n)
    if (fwd_tile_waves(tiles, sms - n) <= fwd_tile_waves(tiles, sms - best)) best = n;
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
