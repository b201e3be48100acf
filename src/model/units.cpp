#include "model/units.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace xstage::model {

namespace {

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The length of the plain decimal number at the start of `s`: an optional '-', digits with an optional
// fraction, an optional exponent ("12", "-0.5", ".5", "1e3", "4.25e-1"); 0 if there is none. Everything strtod
// would also take (hex, "inf", "nan", a leading '+' or spaces) is left out on purpose.
std::size_t decimal_length(const std::string& s) {
  auto digits = [&](std::size_t i) {
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i;
  };
  std::size_t i = s.size() > 0 && s[0] == '-' ? 1 : 0;
  const std::size_t int_end = digits(i);
  std::size_t end = int_end;
  if (end < s.size() && s[end] == '.') end = digits(end + 1);
  if (end - i < 1 || (int_end == i && end == int_end + 1)) return 0;  // no digits at all, or a bare "."
  if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
    std::size_t e = end + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    const std::size_t exp_end = digits(e);
    if (exp_end > e) end = exp_end;  // "2e" is 2 followed by a unit 'e', which the caller refuses
  }
  return end;
}

// Splits "4.25MiB" into 4.25 and "MiB". Throws unless the number part is a finite, non-negative decimal number.
std::pair<double, std::string> split_number(const std::string& text, const std::string& what,
                                            const char* expected) {
  const std::string s = trim(text);
  const std::size_t n = decimal_length(s);
  if (n == 0) throw InputError(what + ": '" + text + "' is not a number (expected e.g. " + expected + ")");
  const double value = std::strtod(s.substr(0, n).c_str(), nullptr) + 0.0;  // + 0.0: "-0" is 0, not a negative zero
  if (!std::isfinite(value)) throw InputError(what + ": '" + text + "' is not a finite number");
  if (value < 0.0) throw InputError(what + ": must not be negative (got '" + text + "')");
  return {value, trim(s.substr(n))};
}

std::string printf_string(const char* fmt, double a, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a, unit);
  return buf;
}

}  // namespace

double parse_decimal(const std::string& text, const std::string& what) {
  const std::size_t n = decimal_length(text);
  if (n == 0 || n != text.size())
    throw InputError(what + ": '" + text + "' is not a number (expected a decimal such as 12, 0.5 or 1e3)");
  const double value = std::strtod(text.c_str(), nullptr) + 0.0;  // "-0" is 0, not a negative zero
  if (!std::isfinite(value)) throw InputError(what + ": '" + text + "' is beyond the range of a number");
  return value;
}

std::int64_t parse_decimal_integer(const std::string& text, const std::string& what) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::size_t first = negative ? 1 : 0;
  bool digits = text.size() > first;
  for (std::size_t i = first; i < text.size(); ++i) digits = digits && std::isdigit(static_cast<unsigned char>(text[i]));
  if (!digits) throw InputError(what + ": '" + text + "' is not a decimal integer");
  errno = 0;
  const long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE) throw InputError(what + ": '" + text + "' is beyond the range of an integer");
  return value;
}

double parse_bytes(const std::string& text, const std::string& what) {
  static const std::vector<std::pair<std::string, double>> kSuffixes = {
      {"", 1.0},         {"B", 1.0},       {"KiB", KiB},   {"MiB", MiB}, {"GiB", MiB * KiB},
      {"K", KiB},        {"M", MiB},       {"KB", 1e3},    {"MB", 1e6},  {"GB", 1e9},
  };
  const auto [value, suffix] = split_number(text, what, "32768, 32KiB or 4.25MiB");
  for (const auto& [name, scale] : kSuffixes)
    if (suffix == name) return value * scale;
  throw InputError(what + ": unknown size unit '" + suffix + "' in '" + text +
                   "' (use B, KiB, MiB, GiB, or KB/MB/GB for powers of 1000)");
}

double parse_time_ns(const std::string& text, const std::string& what) {
  static const std::vector<std::pair<std::string, double>> kSuffixes = {
      {"", 1.0}, {"ns", 1.0}, {"us", 1e3}, {"\xC2\xB5s", 1e3}, {"ms", 1e6}, {"s", 1e9},
  };
  const auto [value, suffix] = split_number(text, what, "760, 760ns, 0.76us or 1.5ms");
  for (const auto& [name, scale] : kSuffixes)
    if (suffix == name) return value * scale;
  throw InputError(what + ": unknown time unit '" + suffix + "' in '" + text +
                   "' (use ns, us or ms; a bare number is nanoseconds)");
}

double per_sm_time_ns(double flops, double tflops, int sm_count) {
  if (!std::isfinite(flops) || flops <= 0.0) throw InputError("FLOP count must be positive");
  if (!std::isfinite(tflops) || tflops <= 0.0)
    throw InputError("the TFLOP/s throughput assumption must be positive (got " + std::to_string(tflops) + ")");
  if (sm_count <= 0) throw InputError("the SM count must be positive (got " + std::to_string(sm_count) + ")");
  return flops * sm_count / (tflops * 1e3);
}

std::string format_bytes(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= MiB * KiB) return printf_string("%.2f %s", bytes / (MiB * KiB), "GiB");
  if (a >= MiB) return printf_string("%.2f %s", bytes / MiB, "MiB");
  if (a >= KiB) return printf_string("%.1f %s", bytes / KiB, "KiB");
  return printf_string("%.0f %s", bytes, "B");
}

std::string format_time_ns(double ns) {
  const double a = std::fabs(ns);
  if (a >= 1e6) return printf_string("%.3g %s", ns / 1e6, "ms");
  if (a >= 1e3) return printf_string("%.2f %s", ns / 1e3, "us");
  return printf_string("%.0f %s", ns, "ns");
}

std::string format_rate(double bytes_per_ns) {
  // 1 byte/ns == 1 GB/s.
  if (std::fabs(bytes_per_ns) >= 1e3) return printf_string("%.2f %s", bytes_per_ns / 1e3, "TB/s");
  return printf_string("%.0f %s", bytes_per_ns, "GB/s");
}

std::string format_percent(double fraction, bool with_sign) {
  return printf_string(with_sign ? "%+.1f%s" : "%.1f%s", fraction * 100.0, "%");
}

}  // namespace xstage::model
