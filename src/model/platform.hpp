// The platform model M_X = (T_iss0(K, V), R, Q(K)) of the Burst–Gap model (paper §3.6), as measured by
// `xstage calibrate` and read by `xstage plan`. One triple per store path, because Hopper epilogues use
// both plain st.global stores and TMA bulk stores and the two back-pressure differently.
//
// Units: bytes, nanoseconds, and R in bytes/ns (1 byte/ns == 1 GB/s, SI).
//
// File format ("xstage.platform/1"), written by write_platform_file() and read by read_platform_file():
// {
//   "schema": "xstage.platform/1",
//   "provisional": false,                  // true for a hand-made file not yet replaced by a calibration
//   "provenance": { "gpu": "NVIDIA H200", "gpu_count": 2, "sm_count": 132, "driver": "580.159.04",
//                   "cuda_runtime": "13.0", "nccl": "2.28.9", "topology": "NV18", "pairing": "ring",
//                   "date": "2026-11-29T23:40:00Z", "command": "xstage calibrate --gpus 2",
//                   "sm_clock_mhz": 1980.0, "note": "..." },
//   "store_paths": {
//     "st_global_16B": {
//       "R_bytes_per_ns": 717.0,
//       "T_iss0": [ { "K": 132, "B_bytes": 32768, "T_iss0_ns": 760.0 }, ... ],   // measured grid points
//       "Q":      [ { "K": 132, "Q_bytes": 4456448 }, ... ],
//       "fit":    { ... free-form diagnostics from the calibration ... }
//     },
//     "tma_bulk": { ... same fields ... }
//   },
//   "storer": {                            // optional: the MoE combine storer's own costs per CTA (StorerCosts)
//     "R_S_bytes_per_ns": 62.42, "T_load_ns": 637.8, "T_fence_ns": 1090.1, "T_release_ns": 1478.3,
//     "source": "the committed result and the variants these come from"
//   }
// }
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/burst_gap.hpp"

