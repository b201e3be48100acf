// A fuzz test of the `xstage` command line, run by CI: a few thousand generated hostile invocations (numbers at and
// past every limit, NaN/inf, hex and octal, unit abuse, empty and 2000-element lists, mutated and truncated
// platform and grid files, directories, devices, FIFOs, huge and deeply nested files), each run as its own process
// with no GPU visible. Every case must end with
//   - a result (exit 0) whose every number is finite and not negative unless it is a margin, or
//   - one "xstage: error: ..." line (exit 2) naming an option it was given, or the file it was given, or
//   - for a GPU command whose arguments are valid, the missing GPU (exit 3),
// never a signal, never an internal error (exit 1), never past 10 s or 1 GiB.
//
// A case is the xstage command line (cli::run, the code of the binary) in a forked child of this test: a new
// process per case, with its own exit status, signal, time and peak memory, but without loading the CUDA libraries
// again (what costs an `xstage` process most of its start).
//
// XSTAGE_FUZZ_CASES (default 3000), XSTAGE_FUZZ_SEED (default 29) and XSTAGE_FUZZ_JOBS (default 2) change the run;
// a failing case is printed as a command line that reproduces it (its files are kept under the printed folder).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Rng = std::mt19937_64;

constexpr double kMaxSeconds = 10.0;
constexpr long kMaxRssKiB = 1L << 20;  // 1 GiB

