#include "common/json_file.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "common/error.hpp"

namespace xstage {

namespace {

using nlohmann::json;

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// A value as the error message shows it: its JSON text, cut short (a field may hold megabytes).
std::string shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// What a path is when it is not a regular file, for the refusal.
const char* file_kind(std::filesystem::file_type t) {
  switch (t) {
    case std::filesystem::file_type::directory: return "a directory";
    case std::filesystem::file_type::fifo: return "a FIFO";
    case std::filesystem::file_type::socket: return "a socket";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::block: return "a block device";
    default: return "not a regular file";
  }
}

// The whole file as text, after checking what it is and how big.
std::string read_bounded(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw InputError("an input file path is empty");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError("'" + path + "': no such file");
  if (!fs::is_regular_file(st)) throw InputError("'" + path + "' is " + file_kind(st.type()) + ", not a JSON file");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw InputError("'" + path + "': cannot read its size: " + ec.message());
  if (size > kMaxJsonFileBytes)
    throw InputError("'" + path + "' is " + std::to_string(size) + " bytes; input files are limited to " +
                     std::to_string(kMaxJsonFileBytes) + " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("'" + path + "': cannot open it for reading");
  // Read one byte past the limit, so a file that grew after the size check is still refused.
  std::string text(static_cast<std::size_t>(kMaxJsonFileBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw InputError("'" + path + "': read error");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxJsonFileBytes)
    throw InputError("'" + path + "' grew past " + std::to_string(kMaxJsonFileBytes) + " bytes while being read");
  return text;
}

// Where the parser is, as a JSON pointer, kept up to date from the parser's callbacks; also bounds the nesting
// and refuses duplicate keys.
class ParsePosition {
 public:
  explicit ParsePosition(const std::string& path) : path_(path) {}

  bool on_event(int depth, json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth + 1 > kMaxJsonDepth)
          throw InputError("'" + path_ + "': " + pointer_or_top() + ": nesting deeper than " + std::to_string(kMaxJsonDepth) +
                           " levels");
        frames_.push_back({event == json::parse_event_t::array_start, {}, 0, {}});
        break;
      case json::parse_event_t::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw InputError("'" + path_ + "': " + pointer() + ": duplicate key");
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        next_element();
        break;
      case json::parse_event_t::value:
        next_element();
        break;
    }
    return true;
  }

  // The pointer of the value being read.
  std::string pointer() const {
    std::string p;
    for (const Frame& f : frames_) p = f.array ? json_pointer(p, f.index) : json_pointer(p, f.key);
    return p;
  }
  std::string pointer_or_top() const {
    const std::string p = pointer();
    return p.empty() ? "the top level" : p;
  }

 private:
  struct Frame {
    bool array = false;
    std::string key;             // objects: the key being read
    std::size_t index = 0;       // arrays: the element being read
    std::set<std::string> keys;  // objects: the keys seen
  };
  void next_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  const std::string& path_;
  std::vector<Frame> frames_;
};

// nlohmann's messages start with "[json.exception.parse_error.101] "; the tag means nothing to a user.
std::string without_tag(const std::string& what) {
  const auto close = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

}  // namespace

std::string json_pointer(const std::string& parent, const std::string& key) {
  std::string escaped;
  for (const char c : key) {
    if (c == '~') escaped += "~0";
    else if (c == '/') escaped += "~1";
    else escaped += c;
  }
  return parent + "/" + escaped;
}

std::string json_pointer(const std::string& parent, std::size_t index) { return parent + "/" + std::to_string(index); }

json read_json_file(const std::string& path) {
  const std::string text = read_bounded(path);
  ParsePosition position(path);
  try {
    return json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
      return position.on_event(depth, event, parsed);
    });
  } catch (const json::exception& e) {
    throw InputError("'" + path + "' is not valid JSON (at " + position.pointer_or_top() + "): " + without_tag(e.what()));
  }
}

void JsonFields::fail(const std::string& at, const std::string& problem) const {
  throw InputError(source_ + ": " + (at.empty() ? std::string("the top level") : at) + ": " + problem);
}

void JsonFields::object(const json& v, const std::string& at, std::initializer_list<const char*> allowed) const {
  std::string keys;
  for (const char* k : allowed) keys += std::string(keys.empty() ? "" : ", ") + k;
  if (!v.is_object()) fail(at, "must be an object with " + keys + " (got " + std::string(v.type_name()) + ")");
  for (const auto& [key, value] : v.items()) {
    bool known = false;
    for (const char* k : allowed) known = known || key == k;
    if (!known) fail(json_pointer(at, key), "unknown key (expected one of " + keys + ")");
  }
}

const json& JsonFields::member(const json& obj, const std::string& at, const std::string& key) const {
  if (!obj.is_object()) fail(at, "must be an object");
  const auto it = obj.find(key);
  if (it == obj.end()) fail(json_pointer(at, key), "missing");
  return *it;
}

void JsonFields::array(const json& v, const std::string& at, std::size_t min_size, std::size_t max_size) const {
  if (!v.is_array()) fail(at, "must be an array (got " + std::string(v.type_name()) + ")");
  if (v.size() < min_size || v.size() > max_size)
    fail(at, "must hold " + std::to_string(min_size) + " to " + std::to_string(max_size) + " elements (got " +
                 std::to_string(v.size()) + ")");
}

double JsonFields::number(const json& v, const std::string& at, double lo, double hi, const std::string& unit) const {
  const std::string range = "[" + number_text(lo) + ", " + number_text(hi) + "]" + (unit.empty() ? "" : " " + unit);
  if (!v.is_number()) fail(at, "must be a number in " + range + " (got " + shown(v) + ")");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) fail(at, "must be a number in " + range + " (got " + shown(v) + ")");
  return x;
}

std::int64_t JsonFields::integer(const json& v, const std::string& at, std::int64_t lo, std::int64_t hi,
                                 const std::string& unit) const {
  const std::string range =
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]" + (unit.empty() ? "" : " " + unit);
  if (!v.is_number_integer()) fail(at, "must be an integer in " + range + " (got " + shown(v) + ")");
  // Unsigned values above INT64_MAX are out of every range asked for here.
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    fail(at, "must be an integer in " + range + " (got " + shown(v) + ")");
  const std::int64_t x = v.get<std::int64_t>();
  if (x < lo || x > hi) fail(at, "must be an integer in " + range + " (got " + shown(v) + ")");
  return x;
}

std::string JsonFields::string(const json& v, const std::string& at, std::initializer_list<const char*> allowed) const {
  std::string names;
  for (const char* a : allowed) names += std::string(names.empty() ? "" : ", ") + "\"" + a + "\"";
  if (!v.is_string()) fail(at, allowed.size() ? "must be one of " + names + " (got " + shown(v) + ")" : "must be a string");
  const std::string s = v.get<std::string>();
  if (allowed.size() == 0) return s;
  for (const char* a : allowed)
    if (s == a) return s;
  fail(at, "must be one of " + names + " (got " + shown(v) + ")");
}

bool JsonFields::boolean(const json& v, const std::string& at) const {
  if (!v.is_boolean()) fail(at, "must be true or false (got " + shown(v) + ")");
  return v.get<bool>();
}

}  // namespace xstage
