// Edge cases without fixtures: argument errors, unsupported types, all-zero blocks, scales
// that become f16 subnormals or underflow, non-finite values, the activation rounding mode,
// and vec_dot against an exact float64 product on sizes the fixtures do not cover.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensor/half.h"
#include "tensor/quant.h"

namespace power {
namespace {

const GgmlType kQuantTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,
                                GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,
                                GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};
const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,  GgmlType::Q4_0,
                              GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,  GgmlType::Q8_0,
                              GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,  GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

size_t row_bytes(GgmlType t, int64_t n) {
  uint64_t b = 0;
  EXPECT_TRUE(ggml_row_bytes(t, static_cast<uint64_t>(n), &b));
  return static_cast<size_t>(b);
}

std::vector<float> gaussian(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng) * scale;
  return v;
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

TEST(QuantEdge, SupportMatchesTheTypeTable) {
  // format/ggml_types marks exactly the types tensor/ can turn into f32.
  for (uint32_t id = 0; id < 64; ++id) {
    auto info = ggml_type_info(id);
    if (!info) continue;
    EXPECT_EQ(dequantize_supported(info->type), info->dequant_supported) << info->name;
    EXPECT_EQ(quantize_supported(info->type), info->dequant_supported) << info->name;
  }
}

TEST(QuantEdge, PartialBlocksAndNegativeCountsAreErrors) {
  std::vector<uint8_t> bytes(4096);
  std::vector<float> f(4096);
  for (GgmlType t : kQuantTypes) {
    const int64_t block = ggml_type_info(t).block_elems;
    for (int64_t n : {block - 1, block + 1, int64_t{-1}, -block}) {
      Status s = dequantize_row(t, bytes.data(), f.data(), n);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << ggml_type_name(t) << " n=" << n;
      EXPECT_TRUE(contains(s.message(), std::string(ggml_type_name(t)))) << s.message();
      EXPECT_EQ(quantize_row(t, f.data(), bytes.data(), n).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(vec_dot(t, bytes.data(), bytes.data(), n).status().code(),
                StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(quantize_row_q8_0(f.data(), bytes.data(), 33).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_row_q8_1(f.data(), bytes.data(), 16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_row_q8_K(f.data(), bytes.data(), 128).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dequantize_row(GgmlType::F16, bytes.data(), f.data(), -3).code(),
            StatusCode::kInvalidArgument);
  // n = 0 is a valid empty row.
  EXPECT_TRUE(dequantize_row(GgmlType::Q4_K, bytes.data(), f.data(), 0).ok());
  EXPECT_TRUE(quantize_row(GgmlType::Q4_K, f.data(), bytes.data(), 0).ok());
}

TEST(QuantEdge, UnsupportedTypesAreNamed) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> f(256);
  Status s = dequantize_row(GgmlType::IQ2_XXS, bytes.data(), f.data(), 256);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(contains(s.message(), "IQ2_XXS")) << s.message();
  s = quantize_row(GgmlType::Q8_K, f.data(), bytes.data(), 256);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(contains(s.message(), "Q8_K")) << s.message();
  auto r = vec_dot(GgmlType::TQ1_0, bytes.data(), bytes.data(), 256);
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_TRUE(contains(r.status().message(), "TQ1_0"));
  EXPECT_EQ(vec_dot_activation_type(GgmlType::I32).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(quantize_activation_row(GgmlType::Q4_0, f.data(), bytes.data(), 256).code(),
            StatusCode::kUnsupported);
  // A value that is no ggml type at all (id 4 was Q4_2, retired) is an error, not an abort.
  const auto retired = static_cast<GgmlType>(4);
  EXPECT_FALSE(dequantize_supported(retired));
  s = dequantize_row(retired, bytes.data(), f.data(), 32);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(contains(s.message(), "id 4")) << s.message();
  EXPECT_EQ(vec_dot(retired, bytes.data(), bytes.data(), 32).status().code(),
            StatusCode::kUnsupported);
}

TEST(QuantEdge, AllZeroBlocksRoundTripToZero) {
  const std::vector<float> zeros(512, 0.0f);
  for (GgmlType t : kAllTypes) {
    std::vector<uint8_t> q(row_bytes(t, 512), 0xcd);
    ASSERT_TRUE(quantize_row(t, zeros.data(), q.data(), 512).ok()) << ggml_type_name(t);
    std::vector<float> back(512, 1.0f);
    ASSERT_TRUE(dequantize_row(t, q.data(), back.data(), 512).ok());
    for (float v : back) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
  // The peer's byte conventions for zero blocks (ggml-quants.c): Q4_0 stores d = max/-8 = -0.0
  // (f16 0x8000) and level 8 (x * 0 + 8.5 truncated); IQ4_NL/IQ4_XS map 0 to level index 8
  // (value +1, the level nearest 0); IQ4_XS stores d = -max_scale/32 = -0.0 as well.
  std::vector<uint8_t> q(row_bytes(GgmlType::Q4_0, 32));
  ASSERT_TRUE(quantize_row(GgmlType::Q4_0, zeros.data(), q.data(), 32).ok());
  EXPECT_EQ(q[0] | (q[1] << 8), 0x8000);
  for (size_t i = 2; i < q.size(); ++i) EXPECT_EQ(q[i], 0x88);
  q.assign(row_bytes(GgmlType::IQ4_XS, 256), 0);
  ASSERT_TRUE(quantize_row(GgmlType::IQ4_XS, zeros.data(), q.data(), 256).ok());
  EXPECT_EQ(q[0] | (q[1] << 8), 0x8000);
  for (size_t i = 8; i < q.size(); ++i) EXPECT_EQ(q[i], 0x88);
}

// Values around 1e-5 give Q8_0 scales d = amax/127 ~ 1e-7, below the smallest normal f16
// (6.1e-5): d is stored as an f16 subnormal (spacing 2^-24 ~ 6e-8) and the round trip error
// stays within d/2 + 127 * 2^-25 per element.
TEST(QuantEdge, SubnormalScalesStayAccurate) {
  const std::vector<float> x = gaussian(256, 1e-5f, 7);
  std::vector<uint8_t> q(row_bytes(GgmlType::Q8_0, 256));
  ASSERT_TRUE(quantize_row(GgmlType::Q8_0, x.data(), q.data(), 256).ok());
  std::vector<float> back(256);
  ASSERT_TRUE(dequantize_row(GgmlType::Q8_0, q.data(), back.data(), 256).ok());
  for (int b = 0; b < 8; ++b) {
    const uint16_t d16 = static_cast<uint16_t>(q[34 * b] | (q[34 * b + 1] << 8));
    EXPECT_EQ(d16 & 0x7c00, 0) << "block " << b << " scale should be an f16 subnormal";
    EXPECT_NE(d16 & 0x03ff, 0);
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const double bound = amax / 127.0 / 2 + 127 * std::ldexp(1.0, -25);
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(double{back[32 * b + j]} - x[32 * b + j]), bound) << b << "," << j;
    }
  }
  // Every type keeps tiny inputs finite. With subnormal f16 scales the grid can be distorted
  // by up to the f16 spacing 2^-24 per scale unit, but it always contains the level-0 value
  // (0 for symmetric types, -dmin*m for affine ones with m <= 63 and dmin <= amax/63 + 2^-25),
  // so |err| <= |x| + amax + 63 * 2^-25 <= 2 amax + 2^-19.
  for (GgmlType t : kQuantTypes) {
    std::vector<uint8_t> qt(row_bytes(t, 256));
    ASSERT_TRUE(quantize_row(t, x.data(), qt.data(), 256).ok());
    ASSERT_TRUE(dequantize_row(t, qt.data(), back.data(), 256).ok());
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (int i = 0; i < 256; ++i) {
      ASSERT_TRUE(std::isfinite(back[i])) << ggml_type_name(t);
      ASSERT_LE(std::fabs(back[i] - x[i]), 2 * amax + std::ldexp(1.0f, -19))
          << ggml_type_name(t) << " " << i;
    }
  }
}

// Around 1e-9 every block scale underflows to f16 zero: the result must be exact zeros (no
// division by a zero scale leaking inf/NaN), as in the peer.
TEST(QuantEdge, UnderflowingScalesGiveZeros) {
  const std::vector<float> x = gaussian(256, 1e-9f, 11);
  for (GgmlType t : kQuantTypes) {
    std::vector<uint8_t> q(row_bytes(t, 256));
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), 256).ok());
    std::vector<float> back(256, 1.0f);
    ASSERT_TRUE(dequantize_row(t, q.data(), back.data(), 256).ok());
    for (float v : back) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
}

// f32 subnormal inputs make 1/scale overflow to inf inside the peer's algorithms; the result
// must still be all zeros (every scale underflows f16), with no undefined conversion (the
// sanitizer build runs this). Finite inputs whose range overflows f32 (max - min = inf) are
// accepted and must not crash either; their scales saturate to f16 inf.
TEST(QuantEdge, ExtremeFiniteInputs) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = std::ldexp(static_cast<float>((i % 7) - 3), -140);
  for (GgmlType t : kQuantTypes) {
    std::vector<uint8_t> q(row_bytes(t, 256));
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), 256).ok()) << ggml_type_name(t);
    std::vector<float> back(256, 1.0f);
    ASSERT_TRUE(dequantize_row(t, q.data(), back.data(), 256).ok());
    for (float v : back) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
  for (int i = 0; i < 256; ++i)
    x[i] = (i % 2 ? 3e38f : -3e38f) * (static_cast<float>(i % 5) / 4.0f);
  for (GgmlType t : kQuantTypes) {
    std::vector<uint8_t> q(row_bytes(t, 256));
    EXPECT_TRUE(quantize_row(t, x.data(), q.data(), 256).ok()) << ggml_type_name(t);
  }
}