long env_or(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------------------
// Hostile values, by what an option or field holds.
// ---------------------------------------------------------------------------------------------

template <class T>
const T& pick(Rng& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
}
bool chance(Rng& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

const std::vector<std::string> kInts = {"0", "-1", "1", "2", "3", "7", "64", "128", "132", "256", "010", "0x10", "1e3", "1.5",
                                        "+3", " 3", "", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                                        "99999999999999999999", "2147483647", "2147483648", "4294967296", "65536", "65537",
                                        "1000000", "1000001", "16384", "16385", "4194304", "4194305", "abc", "nan", "inf", "1,2", "-0", "0b101"};
const std::vector<std::string> kReals = {"0", "-1", "1", "0.5", "1e-300", "1e-14", "1e-3", "1e5", "100001", "1e300", "1e309",
                                         "nan", "NaN", "inf", "-inf", "0x1p3", "+2", "", "1.0.0", "5e", ".", "0.99", "0.999",
                                         "1", "800", "1e6", "-0", "2e-3"};
const std::vector<std::string> kTimes = {"0", "1", "1ns", "0.5us", "2us", "1e-300", "1e-14", "1e-3ns", "1e309", "1e308ns", "10s",
                                         "11s", "9.99s", "1e6ms", "1e4ms", "nan", "inf", "-1us", "0x10us", "3 weeks", "1us2",
                                         "\xC2\xB5s", "", "1 us", "1e-300us", "5e-1ms", "1.5ms", "1e10", "1e10ns", "10000000001"};
const std::vector<std::string> kBytes = {"0", "1", "32KiB", "1e20", "1GiB", "64GiB", "65GiB", "-4KiB", "nan", "0x10", "1e309",
                                         "4.6MiB", "1 B", "32furlongs", "", "1e-300", "0.5", "68719476736", "68719476737", "1KB"};
const std::vector<std::string> kMixes = {"1:8", "0:1", "1:0", "1e6:1e-300", "1000:0.001", "1001:1", "nan:1", "1:", "", "1:2:3",
                                         "-1:2", "1e-3:1e3", "0.0009:1", "3:8", "inf:1", ":"};
const std::vector<std::string> kTiles = {"128x128", "0x128", "128x0", "128", "x", "65536x65536", "4096x4096", "4097x1", "128X256",
                                         "1e3x128", "-1x128", "", "128x256", "64x128", "1x1", "0x10x128", "128x128x128"};
const std::vector<std::string> kRuleNames = {"tflops_bf16", "tflops_fp8", "time_jitter", "factor_interleaved_bf16",
                                             "factor_interleaved_fp8", "factor_pipelined", "factor_m_pairs", "skew_hedge_waves",
                                             "skew_hedge_m_pairs", "l2_bytes", "hbm_bytes_per_ns", "reread_cost", "latency_ns",
                                             "m_pairs_min_rows", "ticks_per_tile", "seed", "bogus", ""};

std::string list_of(Rng& rng, const std::vector<std::string>& pool) {
  if (chance(rng, 0.05)) {  // a list far past any sweep
    std::string s;
    for (int i = 0; i < 2000; ++i) s += (i ? "," : "") + pick(rng, pool);
    return s;
  }
  const int n = std::uniform_int_distribution<int>(1, 4)(rng);
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + (chance(rng, 0.1) ? std::string() : pick(rng, pool));
  return s;
}

// One option of a command and how to make a hostile value for it.
struct OptionGen {
  std::string name;
  std::function<std::string(Rng&)> value;
};

OptionGen opt(const std::string& name, const std::vector<std::string>& pool) {
  return {name, [pool](Rng& rng) { return pick(rng, pool); }};
}
OptionGen opt_list(const std::string& name, const std::vector<std::string>& pool) {
  return {name, [pool](Rng& rng) { return list_of(rng, pool); }};
}
OptionGen opt_rule() {
  return {"--rule", [](Rng& rng) {
            if (chance(rng, 0.05)) return std::string("no_equals_sign");
            return pick(rng, kRuleNames) + "=" + (chance(rng, 0.5) ? pick(rng, kReals) : pick(rng, kInts));
          }};
}

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

struct Case {
  std::vector<std::string> argv;  // after the binary
  std::string file;               // a file the case wrote or named (its errors must name it), or ""
  bool gpu_command = false;       // exit 3 (no GPU) is a valid end
  bool stray_words = false;       // random argv: CLI11 names a stray word, not an option
  std::string kind;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string describe(const Case& c) {
  std::string s = "xstage";
  for (const std::string& a : c.argv) s += " " + (a.size() > 200 ? shell_quote(a.substr(0, 200) + "...") : shell_quote(a));
  return s;
}

// A base command and the options one may mutate on it; 1 to 3 of them get a hostile value.
struct CommandGen {
  std::string kind;
  std::vector<std::string> base;
  std::vector<OptionGen> options;
  bool gpu = false;
};

std::vector<CommandGen> command_generators() {
  std::vector<CommandGen> g;
  const std::vector<OptionGen> common = {opt("--store-path", {"st_global_16B", "tma_bulk", "st_global_8B", ""})};
  auto with = [&](std::vector<OptionGen> o) {
    o.insert(o.end(), common.begin(), common.end());
    return o;
  };
  g.push_back({"pattern",
               {"plan", "pattern", "--producers", "132", "--burst", "32KiB", "--gap", "2us"},
               with({opt("--producers", kInts), opt("--burst", kBytes), opt("--volume", kBytes), opt_list("--gap", kTimes),
                     {"--simulate", nullptr}, opt("--bursts", kInts), opt("--stagger", kTimes), opt("--jitter", kTimes),
                     opt("--seed", kInts), {"--json", nullptr}})});
  g.push_back({"moe-aligned",
               {"plan", "moe", "--producers", "66", "--t-l1", "22us", "--t-l2", "1.4us", "--mix", "1:8"},
               with({opt("--producers", kInts), opt("--t-l1", kTimes), opt("--t-l2", kTimes), opt("--mix", kMixes),
                     opt("--tile", kTiles), opt("--out-bytes", kInts), opt("--sms", kInts), opt("--hidden", kInts),
                     opt("--inter", kInts), opt("--tflops", kReals), {"--json", nullptr}})});
  g.push_back({"moe-shapes",
               {"plan", "moe", "--producers", "66", "--hidden", "4096", "--inter", "256", "--tflops", "800"},
               with({opt("--producers", kInts), opt("--hidden", kInts), opt("--inter", kInts), opt("--tflops", kReals),
                     opt("--tile", kTiles), opt("--sms", kInts), opt("--mix", kMixes), {"--json", nullptr}})});
  // A small layer, so that a valid case stays quick; the budget refuses the big ones before any work.
  g.push_back({"moe-layer",
               {"plan", "moe", "--hidden", "256", "--inter", "128", "--experts", "8", "--top-k", "2", "--tokens", "64"},
               with({opt("--hidden", kInts), opt("--inter", kInts), opt("--experts", kInts), opt("--top-k", kInts),
                     opt("--tokens", kInts), opt("--ranks", kInts), opt("--dtype", {"bf16", "fp8", "fp16", ""}),
                     opt("--t-lat", kTimes), opt("--jitter", kReals), opt("--tflops", kReals), opt("--sms", kInts),
                     opt("--tile", {"128x128", "128x256", "64x128", "128x512", "x"}), {"--choose", nullptr}, opt_rule(),
                     opt_rule(), {"--json", nullptr}})});
  g.push_back({"attention",
               {"plan", "attention", "--seq-len", "1024,8192", "--sigma", "0.79us"},
               with({opt_list("--seq-len", kInts), opt("--sigma", kTimes), opt("--tflops", kReals), opt("--tile", kTiles),
                     opt("--head-dim", kInts), opt("--out-bytes", kInts), opt("--producers", kInts), opt("--heads", kInts),
                     opt("--batch", kInts), opt("--ranks", kInts), opt("--t-qk", kTimes), opt("--t-lat", kTimes),
                     opt("--sms", kInts), {"--json", nullptr}})});
  // GPU commands: their arguments are checked before any GPU is looked for.
  const std::vector<OptionGen> moe_common = {opt("--gpus", kInts), opt("--seed", kInts),
                                             opt("--impl", {"megamoe-wave", "nope", "", ",", "unfused-loop,,megamoe-auto"}),
                                             opt("--lead", kInts), opt("--wave", kInts), opt("--device-timeout-s", kReals),
                                             opt("--tile-n", kInts), opt("--cluster", kInts), opt("--cluster-m", kInts),
                                             opt("--dtype", {"bf16", "fp8", "bf16,fp8", "fp16", "", ",fp8"})};
  auto moe_with = [&](std::vector<OptionGen> o) {
    o.insert(o.end(), moe_common.begin(), moe_common.end());
    return o;
  };
  g.push_back({"moe-bench", {"moe", "bench", "--filter", "deepseek-v3"},
               moe_with({opt("--trials", kInts), opt("--warmup-ms", kReals), opt("--trial-gap-ms", kReals),
                         opt("--filter", {"deepseek-v3", "", "a,,b", "zzz", "/fp8"})}),
               true});
  g.push_back({"moe-check", {"moe", "check", "--cases", "k2-balanced"},
               moe_with({opt("--cases", {"k2-balanced", "", ",", "zzz"})}), true});
  g.push_back({"attention-bench", {"attention", "bench"},
               {opt_list("--head-dims", kInts), opt_list("--heads", kInts), opt_list("--seqlens", kInts), opt("--batch", kInts),
                opt("--trials", kInts), opt("--reps", kInts), opt("--warmup-ms", kReals)},
               true});
  g.push_back({"attention-check", {"attention", "check", "--quick"}, {opt("--seed", kInts)}, true});
  g.push_back({"ulysses-bench", {"attention", "ulysses", "bench"},
               {opt("--gpus", kInts), opt_list("--store-path", {"tma", "st_global", "x"}), opt("--device-timeout-s", kReals),
                opt_list("--seqlens", kInts), opt_list("--heads", kInts), opt_list("--head-dims", kInts), opt("--batch", kInts),
                opt("--trials", kInts), opt("--replays", kInts), opt("--warmup-ms", kReals)},
               true});
  g.push_back({"ulysses-check", {"attention", "ulysses", "check", "--quick"},
               {opt("--virtual-ranks", kInts), opt("--seed", kInts), opt("--launches", kInts), opt("--gpus", kInts)}, true});
  g.push_back({"calibrate", {"calibrate", "--quick", "--no-plots", "--out", "/tmp/xstage-fuzz-calibrate"},
               {opt("--gpus", kInts), opt("--paths", {"st_global_16B", "tma_bulk,st_global_16B", "", ",", "tma"}),
                opt_list("--K", kInts), opt_list("--heldout-K", kInts), opt_list("--B-kib", kInts),
                opt("--pairing", {"ring", "one-way", "all-peers", "sideways", ""})},
               true});
  return g;
}

Case option_case(Rng& rng, const CommandGen& g) {
  Case c;
  c.kind = g.kind;
  c.gpu_command = g.gpu;
  std::vector<std::pair<std::string, std::string>> set;  // option -> value, base first
  for (std::size_t i = 0; i < g.base.size();) {
    if (g.base[i].rfind("-", 0) == 0 && i + 1 < g.base.size() && g.base[i + 1].rfind("-", 0) != 0) {
      set.push_back({g.base[i], g.base[i + 1]});
      i += 2;
    } else {
      c.argv.push_back(g.base[i++]);
    }
  }
  const int mutations = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int m = 0; m < mutations; ++m) {
    const OptionGen& o = pick(rng, g.options);
    if (!o.value) {  // a flag
      set.push_back({o.name, ""});
      continue;
    }
    const std::string v = o.value(rng);
    auto it = std::find_if(set.begin(), set.end(), [&](const auto& p) { return p.first == o.name; });
    if (it != set.end() && o.name != "--rule") it->second = v;
    else set.push_back({o.name, v});
  }
  for (const auto& [name, value] : set) {
    c.argv.push_back(name);
    const bool flag = std::none_of(g.options.begin(), g.options.end(), [&](const OptionGen& o) { return o.name == name && o.value; }) &&
                      value.empty() && name != "--out";
    if (!flag) c.argv.push_back(value);
  }
  return c;
}

// Every leaf of a JSON document, as a pointer.
void leaves(const json& v, const std::string& at, std::vector<std::string>& out) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) leaves(x, at + "/" + k, out);
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) leaves(v[i], at + "/" + std::to_string(i), out);
  } else {
    out.push_back(at);
  }
  if (!at.empty() && (v.is_object() || v.is_array())) out.push_back(at);
}

