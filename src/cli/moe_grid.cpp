#include "cli/moe_grid.hpp"

#include <algorithm>

#include "common/json_file.hpp"

namespace xstage::cli {

namespace {

using nlohmann::json;

// A list of distinct names, each one of `allowed`.
std::vector<std::string> name_list(const JsonFields& r, const json& v, const std::string& at,
                                   std::initializer_list<const char*> allowed) {
  r.array(v, at, 1, allowed.size());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string s = r.string(v[i], json_pointer(at, i), allowed);
    if (std::find(out.begin(), out.end(), s) != out.end()) r.fail(json_pointer(at, i), "\"" + s + "\" is listed twice");
    out.push_back(s);
  }
  return out;
}

int dimension(const JsonFields& r, const json& obj, const std::string& at, const char* key, std::int64_t hi) {
  return static_cast<int>(r.integer(r.member(obj, at, key), json_pointer(at, key), 1, hi, ""));
}

GridLayer shape(const JsonFields& r, const json& s, const std::string& at) {
  GridLayer l;
  l.at = at;
  l.h = dimension(r, s, at, "h", kMaxMoeHidden);
  l.h_inter = dimension(r, s, at, "h_inter", kMaxMoeHidden);
  l.E = dimension(r, s, at, "E", kMaxMoeExperts);
  l.k = dimension(r, s, at, "k", kMaxMoeTopK);
  if (l.k > l.E) r.fail(json_pointer(at, "k"), "top-k = " + std::to_string(l.k) + " exceeds E = " + std::to_string(l.E) + " experts");
  return l;
}

}  // namespace

const char* dtype_name(moe::DType dtype) { return dtype == moe::DType::bf16 ? "bf16" : "fp8"; }

MoeGrid read_moe_grid(const std::string& path) {
  const json doc = read_json_file(path);
  const JsonFields r(path);
  r.object(doc, "", {"description", "dtypes", "skewed_zipf_s", "shapes", "tokens_per_rank", "routings", "extra"});
  MoeGrid g;
  g.file = path;
  if (doc.contains("description")) r.string(doc.at("description"), "/description");
  for (const std::string& d : name_list(r, r.member(doc, "", "dtypes"), "/dtypes", {"bf16", "fp8"}))
    g.dtypes.push_back(d == "bf16" ? moe::DType::bf16 : moe::DType::fp8_e4m3);
  if (doc.contains("skewed_zipf_s")) g.skewed_zipf_s = r.number(doc.at("skewed_zipf_s"), "/skewed_zipf_s", 1e-3, 10.0, "");

  if (doc.contains("extra")) {
    const json& extra = doc.at("extra");
    r.array(extra, "/extra", 0, kMaxGridEntries);
    for (std::size_t i = 0; i < extra.size(); ++i) {
      const std::string at = json_pointer("/extra", i);
      r.object(extra[i], at, {"name", "h", "h_inter", "E", "k", "tokens_per_rank", "routings"});
      GridLayer l = shape(r, extra[i], at);
      l.prefix = (extra[i].contains("name") ? r.string(extra[i].at("name"), json_pointer(at, "name")) : "") + ":";
      l.T = dimension(r, extra[i], at, "tokens_per_rank", kMaxMoeTokens);
      l.routings = name_list(r, r.member(extra[i], at, "routings"), json_pointer(at, "routings"), {"balanced", "skewed"});
      g.layers.push_back(l);
    }
  }

  const json& shapes = r.member(doc, "", "shapes");
  r.array(shapes, "/shapes", 1, kMaxGridEntries);
  const json& tokens = r.member(doc, "", "tokens_per_rank");
  r.array(tokens, "/tokens_per_rank", 1, kMaxGridEntries);
  std::vector<int> Ts;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    Ts.push_back(static_cast<int>(r.integer(tokens[i], json_pointer("/tokens_per_rank", i), 1, kMaxMoeTokens, "tokens")));
  const std::vector<std::string> routings = name_list(r, r.member(doc, "", "routings"), "/routings", {"balanced", "skewed"});
  if (g.layers.size() + shapes.size() * Ts.size() > kMaxGridEntries)
    r.fail("/shapes", std::to_string(shapes.size()) + " shapes x " + std::to_string(Ts.size()) + " token counts (+ " +
                          std::to_string(g.layers.size()) + " extra) exceed the limit of " + std::to_string(kMaxGridEntries) +
                          " layers per grid file");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string at = json_pointer("/shapes", i);
    r.object(shapes[i], at, {"h", "h_inter", "E", "k"});
    const GridLayer s = shape(r, shapes[i], at);
    for (const int T : Ts) {
      GridLayer l = s;
      l.T = T;
      l.routings = routings;
      g.layers.push_back(l);
    }
  }
  return g;
}

}  // namespace xstage::cli