TEST(QuantEdge, NonFiniteInputPolicy) {
  std::vector<float> x = gaussian(512, 1.0f, 3);
  std::vector<uint8_t> q(4096);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    x[300] = bad;
    for (GgmlType t : kQuantTypes) {
      Status s = quantize_row(t, x.data(), q.data(), 512);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << ggml_type_name(t);
      EXPECT_TRUE(contains(s.to_string(), "index=300")) << s.to_string();
    }
  }
  // Float types convert instead: NaN -> quiet NaN, inf -> inf.
  x[300] = std::numeric_limits<float>::quiet_NaN();
  x[301] = -std::numeric_limits<float>::infinity();
  ASSERT_TRUE(quantize_row(GgmlType::F16, x.data(), q.data(), 512).ok());
  EXPECT_EQ(q[600] | (q[601] << 8), 0x7e00);
  EXPECT_EQ(q[602] | (q[603] << 8), 0xfc00);
  ASSERT_TRUE(quantize_row(GgmlType::BF16, x.data(), q.data(), 512).ok());
  EXPECT_EQ(q[600] | (q[601] << 8), 0x7fc0);
  EXPECT_EQ(q[602] | (q[603] << 8), 0xff80);

  // Dequantization is plain IEEE arithmetic on the stored scale, as in the peer: a NaN f16
  // scale gives NaN everywhere, an infinite one gives inf (or NaN for level 0).
  uint8_t block[34] = {};
  block[0] = 0x00;
  block[1] = 0x7e;  // d = NaN
  block[2] = 5;
  float out[32];
  ASSERT_TRUE(dequantize_row(GgmlType::Q8_0, block, out, 32).ok());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
  block[1] = 0x7c;  // d = +inf
  ASSERT_TRUE(dequantize_row(GgmlType::Q8_0, block, out, 32).ok());
  EXPECT_TRUE(std::isinf(out[0]) && out[0] > 0);
  EXPECT_TRUE(std::isnan(out[1]));  // 0 * inf

  // Activation quantizers never fail on values; a non-finite block only affects itself.
  std::vector<float> act = gaussian(64, 1.0f, 5);
  std::vector<uint8_t> clean(row_bytes(GgmlType::Q8_0, 64)), dirty(clean.size());
  ASSERT_TRUE(quantize_row_q8_0(act.data(), clean.data(), 64).ok());
  act[40] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(quantize_row_q8_0(act.data(), dirty.data(), 64).ok());
  EXPECT_EQ(std::memcmp(clean.data(), dirty.data(), 34), 0);
}