// Past every range, wrong types, and valid extremes (the ends of every platform and grid range).
const std::vector<json> kJsonValues = {1e-308, 1e308, -1, 0, 1e300, -0.0, 1.5, 132.0, 1e-3, 100001.0, 2147483648LL,
                                       9223372036854775807LL, json(18446744073709551615ULL), -9223372036854775807LL - 1,
                                       "text", "", nullptr, true, json::array(), json::object(), json::array({1, 2}),
                                       1000000, 1000001, 68719476737LL, 4194305, 131073, 65537, 1025, 7, 1, 2, 256, 1e-9,
                                       0.001, 1e5, 1e10, 1.0, 1099511627776.0, 68719476736LL, 131072, 65536, 4194304, 1024, 8};

// A mutated copy of `doc` as text: a leaf replaced or removed, an unknown key added, or the text itself damaged.
std::string mutate_json(Rng& rng, json doc) {
  std::vector<std::string> ptrs;
  leaves(doc, "", ptrs);
  const int how = std::uniform_int_distribution<int>(0, 9)(rng);
  if (how <= 4) {
    const int n = std::uniform_int_distribution<int>(1, 2)(rng);
    for (int i = 0; i < n; ++i) {
      const json::json_pointer p(pick(rng, ptrs));
      if (doc.contains(p)) doc[p] = pick(rng, kJsonValues);  // the first mutation may have removed the second's place
    }
    return doc.dump();
  }
  if (how == 5) {
    const json::json_pointer p(pick(rng, ptrs));
    if (!p.empty()) doc[p.parent_pointer()].is_object() ? static_cast<void>(doc[p.parent_pointer()].erase(p.back()))
                                                         : static_cast<void>(doc[p.parent_pointer()].erase(std::stoul(p.back())));
    return doc.dump();
  }
  if (how == 6) {
    std::vector<std::string> objects;
    for (const std::string& p : ptrs)
      if (doc[json::json_pointer(p)].is_object()) objects.push_back(p);
    if (!objects.empty()) doc[json::json_pointer(pick(rng, objects))]["unknwon_key"] = 1;
    return doc.dump();
  }
  std::string text = doc.dump();
  if (how == 7) return text.substr(0, std::uniform_int_distribution<std::size_t>(0, text.size())(rng));  // truncated
  if (how == 8) {  // a number literal replaced by something JSON has no number for
    std::vector<std::size_t> digits;
    for (std::size_t i = 1; i < text.size(); ++i)
      if (std::isdigit(static_cast<unsigned char>(text[i])) && text[i - 1] == ':') digits.push_back(i);
    if (!digits.empty()) {
      const std::size_t at = pick(rng, digits);
      std::size_t end = at;
      while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' || text[end] == 'e')) ++end;
      text.replace(at, end - at, pick(rng, std::vector<std::string>{"1e309", "-1e309", "NaN", "Infinity", "0x10", "-", "01", "1e99999"}));
    }
    return text;
  }
  // Whole-file abuse: empty, nesting, duplicate keys, not JSON.
  return pick(rng, std::vector<std::string>{"", " ", "[", std::string(3000, '['), std::string(40, '{') + "\"a\":1",
                                             "{\"schema\": 1, \"schema\": 2}", "null", "[1,2,3]", "\"str\"", "{}", "\xEF\xBB\xBF{}",
                                             "{\"a\": \"\xFF\"}", text + "garbage"});
}

