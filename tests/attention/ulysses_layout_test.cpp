// The Ulysses index math (src/attention/ulysses/layout.hpp) that the fused epilogue, the layer and the
// virtual-rank tests share: every output row-head lands on exactly one rank at the right place, tiles split
// by owner, the arrival counts add up, and the destination-interleaved tile order is a permutation.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "attention/tile_scheduler.hpp"
#include "attention/ulysses/destinations.hpp"
#include "attention/ulysses/layer.hpp"
#include "attention/ulysses/layout.hpp"
#include "common/error.hpp"

namespace xstage::attention {
namespace {

std::vector<UlyssesShape> shapes() {
  std::vector<UlyssesShape> out;
  for (int P : {1, 2, 4, 8})
    for (int Ms : {1, 37, 128, 200, 384})
      for (int Hp : {1, 3}) out.push_back(UlyssesShape{2, Ms * P, Hp * P, 128, P});
  return out;
}

// Every (rank r, local head h, row m) of the head-sharded outputs goes to one (owner, row, head) of the
// sequence-sharded outputs, and together they cover every (owner, row < Ms, head < H) exactly once.
TEST(UlyssesLayout, EveryRowHeadLandsOnceAtItsPlace) {
  for (const UlyssesShape& s : shapes()) {
    std::set<std::tuple<int, int, int>> seen;
    for (int r = 0; r < s.ranks; ++r)
      for (int h = 0; h < s.local_heads(); ++h)
        for (int m = 0; m < s.seqlen; ++m) {
          const int owner = s.owner_of_row(m), row = s.row_in_owner(m), head = s.global_head(r, h);
          ASSERT_GE(owner, 0);
          ASSERT_LT(owner, s.ranks);
          ASSERT_GE(row, 0);
          ASSERT_LT(row, s.shard_rows());
          ASSERT_EQ(owner * s.shard_rows() + row, m);
          ASSERT_TRUE(seen.insert({owner, row, head}).second) << "P=" << s.ranks << " m=" << m << " head " << head << " twice";
        }
    EXPECT_EQ(static_cast<long>(seen.size()), static_cast<long>(s.ranks) * s.shard_rows() * s.heads);
  }
}

// The segments of one tile, in the order for_each_tile_segment gives them.
std::vector<RowSegment> segments_of(const UlyssesShape& s, int m0, int b_m) {
  std::vector<RowSegment> out;
  for_each_tile_segment(s, m0, b_m, [&](RowSegment g) { out.push_back(g); });
  return out;
}

// A tile's segments cover its rows once, in order, each inside one owner; and over every tile of every rank,
// each rank receives arrivals_per_call() row-heads, what its counter grows by per call.
TEST(UlyssesLayout, TilesSplitByOwnerAndArrivalsAddUp) {
  for (const UlyssesShape& s : shapes())
    for (int b_m : {128, 192}) {
      std::map<int, long> arrivals;
      const int m_blocks = (s.seqlen + b_m - 1) / b_m;
      for (int mb = 0; mb < m_blocks; ++mb) {
        const std::vector<RowSegment> seg = segments_of(s, mb * b_m, b_m);
        ASSERT_FALSE(seg.empty());
        int next = mb * b_m;
        for (std::size_t i = 0; i < seg.size(); ++i) {
          EXPECT_EQ(seg[i].first, next);
          EXPECT_GT(seg[i].rows, 0);
          EXPECT_EQ(s.owner_of_row(seg[i].first), seg[i].rank);
          EXPECT_EQ(s.owner_of_row(seg[i].first + seg[i].rows - 1), seg[i].rank);
          if (i > 0) EXPECT_EQ(seg[i].rank, seg[i - 1].rank + 1);
          next += seg[i].rows;
          arrivals[seg[i].rank] += static_cast<long>(seg[i].rows) * s.heads * s.batch;  // every head, every batch, all ranks
        }
        EXPECT_EQ(next, std::min(mb * b_m + b_m, s.seqlen));
      }
      for (int j = 0; j < s.ranks; ++j) EXPECT_EQ(arrivals[j], static_cast<long>(s.arrivals_per_call())) << "rank " << j;
    }
}

TEST(UlyssesLayout, StraddlingTilesSplitInTwoOrMore) {
  const UlyssesShape s{1, 3 * 100, 3, 128, 3};  // Ms = 100 < b_m = 128
  std::vector<RowSegment> seg = segments_of(s, 0, 128);
  ASSERT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg[0].rank, 0);
  EXPECT_EQ(seg[0].rows, 100);
  EXPECT_EQ(seg[1].rank, 1);
  EXPECT_EQ(seg[1].rows, 28);
  seg = segments_of(s, 256, 128);  // rows 256..299, the last 44 of rank 2
  ASSERT_EQ(seg.size(), 1u);
  EXPECT_EQ(seg[0].rows, 44);
  const UlyssesShape tiny{1, 8 * 10, 8, 64, 8};  // Ms = 10: one tile spans every rank
  EXPECT_EQ(segments_of(tiny, 0, 128).size(), 8u);  // rows 0..79: every rank's 10
}

// The interleaved order is a permutation of each head's m-blocks, and with P ranks consecutive tiles start
// on different owners wherever the shards hold several m-blocks.
TEST(UlyssesLayout, DestinationInterleavedOrderIsAPermutation) {
  for (int P : {1, 2, 4, 8})
    for (int m_blocks : {1, 2, 7, 64, 96, 512, 513}) {
      const int stride = destination_interleave_stride(m_blocks, P);
      EXPECT_EQ(gcd_int(stride, m_blocks), 1);
      if (P == 1) EXPECT_EQ(stride, 1);
      StaticPersistentTileScheduler sched{m_blocks, 3, 2, stride};
      std::set<std::tuple<int, int, int>> seen;
      for (int t = 0; t < sched.num_tiles(); ++t) {
        const TileCoord c = sched.coord(t);
        ASSERT_TRUE(seen.insert({c.m_block, c.head, c.batch}).second);
        ASSERT_LT(c.m_block, m_blocks);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), sched.num_tiles());
      if (P > 1 && m_blocks >= 8 * P) {
        const UlyssesShape s{1, m_blocks * 128, P, 128, P};
        EXPECT_NE(s.owner_of_row(sched.coord(0).m_block * 128), s.owner_of_row(sched.coord(1).m_block * 128)) << "P=" << P;
      }
    }
}

