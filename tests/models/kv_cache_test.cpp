#include "device/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace power {
namespace {

KvCacheConfig small(GgmlType dtype) {
  KvCacheConfig c;
  c.n_layer = 2;
  c.n_kv_heads = 2;
  c.head_dim_k = 4;
  c.head_dim_v = 3;
  c.block_tokens = 4;
  c.n_blocks = 5;
  c.dtype = dtype;
  return c;
}

TEST(KvCache, PlannedBytesIsTheArithmetic) {
  // 2 layers x 5 blocks x 4 positions x 2 heads x (4 + 3) values x 2 bytes.
  EXPECT_EQ(*KvCache::planned_bytes(small(GgmlType::F16)), 2u * 5 * 4 * 2 * 7 * 2);
  EXPECT_EQ(*KvCache::planned_bytes(small(GgmlType::F32)), 2u * 5 * 4 * 2 * 7 * 4);
  KvCacheConfig bad = small(GgmlType::Q8_0);
  EXPECT_EQ(KvCache::planned_bytes(bad).status().code(), StatusCode::kUnsupported);
}

TEST(KvCache, SequenceReserveTruncateAndRefcounts) {
  auto kv = KvCache::create(small(GgmlType::F32));
  ASSERT_TRUE(kv.ok());
  KvCache& cache = **kv;
  {
    KvSequence a(&cache);
    ASSERT_TRUE(a.reserve(9).ok());  // 3 blocks
    EXPECT_EQ(cache.blocks_used(), 3);
    a.set_n_tokens(9);
    KvSequence b(&cache);
    Status st = b.reserve(12);  // 3 more blocks, only 2 free
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(cache.blocks_used(), 3) << "a failed reserve must not leak blocks";
    ASSERT_TRUE(a.truncate(4).ok());  // keeps exactly one block
    EXPECT_EQ(a.n_tokens(), 4);
    EXPECT_EQ(cache.blocks_used(), 1);
    cache.retain_block(a.blocks()[0]);
    EXPECT_EQ(cache.block_refs(a.blocks()[0]), 2);
    cache.release_block(a.blocks()[0]);
  }
  EXPECT_EQ(cache.blocks_used(), 0) << "destroying sequences frees their blocks";
}

TEST(KvCache, WriteReadRoundTrip) {
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16}) {
    auto kv = KvCache::create(small(dtype));
    ASSERT_TRUE(kv.ok());
    std::vector<float> k = {0.5f, -1.25f, 2.0f, 3.0f, 0.125f, -0.75f, 1.5f, 8.0f};
    std::vector<float> v = {1, 2, 3, -4, -5, -6};
    (*kv)->write_k(1, 3, 2, k.data());
    (*kv)->write_v(1, 3, 2, v.data());
    std::vector<float> out(4);
    (*kv)->read_k(1, 3, 2, 1, out.data());
    EXPECT_EQ(out, std::vector<float>(k.begin() + 4, k.end()));  // exactly representable in f16
    out.resize(3);
    (*kv)->read_v(1, 3, 2, 0, out.data());
    EXPECT_EQ(out, std::vector<float>(v.begin(), v.begin() + 3));
  }
}

}  // namespace
}  // namespace power