// ---------------------------------------------------------------------------------------------
// Running one case and judging it
// ---------------------------------------------------------------------------------------------

struct Outcome {
  int status = -1;  // exit status, or -1 if signalled
  int signal = 0;
  bool timed_out = false;
  double seconds = 0.0;
  long maxrss_kib = 0;
  std::string out, err;
};

// Starts case `c` in a child that runs the command line with no GPU visible, its output in `scratch`.
pid_t start(const Case& c, const std::string& scratch) {
  std::fflush(nullptr);  // nothing buffered here may be written twice
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // The child: a fresh `xstage` in all but the libraries already loaded (CUDA is not initialized in the parent).
  const int in = open("/dev/null", O_RDONLY);
  const int out = open((scratch + "/stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int err = open((scratch + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(125);
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
  std::vector<std::string> args = {"xstage"};
  args.insert(args.end(), c.argv.begin(), c.argv.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = xstage::cli::run(static_cast<int>(args.size()), argv.data());
  std::fflush(nullptr);
  std::cout.flush();
  _exit(rc);  // no atexit handlers of the test process
}

// Every number finite, and negative only under a margin; null only where a result has no such value.
std::string check_json(const json& v, const std::string& at, bool signed_ok) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) {
      if (x.is_null() && k != "D_knee_rows" && k != "aligned_closed_form" && k != "closed_form_at_predicted_K_act" && k != "choice")
        return at + "/" + k + " is null (NaN or inf printed as JSON)";
      const std::string bad = check_json(x, at + "/" + k, k.find("margin") != std::string::npos);
      if (!bad.empty()) return bad;
    }
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].is_null()) return at + "/" + std::to_string(i) + " is null";
      const std::string bad = check_json(v[i], at + "/" + std::to_string(i), signed_ok);
      if (!bad.empty()) return bad;
    }
  } else if (v.is_number()) {
    const double x = v.get<double>();
    if (!std::isfinite(x)) return at + " is not finite";
    if (x < 0 && !signed_ok) return at + " is negative: " + v.dump();
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > (1ULL << 63)) return at + " overflowed: " + v.dump();
  }
  return {};
}

