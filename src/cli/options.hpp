// Strict command-line options, shared by every `xstage` subcommand: a number is decimal, finite and inside its
// range, checked where it is read, and a bad one is an InputError naming the option (exit 2). CLI11's own
// conversions read 010 as octal, 0x10 as hex and "nan" as a number, and its list splitting drops empty
// elements; these helpers do none of that.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace xstage::cli {

// The most elements a list option takes (a sweep of gaps or sequence lengths, names).
inline constexpr std::size_t kMaxListElements = 1024;

// An integer option ("-K,--producers"), decimal, in [lo, hi].
CLI::Option* add_integer(CLI::App* cmd, const std::string& names, int& value, std::int64_t lo, std::int64_t hi,
                         const std::string& help);
CLI::Option* add_integer(CLI::App* cmd, const std::string& names, long& value, std::int64_t lo, std::int64_t hi,
                         const std::string& help);
CLI::Option* add_integer(CLI::App* cmd, const std::string& names, std::uint64_t& value, std::int64_t lo,
                         std::int64_t hi, const std::string& help);
// A real-valued option, decimal, finite, in [lo, hi].
CLI::Option* add_number(CLI::App* cmd, const std::string& names, double& value, double lo, double hi,
                        const std::string& help);
// A list option: comma-separated (and/or repeated) elements, none of them empty; each element is checked by
// the command that reads it (times, sizes, names).
CLI::Option* add_list(CLI::App* cmd, const std::string& names, std::vector<std::string>& value, const std::string& help);
// A list of decimal integers in [lo, hi], e.g. --seq-len 1024,8192.
CLI::Option* add_integer_list(CLI::App* cmd, const std::string& names, std::vector<int>& value, std::int64_t lo,
                              std::int64_t hi, const std::string& help);
CLI::Option* add_integer_list(CLI::App* cmd, const std::string& names, std::vector<std::int64_t>& value, std::int64_t lo,
                              std::int64_t hi, const std::string& help);
// A path option: given, it must not be empty (an empty path never means "the default").
CLI::Option* add_path(CLI::App* cmd, const std::string& names, std::string& value, const std::string& help);

// Runs `f` (reading the file `option` names, or checking what follows from it) and puts the option's name in
// front of any InputError.
template <class F>
auto with_option_name(const std::string& option, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InputError& e) {
    throw InputError(option + ": " + e.what());
  }
}

// "a,b,c" -> {"a", "b", "c"}; an empty element ("a,,b", "a,", "") or more than kMaxListElements is an InputError
// naming `option`.
std::vector<std::string> split_list(const std::string& text, const std::string& option);

// InputError "<option>: <what> must be in [lo, hi] (got <value>)" unless lo <= value <= hi (and finite).
void require_in_range(double value, double lo, double hi, const std::string& option, const std::string& what);

}  // namespace xstage::cli
