// MoE layer grid files (configs/moe_grid.json and its kind): the layers `xstage moe bench --config` times and
// `xstage plan moe --grid` audits. One reader and one schema for both (docs/MODEL.md, "Grid files"):
//
//   {"description": "...",                        // optional, free text
//    "dtypes": ["bf16", "fp8"],                    // 1-2 distinct
//    "skewed_zipf_s": 1.2,                         // optional, [0.001, 10]
//    "shapes": [{"h": 7168, "h_inter": 2048, "E": 256, "k": 8}, ...],
//    "tokens_per_rank": [2048, 8192],
//    "routings": ["balanced", "skewed"],           // 1-2 distinct
//    "extra": [{"name": "deepseek-v3", "h": .., "h_inter": .., "E": .., "k": .., "tokens_per_rank": 4096,
//               "routings": ["balanced"]}]}        // optional: headline layers, run first
//
// Every number is an integer in the layer ranges below; an error names the file, the JSON pointer and the range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/problem/problem.hpp"

namespace xstage::cli {

// The range of each dimension of a MoE layer, for grid files and `xstage plan moe` options alike.
inline constexpr std::int64_t kMaxMoeRanks = 64;           // P
inline constexpr std::int64_t kMaxMoeExperts = 1 << 16;    // E
inline constexpr std::int64_t kMaxMoeTopK = 1 << 10;       // k
inline constexpr std::int64_t kMaxMoeHidden = 1 << 17;     // h, h_inter
inline constexpr std::int64_t kMaxMoeTokens = 1 << 22;     // T, tokens per rank
inline constexpr std::size_t kMaxGridEntries = 1024;       // layers per file (extra + shapes x tokens_per_rank)

struct GridLayer {
  std::string prefix;  // "name:" for an "extra" (headline) layer, "" for the grid's
  std::string at;      // its JSON pointer in the file ("/extra/0", "/shapes/3"), for messages
  int h = 0, h_inter = 0, E = 0, k = 0, T = 0;
  std::vector<std::string> routings;  // "balanced", "skewed"
};

struct MoeGrid {
  std::string file;
  std::vector<moe::DType> dtypes;
  double skewed_zipf_s = 1.2;
  std::vector<GridLayer> layers;  // run order: "extra" first, then shapes x tokens_per_rank
};

// Reads and checks `path` (read_json_file's bounds, then the schema above). InputError names the file and field.
MoeGrid read_moe_grid(const std::string& path);

const char* dtype_name(moe::DType dtype);  // "bf16", "fp8"

}  // namespace xstage::cli