// Text results: no "nan"/"inf" words, and a negative number only on a line about a margin.
std::string check_text(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    for (const char* word : {"nan", "inf "}) {
      for (std::size_t at = lower.find(word); at != std::string::npos; at = lower.find(word, at + 1)) {
        const bool start = at == 0 || !std::isalpha(static_cast<unsigned char>(lower[at - 1]));
        const bool end = at + 3 >= lower.size() || !std::isalpha(static_cast<unsigned char>(lower[at + 3]));
        if (start && end) return "'" + line + "' holds a non-finite number";
      }
    }
    if (lower.find("margin") != std::string::npos) continue;
    for (std::size_t at = line.find('-'); at != std::string::npos; at = line.find('-', at + 1))
      if (at + 1 < line.size() && std::isdigit(static_cast<unsigned char>(line[at + 1])) &&
          (at == 0 || line[at - 1] == ' ' || line[at - 1] == '(' || line[at - 1] == '='))
        return "'" + line + "' holds a negative number";
  }
  return {};
}

// Does the error name what was wrong: an option it typed or the one it lacks, the file it was given, or (random
// words) the word that was not expected?
bool names_input(const std::string& msg, const Case& c) {
  if (!c.file.empty() && msg.find(c.file) != std::string::npos) return true;
  for (std::size_t at = msg.find("--"); at != std::string::npos; at = msg.find("--", at + 1))
    if (at + 2 < msg.size() && std::isalpha(static_cast<unsigned char>(msg[at + 2]))) return true;
  for (const std::string& a : c.argv)
    if (a.size() >= 2 && a[0] == '-' && msg.find(a) != std::string::npos) return true;
  if (c.stray_words)
    for (const std::string& a : c.argv)
      if (!a.empty() && msg.size() >= a.size() && msg.compare(msg.size() - a.size(), a.size(), a) == 0) return true;
  return msg.find("has no subcommand") != std::string::npos || msg.find("subcommand is required") != std::string::npos;
}

