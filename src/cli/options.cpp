#include "cli/options.hpp"

#include <cmath>
#include <cstdio>

#include "common/error.hpp"
#include "model/units.hpp"

namespace xstage::cli {

namespace {

// "-K,--producers" -> "--producers": the name messages use (the long one, as the help shows it).
std::string long_name(const std::string& names) {
  std::string best;
  for (const std::string& n : split_list(names, "option names"))
    if (n.size() > best.size()) best = n;
  return best;
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::int64_t checked_integer(const std::string& text, std::int64_t lo, std::int64_t hi, const std::string& option) {
  const std::int64_t v = model::parse_decimal_integer(text, option);
  if (v < lo || v > hi)
    throw InputError(option + ": must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " +
                     text + ")");
  return v;
}

template <class Int>
CLI::Option* add_integer_impl(CLI::App* cmd, const std::string& names, Int& value, std::int64_t lo, std::int64_t hi,
                              const std::string& help) {
  const std::string option = long_name(names);
  return cmd
      ->add_option_function<std::string>(
          names, [&value, lo, hi, option](const std::string& s) { value = static_cast<Int>(checked_integer(s, lo, hi, option)); },
          help)
      ->type_name("INT");
}

template <class Int>
CLI::Option* add_integer_list_impl(CLI::App* cmd, const std::string& names, std::vector<Int>& value, std::int64_t lo,
                                   std::int64_t hi, const std::string& help) {
  const std::string option = long_name(names);
  return cmd
      ->add_option_function<std::vector<std::string>>(
          names,
          [&value, lo, hi, option](const std::vector<std::string>& given) {
            value.clear();
            for (const std::string& g : given)
              for (const std::string& s : split_list(g, option)) value.push_back(static_cast<Int>(checked_integer(s, lo, hi, option)));
            if (value.size() > kMaxListElements)
              throw InputError(option + ": more than " + std::to_string(kMaxListElements) + " elements");
          },
          help)
      ->type_name("INT");
}

}  // namespace

std::vector<std::string> split_list(const std::string& text, const std::string& option) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = text.find(',', begin);
    const std::string part = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (part.empty())
      throw InputError(option + ": empty element in '" + text + "' (a list is comma-separated values, e.g. 1,2,3)");
    out.push_back(part);
    if (out.size() > kMaxListElements)
      throw InputError(option + ": more than " + std::to_string(kMaxListElements) + " elements in one list");
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

void require_in_range(double value, double lo, double hi, const std::string& option, const std::string& what) {
  if (!(std::isfinite(value) && value >= lo && value <= hi))
    throw InputError(option + ": " + what + " must be in [" + number_text(lo) + ", " + number_text(hi) + "] (got " +
                     number_text(value) + ")");
}

CLI::Option* add_integer(CLI::App* cmd, const std::string& names, int& value, std::int64_t lo, std::int64_t hi,
                         const std::string& help) {
  return add_integer_impl(cmd, names, value, std::max<std::int64_t>(lo, INT32_MIN), std::min<std::int64_t>(hi, INT32_MAX), help);
}

CLI::Option* add_integer(CLI::App* cmd, const std::string& names, long& value, std::int64_t lo, std::int64_t hi,
                         const std::string& help) {
  return add_integer_impl(cmd, names, value, lo, hi, help);
}

CLI::Option* add_integer(CLI::App* cmd, const std::string& names, std::uint64_t& value, std::int64_t lo, std::int64_t hi,
                         const std::string& help) {
  return add_integer_impl(cmd, names, value, std::max<std::int64_t>(lo, 0), hi, help);
}

CLI::Option* add_number(CLI::App* cmd, const std::string& names, double& value, double lo, double hi,
                        const std::string& help) {
  const std::string option = long_name(names);
  return cmd
      ->add_option_function<std::string>(
          names,
          [&value, lo, hi, option](const std::string& s) {
            const double v = model::parse_decimal(s, option);
            if (v < lo || v > hi)
              throw InputError(option + ": must be a number in [" + number_text(lo) + ", " + number_text(hi) + "] (got " + s + ")");
            value = v;
          },
          help)
      ->type_name("NUMBER");
}

CLI::Option* add_list(CLI::App* cmd, const std::string& names, std::vector<std::string>& value, const std::string& help) {
  const std::string option = long_name(names);
  return cmd
      ->add_option_function<std::vector<std::string>>(
          names,
          [&value, option](const std::vector<std::string>& given) {
            value.clear();
            for (const std::string& g : given)
              for (std::string& s : split_list(g, option)) value.push_back(std::move(s));
            if (value.size() > kMaxListElements)
              throw InputError(option + ": more than " + std::to_string(kMaxListElements) + " elements");
          },
          help)
      ->type_name("LIST");
}

CLI::Option* add_integer_list(CLI::App* cmd, const std::string& names, std::vector<int>& value, std::int64_t lo,
                              std::int64_t hi, const std::string& help) {
  return add_integer_list_impl(cmd, names, value, std::max<std::int64_t>(lo, INT32_MIN), std::min<std::int64_t>(hi, INT32_MAX), help);
}

CLI::Option* add_integer_list(CLI::App* cmd, const std::string& names, std::vector<std::int64_t>& value, std::int64_t lo,
                              std::int64_t hi, const std::string& help) {
  return add_integer_list_impl(cmd, names, value, lo, hi, help);
}

CLI::Option* add_path(CLI::App* cmd, const std::string& names, std::string& value, const std::string& help) {
  const std::string option = long_name(names);
  return cmd
      ->add_option_function<std::string>(
          names,
          [&value, option](const std::string& s) {
            if (s.empty()) throw InputError(option + ": the path is empty (leave the option out for its default)");
            value = s;
          },
          help)
      ->type_name("PATH");
}

}  // namespace xstage::cli