namespace xstage::model {

// The two ways a Hopper epilogue issues remote stores.
enum class StorePath {
  st_global_16B,  // plain 16-byte st.global from registers
  tma_bulk,       // cp.async.bulk from shared memory (issue ends when the source may be reused)
};
const char* to_string(StorePath path);
StorePath store_path_from_string(const std::string& name);  // throws InputError on unknown names

// One measured point of the no-back-pressure issue time T_iss0(K, V), V = K * B.
struct IssuePoint {
  int K = 0;
  std::int64_t B_bytes = 0;
  double T_iss0_ns = 0.0;
};

// One measured point of the effective outstanding capacity Q(K).
struct CapacityPoint {
  int K = 0;
  double Q_bytes = 0.0;
};

// M_X for one store path.
struct PlatformTriple {
  double R_bytes_per_ns = 0.0;          // effective aggregate drain rate
  std::vector<IssuePoint> T_iss0;       // grid of measured (K, B) -> T_iss0
  std::vector<CapacityPoint> Q;         // measured K -> Q(K)
  nlohmann::json fit = nlohmann::json::object();  // calibration diagnostics (free-form)
};

// The MegaMoE combine storer's own costs per CTA (its two storer warps, src/moe/kernel/storer.cuh), measured
// apart from the X-Stage: a Linear-2 tile's storers issue ALL of its rows (local and remote) at no more than
// R_S, after a fixed T_load, and take the next tile T_release after their fence returned. model::simulate_combine
// uses them beside M_X (docs/MODEL.md, "The storer's own rate"). The defaults are the storer that is never the
// bound: an infinite rate and no fixed costs (what a platform file without "storer" means).
struct StorerCosts {
  double R_S_bytes_per_ns = std::numeric_limits<double>::infinity();  // issue rate per CTA, every stored byte
  double T_load_ns = 0.0;     // per tile before its first store: the RowSource loads and the loop's start
  double T_release_ns = 0.0;  // per tile after its fence: the count releases before the storers move on
};
// Throws InputError naming `what` unless R_S > 0 (infinite allowed) and both times are finite and >= 0.
void validate_storer_costs(const StorerCosts& s, const std::string& what);

// The file's "storer" section: the costs above plus the system fence's return with only local stores
// outstanding (T_fence_ns: `xstage plan moe` takes it as T_lat unless --t-lat is given) and where they come from.
struct StorerMeasurement {
  StorerCosts costs;
  double T_fence_ns = 0.0;
  std::string source;  // the committed result and how the numbers were taken from it
};

struct PlatformModel {
  bool provisional = false;
  nlohmann::json provenance = nlohmann::json::object();
  std::map<StorePath, PlatformTriple> store_paths;
  std::optional<StorerMeasurement> storer;  // absent: the storer is not a bound (StorerCosts{})
};

// The physical range of every number in a platform file; a value outside is refused, naming the file, the
// field's JSON pointer and the range (docs/MODEL.md lists them). Wide enough for any GPU interconnect, narrow
// enough that every closed form and simulation on them stays finite.
inline constexpr double kMinR_bytes_per_ns = 1e-3;      // 1 MB/s
inline constexpr double kMaxR_bytes_per_ns = 1e5;       // 100 TB/s
inline constexpr double kMinT_iss0_ns = 1e-3;           // 1 ps
inline constexpr double kMaxT_iss0_ns = 1e10;           // 10 s
inline constexpr double kMinQ_bytes = 1.0;
inline constexpr double kMaxQ_bytes = 1099511627776.0;  // 1 TiB
inline constexpr std::int64_t kMaxB_bytes = std::int64_t{1} << 36;  // 64 GiB per producer
inline constexpr int kMaxProducers = 1'000'000;         // K: CTAs or warps that store
inline constexpr int kMaxSmCount = 16384;               // provenance.sm_count (and `xstage plan --sms`)
inline constexpr std::size_t kMaxPlatformPoints = 100'000;  // per T_iss0 grid or Q list
inline constexpr double kMaxStorerTime_ns = 1e9;         // storer.T_load_ns, T_fence_ns, T_release_ns: 1 s per tile
inline constexpr std::size_t kMaxSourceChars = 4096;     // storer.source

nlohmann::json to_json(const PlatformModel& model);
PlatformModel platform_from_json(const nlohmann::json& doc, const std::string& source_name);
void write_platform_file(const std::string& path, const PlatformModel& model);
PlatformModel read_platform_file(const std::string& path);  // InputError naming the file and field

// provenance.sm_count when the file records it (checked by the reader to lie in [1, kMaxSmCount]), else 0.
int platform_sm_count(const PlatformModel& model);

// Checks what platform_from_json checks, on a model built in memory (the calibration's output): at least
// one store path; per path R, a non-empty T_iss0 grid and Q list with every value in its range above and no
// duplicate points; a storer section's rate in [kMinR, kMaxR], its times in [0, kMaxStorerTime_ns], a source. Throws InputError naming `source_name` and the field. write_platform_file() calls it
// (and rethrows as xstage::Error, since a bad model there is a program error, not bad input).
void validate_platform(const PlatformModel& model, const std::string& source_name);

// The triple for one store path; InputError naming the path and those present if the file lacks it.
const PlatformTriple& store_path_triple(const PlatformModel& model, StorePath path);

// ---------------------------------------------------------------------------------------------
// Evaluating M_X between measured points. Neither quantity is extrapolated: outside the measured range
// the nearest measured edge is used and `warning` says on which axis and by how much the query lies
// outside, so the caller can show it (xstage plan prints every warning).
// ---------------------------------------------------------------------------------------------

struct Interpolated {
  double value = 0.0;
  bool extrapolated = false;  // the query lay outside the measured range; `value` is the clamped edge
  std::string warning;        // empty unless extrapolated
};

// T_iss0(K, V) with V = K·B: linear in B within each of the two measured K rows that bracket K, then
// linear in K between those rows. Rows may have different B grids (calibrations need not be rectangular).
Interpolated interpolate_T_iss0_ns(const PlatformTriple& triple, int K, double B_bytes);

// Q(K): linear in K between the measured points.
Interpolated interpolate_Q_bytes(const PlatformTriple& triple, int K);

// M_X at one producer configuration, ready for the closed forms (burst_gap.hpp), plus every warning.
struct PlatformLookup {
  PlatformPoint point;
  std::vector<std::string> warnings;
};
PlatformLookup evaluate_platform(const PlatformTriple& triple, int K, double B_bytes);

}  // namespace xstage::model
