// Runs the built `xstage` binary and captures its exit status, stdout and stderr (tests/cli/*).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace xstage_cli_test {

struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};

// Runs `xstage <args>` through the shell, with `env` (e.g. "RANK=0 WORLD_SIZE=1") in its environment;
// stderr goes to a scratch file so both streams can be checked. The CLI tests test what the command does
// with its arguments, not GPU work: every run sees no GPU (CUDA_VISIBLE_DEVICES empty), so they mean the same
// on CI and on a GPU machine.
inline CliRun xstage(const std::string& args, const std::string& env = "") {
  namespace fs = std::filesystem;
  const fs::path err_file = fs::temp_directory_path() / ("xstage_cli_" + std::to_string(::getpid()) + ".err");
  const std::string cmd =
      "env CUDA_VISIBLE_DEVICES= " + env + " '" + XSTAGE_BINARY + "' " + args + " 2>'" + err_file.string() + "'";
  CliRun r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  fs::remove(err_file);
  return r;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

#define EXPECT_CONTAINS(text, needle) \
  EXPECT_TRUE(::xstage_cli_test::contains(text, needle)) << "'" << (needle) << "' not in:\n" << (text)

// A bad input: exit status 2 and "xstage: error: ..." naming the problem on stderr.
inline void expect_input_error(const std::string& args, const std::string& fragment) {
  const CliRun r = xstage(args);
  EXPECT_EQ(r.status, 2) << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_CONTAINS(r.err, "xstage: error:");
  EXPECT_CONTAINS(r.err, fragment);
}

}  // namespace xstage_cli_test
