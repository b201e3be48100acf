// Platform files: round trip, validation messages, the shipped default, interpolation and clamping.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <string>

#include "common/error.hpp"
#include "common/json_file.hpp"
#include "common/run_info.hpp"
#include "model/platform.hpp"
#include "model/units.hpp"

namespace xstage::model {
namespace {

namespace fs = std::filesystem;

// A unique scratch directory per test, removed afterwards.
class PlatformFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("xstage_platform_" + std::string(info->name()) + "_" +
                                        std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write_text(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  fs::path dir_;
};

// T_iss0 = 100 + B/50 + 2K + B*K/1e6 is bilinear in (K, B), so linear-in-B-then-linear-in-K
// interpolation must reproduce it exactly between grid points.
double bilinear(int K, double B) { return 100.0 + B / 50.0 + 2.0 * K + B * K / 1e6; }

PlatformTriple synthetic_triple() {
  PlatformTriple t;
  t.R_bytes_per_ns = 500.0;
  for (int K : {32, 64, 128})
    for (std::int64_t B : {8192, 16384, 65536}) t.T_iss0.push_back({K, B, bilinear(K, static_cast<double>(B))});
  t.Q = {{32, 1.0 * MiB}, {64, 2.5 * MiB}, {128, 4.0 * MiB}};
  t.fit = {{"residual_ns", 3.5}};
  return t;
}

PlatformModel synthetic_model() {
  PlatformModel m;
  m.provisional = false;
  m.provenance = {{"gpu", "test"}, {"sm_count", 132}};
  m.store_paths[StorePath::st_global_16B] = synthetic_triple();
  PlatformTriple tma = synthetic_triple();
  tma.R_bytes_per_ns = 480.0;
  m.store_paths[StorePath::tma_bulk] = tma;
  return m;
}

// Expects read_platform_file(path) to throw InputError whose message contains every fragment.
void expect_input_error(const std::string& path, std::initializer_list<std::string> fragments) {
  try {
    read_platform_file(path);
    FAIL() << "no error for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}

TEST_F(PlatformFileTest, RoundTrip) {
  const PlatformModel m = synthetic_model();
  write_platform_file(path("p.json"), m);
  const PlatformModel r = read_platform_file(path("p.json"));
  EXPECT_EQ(r.provisional, m.provisional);
  EXPECT_EQ(r.provenance, m.provenance);
  ASSERT_EQ(r.store_paths.size(), 2u);
  for (const auto& [path, t] : m.store_paths) {
    const PlatformTriple& u = r.store_paths.at(path);
    EXPECT_DOUBLE_EQ(u.R_bytes_per_ns, t.R_bytes_per_ns);
    ASSERT_EQ(u.T_iss0.size(), t.T_iss0.size());
    for (std::size_t i = 0; i < t.T_iss0.size(); ++i) {
      EXPECT_EQ(u.T_iss0[i].K, t.T_iss0[i].K);
      EXPECT_EQ(u.T_iss0[i].B_bytes, t.T_iss0[i].B_bytes);
      EXPECT_DOUBLE_EQ(u.T_iss0[i].T_iss0_ns, t.T_iss0[i].T_iss0_ns);
    }
    ASSERT_EQ(u.Q.size(), t.Q.size());
    for (std::size_t i = 0; i < t.Q.size(); ++i) {
      EXPECT_EQ(u.Q[i].K, t.Q[i].K);
      EXPECT_DOUBLE_EQ(u.Q[i].Q_bytes, t.Q[i].Q_bytes);
    }
    EXPECT_EQ(u.fit, t.fit);
  }
  EXPECT_EQ(to_json(r), to_json(m));
}

TEST_F(PlatformFileTest, WriteRefusesAnInvalidModel) {
  PlatformModel m = synthetic_model();
  m.store_paths[StorePath::tma_bulk].Q.clear();
  try {
    write_platform_file(path("bad.json"), m);
    FAIL() << "wrote an invalid model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/store_paths/tma_bulk/Q"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("bad.json")));
}

TEST_F(PlatformFileTest, MissingFieldIsNamed) {
  nlohmann::json doc = to_json(synthetic_model());
  doc["store_paths"]["st_global_16B"].erase("R_bytes_per_ns");
  write_json_file(path("f.json"), doc);
  expect_input_error(path("f.json"), {path("f.json"), "/store_paths/st_global_16B/R_bytes_per_ns", "missing"});
}

TEST_F(PlatformFileTest, NegativeDrainRateIsRejected) {
  nlohmann::json doc = to_json(synthetic_model());
  doc["store_paths"]["tma_bulk"]["R_bytes_per_ns"] = -717.0;
  write_json_file(path("f.json"), doc);
  expect_input_error(path("f.json"), {"/store_paths/tma_bulk/R_bytes_per_ns", "[0.001, 100000] bytes/ns", "-717"});
}

TEST_F(PlatformFileTest, BadPointsAreNamedByIndex) {
  nlohmann::json doc = to_json(synthetic_model());
  doc["store_paths"]["st_global_16B"]["T_iss0"][4]["T_iss0_ns"] = 0;
  write_json_file(path("a.json"), doc);
  expect_input_error(path("a.json"), {"/store_paths/st_global_16B/T_iss0/4/T_iss0_ns", "[0.001, 1e+10] ns"});

  doc = to_json(synthetic_model());
  doc["store_paths"]["st_global_16B"]["Q"][1]["K"] = 64.5;
  write_json_file(path("b.json"), doc);
  expect_input_error(path("b.json"), {"/store_paths/st_global_16B/Q/1/K", "integer"});

  doc = to_json(synthetic_model());
  doc["store_paths"]["st_global_16B"]["Q"].push_back({{"K", 32}, {"Q_bytes", 5.0}});
  write_json_file(path("c.json"), doc);
  expect_input_error(path("c.json"), {"/store_paths/st_global_16B/Q/3", "duplicate", "K=32"});

  doc = to_json(synthetic_model());
  doc["store_paths"]["st_global_16B"]["T_iss0"] = nlohmann::json::array();
  write_json_file(path("d.json"), doc);
  expect_input_error(path("d.json"), {"/store_paths/st_global_16B/T_iss0", "1 to 100000 elements"});
}

TEST_F(PlatformFileTest, WrongSchemaIsRejected) {
  nlohmann::json doc = to_json(synthetic_model());
  doc["schema"] = "xstage.platform/2";
  write_json_file(path("s.json"), doc);
  expect_input_error(path("s.json"), {"schema", "xstage.platform/1", "xstage.platform/2"});

  doc.erase("schema");
  write_json_file(path("t.json"), doc);
  expect_input_error(path("t.json"), {"/schema", "missing"});

  write_text("arr.json", "[1, 2, 3]");
  expect_input_error(path("arr.json"), {"arr.json", "the top level", "must be an object"});
}

TEST_F(PlatformFileTest, UnknownStorePathAndNotJson) {
  nlohmann::json doc = to_json(synthetic_model());
  doc["store_paths"]["st_global_8B"] = doc["store_paths"]["tma_bulk"];
  write_json_file(path("u.json"), doc);
  expect_input_error(path("u.json"), {"/store_paths/st_global_8B", "unknown key"});

  write_text("x.json", "{ \"schema\": \"xstage.platform/1\", ");
  expect_input_error(path("x.json"), {"x.json", "not valid JSON"});

  expect_input_error(path("absent.json"), {"absent.json", "no such file"});
}

// Every number has a physical range (model/platform.hpp); a value outside it is named with the range, so a file that
// would print "G* = inf" or call a 1e294 ms issue time "piggyback" is refused as it is read.
TEST_F(PlatformFileTest, ValuesOutsideTheirPhysicalRangeAreRefused) {
  const struct {
    const char* pointer;
    nlohmann::json value;
    const char* range;
  } cases[] = {
      {"/store_paths/st_global_16B/R_bytes_per_ns", 1e-308, "[0.001, 100000] bytes/ns"},
      {"/store_paths/st_global_16B/R_bytes_per_ns", 1e6, "[0.001, 100000] bytes/ns"},
      {"/store_paths/st_global_16B/T_iss0/0/T_iss0_ns", 1e300, "[0.001, 1e+10] ns"},
      {"/store_paths/st_global_16B/T_iss0/0/B_bytes", 0, "[1, 68719476736] bytes"},
      {"/store_paths/st_global_16B/T_iss0/0/K", 2000000, "[1, 1000000] producers"},
      {"/store_paths/tma_bulk/Q/2/Q_bytes", 1e13, "[1, 1.09951e+12] bytes"},
      {"/store_paths/tma_bulk/Q/2/K", -3, "[1, 1000000] producers"},
      {"/provenance/sm_count", 0, "[1, 16384] SMs"},
      {"/provenance/sm_count", 16385, "[1, 16384] SMs"},
  };
  for (const auto& c : cases) {
    nlohmann::json doc = to_json(synthetic_model());
    doc[nlohmann::json::json_pointer(c.pointer)] = c.value;
    write_json_file(path("r.json"), doc);
    expect_input_error(path("r.json"), {"r.json", c.pointer, c.range});
  }
  // A wrong type and a misspelt key are named too.
  nlohmann::json doc = to_json(synthetic_model());
  doc["store_paths"]["tma_bulk"]["R_bytes_per_ns"] = "717";
  write_json_file(path("t.json"), doc);
  expect_input_error(path("t.json"), {"/store_paths/tma_bulk/R_bytes_per_ns", "must be a number", "\"717\""});
  doc = to_json(synthetic_model());
  doc["store_paths"]["tma_bulk"]["T_iss0"][0]["T_iss0_nss"] = 5;
  write_json_file(path("k.json"), doc);
  expect_input_error(path("k.json"), {"/store_paths/tma_bulk/T_iss0/0/T_iss0_nss", "unknown key"});
  doc = to_json(synthetic_model());
  doc["provisional"] = 1;
  write_json_file(path("p.json"), doc);
  expect_input_error(path("p.json"), {"/provisional", "true or false"});
}

// The file itself is checked before it is parsed: its kind, its size, its nesting, its numbers.
TEST_F(PlatformFileTest, FileKindSizeNestingAndOverflowAreRefusedByName) {
  expect_input_error(dir_.string(), {dir_.string(), "is a directory"});
  expect_input_error("", {"empty"});
  expect_input_error("/dev/null", {"/dev/null", "character device"});
  const std::string fifo = path("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_input_error(fifo, {fifo, "a FIFO"});  // refused without opening it (opening a FIFO would block)

  write_text("big.json", std::string(kMaxJsonFileBytes + 1, ' '));
  expect_input_error(path("big.json"), {"big.json", "4194305 bytes", "limited to 4194304"});
  write_text("deep.json", std::string(200, '['));
  expect_input_error(path("deep.json"), {"deep.json", "nesting deeper than 16"});

  // nlohmann's own message names neither the file nor the field; this one names both.
  nlohmann::json doc = to_json(synthetic_model());
  std::string text = doc.dump();
  const std::string R = "\"R_bytes_per_ns\":" + doc["store_paths"]["tma_bulk"]["R_bytes_per_ns"].dump();
  text.replace(text.rfind(R), R.size(), "\"R_bytes_per_ns\":1e309");
  write_text("o.json", text);
  expect_input_error(path("o.json"), {"o.json", "/store_paths/tma_bulk/R_bytes_per_ns", "overflow", "1e309"});

  write_text("dup.json", R"({"schema": "xstage.platform/1", "schema": "xstage.platform/1"})");
  expect_input_error(path("dup.json"), {"dup.json", "/schema", "duplicate key"});
  write_text("trunc.json", doc.dump().substr(0, 200));
  expect_input_error(path("trunc.json"), {"trunc.json", "not valid JSON", "line 1"});
}

TEST(PlatformLookup, MissingStorePathIsNamed) {
  PlatformModel m = synthetic_model();
  m.store_paths.erase(StorePath::tma_bulk);
  try {
    store_path_triple(m, StorePath::tma_bulk);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tma_bulk"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("st_global_16B"), std::string::npos);
  }
  EXPECT_EQ(store_path_from_string("tma_bulk"), StorePath::tma_bulk);
  EXPECT_THROW(store_path_from_string("st.global"), InputError);
}

TEST(PlatformInterpolation, ExactAtGridPointsAndBilinearBetween) {
  const PlatformTriple t = synthetic_triple();
  for (const IssuePoint& pt : t.T_iss0) {
    const Interpolated v = interpolate_T_iss0_ns(t, pt.K, static_cast<double>(pt.B_bytes));
    EXPECT_DOUBLE_EQ(v.value, pt.T_iss0_ns);
    EXPECT_FALSE(v.extrapolated);
    EXPECT_TRUE(v.warning.empty());
  }
  for (int K : {33, 48, 100, 127})
    for (double B : {9000.0, 12288.0, 40000.0, 65000.0}) {
      const Interpolated v = interpolate_T_iss0_ns(t, K, B);
      EXPECT_NEAR(v.value, bilinear(K, B), 1e-9) << "K=" << K << " B=" << B;
      EXPECT_FALSE(v.extrapolated);
    }
  // Q(K) is linear in K between points.
  EXPECT_DOUBLE_EQ(interpolate_Q_bytes(t, 48).value, 1.75 * MiB);
  EXPECT_DOUBLE_EQ(interpolate_Q_bytes(t, 96).value, 3.25 * MiB);
  EXPECT_FALSE(interpolate_Q_bytes(t, 96).extrapolated);
}

TEST(PlatformInterpolation, RowsWithDifferentBGrids) {
  PlatformTriple t;
  t.R_bytes_per_ns = 700.0;
  t.T_iss0 = {{16, 4096, 200.0}, {16, 65536, 1400.0}, {64, 8192, 300.0}, {64, 16384, 500.0}, {64, 32768, 900.0}};
  t.Q = {{16, 1e6}};
  // K = 40 is halfway between the rows; at B = 12288 row 16 gives 200 + 1200*(8192/61440) = 360,
  // row 64 gives 400.
  const Interpolated v = interpolate_T_iss0_ns(t, 40, 12288.0);
  EXPECT_NEAR(v.value, 0.5 * (360.0 + 400.0), 1e-9);
  EXPECT_FALSE(v.extrapolated);
  // B = 40000 is inside row 16's range but beyond row 64's: clamped there, with a warning naming K = 64.
  const Interpolated w = interpolate_T_iss0_ns(t, 40, 40000.0);
  EXPECT_TRUE(w.extrapolated);
  EXPECT_NE(w.warning.find("at K = 64"), std::string::npos) << w.warning;
  EXPECT_EQ(w.warning.find("at K = 16"), std::string::npos) << w.warning;
}

TEST(PlatformInterpolation, ClampsAndWarnsOutsideTheMeasuredRange) {
  const PlatformTriple t = synthetic_triple();
  // K above the range: the K = 128 row, and the warning says by how much.
  const Interpolated k_hi = interpolate_T_iss0_ns(t, 148, 16384.0);
  EXPECT_TRUE(k_hi.extrapolated);
  EXPECT_DOUBLE_EQ(k_hi.value, bilinear(128, 16384.0));
  for (const char* f : {"K = 148", "above", "[32, 128]", "by 20", "15.6%", "not extrapolated"})
    EXPECT_NE(k_hi.warning.find(f), std::string::npos) << f << " not in: " << k_hi.warning;
  // B below the range.
  const Interpolated b_lo = interpolate_T_iss0_ns(t, 64, 4096.0);
  EXPECT_TRUE(b_lo.extrapolated);
  EXPECT_DOUBLE_EQ(b_lo.value, bilinear(64, 8192.0));
  for (const char* f : {"B = 4.0 KiB", "below", "[8.0 KiB, 64.0 KiB]", "by 4.0 KiB", "50.0%"})
    EXPECT_NE(b_lo.warning.find(f), std::string::npos) << f << " not in: " << b_lo.warning;
  // Both axes at once: two warnings.
  const Interpolated both = interpolate_T_iss0_ns(t, 8, 1e6);
  EXPECT_DOUBLE_EQ(both.value, bilinear(32, 65536.0));
  EXPECT_NE(both.warning.find("K = 8"), std::string::npos);
  EXPECT_NE(both.warning.find("B = "), std::string::npos);
  // Q below and above.
  const Interpolated q_lo = interpolate_Q_bytes(t, 16);
  EXPECT_TRUE(q_lo.extrapolated);
  EXPECT_DOUBLE_EQ(q_lo.value, 1.0 * MiB);
  EXPECT_NE(q_lo.warning.find("Q(K)"), std::string::npos);
  EXPECT_DOUBLE_EQ(interpolate_Q_bytes(t, 1000).value, 4.0 * MiB);

  const PlatformLookup look = evaluate_platform(t, 148, 16384.0);
  EXPECT_EQ(look.warnings.size(), 2u);  // T_iss0 and Q, both clamped in K
  EXPECT_DOUBLE_EQ(look.point.R_bytes_per_ns, 500.0);
  EXPECT_TRUE(evaluate_platform(t, 64, 16384.0).warnings.empty());
  EXPECT_THROW(evaluate_platform(t, 0, 16384.0), InputError);
  EXPECT_THROW(evaluate_platform(t, 64, -1.0), InputError);
}

// The optional storer section: round trip, absent means never the bound, and each bad value named.
StorerMeasurement synthetic_storer() {
  StorerMeasurement s;
  s.costs = {62.5, 600.0, 1500.0};
  s.T_fence_ns = 1100.0;
  s.source = "a bench run";
  return s;
}

TEST_F(PlatformFileTest, StorerSectionRoundTripsAndIsOptional) {
  PlatformModel m = synthetic_model();
  write_platform_file(path("none.json"), m);
  EXPECT_FALSE(read_platform_file(path("none.json")).storer.has_value());
  EXPECT_FALSE(to_json(m).contains("storer"));
  m.storer = synthetic_storer();
  write_platform_file(path("s.json"), m);
  const PlatformModel r = read_platform_file(path("s.json"));
  ASSERT_TRUE(r.storer.has_value());
  EXPECT_DOUBLE_EQ(r.storer->costs.R_S_bytes_per_ns, 62.5);
  EXPECT_DOUBLE_EQ(r.storer->costs.T_load_ns, 600.0);
  EXPECT_DOUBLE_EQ(r.storer->costs.T_release_ns, 1500.0);
  EXPECT_DOUBLE_EQ(r.storer->T_fence_ns, 1100.0);
  EXPECT_EQ(r.storer->source, "a bench run");
  EXPECT_EQ(to_json(r), to_json(m));
  // Absent, the storer is never the bound: an infinite rate and no fixed costs.
  const StorerCosts never;
  EXPECT_TRUE(std::isinf(never.R_S_bytes_per_ns));
  EXPECT_DOUBLE_EQ(never.T_load_ns + never.T_release_ns, 0.0);
}

TEST_F(PlatformFileTest, BadStorerValuesAreNamed) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* expect;
  };
  const Case cases[] = {{"R_S_bytes_per_ns", -62.5, "[0.001, 100000] bytes/ns"},
                        {"R_S_bytes_per_ns", 0.0, "[0.001, 100000] bytes/ns"},
                        {"R_S_bytes_per_ns", "fast", "must be a number"},
                        {"T_load_ns", -1.0, "[0, 1e+09] ns"},
                        {"T_fence_ns", 2e9, "[0, 1e+09] ns"},
                        {"T_release_ns", -0.5, "[0, 1e+09] ns"},
                        {"source", 7, "must be a string"}};
  for (const Case& c : cases) {
    PlatformModel m = synthetic_model();
    m.storer = synthetic_storer();
    nlohmann::json doc = to_json(m);
    doc["storer"][c.key] = c.value;
    write_json_file(path("f.json"), doc);
    expect_input_error(path("f.json"), {path("f.json"), std::string("/storer/") + c.key, c.expect});
  }
  for (const char* key : {"R_S_bytes_per_ns", "T_load_ns", "T_fence_ns", "T_release_ns", "source"}) {
    PlatformModel m = synthetic_model();
    m.storer = synthetic_storer();
    nlohmann::json doc = to_json(m);
    doc["storer"].erase(key);
    write_json_file(path("f.json"), doc);
    expect_input_error(path("f.json"), {std::string("/storer/") + key, "missing"});
  }
  nlohmann::json doc = to_json(synthetic_model());
  doc["storer"] = to_json([] { PlatformModel m = synthetic_model(); m.storer = synthetic_storer(); return m; }())["storer"];
  doc["storer"]["R_S"] = 1.0;  // a misspelt key is an error, not ignored
  write_json_file(path("f.json"), doc);
  expect_input_error(path("f.json"), {"/storer", "R_S"});
  // In memory (what a writer would store): non-finite values and an empty source are refused too.
  PlatformModel m = synthetic_model();
  m.storer = synthetic_storer();
  m.storer->costs.T_load_ns = std::nan("");
  EXPECT_THROW(write_platform_file(path("w.json"), m), Error);
  m.storer = synthetic_storer();
  m.storer->source.clear();
  EXPECT_THROW(write_platform_file(path("w.json"), m), Error);
  EXPECT_FALSE(fs::exists(path("w.json")));
}

TEST(StorerCosts, ValidationNamesTheBadValue) {
  EXPECT_NO_THROW(validate_storer_costs(StorerCosts{}, "x"));  // infinite rate: never the bound
  for (const StorerCosts& bad : {StorerCosts{0.0, 0.0, 0.0}, StorerCosts{-1.0, 0.0, 0.0}, StorerCosts{std::nan(""), 0.0, 0.0},
                                 StorerCosts{10.0, -1.0, 0.0}, StorerCosts{10.0, 0.0, std::numeric_limits<double>::infinity()}}) {
    try {
      validate_storer_costs(bad, "the audit");
      FAIL() << "accepted a bad storer";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("the audit"), std::string::npos) << e.what();
    }
  }
}

TEST(ShippedPlatform, H200IsACalibrationThatRecordsHowItWasMade) {
  const PlatformModel m = read_platform_file(std::string(XSTAGE_SOURCE_DIR) + "/platforms/h200_nvlink4.json");
  EXPECT_FALSE(m.provisional);
  EXPECT_NE(m.provenance.at("command").get<std::string>().find("xstage calibrate"), std::string::npos);
  EXPECT_EQ(m.provenance.at("gpu_count").get<int>(), 2);
  for (StorePath path : {StorePath::st_global_16B, StorePath::tma_bulk}) {
    const PlatformTriple& t = store_path_triple(m, path);
    // Measured over the whole H200 (132 SMs): the grid reaches every SM and every K has a capacity.
    const PlatformLookup all_sms = evaluate_platform(t, 132, 32 * KiB);
    EXPECT_TRUE(all_sms.warnings.empty()) << to_string(path);
    EXPECT_GT(all_sms.point.Q_bytes, 0.0);
    // Physically: the drain cannot beat NVLink4's 18 x 26.56 GB/s per direction.
    EXPECT_LT(t.R_bytes_per_ns, 18 * 26.56);
    EXPECT_FALSE(t.fit.empty()) << "the calibration's diagnostics travel with the file";
  }
  // The storer's own costs, measured apart from the X-Stage and named by their source.
  ASSERT_TRUE(m.storer.has_value());
  EXPECT_NE(m.storer->source.find("storer_bench"), std::string::npos) << m.storer->source;
  EXPECT_NO_THROW(validate_storer_costs(m.storer->costs, "h200_nvlink4.json"));
  EXPECT_FALSE(std::isinf(m.storer->costs.R_S_bytes_per_ns));
}

TEST(ShippedPlatform, PaperReferenceIsProvisionalPaperNumbersForBothPaths) {
  const PlatformModel m = read_platform_file(std::string(XSTAGE_SOURCE_DIR) + "/platforms/paper_reference.json");
  EXPECT_TRUE(m.provisional);
  EXPECT_NE(m.provenance.at("note").get<std::string>().find("not a measurement"), std::string::npos);
  const PlatformTriple& st = store_path_triple(m, StorePath::st_global_16B);
  const PlatformTriple& tma = store_path_triple(m, StorePath::tma_bulk);
  EXPECT_DOUBLE_EQ(st.R_bytes_per_ns, 717.0);
  const PlatformLookup at132 = evaluate_platform(st, 132, 32 * KiB);
  EXPECT_TRUE(at132.warnings.empty());
  EXPECT_NEAR(at132.point.T_iss0_ns, 760.0, 1.0);
  // Q(K) scaled from 4.25 MiB at K = 148.
  EXPECT_NEAR(at132.point.Q_bytes, 4.25 * MiB * 132 / 148, 2.0);
  // The paper's own K = 148 is on the grid: its numbers exactly, no warning.
  const PlatformLookup at148 = evaluate_platform(st, 148, 32 * KiB);
  EXPECT_TRUE(at148.warnings.empty());
  EXPECT_NEAR(at148.point.Q_bytes, 4.25 * MiB, 2.0);
  EXPECT_NEAR(at148.point.T_iss0_ns, 760.0, 1.0);
  EXPECT_FALSE(m.storer.has_value()) << "the paper gives no storer rate";
  EXPECT_FALSE(evaluate_platform(st, 200, 32 * KiB).warnings.empty());
  // TMA bursts back-pressure at about half the volume.
  for (int K : {16, 33, 66, 132, 148})
    EXPECT_NEAR(interpolate_Q_bytes(tma, K).value / interpolate_Q_bytes(st, K).value, 0.5, 0.01);
}

}  // namespace
}  // namespace xstage::model
