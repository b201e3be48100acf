// Provenance of a run: when, and by which command. Every result file records it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xstage {

// The process's command line, as the user typed it (set once by main()).
void set_command_line(int argc, const char* const* argv);
const std::string& command_line();

// Current time, UTC, ISO 8601 ("2026-11-29T23:40:00Z").
std::string utc_timestamp();

// Writes `doc` to `path` (indented by `indent` spaces, -1: compact; trailing newline), creating its folder; throws
// xstage::Error naming the path.
void write_json_file(const std::string& path, const nlohmann::json& doc, int indent = 2);

// A double for a result file: NaN (not measured, not meaningful) as null.
nlohmann::json number_or_null(double v);

// Creates a directory (and parents) or throws naming it.
void ensure_directory(const std::string& path);

}  // namespace xstage
