// The samples CSV must round-trip exactly and reject malformed input with the file and line named.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "calibration/measurement.hpp"
#include "common/error.hpp"
#include "synthetic.hpp"

namespace xstage::calibration {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "xstage_" + name; }

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Expects read_samples_csv(path) to throw InputError whose message contains every fragment.
void expect_input_error(const std::string& path, std::initializer_list<std::string> fragments) {
  try {
    read_samples_csv(path);
    ADD_FAILURE() << "expected InputError for " << path;
  } catch (const InputError& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(SamplesCsv, RoundTripsEveryFieldExactly) {
  testing::SweepPlan plan;
  plan.path = StorePath::tma_bulk;
  auto samples = testing::make_synthetic_samples(testing::Truth{}, plan);
  samples[0].T_iss_ns = 0.1 + 0.2;  // a double with no short decimal form
  const std::string path = temp_path("roundtrip.csv");
  write_samples_csv(path, samples);
  const auto back = read_samples_csv(path);
  ASSERT_EQ(back.size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto &a = samples[i], &b = back[i];
    EXPECT_EQ(a.sweep, b.sweep);
    EXPECT_EQ(a.mode, b.mode);
    EXPECT_EQ(a.path, b.path);
    EXPECT_EQ(a.dest, b.dest);
    EXPECT_EQ(a.K, b.K);
    EXPECT_EQ(a.B_bytes, b.B_bytes);
    EXPECT_EQ(a.gap_ns_requested, b.gap_ns_requested);
    EXPECT_EQ(a.gap_ns, b.gap_ns);
    EXPECT_EQ(a.T_iss_ns, b.T_iss_ns);
    EXPECT_EQ(a.T_iss_p10_ns, b.T_iss_p10_ns);
    EXPECT_EQ(a.T_iss_p90_ns, b.T_iss_p90_ns);
    EXPECT_EQ(a.T_period_ns, b.T_period_ns);
    EXPECT_EQ(a.wall_bytes_per_ns, b.wall_bytes_per_ns);
    EXPECT_EQ(a.sm_clock_mhz, b.sm_clock_mhz);
    EXPECT_EQ(a.n_bursts, b.n_bursts);
    EXPECT_EQ(a.rank, b.rank);
  }
  std::remove(path.c_str());
}

TEST(SamplesCsv, HeaderNamesColumnsAndEnumsAreWords) {
  BurstSample s;
  s.sweep = Sweep::isolated;
  s.mode = Mode::isolated;
  s.dest = Destination::local;
  s.K = 132;
  s.B_bytes = 32768;
  const std::string path = temp_path("header.csv");
  write_samples_csv(path, {s});
  const std::string text = read_text(path);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "sweep,mode,path,dest,K,B_bytes,gap_ns_requested,gap_ns,T_iss_ns,T_iss_p10_ns,T_iss_p90_ns,"
            "T_period_ns,wall_bytes_per_ns,sm_clock_mhz,n_bursts,rank");
  EXPECT_NE(text.find("isolated,isolated,st_global_16B,local,132,32768,"), std::string::npos) << text;
  std::remove(path.c_str());
}

TEST(SamplesCsv, ToleratesReorderedColumnsCrlfAndBlankLines) {
  const std::string path = temp_path("reordered.csv");
  write_text(path,
             "rank,K,B_bytes,sweep,mode,path,dest,gap_ns_requested,gap_ns,T_iss_ns,T_iss_p10_ns,T_iss_p90_ns,"
             "T_period_ns,wall_bytes_per_ns,sm_clock_mhz,n_bursts,extra\r\n"
             "\r\n"
             "1,66,4096,zero_gap,periodic,tma_bulk,remote,0,0,512.5,500,520,512.5,527.8,1980,64,x\r\n");
  const auto s = read_samples_csv(path);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 1);
  EXPECT_EQ(s[0].K, 66);
  EXPECT_EQ(s[0].path, StorePath::tma_bulk);
  EXPECT_EQ(s[0].sweep, Sweep::zero_gap);
  EXPECT_DOUBLE_EQ(s[0].T_iss_ns, 512.5);
  std::remove(path.c_str());
}

TEST(SamplesCsv, MalformedInputIsAnInputErrorNamingFileAndLine) {
  const std::string header =
      "sweep,mode,path,dest,K,B_bytes,gap_ns_requested,gap_ns,T_iss_ns,T_iss_p10_ns,T_iss_p90_ns,"
      "T_period_ns,wall_bytes_per_ns,sm_clock_mhz,n_bursts,rank\n";
  const std::string good = "gap,periodic,st_global_16B,remote,132,32768,100,101,900,880,920,1001,600,1980,64,0\n";
  const std::string path = temp_path("bad.csv");

  write_text(path, header + good + "gap,periodic,st_global_16B,remote,132,32768,100,1e,900,880,920,1001,600,1980,64,0\n");
  expect_input_error(path, {path, "line 3", "gap_ns", "1e"});

  write_text(path, header + good + good.substr(0, good.size() - 3) + "\n");  // a field short
  expect_input_error(path, {path, "line 3", "expected 16 fields"});

  write_text(path, header + "gap,periodic,st_global_16B,sideways,132,32768,100,101,900,880,920,1001,600,1980,64,0\n");
  expect_input_error(path, {path, "line 2", "dest", "sideways"});

  write_text(path, header + "gap,periodic,nvlink_magic,remote,132,32768,100,101,900,880,920,1001,600,1980,64,0\n");
  expect_input_error(path, {"line 2", "path"});

  write_text(path, header + "gap,periodic,st_global_16B,remote,13.5,32768,100,101,900,880,920,1001,600,1980,64,0\n");
  expect_input_error(path, {"line 2", "column 'K'"});  // K is an integer

  write_text(path, "sweep,mode,path,dest,K\n");
  expect_input_error(path, {path, "line 1", "B_bytes"});

  write_text(path, "");
  expect_input_error(path, {path, "empty"});

  std::remove(path.c_str());
  expect_input_error(temp_path("does_not_exist.csv"), {"cannot open", "does_not_exist.csv"});
}

}  // namespace
}  // namespace xstage::calibration
