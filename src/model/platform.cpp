#include "model/platform.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

#include "common/error.hpp"
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
// Reading: every failure names the file and the JSON path of the field.
// ---------------------------------------------------------------------------------------------

class FieldReader {
 public:
  explicit FieldReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw InputError(source_ + ": field '" + field + "': " + problem);
  }

  const nlohmann::json& member(const nlohmann::json& obj, const std::string& parent,
                               const std::string& key) const {
    const std::string field = parent.empty() ? key : parent + "." + key;
    if (!obj.contains(key)) fail(field, "missing");
    return obj.at(key);
  }

  double positive_number(const nlohmann::json& obj, const std::string& parent, const std::string& key) const {
    const nlohmann::json& v = member(obj, parent, key);
    const std::string field = parent + "." + key;
    if (!v.is_number()) fail(field, "must be a number (got " + v.dump() + ")");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x <= 0.0) fail(field, "must be a positive number (got " + v.dump() + ")");
    return x;
  }

  std::int64_t positive_integer(const nlohmann::json& obj, const std::string& parent,
                                const std::string& key) const {
    const nlohmann::json& v = member(obj, parent, key);
    const std::string field = parent + "." + key;
    if (!v.is_number_integer()) fail(field, "must be an integer (got " + v.dump() + ")");
    const std::int64_t x = v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>())
                                                  : v.get<std::int64_t>();
    if (x <= 0) fail(field, "must be a positive integer (got " + v.dump() + ")");
    return x;
  }

  const nlohmann::json& non_empty_array(const nlohmann::json& obj, const std::string& parent,
                                        const std::string& key) const {
    const nlohmann::json& v = member(obj, parent, key);
    if (!v.is_array()) fail(parent + "." + key, "must be an array of measured points");
    if (v.empty()) fail(parent + "." + key, "must hold at least one measured point");
    return v;
  }

 private:
  std::string source_;
};

int checked_K(const FieldReader& r, const nlohmann::json& obj, const std::string& parent) {
  const std::int64_t K = r.positive_integer(obj, parent, "K");
  if (K > 1'000'000) r.fail(parent + ".K", "is absurdly large (" + std::to_string(K) + " producers)");
  return static_cast<int>(K);
}

PlatformTriple triple_from_json(const FieldReader& r, const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) r.fail(where, "must be an object with R_bytes_per_ns, T_iss0 and Q");
  PlatformTriple t;
  t.R_bytes_per_ns = r.positive_number(j, where, "R_bytes_per_ns");

  const nlohmann::json& iss = r.non_empty_array(j, where, "T_iss0");
  for (std::size_t i = 0; i < iss.size(); ++i) {
    const std::string at = where + ".T_iss0[" + std::to_string(i) + "]";
    if (!iss[i].is_object()) r.fail(at, "must be an object {K, B_bytes, T_iss0_ns}");
    IssuePoint pt;
    pt.K = checked_K(r, iss[i], at);
    pt.B_bytes = r.positive_integer(iss[i], at, "B_bytes");
    pt.T_iss0_ns = r.positive_number(iss[i], at, "T_iss0_ns");
    t.T_iss0.push_back(pt);
  }

  const nlohmann::json& cap = r.non_empty_array(j, where, "Q");
  for (std::size_t i = 0; i < cap.size(); ++i) {
    const std::string at = where + ".Q[" + std::to_string(i) + "]";
    if (!cap[i].is_object()) r.fail(at, "must be an object {K, Q_bytes}");
    CapacityPoint pt;
    pt.K = checked_K(r, cap[i], at);
    pt.Q_bytes = r.positive_number(cap[i], at, "Q_bytes");
    t.Q.push_back(pt);
  }

  if (j.contains("fit")) {
    if (!j.at("fit").is_object()) r.fail(where + ".fit", "must be an object");
    t.fit = j.at("fit");
  }
  return t;
}

