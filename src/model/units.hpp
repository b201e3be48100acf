// Human-readable quantities for the Burst–Gap vocabulary: bytes (binary prefixes, as the paper's MiB),
// nanoseconds, and drain rates (bytes/ns == GB/s). One place for parsing user input and printing it.
#pragma once

#include <cstdint>
#include <string>

namespace xstage::model {

inline constexpr double KiB = 1024.0;
inline constexpr double MiB = 1024.0 * 1024.0;

// A plain decimal number: an optional '-', digits with an optional fraction and exponent ("12", "0.5", "1e3").
// No hex, "inf", "nan", leading '+' or spaces; a value beyond a double is refused. Throws InputError naming `what`.
double parse_decimal(const std::string& text, const std::string& what);
// A decimal integer ("132", "-1"; "010" is ten, "0x10" is refused); throws InputError naming `what` for anything
// else or beyond 64 bits.
std::int64_t parse_decimal_integer(const std::string& text, const std::string& what);

// "32768", "32KiB", "32 KiB", "4.25MiB", "1GiB", "32KB" (KB/MB are taken as SI: 1000, 1000²).
// The number is decimal (as parse_decimal). Throws InputError naming `what` on anything else (empty, negative,
// junk suffix, not finite).
double parse_bytes(const std::string& text, const std::string& what);

// "760", "760ns", "0.76us", "0.76µs", "6 us", "1.5ms". A bare number is nanoseconds.
double parse_time_ns(const std::string& text, const std::string& what);

// Time for one SM to do `flops` when the whole GPU sustains `tflops` TFLOP/s spread evenly over
// `sm_count` SMs (1 TFLOP/s == 1000 FLOP/ns). How the audits turn a throughput assumption into mainloop
// times. Throws InputError unless all three are positive.
double per_sm_time_ns(double flops, double tflops, int sm_count);

// "32.0 KiB", "4.63 MiB", "812 B".
std::string format_bytes(double bytes);
// "760 ns", "6.00 us", "1.25 ms".
std::string format_time_ns(double ns);
// "717 GB/s", "1.57 TB/s".
std::string format_rate(double bytes_per_ns);
// "12.3%" with a sign when asked.
std::string format_percent(double fraction, bool with_sign = false);

}  // namespace xstage::model
