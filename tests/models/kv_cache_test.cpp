#include "device/kv_cache.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "tensor/half.h"

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

// k_row / v_row point at the stored row: f32 values for an F32 cache, halves for F16, which
// read as what read_k / read_v give for every position and head (attention reads rows in place).
TEST(KvCache, StoredRowsReadAsReadKAndReadV) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (GgmlType dtype : {GgmlType::F32, GgmlType::F16}) {
    const KvCacheConfig c = small(dtype);
    auto kv = KvCache::create(c);
    ASSERT_TRUE(kv.ok());
    KvCache& cache = **kv;
    std::vector<float> k(static_cast<size_t>(c.n_kv_heads * c.head_dim_k));
    std::vector<float> v(static_cast<size_t>(c.n_kv_heads * c.head_dim_v));
    for (int layer = 0; layer < c.n_layer; ++layer) {
      for (int block = 0; block < c.n_blocks; ++block) {
        for (int slot = 0; slot < c.block_tokens; ++slot) {
          for (float& x : k) x = nd(rng);
          for (float& x : v) x = nd(rng);
          cache.write_k(layer, block, slot, k.data());
          cache.write_v(layer, block, slot, v.data());
        }
      }
    }
    auto stored = [&](const uint8_t* p, int d) {
      if (dtype == GgmlType::F32) {
        float f;
        std::memcpy(&f, p + 4 * d, 4);
        return f;
      }
      uint16_t h;
      std::memcpy(&h, p + 2 * d, 2);
      return f16_to_f32(h);
    };
    int mismatches = 0;
    std::vector<float> one_k(static_cast<size_t>(c.head_dim_k));
    std::vector<float> one_v(static_cast<size_t>(c.head_dim_v));
    for (int layer = 0; layer < c.n_layer; ++layer) {
      for (int block = 0; block < c.n_blocks; ++block) {
        for (int slot = 0; slot < c.block_tokens; ++slot) {
          for (int head = 0; head < c.n_kv_heads; ++head) {
            cache.read_k(layer, block, slot, head, one_k.data());
            cache.read_v(layer, block, slot, head, one_v.data());
            const uint8_t* kr = cache.k_row(layer, block, slot, head);
            const uint8_t* vr = cache.v_row(layer, block, slot, head);
            for (int d = 0; d < c.head_dim_k; ++d) {
              if (std::bit_cast<uint32_t>(stored(kr, d)) !=
                  std::bit_cast<uint32_t>(one_k[static_cast<size_t>(d)])) {
                ++mismatches;
              }
            }
            for (int d = 0; d < c.head_dim_v; ++d) {
              if (std::bit_cast<uint32_t>(stored(vr, d)) !=
                  std::bit_cast<uint32_t>(one_v[static_cast<size_t>(d)])) {
                ++mismatches;
              }
            }
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << (dtype == GgmlType::F16 ? "F16" : "F32");
  }
}

// Reading an F16 cache gives every f16 value exactly (the reference: tensor/half.h's
// converter, bit-exact with ggml), on the F16C path and on the portable one alike.
TEST(KvCache, F16ReadsEveryHalfExactlyOnEveryPath) {
  KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_heads = 1;
  c.head_dim_k = 64;
  c.head_dim_v = 64;
  c.block_tokens = 16;
  c.n_blocks = 64;  // 1024 positions x 64 values = every 16-bit pattern once
  c.dtype = GgmlType::F16;
  auto kv = KvCache::create(c);
  ASSERT_TRUE(kv.ok());
  std::vector<float> row(64);
  for (int pos = 0; pos < 1024; ++pos) {
    for (int d = 0; d < 64; ++d) row[d] = f16_to_f32(static_cast<uint16_t>(pos * 64 + d));
    (*kv)->write_k(0, pos / 16, pos % 16, row.data());
  }
  const CpuIsa saved = cpu_isa();
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!set_cpu_isa_for_testing(isa)) continue;
    int mismatches = 0;
    for (int pos = 0; pos < 1024; ++pos) {
      (*kv)->read_k(0, pos / 16, pos % 16, 0, row.data());
      for (int d = 0; d < 64; ++d) {
        const float want = f16_to_f32(static_cast<uint16_t>(pos * 64 + d));
        // NaNs are stored canonical (f32_to_f16), so only compare that a NaN reads as NaN.
        const bool same = std::isnan(want)
                              ? std::isnan(row[d])
                              : std::bit_cast<uint32_t>(row[d]) == std::bit_cast<uint32_t>(want);
        if (!same) ++mismatches;
      }
    }
    EXPECT_EQ(mismatches, 0) << cpu_isa_name(isa);
  }
  set_cpu_isa_for_testing(saved);
}

// Writing an F16 cache rounds as f32_to_f16 does (to nearest, ties to even), on the F16C path
// and on the portable one: the same stored half for random values at many magnitudes, exact
// ties, values around the largest half and the subnormal range, zeros and infinities.
TEST(KvCache, F16WritesRoundAsTheReferenceOnEveryPath) {
  KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_heads = 1;
  c.head_dim_k = 61;  // not a multiple of 8: the tail takes the portable converter
  c.head_dim_v = 61;
  c.block_tokens = 16;
  c.n_blocks = 4;
  c.dtype = GgmlType::F16;
  std::vector<float> vals;
  std::mt19937 rng(9);
  for (float scale : {1e-7f, 3e-5f, 1e-2f, 1.0f, 300.0f, 6e4f}) {
    std::normal_distribution<float> nd(0.0f, scale);
    for (int i = 0; i < 400; ++i) vals.push_back(nd(rng));
  }
  for (float t :
       {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 2048.0f + 1.0f, 2048.0f + 3.0f,
        std::ldexp(1.0f, -24) * 0.5f, std::ldexp(1.0f, -24) * 1.5f, std::ldexp(1.0f, -24) * 2.5f,
        65504.0f, 65519.99f, 65520.0f, 1e9f, 0.0f, std::numeric_limits<float>::infinity()}) {
    vals.push_back(t);
    vals.push_back(-t);
  }
  vals.resize((vals.size() + 60) / 61 * 61, 0.5f);
  const CpuIsa saved = cpu_isa();
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!set_cpu_isa_for_testing(isa)) continue;
    auto kv = KvCache::create(c);
    ASSERT_TRUE(kv.ok());
    int mismatches = 0;
    std::vector<float> row(61);
    for (size_t r = 0; r * 61 < vals.size(); ++r) {
      const int pos = static_cast<int>(r % 64);
      (*kv)->write_k(0, pos / 16, pos % 16, vals.data() + r * 61);
      (*kv)->read_k(0, pos / 16, pos % 16, 0, row.data());
      for (int d = 0; d < 61; ++d) {
        const float want = f16_to_f32(f32_to_f16(vals[r * 61 + d]));
        if (std::bit_cast<uint32_t>(row[d]) != std::bit_cast<uint32_t>(want)) ++mismatches;
      }
    }
    EXPECT_EQ(mismatches, 0) << cpu_isa_name(isa);
  }
  set_cpu_isa_for_testing(saved);
}

}  // namespace
}  // namespace power