// Checks that hold for files and in-memory models alike.
void validate_triple(const FieldReader& r, const PlatformTriple& t, const std::string& where) {
  if (!std::isfinite(t.R_bytes_per_ns) || t.R_bytes_per_ns <= 0.0)
    r.fail(where + ".R_bytes_per_ns", "must be a positive number (got " + number_text(t.R_bytes_per_ns) + ")");
  if (t.T_iss0.empty()) r.fail(where + ".T_iss0", "must hold at least one measured point");
  if (t.Q.empty()) r.fail(where + ".Q", "must hold at least one measured point");
  std::set<std::pair<int, std::int64_t>> seen_iss;
  for (std::size_t i = 0; i < t.T_iss0.size(); ++i) {
    const IssuePoint& pt = t.T_iss0[i];
    const std::string at = where + ".T_iss0[" + std::to_string(i) + "]";
    if (pt.K <= 0) r.fail(at + ".K", "must be a positive integer (got " + std::to_string(pt.K) + ")");
    if (pt.B_bytes <= 0) r.fail(at + ".B_bytes", "must be a positive integer (got " + std::to_string(pt.B_bytes) + ")");
    if (!std::isfinite(pt.T_iss0_ns) || pt.T_iss0_ns <= 0.0)
      r.fail(at + ".T_iss0_ns", "must be a positive number (got " + number_text(pt.T_iss0_ns) + ")");
    if (!seen_iss.insert({pt.K, pt.B_bytes}).second)
      r.fail(at, "duplicate point K=" + std::to_string(pt.K) + ", B_bytes=" + std::to_string(pt.B_bytes));
  }
  std::set<int> seen_q;
  for (std::size_t i = 0; i < t.Q.size(); ++i) {
    const CapacityPoint& pt = t.Q[i];
    const std::string at = where + ".Q[" + std::to_string(i) + "]";
    if (pt.K <= 0) r.fail(at + ".K", "must be a positive integer (got " + std::to_string(pt.K) + ")");
    if (!std::isfinite(pt.Q_bytes) || pt.Q_bytes <= 0.0)
      r.fail(at + ".Q_bytes", "must be a positive number (got " + number_text(pt.Q_bytes) + ")");
    if (!seen_q.insert(pt.K).second) r.fail(at, "duplicate point K=" + std::to_string(pt.K));
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
  return doc;
}

PlatformModel platform_from_json(const nlohmann::json& doc, const std::string& source_name) {
  const FieldReader r(source_name);
  if (!doc.is_object()) throw InputError(source_name + ": not a platform file (the top level must be a JSON object)");
  const nlohmann::json& schema = r.member(doc, "", "schema");
  if (!schema.is_string() || schema.get<std::string>() != kSchema)
    r.fail("schema", std::string("expected \"") + kSchema + "\" (got " + schema.dump() + ")");

  PlatformModel model;
  if (doc.contains("provisional")) {
    if (!doc.at("provisional").is_boolean()) r.fail("provisional", "must be true or false");
    model.provisional = doc.at("provisional").get<bool>();
  }
  if (doc.contains("provenance")) {
    if (!doc.at("provenance").is_object()) r.fail("provenance", "must be an object");
    model.provenance = doc.at("provenance");
  }

  const nlohmann::json& paths = r.member(doc, "", "store_paths");
  if (!paths.is_object() || paths.empty())
    r.fail("store_paths", "must be an object with at least one of st_global_16B, tma_bulk");
  for (const auto& [name, j] : paths.items()) {
    StorePath path{};
    try {
      path = store_path_from_string(name);
    } catch (const InputError&) {
      r.fail("store_paths." + name, "unknown store path (expected st_global_16B or tma_bulk)");
    }
    model.store_paths[path] = triple_from_json(r, j, "store_paths." + name);
  }
  validate_platform(model, source_name);
  return model;
}

void validate_platform(const PlatformModel& model, const std::string& source_name) {
  const FieldReader r(source_name);
  if (model.store_paths.empty()) r.fail("store_paths", "must hold at least one store path");
  for (const auto& [path, t] : model.store_paths)
    validate_triple(r, t, std::string("store_paths.") + to_string(path));
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
