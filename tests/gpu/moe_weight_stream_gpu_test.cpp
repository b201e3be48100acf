// The streaming read of `xstage moe bench --hbm-reference` (moe/harness/weight_stream.hpp) reads exactly the bytes
// it is given: its checksum against the host's over spans with tails that are not a multiple of 16 B, with bytes
// that are not to be read around them, and large enough that every thread runs its several-loads-in-flight loop;
// bad spans are clear errors. Part of xstage_moe_gpu_tests (every rank runs it on its own GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/error.hpp"
#include "moe/harness/weight_stream.hpp"

namespace xstage::moe {
namespace {

// weight_stream.hpp's checksum on the host: every 16-B vector's four little-endian 32-bit words, then each tail byte.
std::uint64_t host_checksum(const std::uint8_t* p, std::int64_t bytes) {
  std::uint64_t sum = 0;
  const std::int64_t vec_bytes = bytes / 16 * 16;
  for (std::int64_t i = 0; i < vec_bytes; i += 4) {
    std::uint32_t w;
    std::memcpy(&w, p + i, 4);
    sum += w;
  }
  for (std::int64_t i = vec_bytes; i < bytes; ++i) sum += p[i];
  return sum;
}

TEST(StreamRead, ReadsExactlyTheSpans) {
  // 64 MiB + change: more than 4 loads per thread of every resident thread, so the unrolled loop, the remainder
  // loop and the byte tail all run. Every byte outside the spans is 0xFF, so reading one more vector or one more
  // tail byte moves the checksum.
  // The spans start on 16-B boundaries (StreamRead requires it): the big one's 5-byte tail is followed by padding.
  constexpr std::int64_t kBig = (64ll << 20) + 5, kBigPadded = (kBig + 15) / 16 * 16, kGap = 4096;
  const std::int64_t spans_at[3] = {0, kBigPadded + kGap, kBigPadded + 2 * kGap};
  const std::int64_t spans_bytes[3] = {kBig, 16, 33};
  const std::int64_t total = spans_at[2] + spans_bytes[2] + kGap;
  std::vector<std::uint8_t> host(total, 0xFF);
  std::mt19937_64 rng(20261201);
  std::uint64_t want = 0;
  for (int s = 0; s < 3; ++s) {
    for (std::int64_t i = 0; i < spans_bytes[s]; ++i) host[spans_at[s] + i] = static_cast<std::uint8_t>(rng());
    want += host_checksum(host.data() + spans_at[s], spans_bytes[s]);
  }
  DeviceBuffer dev(total);
  XSTAGE_CUDA_CHECK(cudaMemcpy(dev.get(), host.data(), total, cudaMemcpyHostToDevice));
  const auto* base = dev.get<std::uint8_t>();
  const StreamRead read({{base + spans_at[0], spans_bytes[0]}, {base + spans_at[1], spans_bytes[1]},
                         {nullptr, 0}, {base + spans_at[2], spans_bytes[2]}});
  EXPECT_EQ(read.bytes(), spans_bytes[0] + spans_bytes[1] + spans_bytes[2]);
  EXPECT_GT(read.l2_bytes(), 0);
  read.enqueue(nullptr);
  EXPECT_EQ(read.checksum(), want);
  read.enqueue(nullptr);  // the same again: nothing carried over from the last launch
  EXPECT_EQ(read.checksum(), want);
  // One byte fewer at the end of the big span: the checksum drops by exactly that byte.
  const StreamRead shorter({{base, kBig - 1}});
  shorter.enqueue(nullptr);
  EXPECT_EQ(shorter.checksum(), host_checksum(host.data(), kBig) - host[kBig - 1]);
}

TEST(StreamRead, RejectsBadSpans) {
  DeviceBuffer dev(256);
  const auto* base = dev.get<std::uint8_t>();
  EXPECT_THROW(StreamRead({{base + 8, 64}}), InputError);   // off a 16-B boundary
  EXPECT_THROW(StreamRead({{base, -16}}), InputError);      // negative size
  EXPECT_THROW(StreamRead({{nullptr, 64}}), InputError);    // no pointer
  EXPECT_THROW(StreamRead({{base, 0}}), InputError);        // nothing to read
  EXPECT_THROW(StreamRead(std::vector<DeviceSpan>(9, DeviceSpan{base, 16})), InputError);  // more spans than one launch takes
}

}  // namespace
}  // namespace xstage::moe
