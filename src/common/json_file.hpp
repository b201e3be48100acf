// JSON input files (platform files, grid files): the file is checked before it is read, the text before
// it is parsed, and every field against a schema before it is used. Every error names the file and, for a
// field, its JSON pointer (RFC 6901) and the range it must lie in.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace xstage {

// Bounds on an input file, checked before parsing: the shipped files are a few KiB and nest 4 deep.
inline constexpr std::uintmax_t kMaxJsonFileBytes = 4u << 20;  // 4 MiB
inline constexpr int kMaxJsonDepth = 16;

// Reads and parses `path`. Refuses (InputError naming the path) an empty path, a missing file, a
// directory, anything but a regular file (FIFO, device, socket), a file over kMaxJsonFileBytes, nesting
// deeper than kMaxJsonDepth, a duplicate key, and text that is not JSON (with the line, column and the
// pointer of the value being read, e.g. a number that overflows a double).
nlohmann::json read_json_file(const std::string& path);

// The JSON pointer of `key` inside the value at `parent` ("" is the document): "/a/b~1c".
std::string json_pointer(const std::string& parent, const std::string& key);
std::string json_pointer(const std::string& parent, std::size_t index);

// Field-by-field checks of a parsed document. Every failure is an InputError
// "<source>: <pointer>: <problem>", e.g. "p.json: /store_paths/tma_bulk/R_bytes_per_ns: must be a number in
// [0.001, 1e+05] bytes/ns (got -717)". `at` is always the pointer of the value being checked.
class JsonFields {
 public:
  explicit JsonFields(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& at, const std::string& problem) const;

  // `v` must be an object whose keys are all in `allowed` (a misspelt key is an error, not ignored).
  void object(const nlohmann::json& v, const std::string& at, std::initializer_list<const char*> allowed) const;
  // The member `key` of the object `obj` at `at`; an error if it is missing.
  const nlohmann::json& member(const nlohmann::json& obj, const std::string& at, const std::string& key) const;
  // `v` must be an array of min_size..max_size elements.
  void array(const nlohmann::json& v, const std::string& at, std::size_t min_size, std::size_t max_size) const;
  // A finite number in [lo, hi]; `unit` ("ns", "bytes", "" for none) is printed with the range.
  double number(const nlohmann::json& v, const std::string& at, double lo, double hi, const std::string& unit) const;
  // An integer (no fraction, no exponent) in [lo, hi].
  std::int64_t integer(const nlohmann::json& v, const std::string& at, std::int64_t lo, std::int64_t hi,
                       const std::string& unit) const;
  // A string, one of `allowed` when that is not empty.
  std::string string(const nlohmann::json& v, const std::string& at, std::initializer_list<const char*> allowed = {}) const;
  bool boolean(const nlohmann::json& v, const std::string& at) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace xstage
