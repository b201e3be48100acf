// The TMA descriptor cache (common/tma_encode.hpp) with a stand-in encoder, and the process's cuTensorMapEncodeTiled
// (no GPU needed: without a driver it fails cleanly; with one it encodes).
#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "common/tma_encode.hpp"

namespace xstage {
namespace {

int g_calls = 0;
int g_status = 0;

// A stand-in for the driver: a descriptor made of the arguments (so that a wrong key shows as a wrong descriptor).
int fake_encode(const TmaEncodeArgs& a, TmaDescriptorBytes* out) {
  ++g_calls;
  if (g_status != 0) return g_status;
  *out = TmaDescriptorBytes{};
  out->words[0] = a.address;
  out->words[1] = TmaEncodeArgsHash{}(a);
  out->words[2] = a.dims[0];
  return 0;
}

TmaEncodeArgs q_like(std::uint64_t address = 0x7f0000001000ull) {
  TmaEncodeArgs a;
  a.data_type = 10;  // bf16
  a.rank = 4;
  a.address = address;
  a.dims = {128, 1000, 24, 2, 0};
  a.strides = {6144, 256, 6144000, 0};
  a.box = {64, 128, 1, 1, 0};
  a.element_strides = {1, 1, 1, 1, 0};
  a.swizzle = 3;
  a.l2_promotion = 2;
  return a;
}

class TmaEncodeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { g_calls = 0, g_status = 0; }
};

TEST_F(TmaEncodeCacheTest, ARepeatedArgumentSetIsEncodedOnce) {
  TmaEncodeCache cache;
  TmaDescriptorBytes first, again;
  ASSERT_EQ(cache.get(q_like(), &first, fake_encode), 0);
  ASSERT_EQ(cache.get(q_like(), &again, fake_encode), 0);
  EXPECT_EQ(g_calls, 1);
  EXPECT_EQ(cache.encodes(), 1u);
  EXPECT_EQ(first.words, again.words);
}

TEST_F(TmaEncodeCacheTest, EveryArgumentIsPartOfTheKey) {
  const std::vector<std::function<void(TmaEncodeArgs&)>> changes = {
      [](TmaEncodeArgs& a) { a.address += 16; },        [](TmaEncodeArgs& a) { a.data_type = 9; },
      [](TmaEncodeArgs& a) { a.rank = 3; },             [](TmaEncodeArgs& a) { a.dims[1] = 1001; },
      [](TmaEncodeArgs& a) { a.dims[3] = 3; },          [](TmaEncodeArgs& a) { a.strides[0] = 6160; },
      [](TmaEncodeArgs& a) { a.strides[2] = 6144 * 1001; }, [](TmaEncodeArgs& a) { a.box[1] = 192; },
      [](TmaEncodeArgs& a) { a.box[0] = 32; },          [](TmaEncodeArgs& a) { a.element_strides[0] = 2; },
      [](TmaEncodeArgs& a) { a.interleave = 1; },       [](TmaEncodeArgs& a) { a.swizzle = 2; },
      [](TmaEncodeArgs& a) { a.l2_promotion = 1; },     [](TmaEncodeArgs& a) { a.oob_fill = 1; },
  };
  TmaEncodeCache cache;
  TmaDescriptorBytes base, other;
  ASSERT_EQ(cache.get(q_like(), &base, fake_encode), 0);
  for (size_t i = 0; i < changes.size(); ++i) {
    TmaEncodeArgs a = q_like();
    changes[i](a);
    EXPECT_FALSE(a == q_like()) << i;
    ASSERT_EQ(cache.get(a, &other, fake_encode), 0);
    EXPECT_EQ(g_calls, int(i) + 2) << "change " << i << " was served a descriptor of other arguments";
    EXPECT_NE(other.words, base.words) << i;
  }
  ASSERT_EQ(cache.get(q_like(), &other, fake_encode), 0);  // the first one is still kept
  EXPECT_EQ(g_calls, int(changes.size()) + 1);
}

TEST_F(TmaEncodeCacheTest, AFailureIsReturnedEveryTimeAndNotKept) {
  TmaEncodeCache cache;
  TmaDescriptorBytes out;
  g_status = 1;  // CUDA_ERROR_INVALID_VALUE
  EXPECT_EQ(cache.get(q_like(), &out, fake_encode), 1);
  EXPECT_EQ(cache.get(q_like(), &out, fake_encode), 1);
  EXPECT_EQ(g_calls, 2);
  EXPECT_EQ(cache.size(), 0u);
  g_status = 0;
  EXPECT_EQ(cache.get(q_like(), &out, fake_encode), 0);
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(TmaEncodeCacheTest, IsBounded) {
  TmaEncodeCache cache(8);
  TmaDescriptorBytes out;
  for (std::uint64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(cache.get(q_like(0x1000 + 128 * i), &out, fake_encode), 0);
    EXPECT_LE(cache.size(), 8u);
    EXPECT_EQ(out.words[0], 0x1000 + 128 * i);
  }
  EXPECT_EQ(g_calls, 100);
  // A working set within the capacity is served from the cache.
  for (int round = 0; round < 3; ++round)
    for (std::uint64_t i = 0; i < 4; ++i) ASSERT_EQ(cache.get(q_like(0x900000 + 128 * i), &out, fake_encode), 0);
  EXPECT_LE(g_calls, 100 + 4 + 4);  // at most one emptying of the full cache in between
}

TEST_F(TmaEncodeCacheTest, ThreadsShareIt) {
  TmaEncodeCache cache(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&cache] {
      TmaDescriptorBytes out;
      for (int i = 0; i < 1000; ++i) {
        const TmaEncodeArgs a = q_like(0x2000 + 128 * (i % 16));
        if (cache.get(a, &out, fake_encode) != 0 || out.words[0] != a.address) std::abort();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.size(), 16u);
  EXPECT_LE(cache.encodes(), 16u * 4);  // two threads may both encode a set neither found
}

// The process's cuTensorMapEncodeTiled (what CuTe calls): without a driver an error, with one a descriptor, the same
// for the same arguments.
TEST(TmaEncodeSymbol, EncodesThroughTheDriverOrFailsCleanly) {
  alignas(64) static std::uint16_t tensor[1024 * 64];
  const cuuint64_t dims[2] = {64, 1024};
  const cuuint64_t strides[1] = {64 * 2};
  const cuuint32_t box[2] = {64, 128}, element_strides[2] = {1, 1};
  CUtensorMap a{}, b{};
  auto encode = [&](CUtensorMap* m) {
    return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, tensor, dims, strides, box, element_strides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    EXPECT_NE(encode(&a), CUDA_SUCCESS);
    return;
  }
  ASSERT_EQ(encode(&a), CUDA_SUCCESS);
  ASSERT_EQ(encode(&b), CUDA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(&a, &b, sizeof a));
  EXPECT_EQ(cuTensorMapEncodeTiled(&a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 9, tensor, dims, strides, box, element_strides,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace xstage