// The peer's CPU from_float for Q8_0 on x86 rounds x * (127/amax) with vroundps (nearest,
// ties to even), while the weight quantizer quantize_row_q8_0_ref uses roundf (ties away from
// zero). With amax = 127 the multiplier is exactly 1, so x.5 inputs expose the tie rule.
TEST(QuantEdge, ActivationQ8RoundsHalfToEvenWeightQ8RoundsAway) {
  std::vector<float> x(32, 0.0f);
  const float ties[] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f};
  std::memcpy(x.data(), ties, sizeof(ties));
  std::vector<uint8_t> a(34), w(34);
  ASSERT_TRUE(quantize_row_q8_0(x.data(), a.data(), 32).ok());
  ASSERT_TRUE(quantize_row(GgmlType::Q8_0, x.data(), w.data(), 32).ok());
  EXPECT_EQ(f16_to_f32(static_cast<uint16_t>(a[0] | (a[1] << 8))), 1.0f);
  const int8_t even[] = {127, 0, 2, 2, 0, -2, -2, 4};
  const int8_t away[] = {127, 1, 2, 3, -1, -2, -3, 4};
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(static_cast<int8_t>(a[2 + j]), even[j]) << j;
    EXPECT_EQ(static_cast<int8_t>(w[2 + j]), away[j]) << j;
  }
}

