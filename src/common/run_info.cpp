#include "common/run_info.hpp"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"

namespace xstage {

namespace {
std::string g_command_line;
}

void set_command_line(int argc, const char* const* argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) {
    if (i) g_command_line += ' ';
    g_command_line += argv[i];
  }
}

const std::string& command_line() { return g_command_line; }

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

void write_json_file(const std::string& path, const nlohmann::json& doc, int indent) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) ensure_directory(p.parent_path().string());
  std::ofstream out(path);
  if (!out) throw Error("cannot open '" + path + "' for writing");
  out << doc.dump(indent) << '\n';
  if (!out) throw Error("failed writing '" + path + "'");
}

void ensure_directory(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error("cannot create directory '" + path + "': " + ec.message());
}

}  // namespace xstage
