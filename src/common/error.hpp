// Errors that tell the user what was wrong and what to do about it.
//
// Library code never calls exit(): it throws xstage::Error, and the CLI turns that into a message on
// stderr and a non-zero exit status. CUDA and NCCL return codes are checked at every call site with
// XSTAGE_CUDA_CHECK / XSTAGE_NCCL_CHECK (src/common/cuda_check.hpp).
#pragma once

#include <stdexcept>
#include <string>

namespace xstage {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Invalid user input (arguments, files, shapes). The CLI maps it to exit status 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// The machine cannot run the request (no GPU, too few GPUs, no peer access). Exit status 3.
class PlatformError : public Error {
 public:
  explicit PlatformError(const std::string& what) : Error(what) {}
};

// Not an error message: the process should exit with `code` (e.g. the status of a failed rank that
// already reported why). main() returns it without printing anything.
class ExitStatus : public std::exception {
 public:
  explicit ExitStatus(int code) : code_(code) {}
  int code() const { return code_; }
  const char* what() const noexcept override { return "exit status"; }

 private:
  int code_;
};

// Throws InputError(message) unless `condition` holds. `message` (any expression a std::string can be made
// from) is evaluated only when the condition fails, so that checks on per-call paths build no strings.
#define XSTAGE_REQUIRE(condition, message)                   \
  do {                                                       \
    if (!(condition)) throw ::xstage::InputError(message);   \
  } while (0)

// Throws InputError naming `name` unless `x` is finite and > 0.
void require_positive(double x, const std::string& name);

}  // namespace xstage
