// Parsing and printing of bytes, times and rates.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "model/units.hpp"

namespace xstage::model {
namespace {

TEST(Units, ParseBytes) {
  EXPECT_DOUBLE_EQ(parse_bytes("32768", "B"), 32768.0);
  EXPECT_DOUBLE_EQ(parse_bytes("32KiB", "B"), 32768.0);
  EXPECT_DOUBLE_EQ(parse_bytes(" 32 KiB ", "B"), 32768.0);
  EXPECT_DOUBLE_EQ(parse_bytes("4.25MiB", "Q"), 4.25 * MiB);
  EXPECT_DOUBLE_EQ(parse_bytes("32KB", "B"), 32000.0);
  EXPECT_DOUBLE_EQ(parse_bytes("1e3", "B"), 1000.0);
  EXPECT_THROW(parse_bytes("", "B"), InputError);
  EXPECT_THROW(parse_bytes("-4KiB", "B"), InputError);
  EXPECT_THROW(parse_bytes("4 parsecs", "B"), InputError);
  EXPECT_THROW(parse_bytes("inf", "B"), InputError);
  try {
    parse_bytes("12 furlongs", "--burst");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--burst"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("furlongs"), std::string::npos);
  }
}

TEST(Units, ParseTime) {
  EXPECT_DOUBLE_EQ(parse_time_ns("760", "G"), 760.0);
  EXPECT_DOUBLE_EQ(parse_time_ns("760ns", "G"), 760.0);
  EXPECT_DOUBLE_EQ(parse_time_ns("0.76us", "G"), 760.0);
  EXPECT_DOUBLE_EQ(parse_time_ns("0.76\xC2\xB5s", "G"), 760.0);
  EXPECT_DOUBLE_EQ(parse_time_ns("1.5ms", "G"), 1.5e6);
  EXPECT_THROW(parse_time_ns("3 weeks", "G"), InputError);
  EXPECT_THROW(parse_time_ns("-1us", "G"), InputError);
  EXPECT_THROW(parse_time_ns("nan", "G"), InputError);
}

// Decimal only: strtod would also read hex, "inf", "nan" and leading '+' or spaces, and strtol octal.
TEST(Units, NumbersAreDecimalOnly) {
  EXPECT_DOUBLE_EQ(parse_decimal("12", "--x"), 12.0);
  EXPECT_DOUBLE_EQ(parse_decimal("-0.5", "--x"), -0.5);
  EXPECT_DOUBLE_EQ(parse_decimal(".5", "--x"), 0.5);
  EXPECT_DOUBLE_EQ(parse_decimal("1e3", "--x"), 1000.0);
  EXPECT_DOUBLE_EQ(parse_decimal("4.25E-1", "--x"), 0.425);
  for (const char* bad : {"", " 1", "1 ", "+1", "0x10", "inf", "nan", "1e", "1e+", ".", "-", "1.2.3", "1,5", "1e309"})
    EXPECT_THROW(parse_decimal(bad, "--x"), InputError) << "'" << bad << "'";
  EXPECT_EQ(parse_decimal_integer("010", "-K"), 10);  // decimal, not octal
  EXPECT_EQ(parse_decimal_integer("-7", "-K"), -7);
  for (const char* bad : {"", "0x10", "1.0", "1e3", "+3", " 3", "3 ", "12abc", "99999999999999999999"})
    EXPECT_THROW(parse_decimal_integer(bad, "-K"), InputError) << "'" << bad << "'";
  try {
    parse_decimal_integer("0x10", "--producers");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--producers: '0x10' is not a decimal integer"), std::string::npos) << e.what();
  }
  // Times and sizes read their number the same way.
  EXPECT_THROW(parse_time_ns("0x10us", "G"), InputError);
  EXPECT_THROW(parse_time_ns("1e400us", "G"), InputError);
  EXPECT_THROW(parse_bytes("+4KiB", "B"), InputError);
  EXPECT_DOUBLE_EQ(parse_time_ns("1e-3us", "G"), 1.0);
}

TEST(Units, Format) {
  EXPECT_EQ(format_bytes(32768.0), "32.0 KiB");
  EXPECT_EQ(format_bytes(4.25 * MiB), "4.25 MiB");
  EXPECT_EQ(format_bytes(812.0), "812 B");
  EXPECT_EQ(format_time_ns(760.0), "760 ns");
  EXPECT_EQ(format_time_ns(6003.8), "6.00 us");
  EXPECT_EQ(format_rate(717.0), "717 GB/s");
  EXPECT_EQ(format_rate(1570.0), "1.57 TB/s");
  EXPECT_EQ(format_percent(0.123), "12.3%");
  EXPECT_EQ(format_percent(-0.5, true), "-50.0%");
}

TEST(Units, PerSmTime) {
  // 6e6 FLOP on one of 100 SMs of a 600 TFLOP/s GPU: 6e6 / (6e5/100 FLOP/ns) = 1000 ns.
  EXPECT_DOUBLE_EQ(per_sm_time_ns(6e6, 600.0, 100), 1000.0);
  EXPECT_THROW(per_sm_time_ns(6e6, 0.0, 100), InputError);
  EXPECT_THROW(per_sm_time_ns(6e6, 600.0, 0), InputError);
}

}  // namespace
}  // namespace xstage::model