// Empty when the outcome is acceptable, else why not.
std::string judge(const Case& c, const Outcome& o) {
  if (o.signal) return "killed by signal " + std::to_string(o.signal);
  if (o.timed_out) return "ran past " + std::to_string(kMaxSeconds) + " s";
  if (o.maxrss_kib > kMaxRssKiB) return "used " + std::to_string(o.maxrss_kib / 1024) + " MiB";
  for (const char* leak : {"json.exception", "basic_filebuf", "std::", "stoi", "stod", "stoull", "bad_alloc", "internal error"})
    if (o.err.find(leak) != std::string::npos) return "stderr leaks '" + std::string(leak) + "'";
  if (o.status == 0) {
    for (const char* print_only : {"--help", "-h", "--version"})
      if (std::find(c.argv.begin(), c.argv.end(), print_only) != c.argv.end()) return {};
    if (std::find(c.argv.begin(), c.argv.end(), "--json") != c.argv.end()) {
      json doc;
      try {
        doc = json::parse(o.out);
      } catch (const std::exception& e) {
        return std::string("--json output does not parse: ") + e.what();
      }
      const std::string bad = check_json(doc, "", false);
      return bad.empty() ? std::string() : "result " + bad;
    }
    const std::string bad = check_text(o.out);
    return bad.empty() ? std::string() : "result " + bad;
  }
  if (o.status == 3 && c.gpu_command) return o.err.find("xstage: error:") != std::string::npos ? "" : "exit 3 without a message";
  if (o.status != 2) return "exit status " + std::to_string(o.status);
  std::size_t errors = 0;
  std::string msg;
  std::istringstream in(o.err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("xstage: error: ", 0) == 0) ++errors, msg = line;
  if (errors != 1) return std::to_string(errors) + " error lines";
  if (!names_input(msg, c)) return "the error names no option or file it was given: " + msg;
  if (!c.file.empty() && msg.find(c.file) != std::string::npos && msg.find(": /") == std::string::npos &&
      msg.find("not valid JSON") == std::string::npos && msg.find("the top level") == std::string::npos &&
      msg.find("' is ") == std::string::npos && msg.find("no such file") == std::string::npos &&
      msg.find("/shapes") == std::string::npos)
    return "a file error without a field or a reason about the file: " + msg;
  return {};
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

class CaseMaker {
 public:
  explicit CaseMaker(std::uint64_t seed) : rng_(seed), commands_(command_generators()) {
    platform_ = json::parse(read_file(std::string(XSTAGE_SOURCE_DIR) + "/platforms/h200_nvlink4.json"));
    grid_ = json::parse(R"({"description": "fuzz", "dtypes": ["bf16", "fp8"], "skewed_zipf_s": 1.2,
        "shapes": [{"h": 256, "h_inter": 128, "E": 8, "k": 2}, {"h": 512, "h_inter": 256, "E": 16, "k": 4}],
        "tokens_per_rank": [64, 128], "routings": ["balanced", "skewed"],
        "extra": [{"name": "x", "h": 256, "h_inter": 256, "E": 8, "k": 2, "tokens_per_rank": 32, "routings": ["balanced"]}]})");
  }

  // Case `i`, whose files go to `scratch` (one folder per case).
  Case make(std::size_t i, const std::string& scratch) {
    Rng rng(rng_() ^ (i * 0x9E3779B97F4A7C15ULL));
    const int what = std::uniform_int_distribution<int>(0, 99)(rng);
    if (what < 55) return option_case(rng, pick(rng, commands_));
    if (what < 72) return platform_case(rng, scratch);
    if (what < 86) return grid_case(rng, scratch);
    if (what < 94) return path_case(rng, scratch);
    return random_argv(rng);
  }

 private:
  Case platform_case(Rng& rng, const std::string& scratch) {
    Case c;
    c.kind = "platform";
    c.file = scratch + "/platform.json";
    std::ofstream(c.file) << mutate_json(rng, platform_);
    const std::vector<std::vector<std::string>> commands = {
        {"pattern", "--producers", "132", "--burst", "32KiB", "--gap", "2us", "--json"},
        {"pattern", "--producers", "148", "--burst", "32KiB", "--gap", "0,6us", "--simulate", "--bursts", "10"},
        {"attention", "--seq-len", "1024,8192", "--sigma", "0.79us", "--json"},
        {"moe", "--producers", "66", "--hidden", "4096", "--inter", "256", "--tflops", "800"},
        {"moe", "--hidden", "256", "--inter", "128", "--experts", "8", "--top-k", "2", "--tokens", "64", "--json"}};
    c.argv = {"plan", "--platform", c.file};
    if (chance(rng, 0.3)) c.argv.insert(c.argv.end(), {"--store-path", "tma_bulk"});
    const auto& cmd = pick(rng, commands);
    c.argv.insert(c.argv.end(), cmd.begin(), cmd.end());
    return c;
  }

  Case grid_case(Rng& rng, const std::string& scratch) {
    Case c;
    c.kind = "grid";
    c.file = scratch + "/grid.json";
    std::ofstream(c.file) << mutate_json(rng, grid_);
    if (chance(rng, 0.3)) {
      c.argv = {"moe", "bench", "--config", c.file};
      c.gpu_command = true;
    } else {
      c.argv = {"plan", "moe", "--grid", c.file};
      if (chance(rng, 0.3)) c.argv.push_back("--choose");
      if (chance(rng, 0.5)) c.argv.push_back("--json");
      if (chance(rng, 0.2)) c.argv.insert(c.argv.end(), {"--ranks", pick(rng, std::vector<std::string>{"1", "4", "8", "64"})});
    }
    return c;
  }

  // Paths that are not JSON files, wherever a command reads one.
  Case path_case(Rng& rng, const std::string& scratch) {
    Case c;
    c.kind = "path";
    const int which = std::uniform_int_distribution<int>(0, 7)(rng);
    if (which == 0) c.file = scratch;  // a directory
    if (which == 1) c.file = "/dev/null";
    if (which == 2) c.file = "/dev/zero";
    if (which == 3) {
      c.file = scratch + "/fifo";
      mkfifo(c.file.c_str(), 0600);
    }
    if (which == 4) c.file = scratch + "/absent.json";
    if (which == 5) {
      c.file = scratch + "/big.json";
      std::ofstream(c.file) << std::string((4 << 20) + 1, '[');
    }
    if (which == 6) {
      c.file = scratch + "/deep.json";
      std::ofstream(c.file) << std::string(100000, '[');
    }
    if (which == 7) c.file = "";
    const int where = std::uniform_int_distribution<int>(0, 3)(rng);
    if (where == 0) c.argv = {"plan", "--platform", c.file, "pattern", "--producers", "132", "--burst", "32KiB", "--gap", "2us"};
    if (where == 1) c.argv = {"plan", "moe", "--grid", c.file};
    if (where == 2) c.argv = {"moe", "bench", "--config", c.file}, c.gpu_command = true;
    if (where == 3) c.argv = {"attention", "ulysses", "bench", "--platform", c.file}, c.gpu_command = true;
    return c;
  }

  // Words in random order: options of any command with values of any kind, stray words, subcommands.
  Case random_argv(Rng& rng) {
    Case c;
    c.kind = "argv";
    c.stray_words = true;
    const std::vector<std::vector<std::string>> heads = {{}, {"plan"}, {"plan", "pattern"}, {"plan", "moe"}, {"plan", "attention"},
                                                         {"moe"}, {"attention"}, {"bogus"}, {"plan", "bogus"}, {"--version"},
                                                         {"moe", "bench"}, {"attention", "ulysses"}};
    c.argv = pick(rng, heads);
    const std::vector<std::string> words = {"--producers", "-K", "--burst", "-B", "--gap", "-G", "--json", "--simulate", "--tile",
                                            "--seq-len", "-M", "--sigma", "--grid", "--platform", "--choose", "--rule", "--hidden",
                                            "--trials", "--out", "--help", "--", "-", "pattern", "moe", "132", "2us", "x", "=",
                                            "--producers=5", "--gap=", "-K5", "--nonexistent", "-Z"};
    const int n = std::uniform_int_distribution<int>(0, 6)(rng);
    for (int i = 0; i < n; ++i) c.argv.push_back(pick(rng, words));
    c.gpu_command = true;  // a valid GPU command may result
    return c;
  }

  Rng rng_;
  std::vector<CommandGen> commands_;
  json platform_, grid_;
};

