// The split tail: the last, partial wave of tiles divided by key range over every CTA.
//
// The persistent kernel's CTAs take whole tiles c, c + G, c + 2G, ... (tile_scheduler.hpp), so its makespan is
// ceil(tiles / G) tile times, and the last wave leaves SMs idle wherever tiles is not a multiple of G: SD3-1024's
// 1104 tiles on 132 SMs are 8 full waves and 48 tiles, and for a ninth of the run 84 SMs wait. With a split tail the
// first tiles - (tiles mod G) tiles go as before, and the key blocks of the last R = tiles mod G tiles (R x N steps,
// N key blocks a tile) are cut into G contiguous ranges of the concatenated sequence, one per CTA: each CTA takes
// ~R·N/G steps more instead of a whole tile or none. A range covers the end of one tile and the start of the next at
// most (R < G, so a range is shorter than a tile): a CTA has at most two units, and each is a "part" of its tile.
//
// A part's output is the normalised O of its key range and its log-sum-exp, in fp32 in a workspace slot (2 per CTA:
// its first and second unit); the combine kernel (key_split_combine.cu) merges a tile's parts in CTA order,
//   lse = log Σ_k exp(lse_k),   O = Σ_k exp(lse_k − lse) · O_k,
// and stores the bf16 tile. Everything here is plain arithmetic that the kernel, the combine kernel, the launcher
// and the CPU tests share (tests/attention/key_split_test.cpp walks it).
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace xstage::attention {

// The key blocks the mainloop walks for one tile: [begin, end), from the last; end == 0: every block of the tile's own
// key length (a whole tile).
struct KeyBlocks {
  int begin = 0;
  int end = 0;
};

// Key blocks [begin, end) of one tile, and the workspace slot its part goes to.
struct KeyUnit {
  int tile = 0;   // index in the tile scheduler's order
  int begin = 0;  // first key block
  int end = 0;    // one past the last key block; begin == end: no unit
  int slot = 0;   // 2 · cta + (0: the CTA's first unit, 1: its second)
  XSTAGE_HD constexpr bool empty() const { return begin >= end; }
};

struct KeySplit {
  int tiles = 0;       // all tiles of the launch
  int tail_tiles = 0;  // the last tail_tiles of them are split (0: none)
  int key_blocks = 0;  // N: key blocks of every tile
  int ctas = 0;        // G: the grid

  XSTAGE_HD constexpr bool active() const { return tail_tiles > 0; }
  // Tiles [0, whole_tiles()) go whole, c, c + G, ... as without a split.
  XSTAGE_HD constexpr int whole_tiles() const { return tiles - tail_tiles; }
  // The tail's steps: (tile - whole_tiles()) · N + key block.
  XSTAGE_HD constexpr std::int64_t tail_steps() const { return std::int64_t{tail_tiles} * key_blocks; }
  // CTA c's steps are [range_begin(c), range_begin(c + 1)).
  XSTAGE_HD constexpr std::int64_t range_begin(int cta) const { return tail_steps() * cta / ctas; }
  // The CTA whose range holds step s.
  XSTAGE_HD constexpr int cta_of(std::int64_t step) const { return static_cast<int>(((step + 1) * ctas - 1) / tail_steps()); }

  // CTA c's unit i (0 or 1); empty where it has no such unit.
  XSTAGE_HD constexpr KeyUnit unit(int cta, int i) const {
    const std::int64_t lo = range_begin(cta), hi = range_begin(cta + 1);
    if (lo >= hi) return {};
    const int first = static_cast<int>(lo / key_blocks);
    const std::int64_t first_end = std::int64_t{first + 1} * key_blocks;  // the step past the first tile's last
    if (i == 0) {
      const std::int64_t end = hi < first_end ? hi : first_end;
      return {whole_tiles() + first, static_cast<int>(lo - std::int64_t{first} * key_blocks),
              static_cast<int>(end - std::int64_t{first} * key_blocks), 2 * cta};
    }
    if (hi <= first_end) return {};
    return {whole_tiles() + first + 1, 0, static_cast<int>(hi - first_end), 2 * cta + 1};
  }

  // Whether CTA c's range holds any step (with fewer tail steps than CTAs, some hold none).
  XSTAGE_HD constexpr bool holds_steps(int cta) const { return range_begin(cta) < range_begin(cta + 1); }
  // The parts of tail tile j (0-based within the tail) are those of the CTAs first_cta(j) .. last_cta(j) that hold
  // steps, in order; a CTA's part of it is its unit 0 if its range starts within the tile, else its unit 1.
  XSTAGE_HD constexpr int first_cta(int j) const { return cta_of(std::int64_t{j} * key_blocks); }
  XSTAGE_HD constexpr int last_cta(int j) const { return cta_of(std::int64_t{j + 1} * key_blocks - 1); }
  XSTAGE_HD constexpr int slot_of(int cta, int j) const {
    return range_begin(cta) >= std::int64_t{j} * key_blocks ? 2 * cta : 2 * cta + 1;
  }
};

// The decision below in key-block steps of one CTA: a tile takes N + kKeyTileOverheadSteps (its Q load and first
// product before the pipeline fills, its last P·V and its store), and a split costs kKeySplitCostSteps beyond its
// tail's own ⌈R·N/G⌉ steps (a CTA's second unit, the parts' stores, the combine kernel and the gap before it). The 16
// was fitted on one H100 and checked on eight shapes outside the fit; the measurements, and why it stayed 16 once the
// combine kernel got cheaper, are in docs/ATTENTION.md, "The split tail".
inline constexpr double kKeyTileOverheadSteps = 2.0;
inline constexpr double kKeySplitCostSteps = 16.0;
// The least predicted gain for which the launcher splits.
inline constexpr double kKeySplitMinGain = 0.01;

// How many tail tiles to split for `tiles` tiles of `key_blocks` key blocks each on `ctas` CTAs (0: none): the last
// partial wave's, where the predicted makespan falls by kKeySplitMinGain or more.
constexpr int choose_key_split_tail(std::int64_t tiles, int key_blocks, int ctas) {
  if (ctas <= 0 || key_blocks <= 0 || tiles <= 0) return 0;
  const std::int64_t waves = (tiles + ctas - 1) / ctas, tail = tiles - (waves - 1) * ctas;
  if (tail == ctas) return 0;  // every wave full
  const double per_tile = key_blocks + kKeyTileOverheadSteps;
  const double whole = double(waves) * per_tile;
  const std::int64_t steps = tail * key_blocks;
  const double split = double(waves - 1) * per_tile + double((steps + ctas - 1) / ctas) + kKeySplitCostSteps;
  return split <= whole * (1.0 - kKeySplitMinGain) ? static_cast<int>(tail) : 0;
}

// Whether the plain kernel may split its tail (FlashFwdArgs::key_split).
enum class KeySplitMode {
  automatic,  // where choose_key_split_tail predicts a gain
  off,        // never: every tile whole (the Ulysses layer: its paths stay bit-identical to each other)
  always,     // wherever there is a partial last wave (tests)
};

// The split of a launch of `tiles` tiles with `key_blocks` key blocks each on `sms` SMs; inactive for none. A split
// launch has one CTA per SM, also where there are fewer tiles than SMs.
constexpr KeySplit plan_key_split(KeySplitMode mode, std::int64_t tiles, int key_blocks, int sms) {
  if (mode == KeySplitMode::off || tiles <= 0 || key_blocks <= 0 || sms <= 0) return {};
  const int tail = mode == KeySplitMode::always ? static_cast<int>(tiles % sms) : choose_key_split_tail(tiles, key_blocks, sms);
  if (tail == 0) return {};
  return {static_cast<int>(tiles), tail, key_blocks, sms};
}

// The workspace a split needs: per slot (2 per CTA) b_m × d fp32 outputs and b_m fp32 log-sum-exps.
constexpr std::int64_t key_split_workspace_bytes(int ctas, int block_m, int head_dim) {
  return std::int64_t{2} * ctas * block_m * (head_dim + 1) * 4;
}

}  // namespace xstage::attention
