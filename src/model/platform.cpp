#include "model/platform.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

#include "common/error.hpp"
#include "common/json_file.hpp"
#include "common/run_info.hpp"
#include "model/units.hpp"

namespace xstage::model {

namespace {

constexpr const char* kSchema = "xstage.platform/1";

std::string number_text(double x) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Reading and checking: every failure names the file, the field's JSON pointer and its range.
// ---------------------------------------------------------------------------------------------

PlatformTriple triple_from_json(const JsonFields& r, const nlohmann::json& j, const std::string& at) {
  r.object(j, at, {"R_bytes_per_ns", "T_iss0", "Q", "fit"});
  PlatformTriple t;
  t.R_bytes_per_ns = r.number(r.member(j, at, "R_bytes_per_ns"), json_pointer(at, "R_bytes_per_ns"), kMinR_bytes_per_ns,
                              kMaxR_bytes_per_ns, "bytes/ns");

  const std::string iss_at = json_pointer(at, "T_iss0");
  const nlohmann::json& iss = r.member(j, at, "T_iss0");
  r.array(iss, iss_at, 1, kMaxPlatformPoints);
  for (std::size_t i = 0; i < iss.size(); ++i) {
    const std::string pt_at = json_pointer(iss_at, i);
    r.object(iss[i], pt_at, {"K", "B_bytes", "T_iss0_ns"});
    IssuePoint pt;
    pt.K = static_cast<int>(r.integer(r.member(iss[i], pt_at, "K"), json_pointer(pt_at, "K"), 1, kMaxProducers, "producers"));
    pt.B_bytes = r.integer(r.member(iss[i], pt_at, "B_bytes"), json_pointer(pt_at, "B_bytes"), 1, kMaxB_bytes, "bytes");
    pt.T_iss0_ns = r.number(r.member(iss[i], pt_at, "T_iss0_ns"), json_pointer(pt_at, "T_iss0_ns"), kMinT_iss0_ns,
                            kMaxT_iss0_ns, "ns");
    t.T_iss0.push_back(pt);
  }

  const std::string q_at = json_pointer(at, "Q");
  const nlohmann::json& cap = r.member(j, at, "Q");
  r.array(cap, q_at, 1, kMaxPlatformPoints);
  for (std::size_t i = 0; i < cap.size(); ++i) {
    const std::string pt_at = json_pointer(q_at, i);
    r.object(cap[i], pt_at, {"K", "Q_bytes"});
    CapacityPoint pt;
    pt.K = static_cast<int>(r.integer(r.member(cap[i], pt_at, "K"), json_pointer(pt_at, "K"), 1, kMaxProducers, "producers"));
    pt.Q_bytes = r.number(r.member(cap[i], pt_at, "Q_bytes"), json_pointer(pt_at, "Q_bytes"), kMinQ_bytes, kMaxQ_bytes, "bytes");
    t.Q.push_back(pt);
  }

  if (j.contains("fit")) {
    if (!j.at("fit").is_object()) r.fail(json_pointer(at, "fit"), "must be an object");
    t.fit = j.at("fit");
  }
  return t;
}

StorerMeasurement storer_from_json(const JsonFields& r, const nlohmann::json& j, const std::string& at) {
  r.object(j, at, {"R_S_bytes_per_ns", "T_load_ns", "T_fence_ns", "T_release_ns", "source"});
  StorerMeasurement s;
  s.costs.R_S_bytes_per_ns = r.number(r.member(j, at, "R_S_bytes_per_ns"), json_pointer(at, "R_S_bytes_per_ns"), kMinR_bytes_per_ns,
                                      kMaxR_bytes_per_ns, "bytes/ns");
  const auto time = [&](const char* key) {
    return r.number(r.member(j, at, key), json_pointer(at, key), 0.0, kMaxStorerTime_ns, "ns");
  };
  s.costs.T_load_ns = time("T_load_ns");
  s.T_fence_ns = time("T_fence_ns");
  s.costs.T_release_ns = time("T_release_ns");
  s.source = r.string(r.member(j, at, "source"), json_pointer(at, "source"));
  return s;
}

// The range checks of the reader, on a model built in memory (the same constants, the same messages).
void check_range(const JsonFields& r, double x, const std::string& at, double lo, double hi, const std::string& unit) {
  if (!(x >= lo && x <= hi))
    r.fail(at, "must be a number in [" + number_text(lo) + ", " + number_text(hi) + "] " + unit + " (got " + number_text(x) + ")");
}

void validate_triple(const JsonFields& r, const PlatformTriple& t, const std::string& at) {
  check_range(r, t.R_bytes_per_ns, json_pointer(at, "R_bytes_per_ns"), kMinR_bytes_per_ns, kMaxR_bytes_per_ns, "bytes/ns");
  for (const auto& [list, size] : {std::pair{"T_iss0", t.T_iss0.size()}, std::pair{"Q", t.Q.size()}})
    if (size < 1 || size > kMaxPlatformPoints)
      r.fail(json_pointer(at, list), "must hold 1 to " + std::to_string(kMaxPlatformPoints) + " measured points (got " +
                                         std::to_string(size) + ")");
  std::set<std::pair<int, std::int64_t>> seen_iss;
  for (std::size_t i = 0; i < t.T_iss0.size(); ++i) {
    const IssuePoint& pt = t.T_iss0[i];
    const std::string pt_at = json_pointer(json_pointer(at, "T_iss0"), i);
    check_range(r, pt.K, json_pointer(pt_at, "K"), 1, kMaxProducers, "producers");
    check_range(r, static_cast<double>(pt.B_bytes), json_pointer(pt_at, "B_bytes"), 1, static_cast<double>(kMaxB_bytes), "bytes");
    check_range(r, pt.T_iss0_ns, json_pointer(pt_at, "T_iss0_ns"), kMinT_iss0_ns, kMaxT_iss0_ns, "ns");
    if (!seen_iss.insert({pt.K, pt.B_bytes}).second)
      r.fail(pt_at, "duplicate point K=" + std::to_string(pt.K) + ", B_bytes=" + std::to_string(pt.B_bytes));
  }
  std::set<int> seen_q;
  for (std::size_t i = 0; i < t.Q.size(); ++i) {
    const CapacityPoint& pt = t.Q[i];
    const std::string pt_at = json_pointer(json_pointer(at, "Q"), i);
    check_range(r, pt.K, json_pointer(pt_at, "K"), 1, kMaxProducers, "producers");
    check_range(r, pt.Q_bytes, json_pointer(pt_at, "Q_bytes"), kMinQ_bytes, kMaxQ_bytes, "bytes");
    if (!seen_q.insert(pt.K).second) r.fail(pt_at, "duplicate point K=" + std::to_string(pt.K));
  }
}

// ---------------------------------------------------------------------------------------------
// Interpolation helpers.
// ---------------------------------------------------------------------------------------------

// How a coordinate axis is named and printed in warnings.
struct Axis {
  const char* name;               // "K" or "B"
  std::string (*format)(double);  // how to print a coordinate
};

std::string format_count(double x) { return number_text(x); }

// The warning for a query x outside the measured range [lo, hi]; `context` names the row (may be empty).
std::string outside_range_warning(const std::string& quantity, const Axis& axis, double x, double lo, double hi,
                                  const std::string& context) {
  const double edge = x < lo ? lo : hi;
  const double by = std::fabs(x - edge);
  return quantity + ": " + axis.name + " = " + axis.format(x) + " lies " + (x < lo ? "below" : "above") +
         " the measured range [" + axis.format(lo) + ", " + axis.format(hi) + "]" + context + " by " +
         axis.format(by) + " (" + format_percent(by / edge) + " of the edge); used the value at " + axis.name +
         " = " + axis.format(edge) + " (not extrapolated)";
}

// Linear interpolation over sorted, unique (x, y) points, clamped (with a warning) outside them.
Interpolated interpolate_1d(const std::vector<std::pair<double, double>>& pts, double x, const Axis& axis,
                            const std::string& quantity, const std::string& context) {
  Interpolated out;
  const double lo = pts.front().first, hi = pts.back().first;
  if (x < lo || x > hi) {
    out.value = x < lo ? pts.front().second : pts.back().second;
    out.extrapolated = true;
    out.warning = outside_range_warning(quantity, axis, x, lo, hi, context);
    return out;
  }
  const auto it = std::lower_bound(pts.begin(), pts.end(), x,
                                   [](const std::pair<double, double>& p, double v) { return p.first < v; });
  if (it->first == x) {
    out.value = it->second;
    return out;
  }
  const auto& [x1, y1] = *it;
  const auto& [x0, y0] = *(it - 1);
  out.value = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
  return out;
}

void append_warning(Interpolated& into, const Interpolated& from) {
  if (!from.extrapolated) return;
  into.extrapolated = true;
  if (into.warning.find(from.warning) != std::string::npos) return;  // the same row used twice
  into.warning += (into.warning.empty() ? "" : "; ") + from.warning;
}

std::vector<std::pair<double, double>> issue_row(const PlatformTriple& t, int K) {
  std::vector<std::pair<double, double>> row;
  for (const IssuePoint& pt : t.T_iss0)
    if (pt.K == K) row.emplace_back(static_cast<double>(pt.B_bytes), pt.T_iss0_ns);
  std::sort(row.begin(), row.end());
  return row;
}

void require_T_iss0_grid(const PlatformTriple& t) {
  if (t.T_iss0.empty()) throw InputError("platform triple has no T_iss0 points to interpolate");
}

void require_Q_points(const PlatformTriple& t) {
  if (t.Q.empty()) throw InputError("platform triple has no Q points to interpolate");
}

}  // namespace

const char* to_string(StorePath path) {
  switch (path) {
    case StorePath::st_global_16B: return "st_global_16B";
    case StorePath::tma_bulk: return "tma_bulk";
  }
  return "?";
}

StorePath store_path_from_string(const std::string& name) {
  if (name == "st_global_16B") return StorePath::st_global_16B;
  if (name == "tma_bulk") return StorePath::tma_bulk;
  throw InputError("unknown store path '" + name + "' (expected st_global_16B or tma_bulk)");
}

nlohmann::json to_json(const PlatformModel& model) {
  nlohmann::json doc;
  doc["schema"] = kSchema;
  doc["provisional"] = model.provisional;
  doc["provenance"] = model.provenance;
  nlohmann::json paths = nlohmann::json::object();
  for (const auto& [path, t] : model.store_paths) {
    nlohmann::json j;
    j["R_bytes_per_ns"] = t.R_bytes_per_ns;
    j["T_iss0"] = nlohmann::json::array();
    for (const IssuePoint& pt : t.T_iss0)
      j["T_iss0"].push_back({{"K", pt.K}, {"B_bytes", pt.B_bytes}, {"T_iss0_ns", pt.T_iss0_ns}});
    j["Q"] = nlohmann::json::array();
    for (const CapacityPoint& pt : t.Q) j["Q"].push_back({{"K", pt.K}, {"Q_bytes", pt.Q_bytes}});
    j["fit"] = t.fit;
    paths[to_string(path)] = std::move(j);
  }
  doc["store_paths"] = std::move(paths);
  if (model.storer)
    doc["storer"] = {{"R_S_bytes_per_ns", model.storer->costs.R_S_bytes_per_ns}, {"T_load_ns", model.storer->costs.T_load_ns},
                     {"T_fence_ns", model.storer->T_fence_ns}, {"T_release_ns", model.storer->costs.T_release_ns},
                     {"source", model.storer->source}};
  return doc;
}

PlatformModel platform_from_json(const nlohmann::json& doc, const std::string& source_name) {
  const JsonFields r(source_name);
  r.object(doc, "", {"schema", "provisional", "provenance", "store_paths", "storer"});
  r.string(r.member(doc, "", "schema"), "/schema", {kSchema});

  PlatformModel model;
  if (doc.contains("provisional")) model.provisional = r.boolean(doc.at("provisional"), "/provisional");
  if (doc.contains("provenance")) {
    // Free-form record of how the file was made; only sm_count is read (the default K of `xstage plan`).
    const nlohmann::json& prov = doc.at("provenance");
    if (!prov.is_object()) r.fail("/provenance", "must be an object");
    if (prov.contains("sm_count")) r.integer(prov.at("sm_count"), "/provenance/sm_count", 1, kMaxSmCount, "SMs");
    model.provenance = prov;
  }

  const nlohmann::json& paths = r.member(doc, "", "store_paths");
  r.object(paths, "/store_paths", {"st_global_16B", "tma_bulk"});
  for (const auto& [name, j] : paths.items())
    model.store_paths[store_path_from_string(name)] = triple_from_json(r, j, json_pointer("/store_paths", name));
  if (doc.contains("storer")) model.storer = storer_from_json(r, doc.at("storer"), "/storer");
  validate_platform(model, source_name);
  return model;
}

void validate_platform(const PlatformModel& model, const std::string& source_name) {
  const JsonFields r(source_name);
  if (model.store_paths.empty()) r.fail("/store_paths", "must hold at least one of st_global_16B, tma_bulk");
  for (const auto& [path, t] : model.store_paths) validate_triple(r, t, json_pointer("/store_paths", to_string(path)));
  if (model.storer) {
    const StorerMeasurement& s = *model.storer;
    check_range(r, s.costs.R_S_bytes_per_ns, "/storer/R_S_bytes_per_ns", kMinR_bytes_per_ns, kMaxR_bytes_per_ns, "bytes/ns");
    check_range(r, s.costs.T_load_ns, "/storer/T_load_ns", 0.0, kMaxStorerTime_ns, "ns");
    check_range(r, s.T_fence_ns, "/storer/T_fence_ns", 0.0, kMaxStorerTime_ns, "ns");
    check_range(r, s.costs.T_release_ns, "/storer/T_release_ns", 0.0, kMaxStorerTime_ns, "ns");
    if (s.source.empty() || s.source.size() > kMaxSourceChars)
      r.fail("/storer/source", "must name the measurement in 1 to " + std::to_string(kMaxSourceChars) + " characters");
  }
}

void validate_storer_costs(const StorerCosts& s, const std::string& what) {
  if (std::isnan(s.R_S_bytes_per_ns) || s.R_S_bytes_per_ns <= 0.0)
    throw InputError(what + ": the storer rate R_S must be positive bytes/ns (infinite: not a bound; got " +
                     number_text(s.R_S_bytes_per_ns) + ")");
  for (const auto& [x, name] : {std::pair{s.T_load_ns, "T_load"}, std::pair{s.T_release_ns, "T_release"}})
    if (!std::isfinite(x) || x < 0.0)
      throw InputError(what + ": the storer's " + name + " must be a finite, non-negative time (got " + number_text(x) + " ns)");
}

int platform_sm_count(const PlatformModel& model) {
  const nlohmann::json& prov = model.provenance;
  const auto it = prov.find("sm_count");
  return it != prov.end() && it->is_number_integer() ? it->get<int>() : 0;
}

void write_platform_file(const std::string& path, const PlatformModel& model) {
  try {
    validate_platform(model, path);
  } catch (const InputError& e) {
    throw Error(std::string("refusing to write an invalid platform file: ") + e.what());
  }
  write_json_file(path, to_json(model));
}

PlatformModel read_platform_file(const std::string& path) {
  return platform_from_json(read_json_file(path), path);
}

const PlatformTriple& store_path_triple(const PlatformModel& model, StorePath path) {
  const auto it = model.store_paths.find(path);
  if (it != model.store_paths.end()) return it->second;
  std::string present;
  for (const auto& [p, t] : model.store_paths) present += std::string(present.empty() ? "" : ", ") + to_string(p);
  throw InputError(std::string("the platform file has no measurements for store path '") + to_string(path) +
                   "' (it has: " + (present.empty() ? "none" : present) + ")");
}

Interpolated interpolate_Q_bytes(const PlatformTriple& triple, int K) {
  require_Q_points(triple);
  std::vector<std::pair<double, double>> pts;
  for (const CapacityPoint& pt : triple.Q) pts.emplace_back(pt.K, pt.Q_bytes);
  std::sort(pts.begin(), pts.end());
  return interpolate_1d(pts, K, Axis{"K", format_count}, "Q(K)", "");
}

Interpolated interpolate_T_iss0_ns(const PlatformTriple& triple, int K, double B_bytes) {
  require_T_iss0_grid(triple);
  std::set<int> Ks;
  for (const IssuePoint& pt : triple.T_iss0) Ks.insert(pt.K);

  // The value of one measured K row at B (linear in B, clamped).
  Interpolated result;
  auto row_value = [&](int row_K) {
    const Interpolated v = interpolate_1d(issue_row(triple, row_K), B_bytes, Axis{"B", format_bytes},
                                          "T_iss0", " at K = " + std::to_string(row_K));
    append_warning(result, v);
    return v.value;
  };

  // Linear in K between the bracketing rows; the nearest row (with a warning) outside them.
  const auto hi = Ks.lower_bound(K);
  if (hi != Ks.end() && *hi == K) {
    result.value = row_value(K);
  } else if (hi == Ks.begin() || hi == Ks.end()) {
    const int edge = hi == Ks.end() ? *Ks.rbegin() : *Ks.begin();
    append_warning(result, Interpolated{0.0, true,
                                        outside_range_warning("T_iss0", Axis{"K", format_count}, K, *Ks.begin(),
                                                              *Ks.rbegin(), "")});
    result.value = row_value(edge);
  } else {
    const int k1 = *hi, k0 = *std::prev(hi);
    const double y0 = row_value(k0), y1 = row_value(k1);
    result.value = y0 + (y1 - y0) * (K - k0) / static_cast<double>(k1 - k0);
  }
  return result;
}

PlatformLookup evaluate_platform(const PlatformTriple& triple, int K, double B_bytes) {
  if (K <= 0) throw InputError("the number of producers K must be positive (got " + std::to_string(K) + ")");
  if (!std::isfinite(B_bytes) || B_bytes <= 0.0)
    throw InputError("the bytes per producer B must be positive (got " + number_text(B_bytes) + ")");
  if (!std::isfinite(triple.R_bytes_per_ns) || triple.R_bytes_per_ns <= 0.0)
    throw InputError("platform triple has no positive drain rate R");
  PlatformLookup out;
  const Interpolated t = interpolate_T_iss0_ns(triple, K, B_bytes);
  const Interpolated q = interpolate_Q_bytes(triple, K);
  out.point = PlatformPoint{t.value, triple.R_bytes_per_ns, q.value};
  if (t.extrapolated) out.warnings.push_back(t.warning);
  if (q.extrapolated) out.warnings.push_back(q.warning);
  return out;
}

}  // namespace xstage::model
