// Hostile input, one case per kind: each gives a one-line error naming the option, or the file and field, that was
// wrong (exit 2), or for a valid extreme a finite result, quickly. tests/fuzz/ generates thousands more.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace xstage_cli_test;

const std::string kSource = XSTAGE_SOURCE_DIR;
const std::string kPattern = "pattern -K 132 -B 32KiB -G 2us";  // after "plan [--platform FILE]"
const std::string kLayer = "plan moe --hidden 7168 --inter 2048 --experts 256 --top-k 8";

// A scratch folder for the files a case writes, removed afterwards.
class InputChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xstage_input_checks_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  // The shipped calibration with the value at `pointer` replaced.
  std::string platform_with(const std::string& pointer, const nlohmann::json& value) const {
    nlohmann::json doc = nlohmann::json::parse(std::ifstream(kSource + "/platforms/h200_nvlink4.json"));
    doc[nlohmann::json::json_pointer(pointer)] = value;
    return write("platform.json", doc.dump());
  }
  fs::path dir_;
};

// The error is one line, "xstage: error: ...", holding `fragment`; nothing else but warnings and CLI11's pointer to
// --help.
void expect_one_line_error(const std::string& args, const std::string& fragment) {
  const CliRun r = xstage(args);
  EXPECT_EQ(r.status, 2) << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_CONTAINS(r.err, fragment);
  std::size_t lines = 0;
  for (std::size_t at = r.err.find("xstage: error:"); at != std::string::npos; at = r.err.find("xstage: error:", at + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
}

// Platform files: a value outside its physical range is named with the file, the JSON pointer and the range
// (R = 1e-308 used to print "G* = inf ms"; T_iss0 = 1e294 ms used to be "piggyback").
TEST_F(InputChecks, PlatformValuesOutsideTheirRangeAreNamed) {
  std::string p = platform_with("/store_paths/st_global_16B/R_bytes_per_ns", 1e-308);
  expect_one_line_error("plan --platform " + p + " " + kPattern,
                        "--platform: " + p + ": /store_paths/st_global_16B/R_bytes_per_ns: must be a number in [0.001, 100000] bytes/ns (got 1e-308)");
  p = platform_with("/store_paths/st_global_16B/T_iss0/0/T_iss0_ns", 1e300);
  expect_one_line_error("plan --platform " + p + " " + kPattern, "/store_paths/st_global_16B/T_iss0/0/T_iss0_ns: must be a number in");
}

// A number past a double's range used to surface as nlohmann's "number overflow parsing '1e309'" with no file.
TEST_F(InputChecks, NumberOverflowInAFileNamesTheFileAndField) {
  const std::string p = write("o.json", R"({"schema": "xstage.platform/1", "store_paths": {"tma_bulk": {"R_bytes_per_ns": 1e309}}})");
  expect_one_line_error("plan --platform " + p + " " + kPattern, "--platform: '" + p + "' is not valid JSON (at /store_paths/tma_bulk/R_bytes_per_ns)");
}

// A directory, a device, a FIFO, an empty path, a missing file: refused by name before anything is read (an empty
// --platform used to mean the shipped calibration; a directory gave "basic_filebuf::underflow").
TEST_F(InputChecks, PathsThatAreNotFilesAreRefusedByName) {
  expect_one_line_error("plan --platform " + dir_.string() + " " + kPattern, "--platform: '" + dir_.string() + "' is a directory");
  expect_one_line_error("plan --platform /dev/zero " + kPattern, "--platform: '/dev/zero' is a character device");
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line_error("plan --platform " + fifo + " " + kPattern, "is a FIFO");
  expect_one_line_error("plan --platform '' " + kPattern, "--platform: the path is empty");
  expect_one_line_error("plan moe --grid '' --choose", "--grid: the path is empty");
  expect_one_line_error("plan --platform " + (dir_ / "absent.json").string() + " " + kPattern, "no such file");
}

// A 200 MB file of '[' used to take 14 GB and end in std::bad_alloc; the size is checked before reading, the
// nesting while parsing.
TEST_F(InputChecks, HugeAndDeepFilesAreRefusedBeforeParsing) {
  const std::string big = write("big.json", std::string(5 << 20, '['));
  const auto t0 = std::chrono::steady_clock::now();
  expect_one_line_error("plan --platform " + big + " " + kPattern, "bytes; input files are limited to 4194304 bytes");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  const std::string deep = write("deep.json", std::string(100000, '['));
  expect_one_line_error("plan --platform " + deep + " " + kPattern, "nesting deeper than 16 levels");
}

// Grid files: every field against the schema (a grid's "h": 1e300 used to blame --hidden, an option never typed).
TEST_F(InputChecks, GridFieldsAreNamedByPointer) {
  const std::string head = R"({"dtypes": ["bf16"], "tokens_per_rank": [64], "routings": ["balanced"], "shapes": [)";
  std::string g = write("g.json", head + R"({"h": 1e300, "h_inter": 128, "E": 8, "k": 2}]})");
  expect_one_line_error("plan moe --grid " + g, "--grid: " + g + ": /shapes/0/h: must be an integer in [1, 131072] (got 1e+300)");
  expect_one_line_error("moe bench --config " + g, "/shapes/0/h: must be an integer in [1, 131072]");
  g = write("k.json", head + R"({"h": 256, "h_inter": 128, "E": 8, "k": 2, "top_k": 2}]})");
  expect_one_line_error("plan moe --grid " + g, "/shapes/0/top_k: unknown key");
  g = write("s.json", head + R"({"h": 256, "h_inter": 128, "E": 7, "k": 2}]})");
  expect_one_line_error("plan moe --grid " + g, "--grid: " + g + ": /shapes/0: MoE: E = 7 experts cannot be split evenly over P = 2");
}

// Too many layers in one grid file (a 2000-shape grid used to take 38 s): refused, naming the limit.
TEST_F(InputChecks, GridSizeIsBounded) {
  auto grid = [&](int n_shapes, const std::string& tokens) {
    std::string shapes;
    for (int i = 0; i < n_shapes; ++i) shapes += std::string(i ? "," : "") + R"({"h": 256, "h_inter": 128, "E": 8, "k": 2})";
    return write("many.json", R"({"dtypes": ["bf16"], "tokens_per_rank": )" + tokens + R"(, "routings": ["balanced"], "shapes": [)" +
                                  shapes + "]}");
  };
  expect_one_line_error("plan moe --grid " + grid(2000, "[64]"), "/shapes: must hold 1 to 1024 elements (got 2000)");
  expect_one_line_error("plan moe --grid " + grid(600, "[64, 128]"), "/shapes: 600 shapes x 2 token counts (+ 0 extra) exceed the limit of 1024 layers");
}

// Numbers are decimal: 010 is ten (it used to be read as octal 8), 0x10 is refused (it used to be 16).
TEST(InputChecksOptions, NumbersAreDecimal) {
  const CliRun r = xstage("plan pattern -K 010 -B 32KiB -G 2us --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("pattern").at("K"), 10);
  expect_one_line_error("plan pattern -K 0x10 -B 32KiB -G 2us", "--producers: '0x10' is not a decimal integer");
  expect_one_line_error("plan pattern -K 132 -B 0x10KiB -G 2us", "--burst: unknown size unit 'x10KiB'");
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G nan", "--gap: 'nan' is not a number");
  expect_one_line_error("plan moe --hidden 7168 --inter 2048 --tflops inf -K 66", "--tflops: 'inf' is not a number");
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G 1e400us", "--gap: '1e400us' is not a finite number");
}

// A list's empty element is refused (-G 1us,,2us used to drop it silently).
TEST(InputChecksOptions, EmptyListElementsAreRefused) {
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G 1us,,2us", "--gap: empty element in '1us,,2us'");
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G 1us,", "--gap: empty element");
  expect_one_line_error("plan attention -M 1024,,2048 --sigma 1us", "--seq-len: empty element");
  expect_one_line_error("moe bench --filter a,,b", "--filter: empty element");
}

// Numbers past every physical range are refused with the option and the range (--sigma 1e-14 used to print
// M_ub* = -4116683156392951808 tokens; --mix 1e6:1e-300 blamed "gap G").
TEST(InputChecksOptions, RangesNameTheOption) {
  expect_one_line_error("plan attention -M 1024 --sigma 1e-14", "--sigma: time (ns) must be in [1, 1e+10] (got 1e-14)");
  expect_one_line_error("plan moe -K 66 --t-l1 2us --t-l2 1us --mix 1e6:1e-300", "--mix: n1 must be in [0.001, 1000] (got 1e+06)");
  expect_one_line_error("plan moe -K 66 --t-l1 2us --t-l2 1us --mix 1:1e-300", "--mix: n2 must be in [0.001, 1000] (got 1e-300)");
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G 2us --bursts 0", "--bursts: must be an integer in [2, 100000] (got 0)");
  expect_one_line_error("plan attention -M 99999999999 --sigma 1us", "--seq-len: must be an integer in [1, 1000000000]");
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G 2us --seed -1", "--seed: must be an integer in [0, 9223372036854775807]");
}

// A valid extreme gives a finite result: the longest sequence, the fastest drain, the most producers.
TEST(InputChecksOptions, ValidExtremesGiveFiniteResults) {
  for (const std::string args : {"plan attention -M 1000000000 --sigma 1ns --heads 65536 --batch 65536 --json",
                                 "plan attention -M 1 --sigma 10s --tile 4096x4096 --head-dim 4096 --out-bytes 8 -K 1000000 --json",
                                 "plan pattern -K 1000000 -B 64KiB -G 10s --json", "plan pattern -K 1 -B 1 -G 0 --json",
                                 "plan moe -K 1 --t-l1 1ns --t-l2 10s --mix 1000:0.001 --json"}) {
    const CliRun r = xstage(args);
    ASSERT_EQ(r.status, 0) << args << "\n" << r.err;
    // nlohmann writes NaN and inf as null: the only null a result may hold is an absent optional (no D_knee without
    // h_inter).
    std::size_t nulls = 0, allowed = 0;
    for (std::size_t at = r.out.find("null"); at != std::string::npos; at = r.out.find("null", at + 1)) ++nulls;
    for (std::size_t at = r.out.find("\"D_knee_rows\": null"); at != std::string::npos; at = r.out.find("\"D_knee_rows\": null", at + 1)) ++allowed;
    EXPECT_EQ(nulls, allowed) << args << "\n" << r.out;
  }
}

// --rule values are bounded to what the rule can use (factor_pipelined=-5 used to pick a schedule with a negative
// predicted time; ticks_per_tile=1e9 ran 22 s into an internal error; latency_ns=1e308 was an "internal error").
TEST(InputChecksOptions, RuleValuesAreBounded) {
  const std::string choose = kLayer + " --tokens 64 --choose";
  expect_one_line_error(choose + " --rule factor_pipelined=-5", "--rule factor_pipelined: the value must be in [0.1, 10] (got -5)");
  expect_one_line_error(choose + " --rule ticks_per_tile=1e9", "--rule ticks_per_tile: '1e9' is not a decimal integer");
  expect_one_line_error(choose + " --rule ticks_per_tile=1000000000", "--rule ticks_per_tile: the value must be in [1, 64]");
  expect_one_line_error(choose + " --rule latency_ns=1e308", "--rule latency_ns: the value must be in [0, 1e+07]");
  expect_one_line_error(choose + " --rule tflops_bf16=nan", "--rule tflops_bf16: 'nan' is not a number");
}

// The planner's work is bounded before any of it is done (--tokens 4194304 used to take 64 s and 6.6 GB).
TEST(InputChecksOptions, PlannerWorkIsBoundedAndRefusedQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  expect_one_line_error(kLayer + " --tokens 4194304", "the layer (--tokens, --top-k, --experts, --hidden, --inter) has");
  expect_one_line_error(kLayer + " --tokens 4194304", "over the planner's limit of 1.5e+06 per layer");
  // A tile phase of many ticks (h / h_inter = 512) on many SMs: few tiles, but every tick visits every CTA.
  const std::string ticks = "plan moe --hidden 65536 --inter 128 --experts 8 --top-k 2 --tokens 64 --sms 16384";
  expect_one_line_error(ticks, "the layer (--hidden, --inter, --experts, --top-k, --tokens, --sms) needs");
  expect_one_line_error(ticks, "simulation steps, over the planner's budget of 2.5e+09");
  expect_one_line_error(ticks + "0", "--sms: must be an integer in [1, 16384] (got 163840)");
  expect_one_line_error("plan pattern -K 5000 -B 1KiB -G 0,1us --simulate --bursts 1000", "--simulate: 5000 producers x 1000 bursts x 2 gap(s)");
  std::string gaps;  // a 20-gap sweep, simulated (it used to take 30 s)
  for (int g = 0; g < 20; ++g) gaps += (g ? "," : "") + std::to_string(g) + "us";
  expect_one_line_error("plan pattern -K 132 -B 32KiB -G " + gaps + " --simulate --bursts 1000",
                        "--simulate: 132 producers x 1000 bursts x 20 gap(s) is 1.39e+09 producer-steps, over the planner's budget of 2.5e+08");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

// `xstage --version` prints the version; an unknown subcommand is named (both used to say "A subcommand is required").
TEST(InputChecksOptions, VersionAndUnknownSubcommands) {
  const CliRun v = xstage("--version");
  EXPECT_EQ(v.status, 0) << v.err;
  EXPECT_CONTAINS(v.out, "xstage 0.");
  expect_one_line_error("bogus", "'xstage' has no subcommand 'bogus' (it has: calibrate, plan, attention, moe)");
  expect_one_line_error("plan bogus", "'xstage plan' has no subcommand 'bogus' (it has: pattern, moe, attention)");
  expect_one_line_error("moe frobnicate", "'xstage moe' has no subcommand 'frobnicate'");
}

// Every command that writes results names the file --out and counts timed trials with --trials.
TEST(InputChecksOptions, OutputAndTrialOptionsAgreeAcrossCommands) {
  for (const char* cmd : {"moe bench", "moe check", "attention bench", "attention check", "attention ulysses bench",
                          "attention ulysses check"}) {
    const CliRun r = xstage(std::string(cmd) + " --help");
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_CONTAINS(r.out, "--out");
    EXPECT_EQ(r.out.find("--json"), std::string::npos) << cmd << ": the old name is hidden";
  }
  for (const char* cmd : {"moe bench", "attention bench", "attention ulysses bench"}) {
    const CliRun r = xstage(std::string(cmd) + " --help");
    EXPECT_CONTAINS(r.out, "--trials");
    EXPECT_EQ(r.out.find("--reps"), std::string::npos) << cmd;
  }
  expect_one_line_error("attention bench --trials 0", "--trials: must be an integer in [1, 100000] (got 0)");
  expect_one_line_error("attention bench --reps 0", "--reps: must be an integer in [1, 100000] (got 0)");  // the hidden old name
  expect_one_line_error("attention bench --head-dims 96", "--head-dims: the kernel takes 64 and/or 128 (got 96)");
}

}  // namespace
