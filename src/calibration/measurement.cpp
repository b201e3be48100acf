// BurstSample CSV: the raw artefact of `xstage calibrate`, and the input of the fit and of
// tools/calibration/plot.py. One header row naming the columns, then one sample per row. Columns are
// looked up by name, so a reader tolerates reordered or extra columns; every known column is required.
#include "calibration/measurement.hpp"

#include <array>
#include <charconv>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/error.hpp"

namespace xstage::calibration {

const char* to_string(Mode mode) { return mode == Mode::isolated ? "isolated" : "periodic"; }

const char* to_string(Destination dest) { return dest == Destination::local ? "local" : "remote"; }

const char* to_string(Sweep sweep) {
  switch (sweep) {
    case Sweep::zero_gap: return "zero_gap";
    case Sweep::plateau: return "plateau";
    case Sweep::gap: return "gap";
    case Sweep::isolated: return "isolated";
    case Sweep::unset: break;
  }
  return "unset";
}

namespace {

// Shortest decimal that reads back to the same double, so a CSV round trip is exact.
std::string format_double(double value) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  return std::string(buf.data(), end);
}

// A column: its name, how to print a sample's field, how to parse text into it (false if malformed).
struct Column {
  const char* name;
  std::function<std::string(const BurstSample&)> get;
  std::function<bool(const std::string&, BurstSample&)> set;
};

template <typename T>
bool parse_number(const std::string& text, T& out) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last && first != last;
}

template <typename Enum, std::size_t N>
bool parse_enum(const std::string& text, Enum& out, const std::array<Enum, N>& values) {
  for (Enum v : values) {
    if (text == to_string(v)) { out = v; return true; }
  }
  return false;
}

#define XSTAGE_NUMBER_COLUMN(field)                                                             \
  Column {                                                                                      \
    #field, [](const BurstSample& s) {                                                          \
      if constexpr (std::is_floating_point_v<decltype(s.field)>) return format_double(s.field);  \
      else return std::to_string(s.field);                                                      \
    },                                                                                          \
        [](const std::string& t, BurstSample& s) { return parse_number(t, s.field); }           \
  }

const std::vector<Column>& columns() {
  static const std::vector<Column> cols = {
      {"sweep", [](const BurstSample& s) { return std::string(to_string(s.sweep)); },
       [](const std::string& t, BurstSample& s) {
         return parse_enum(t, s.sweep, std::array{Sweep::zero_gap, Sweep::plateau, Sweep::gap,
                                                  Sweep::isolated, Sweep::unset});
       }},
      {"mode", [](const BurstSample& s) { return std::string(to_string(s.mode)); },
       [](const std::string& t, BurstSample& s) {
         return parse_enum(t, s.mode, std::array{Mode::periodic, Mode::isolated});
       }},
      // Store paths spelled as in the platform file (model::to_string).
      {"path", [](const BurstSample& s) { return std::string(model::to_string(s.path)); },
       [](const std::string& t, BurstSample& s) {
         for (StorePath p : {StorePath::st_global_16B, StorePath::tma_bulk}) {
           if (t == model::to_string(p)) { s.path = p; return true; }
         }
         return false;
       }},
      {"dest", [](const BurstSample& s) { return std::string(to_string(s.dest)); },
       [](const std::string& t, BurstSample& s) {
         return parse_enum(t, s.dest, std::array{Destination::remote, Destination::local});
       }},
      XSTAGE_NUMBER_COLUMN(K),
      XSTAGE_NUMBER_COLUMN(B_bytes),
      XSTAGE_NUMBER_COLUMN(gap_ns_requested),
      XSTAGE_NUMBER_COLUMN(gap_ns),
      XSTAGE_NUMBER_COLUMN(T_iss_ns),
      XSTAGE_NUMBER_COLUMN(T_iss_p10_ns),
      XSTAGE_NUMBER_COLUMN(T_iss_p90_ns),
      XSTAGE_NUMBER_COLUMN(T_period_ns),
      XSTAGE_NUMBER_COLUMN(wall_bytes_per_ns),
      XSTAGE_NUMBER_COLUMN(sm_clock_mhz),
      XSTAGE_NUMBER_COLUMN(n_bursts),
      XSTAGE_NUMBER_COLUMN(rank),
  };
  return cols;
}
#undef XSTAGE_NUMBER_COLUMN

// Fields never contain commas or quotes (numbers and identifiers), so a plain split suffices.
std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  for (auto& f : fields) {  // tolerate spaces around fields
    const auto b = f.find_first_not_of(" \t");
    const auto e = f.find_last_not_of(" \t");
    f = (b == std::string::npos) ? std::string() : f.substr(b, e - b + 1);
  }
  return fields;
}

}  // namespace

void write_samples_csv(const std::string& path, const std::vector<BurstSample>& samples) {
  std::ofstream out(path);
  if (!out) throw Error("cannot write samples CSV '" + path + "'");
  const auto& cols = columns();
  for (std::size_t c = 0; c < cols.size(); ++c) out << (c ? "," : "") << cols[c].name;
  out << '\n';
  for (const auto& s : samples) {
    for (std::size_t c = 0; c < cols.size(); ++c) out << (c ? "," : "") << cols[c].get(s);
    out << '\n';
  }
  out.flush();
  if (!out) throw Error("error while writing samples CSV '" + path + "'");
}

std::vector<BurstSample> read_samples_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open samples CSV '" + path + "'");
  const auto where = [&](int line_no) { return "samples CSV '" + path + "' line " + std::to_string(line_no); };

  std::string line;
  int line_no = 0;
  std::vector<std::string> header;
  while (header.empty() && std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) header = split_fields(line);
  }
  if (header.empty()) throw InputError("samples CSV '" + path + "' is empty (expected a header row)");

  // Map each known column to its position in this file's header.
  std::map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < header.size(); ++i) position[header[i]] = i;
  std::vector<std::pair<const Column*, std::size_t>> bound;
  for (const auto& col : columns()) {
    auto it = position.find(col.name);
    if (it == position.end())
      throw InputError(where(line_no) + ": header lacks column '" + col.name + "'");
    bound.emplace_back(&col, it->second);
  }

  std::vector<BurstSample> samples;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    const auto fields = split_fields(line);
    if (fields.size() != header.size())
      throw InputError(where(line_no) + ": expected " + std::to_string(header.size()) + " fields, found " +
                       std::to_string(fields.size()));
    BurstSample s;
    for (const auto& [col, idx] : bound) {
      if (!col->set(fields[idx], s))
        throw InputError(where(line_no) + ": column '" + col->name + "' has invalid value '" + fields[idx] + "'");
    }
    samples.push_back(s);
  }
  return samples;
}

}  // namespace xstage::calibration