TEST(QuantEdge, Q8_1SumAndQ8_KBlockSums) {
  const std::vector<float> x = gaussian(512, 2.0f, 13);
  std::vector<uint8_t> q1(row_bytes(GgmlType::Q8_1, 512));
  ASSERT_TRUE(quantize_row_q8_1(x.data(), q1.data(), 512).ok());
  for (int b = 0; b < 16; ++b) {
    const uint8_t* blk = q1.data() + 36 * b;
    const float d = f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(blk[4 + j]);
    // s = f16(d_f32 * sum) where d_f32 = amax/127 before f16 rounding.
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    EXPECT_EQ(blk[2] | (blk[3] << 8), f32_to_f16(amax / 127.0f * static_cast<float>(sum)));
    EXPECT_EQ(d, f16_to_f32(f32_to_f16(amax / 127.0f)));
  }
  std::vector<uint8_t> qk(row_bytes(GgmlType::Q8_K, 512));
  ASSERT_TRUE(quantize_row_q8_K(x.data(), qk.data(), 512).ok());
  for (int b = 0; b < 2; ++b) {
    const uint8_t* blk = qk.data() + 292 * b;
    float d;
    std::memcpy(&d, blk, 4);
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[256 * b + j]));
    EXPECT_NEAR(std::fabs(d), amax / 127.0f, amax * 1e-7f);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += static_cast<int8_t>(blk[4 + 16 * g + j]);
      const int16_t stored = static_cast<int16_t>(blk[260 + 2 * g] | (blk[261 + 2 * g] << 8));
      EXPECT_EQ(stored, sum);
    }
    for (int j = 0; j < 256; ++j) {
      const int8_t v = static_cast<int8_t>(blk[4 + j]);
      EXPECT_LE(std::abs(int{v}), 127);  // -128 never occurs (the peer's IQ kernels need this)
      EXPECT_NEAR(v * d, x[256 * b + j], std::fabs(d) * 0.5001);
    }
  }
}

// Decodes an activation row to f32 in the test (Q8_1/Q8_K layouts from ggml-common.h).
std::vector<double> decode_activation(GgmlType act, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  if (act == GgmlType::Q8_1) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* blk = q.data() + 36 * (i / 32);
      out[i] = f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8))) *
               static_cast<int8_t>(blk[4 + i % 32]);
    }
  } else if (act == GgmlType::Q8_K) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* blk = q.data() + 292 * (i / 256);
      float d;
      std::memcpy(&d, blk, 4);
      out[i] = double{d} * static_cast<int8_t>(blk[4 + i % 256]);
    }
  } else {
    std::vector<float> f(static_cast<size_t>(n));
    EXPECT_TRUE(dequantize_row(act, q.data(), f.data(), n).ok());
    for (int64_t i = 0; i < n; ++i) out[i] = f[i];
  }
  return out;
}

// vec_dot must be the dot product of exactly the two decoded operands up to float rounding of
// its accumulation: (n/32 + 8) * 2^-23 * sum|w*a| covers one rounding per block and lane plus
// the final reductions (doubled). Q4_1/Q5_1 read the min term through the activation's f16
// s = d * sum(q), which adds up to |m| * half an f16 ulp of s per block.
TEST(QuantEdge, VecDotEqualsExactProductOfDecodedOperands) {
  for (GgmlType t : kAllTypes) {
    const int64_t block = ggml_type_info(t).block_elems;
    const auto act = vec_dot_activation_type(t);
    ASSERT_TRUE(act.ok());
    const int64_t act_block = ggml_type_info(*act).block_elems;
    const int64_t unit = std::max(block, act_block);
    for (int64_t n : {unit, 3 * unit, 7 * unit, 100 * unit / 32 * 32 + (unit > 1 ? 0 : 3)}) {
      if (n % unit != 0) continue;
      std::vector<float> wsrc = gaussian(n, 0.7f, static_cast<uint32_t>(n + 1));
      wsrc[0] += 3.0f;  // make block minima and maxima differ in magnitude
      const std::vector<float> x = gaussian(n, 1.0f, static_cast<uint32_t>(n + 2));
      std::vector<uint8_t> wq(row_bytes(t, n)), xq(row_bytes(*act, n));
      ASSERT_TRUE(quantize_row(t, wsrc.data(), wq.data(), n).ok());
      ASSERT_TRUE(quantize_activation_row(*act, x.data(), xq.data(), n).ok());
      std::vector<float> w(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize_row(t, wq.data(), w.data(), n).ok());
      const std::vector<double> a = decode_activation(*act, xq, n);
      double exact = 0, sum_abs = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double{w[i]} * a[i];
        sum_abs += std::fabs(double{w[i]} * a[i]);
      }
      double bound = (static_cast<double>(n) / 32 + 8) * std::ldexp(sum_abs, -23);
      if (*act == GgmlType::Q8_1) {
        for (int64_t b = 0; b < n; b += 32) {
          double wmax = 0, asum = 0;
          for (int64_t i = b; i < b + 32; ++i) {
            wmax = std::max(wmax, std::fabs(double{w[i]}));
            asum += std::fabs(a[i]);
          }
          bound += 1.2 * wmax * std::max(asum * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
        }
      }
      auto got = vec_dot(t, wq.data(), xq.data(), n);
      ASSERT_TRUE(got.ok());
      EXPECT_LE(std::fabs(*got - exact), bound) << ggml_type_name(t) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace power