TEST(FuzzCli, EveryHostileInvocationEndsInAResultOrAClearError) {
  const std::size_t cases = static_cast<std::size_t>(env_or("XSTAGE_FUZZ_CASES", 3000));
  const std::uint64_t seed = static_cast<std::uint64_t>(env_or("XSTAGE_FUZZ_SEED", 29));
  const std::size_t jobs = static_cast<std::size_t>(std::max(1L, env_or("XSTAGE_FUZZ_JOBS", 2)));
  const fs::path root = fs::temp_directory_path() / ("xstage_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(root);

  // One thread: it forks every child, so no other thread can hold a lock a child would inherit.
  struct Running {
    Case c;
    std::string scratch;
    std::chrono::steady_clock::time_point t0;
    bool killed = false;
  };
  std::map<pid_t, Running> running;
  CaseMaker maker(seed);
  std::vector<std::string> failures;
  std::size_t next = 0, by_status[4] = {0, 0, 0, 0};
  double slowest = 0.0;
  long largest = 0;
  std::string slowest_case;
  while (next < cases || !running.empty()) {
    while (next < cases && running.size() < jobs) {
      Running r;
      r.scratch = (root / ("case" + std::to_string(next))).string();
      fs::create_directories(r.scratch);
      r.c = maker.make(next, r.scratch);
      r.t0 = std::chrono::steady_clock::now();
      const pid_t pid = start(r.c, r.scratch);
      ASSERT_GT(pid, 0) << "fork failed";
      running.emplace(pid, std::move(r));
      ++next;
    }
    int raw = 0;
    rusage ru{};
    const pid_t done = wait4(-1, &raw, WNOHANG, &ru);
    const auto now = std::chrono::steady_clock::now();
    if (done <= 0) {
      for (auto& [pid, r] : running)
        if (!r.killed && std::chrono::duration<double>(now - r.t0).count() > kMaxSeconds) {
          kill(pid, SIGKILL);
          r.killed = true;
        }
      usleep(500);
      continue;
    }
    const auto it = running.find(done);
    ASSERT_NE(it, running.end());
    Running r = std::move(it->second);
    running.erase(it);
    Outcome o;
    o.seconds = std::chrono::duration<double>(now - r.t0).count();
    o.timed_out = r.killed;
    o.maxrss_kib = ru.ru_maxrss;
    if (WIFEXITED(raw)) o.status = WEXITSTATUS(raw);
    if (WIFSIGNALED(raw)) o.signal = WTERMSIG(raw);
    o.out = read_file(r.scratch + "/stdout");
    o.err = read_file(r.scratch + "/stderr");
    const std::string why = judge(r.c, o);
    if (o.status >= 0 && o.status <= 3) ++by_status[o.status];
    if (o.seconds > slowest) slowest = o.seconds, slowest_case = describe(r.c);
    largest = std::max(largest, o.maxrss_kib);
    if (why.empty()) fs::remove_all(r.scratch);
    else
      failures.push_back(r.c.kind + ": " + why + "\n  " + describe(r.c) + "\n  stderr: " + o.err.substr(0, 400));
  }

  std::printf("fuzz: %zu cases (seed %llu): exit 0: %zu, 2: %zu, 3: %zu, 1: %zu; slowest %.2f s (%s), largest %ld MiB\n", cases,
              static_cast<unsigned long long>(seed), by_status[0], by_status[2], by_status[3], by_status[1], slowest,
              slowest_case.c_str(), largest / 1024);
  for (std::size_t i = 0; i < failures.size() && i < 30; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << cases << " cases failed; their files are under " << root;
  if (failures.empty()) fs::remove_all(root);
  // A fuzz run that never reached a result or an error tested nothing.
  EXPECT_GT(by_status[0], cases / 20);
  EXPECT_GT(by_status[2], cases / 5);
}

}  // namespace