TEST(UlyssesLayout, BadShapesAreRefusedWithTheReason) {
  auto message = [](const UlyssesShape& s) {
    try {
      validate(s);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({1, 1024, 6, 128, 4}).find("H must be a multiple of P"), std::string::npos);
  EXPECT_NE(message({1, 1023, 8, 128, 4}).find("M must be a multiple of P"), std::string::npos);
  EXPECT_NE(message({1, 1024, 8, 96, 4}).find("head_dim must be 64 or 128"), std::string::npos);
  EXPECT_NE(message({1, 1024, 16, 128, 16}).find("1 to 8 ranks"), std::string::npos);
  EXPECT_EQ(message({3, 1000, 8, 64, 8}), "");  // Ms = 125: tiles straddle ranks, which is handled
}

// fused_both's input chunks: every row in exactly one chunk of its own source, chunks contiguous and in order,
// at most 64 per batch, and the walk by next_chunk_row visits each chunk a row range touches once.
TEST(UlyssesLayout, InputChunksCoverEachShardOnce) {
  for (int P : {1, 2, 3, 4, 8})
    for (int Ms : {1, 37, 100, 128, 1000, 4096, 8192}) {
      const UlyssesShape s{2, Ms * P, 2 * P, 128, P};
      const InputChunks c = make_input_chunks(s);
      ASSERT_LE(c.per_batch(), kMaxInputChunksPerBatch) << "P=" << P << " Ms=" << Ms;
      ASSERT_GE(c.per_source, 1);
      ASSERT_GE(c.per_source * c.rows, Ms);
      ASSERT_LT((c.per_source - 1) * c.rows, Ms);  // no empty chunk
      std::vector<int> rows_in(c.per_batch(), 0);
      for (int m = 0; m < s.seqlen; ++m) {
        const int i = c.index_of_row(m);
        ASSERT_GE(i, 0);
        ASSERT_LT(i, c.per_batch());
        ASSERT_EQ(i / c.per_source, s.owner_of_row(m)) << "row " << m;  // a chunk never crosses a shard
        const int j = i / c.per_source, k = i % c.per_source;
        ASSERT_GE(m, c.first_row(j, k));
        ASSERT_LT(m, c.first_row(j, k) + c.rows_of(k));
        ++rows_in[i];
      }
      for (int i = 0; i < c.per_batch(); ++i) EXPECT_EQ(rows_in[i], c.rows_of(i % c.per_source)) << "chunk " << i;
      // The producer's bits: one per chunk of a (batch, head), all of them set in all_chunks().
      EXPECT_EQ(__builtin_popcountll(c.all_chunks()), c.per_batch());
      // A flag's index names its batch, head, source rank and chunk (what a timeout reports); the flags of one
      // receiver are [B][Hp][chunks per batch].
      ASSERT_EQ(c.heads, 2);
      ASSERT_EQ(c.flags(s.batch), s.batch * 2 * P * c.per_source);
      for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
          for (int j = 0; j < P; ++j)
            for (int k = 0; k < c.per_source; ++k) {
              const int f = c.flag(b, h, c.in_batch(j, k));
              EXPECT_EQ(f, ((b * c.heads + h) * P + j) * c.per_source + k);
              const InputChunks::FlagOwner o = c.owner_of_flag(f);
              EXPECT_EQ(o.batch, b);
              EXPECT_EQ(o.head, h);
              EXPECT_EQ(o.source, j);
              EXPECT_EQ(o.chunk, k);
            }
      // The producer's walk over rows [a, b): each chunk touched once, in order.
      for (int a : {0, Ms / 2, s.seqlen - 1})
        for (int len : {1, 64, 128, 192, s.seqlen}) {
          const int b = std::min(a + len, s.seqlen);
          std::vector<int> walked;
          for (int m = a; m < b; m = c.next_chunk_row(m)) walked.push_back(c.index_of_row(m));
          std::vector<int> expected;
          for (int m = a; m < b; ++m)
            if (expected.empty() || expected.back() != c.index_of_row(m)) expected.push_back(c.index_of_row(m));
          EXPECT_EQ(walked, expected) << "P=" << P << " Ms=" << Ms << " rows " << a << ".." << b;
        }
    }
}

// fused_both's pusher: every (receiver, batch, head, source, chunk) it owes exactly once, in the order the receivers'
// kernels need them: first each set's head start (virtual ranks: set r is receiver r's items; real ranks: one set of
// every receiver's), its first (batch, head)s, then the rest of each set; within a set (batch, head) by (batch, head),
// each from the sequence's last chunk (virtual ranks) or from this rank's last chunk, every receiver in turn (real
// ranks); and the bytes it moves to other ranks are the all-to-all's.
TEST(UlyssesLayout, PushOrderOwesEveryChunkOnceInNeededOrder) {
  for (int P : {1, 2, 4, 8})
    for (int B : {1, 3})
      for (int Ms : {37, 1000, 4096})
        for (int start_heads : {0, 1, 2, 100}) {
          const UlyssesShape s{B, Ms * P, 2 * P, 64, P};
          const InputChunks c = make_input_chunks(s);
          for (int source = -1; source < P; ++source) {
            const PushOrder order{s, c, source, start_heads};
            const int n = std::min(start_heads, B * c.heads);  // the head start's (batch, head)s per set
            std::set<std::tuple<int, int, int, int, int>> seen;
            std::int64_t remote_rows = 0;
            ASSERT_EQ(order.head_start_first(0), 0);
            for (int i = 0; i < order.items(); ++i) {
              const PushItem it = order.item(i);
              ASSERT_TRUE(seen.insert({it.receiver, it.batch, it.head, it.source, it.chunk}).second) << "item " << i;
              ASSERT_GE(it.chunk, 0);
              ASSERT_LT(it.chunk, c.per_source);
              ASSERT_GE(it.head, 0);
              ASSERT_LT(it.head, c.heads);
              if (source >= 0) ASSERT_EQ(it.source, source);
              if (it.receiver != it.source) remote_rows += c.rows_of(it.chunk);
              const int set = source < 0 ? it.receiver : 0, bh = it.batch * c.heads + it.head;
              // In its set's head start exactly when among the set's first n (batch, head)s.
              const bool in_start = i >= order.head_start_first(set) && i < order.head_start_first(set + 1);
              ASSERT_EQ(in_start, bh < n) << "item " << i;
              ASSERT_EQ(i < order.head_starts_end(), bh < n) << "item " << i;
              if (i == 0) continue;
              const PushItem prev = order.item(i - 1);
              const int prev_set = source < 0 ? prev.receiver : 0, prev_bh = prev.batch * c.heads + prev.head;
              if (i == order.head_starts_end()) continue;  // from the last head start to the first set's rest
              ASSERT_LE(prev_set, set) << "item " << i;
              if (prev_set == set) ASSERT_LE(prev_bh, bh) << "item " << i;
              if (prev_set != set || prev_bh != bh) continue;
              if (source < 0)  // from the sequence's end to its start
                ASSERT_GT(c.first_row(prev.source, prev.chunk), c.first_row(it.source, it.chunk));
              else
                ASSERT_GE(prev.chunk, it.chunk);
            }
            const int sources = source < 0 ? P : 1;
            EXPECT_EQ(static_cast<int>(seen.size()), sources * P * B * c.heads * c.per_source);
            // the all-to-all: (P-1)/P of every shard, each head
            EXPECT_EQ(remote_rows, static_cast<std::int64_t>(sources) * (P - 1) * B * c.heads * Ms);
          }
        }
}

// The first wave's (batch, head)s: its CTAs over the m-blocks of each head in turn.
TEST(UlyssesLayout, FirstWaveHeadsCoverTheFirstWave) {
  EXPECT_EQ(first_wave_heads(128, 128), 1);  // M = 16384 at b_m = 128 on 128 SMs: one head
  EXPECT_EQ(first_wave_heads(128, 127), 2);
  EXPECT_EQ(first_wave_heads(128, 32), 4);   // M = 4096: four heads
  EXPECT_EQ(first_wave_heads(5, 1), 5);
}

// The units of a (batch, head) block: locate(offset) names the item (its position in the block) and unit that counting
// the block's items' units in order reaches, and every block has units_per_block() of them.
TEST(UlyssesLayout, LocateCountsTheUnitsOfABlock) {
  for (int P : {1, 2, 3, 8})
    for (int Ms : {5, 37, 1000, 4096})
      for (int d : {64, 128}) {
        const UlyssesShape s{2, Ms * P, 3 * P, d, P};
        const InputChunks c = make_input_chunks(s);
        for (int source = -1; source < P; ++source) {
          const PushOrder order{s, c, source, 1};
          for (int block : {0, 1, order.sets() * order.heads() - 1}) {
            const int first = block * order.items_per_head();  // the order's items as blocks, head starts first
            int offset = 0;
            for (int rest = 0; rest < order.items_per_head(); ++rest) {
              const int n = 3 * c.units_per_tensor(order.item(first + rest).chunk);
              for (int u = 0; u < n; ++u, ++offset) {
                const PushOrder::Position at = order.locate(offset);
                ASSERT_EQ(at.rest, rest) << "P=" << P << " Ms=" << Ms << " source " << source << " offset " << offset;
                ASSERT_EQ(at.unit, u);
                ASSERT_EQ(at.units, n);
              }
            }
            EXPECT_EQ(offset, order.units_per_block());
          }
        }
      }
}

// The pusher's units: each tensor of a chunk cut into runs of kPushUnitPieces pieces that cover its rows of one head
// once; a launch's warps, each going from one of its runs to the next as the kernel does (PushRuns, locate, item),
// move every unit of the launch exactly once; and over the call's launches (each set's head start, runs of
// kPushRunHeadStart, then the rest beside the attention kernels, runs of kPushRunAlongside, each numbering its units
// from 0) the additions to each flag sum to the target the attention kernel waits for.
TEST(UlyssesLayout, PushUnitsReachEachFlagsTarget) {
  struct Case {
    int B, Ms, heads_per_rank, d, P;
  };
  for (const Case k : {Case{1, 37, 1, 64, 2}, Case{3, 1000, 3, 64, 4}, Case{2, 4096, 4, 128, 2}, Case{1, 125, 5, 128, 8},
                       Case{1, 8192, 12, 128, 2}})
    for (int W : {1, 7, 32, 64, 96, 512}) {
      const UlyssesShape s{k.B, k.Ms * k.P, k.heads_per_rank * k.P, k.d, k.P};
      const InputChunks c = make_input_chunks(s);
      ASSERT_EQ(c.row_pieces * 16, k.d * 2);
      ASSERT_EQ(c.heads, k.heads_per_rank);
      for (int ch = 0; ch < c.per_source; ++ch) {
        const int pieces = c.rows_of(ch) * c.row_pieces;
        ASSERT_GE(c.units_per_tensor(ch) * kPushUnitPieces, pieces) << "chunk " << ch;
        ASSERT_LT((c.units_per_tensor(ch) - 1) * kPushUnitPieces, pieces) << "chunk " << ch;  // no empty unit
      }
      for (int source : {-1, k.P - 1})
      for (const InPlaceRows in_place : {InPlaceRows{}, InPlaceRows{192, 128, s.seqlen, s.shard_rows()}}) {
        const PushOrder order{s, c, source, 2, in_place};
        std::map<int, std::uint32_t> added;  // by receiver·flags + flag: what the warps add
        // One launch of items [first_item, end_item) over `runs`, as pusher_kernel walks it.
        auto launch = [&](int first_item, int end_item, const PushRuns runs) {
          ASSERT_EQ((end_item - first_item) % order.items_per_head(), 0);
          const int units = static_cast<int>(order.launch_units(first_item, end_item));
          std::vector<int> moved(static_cast<std::size_t>(units), 0);
          for (int w = 0; w < runs.warps; ++w)
            for (int g = runs.first_unit(w); g < units; g += runs.cycle()) {
              const int run_end = std::min(g + runs.run, units);
              for (int x = g; x < run_end;) {
                const PushOrder::Span part = order.span(first_item, x, run_end);
                const PushItem& it = part.item;
                ASSERT_GT(part.stop, part.first);
                ASSERT_EQ(part.stop - part.first, std::min(3 * c.units_per_tensor(it.chunk) - part.first, run_end - x));
                for (int u = part.first; u < part.stop; ++u) ++moved[static_cast<std::size_t>(x + u - part.first)];
                x += part.stop - part.first;
                if (!order.moves(it)) continue;  // as the pusher steps over what its receiver reads in place
                added[it.receiver * 100000 + c.flag(it.batch, it.head, c.in_batch(it.source, it.chunk))] += part.stop - part.first;
              }
            }
          for (std::size_t u = 0; u < moved.size(); ++u) ASSERT_EQ(moved[u], 1) << "unit " << u << " of " << runs.warps << " warps";
        };
        for (int set = 0; set < order.sets(); ++set)
          launch(order.head_start_first(set), order.head_start_first(set + 1), PushRuns{4 * W + 3, kPushRunHeadStart});
        launch(order.head_starts_end(), order.items(), PushRuns{W, kPushRunAlongside});
        // Every flag a receiver's kernel waits on reaches exactly its target (InputArrivals::target), and the flags
        // of the chunks it reads in place are never touched.
        InputArrivals in;
        in.chunks = c;
        const int senders = source < 0 ? k.P : 1;
        int in_place_flags = 0;
        for (int r = 0; r < k.P; ++r)
          if (source < 0 || source == r)
            in_place_flags += std::popcount(in_place.read_in_place(c, r)) * k.B * k.heads_per_rank;
        EXPECT_EQ(static_cast<int>(added.size()) + in_place_flags, k.P * k.B * k.heads_per_rank * senders * c.per_source);
        for (const auto& [key, value] : added) {
          const int f = key % 100000, index_in_batch = f % c.per_batch();
          EXPECT_EQ(value, in.target(index_in_batch)) << "flag " << f << " of receiver " << key / 100000;
          EXPECT_EQ(value, c.arrival_target(c.owner_of_flag(f).chunk));
          EXPECT_FALSE((in_place.read_in_place(c, key / 100000) >> index_in_batch) & 1u) << "flag " << f << " is read in place";
        }
      }
    }
}

// The rows each rank reads in place: a Q tile (b_m rows) or K/V block (b_n rows) within the rank's shard reads its own
// input; every other tile or block reads the inbox, so every own chunk it overlaps is pushed, and no other own chunk
// is (checked against a walk over every tile and block, on shards that b_m and b_n do and do not divide).
TEST(UlyssesLayout, InPlaceRowsPushExactlyWhatStraddlingBlocksRead) {
  for (int P : {1, 2, 3, 4, 8})
    for (int Ms : {1, 37, 100, 128, 192, 1000, 4096, 4250})
      for (const auto [b_m, b_n] : {std::pair{128, 160}, std::pair{128, 192}, std::pair{192, 128}}) {
        const UlyssesShape s{1, Ms * P, P, 128, P};
        const InputChunks c = make_input_chunks(s);
        const InPlaceRows in_place{b_m, b_n, s.seqlen, Ms};
        for (int r = 0; r < P; ++r) {
          std::vector<bool> needed(static_cast<std::size_t>(c.per_source), false);  // own chunks some inbox read overlaps
          std::int64_t in_place_rows = 0;
          for (int rows : {b_m, b_n})
            for (int m0 = 0; m0 < s.seqlen; m0 += rows) {
              const int m1 = std::min(m0 + rows, s.seqlen);
              const bool within = m0 >= r * Ms && m1 <= (r + 1) * Ms;
              ASSERT_EQ(in_place.blocks_within(r, rows).holds(m0 / rows), within) << "rows [" << m0 << ", " << m1 << ") of rank " << r;
              ASSERT_FALSE(InPlaceRows{}.blocks_within(r, rows).holds(m0 / rows));
              if (within) {
                in_place_rows += m1 - m0;
                continue;
              }
              for (int m = std::max(m0, r * Ms); m < std::min(m1, (r + 1) * Ms); ++m)
                needed[static_cast<std::size_t>((m - r * Ms) / c.rows)] = true;
            }
          std::uint64_t expected_bits = 0;
          for (int k = 0; k < c.per_source; ++k) {
            EXPECT_EQ(in_place.pushes_own(c, r, k), needed[static_cast<std::size_t>(k)])
                << "P " << P << ", Ms " << Ms << ", b_m " << b_m << ", b_n " << b_n << ", rank " << r << ", chunk " << k;
            if (!needed[static_cast<std::size_t>(k)]) expected_bits |= std::uint64_t{1} << c.in_batch(r, k);
          }
          EXPECT_EQ(in_place.read_in_place(c, r), expected_bits);
          if (Ms >= 4 * std::max(b_m, b_n)) EXPECT_GT(in_place_rows, 0) << "a long shard reads some rows in place";
          // Without in-place reads every own chunk is pushed.
          for (int k = 0; k < c.per_source; ++k) EXPECT_TRUE(InPlaceRows{}.pushes_own(c, r, k));
        }
        // The pusher's test per item (PushOrder::moves, one bit of never_pushed) is this definition, for virtual
        // ranks and for every real rank, with and without in-place reads.
        for (int source = -1; source < P; ++source)
          for (const InPlaceRows rows : {in_place, InPlaceRows{}}) {
            const PushOrder order{s, c, source, 1, rows};
            for (int i = 0; i < order.items(); ++i) {
              const PushItem it = order.item(i);
              ASSERT_EQ(order.moves(it), it.source != it.receiver || rows.pushes_own(c, it.receiver, it.chunk))
                  << "P " << P << ", Ms " << Ms << ", source " << source << ", item " << i;
            }
          }
      }
}

// A lane's stepped walk over a unit's pieces lands where dividing by the row width would.
TEST(UlyssesLayout, PieceWalkStepsLikeDivision) {
  for (int width = 8; width <= 5 * 128 * 2 / 16; width += 8) {
    const PieceWalk walk(width);
    for (int x0 = 0; x0 < 3 * width + 64; ++x0) {
      int r = x0 / width, col = x0 % width;
      for (int k = 1; k < 40; ++k) {
        walk.next(r, col);
        const int x = x0 + 32 * k;
        ASSERT_EQ(r, x / width) << "width " << width << ", piece " << x;
        ASSERT_EQ(col, x % width) << "width " << width << ", piece " << x;
      }
    }
  }
}

// The pusher's SMs: the most (up to kMaxPushCtas) at the shortest makespan of the attention kernel, in the tile
// configuration chosen for the SMs left, that any N >= 1 allows.
TEST(UlyssesLayout, PushCtasKeepTheMakespan) {
  EXPECT_EQ(choose_push_ctas(128, 4, 16384, 132), 4);    // 512 tiles: 4 waves on 128 SMs, 5 on 127
  EXPECT_EQ(choose_push_ctas(128, 12, 16384, 132), 4);   // 1536 tiles: 12 waves on 128, 13 on 127
  EXPECT_EQ(choose_push_ctas(128, 1, 8192, 132), kMaxPushCtas);  // 64 tiles: one wave on any SM count
  // d = 64, 12 heads x 4096: 264 tiles of 192 rows take 2 waves on 132 SMs and 3 on any fewer; 384 tiles of 128 rows
  // take 3 waves on 128 SMs (4 on 127), a shorter makespan than 3 waves of 192 rows: 4 SMs, and the 128-row tiles there.
  EXPECT_EQ(choose_push_ctas(64, 12, 4096, 132), 4);
  EXPECT_EQ(choose_fwd_tile_config(64, 12, 4096, 132), FwdTileConfigId::kHdim64Rows192);
  EXPECT_EQ(choose_fwd_tile_config(64, 12, 4096, 128), FwdTileConfigId::kHdim64Rows128);
  for (int d : {64, 128})
    for (int sms : {4, 16, 78, 114, 132})
      for (std::int64_t batch_heads : {1, 4, 12, 40})
        for (std::int64_t M = 64; M < 40000; M += 613) {
          const int n = choose_push_ctas(d, batch_heads, M, sms);
          ASSERT_GE(n, 1);
          ASSERT_LE(n, std::min(kMaxPushCtas, sms - 1));
          double shortest = push_makespan(d, batch_heads, M, sms - 1);
          for (int m = 1; m <= kMaxPushCtas && m < sms; ++m) shortest = std::min(shortest, push_makespan(d, batch_heads, M, sms - m));
          ASSERT_EQ(push_makespan(d, batch_heads, M, sms - n), shortest) << d << " " << batch_heads << "x" << M << " on " << sms;
          if (n < kMaxPushCtas && n + 1 < sms) {
            ASSERT_GT(push_makespan(d, batch_heads, M, sms - n - 1), shortest) << d << " " << batch_heads << "x" << M << " on " << sms;
          }
        }
  // The option: 0 (chosen per shape) or 1 to kMaxPushCtas SMs; anything else refused, naming it.
  auto message = [](int push_ctas) {
    UlyssesOptions o;
    o.push_ctas = push_ctas;
    try {
      validate(o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(0), "");
  EXPECT_EQ(message(kMaxPushCtas), "");
  EXPECT_NE(message(-1).find("push_ctas is -1"), std::string::npos);
  EXPECT_NE(message(kMaxPushCtas + 1).find("push_ctas is 17"), std::string::npos);
}

}  // namespace
}  // namespace xstage::attention
