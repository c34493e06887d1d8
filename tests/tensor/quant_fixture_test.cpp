// Bit-exactness against the peer (llama.cpp) fixtures: dequantization, quantization,
// activation quantization and vec_dot, for all 14 fixture types and every tensor listed in
// their meta.json. Every expected value here was written by the peer; nothing is compared to
// output our own code produced earlier.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "quant_fixture.h"
#include "tensor/quant.h"

namespace power {
namespace {

using testing::FixtureMeta;
using testing::read_bytes;
using testing::read_f32;

class QuantFixture : public ::testing::TestWithParam<std::string> {
 protected:
  GgmlType type() const { return *ggml_type_from_name(GetParam()); }
};

std::string type_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// Index of the first differing 32-bit pattern, or -1.
int64_t first_bit_mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

size_t first_byte_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  size_t i = 0;
  while (i < want.size() && got[i] == want[i]) ++i;
  return i;
}

TEST_P(QuantFixture, DequantizeEqualsPeerBitForBit) {
  POWER_REQUIRE_SHARED();
  FixtureMeta meta;
  ASSERT_TRUE(testing::load_fixture_meta(GetParam(), &meta));
  ASSERT_TRUE(dequantize_supported(type()));
  for (const auto& t : meta.tensors) {
    const std::vector<uint8_t> raw = read_bytes(meta.path(t.raw));
    const std::vector<float> want = read_f32(meta.path(t.dequant));
    const uint64_t row_bytes = testing::row_bytes_of(type(), t.ne0);
    ASSERT_EQ(raw.size(), row_bytes * static_cast<uint64_t>(t.ne1)) << t.name;
    ASSERT_EQ(want.size(), static_cast<size_t>(t.ne0 * t.ne1)) << t.name;
    std::vector<float> got(want.size());
    for (int64_t r = 0; r < t.ne1; ++r) {
      ASSERT_TRUE(
          dequantize_row(type(), raw.data() + r * row_bytes, got.data() + r * t.ne0, t.ne0).ok());
    }
    const int64_t bad = first_bit_mismatch(got, want);
    EXPECT_EQ(bad, -1) << t.name << ": first mismatch at element " << bad << " (row " << bad / t.ne0
                       << "): got " << (bad >= 0 ? got[bad] : 0.0f) << " want "
                       << (bad >= 0 ? want[bad] : 0.0f);
  }
}

TEST_P(QuantFixture, QuantizeSourceGivesPeerBytes) {
  POWER_REQUIRE_SHARED();
  FixtureMeta meta;
  ASSERT_TRUE(testing::load_fixture_meta(GetParam(), &meta));
  ASSERT_TRUE(quantize_supported(type()));
  const GgmlTypeInfo& info = ggml_type_info(type());
  for (const auto& t : meta.tensors) {
    const std::vector<float> src = read_f32(meta.path(t.src));
    const std::vector<uint8_t> want = read_bytes(meta.path(t.raw));
    ASSERT_EQ(src.size(), static_cast<size_t>(t.ne0 * t.ne1));
    const uint64_t row_bytes = testing::row_bytes_of(type(), t.ne0);
    ASSERT_EQ(want.size(), row_bytes * static_cast<uint64_t>(t.ne1));
    std::vector<uint8_t> got(want.size(), 0xcd);
    for (int64_t r = 0; r < t.ne1; ++r) {
      ASSERT_TRUE(
          quantize_row(type(), src.data() + r * t.ne0, got.data() + r * row_bytes, t.ne0).ok());
    }
    const size_t bad = first_byte_mismatch(got, want);
    EXPECT_EQ(bad, want.size()) << t.name << ": first differing byte " << bad << " (row "
                                << bad / row_bytes << ", block "
                                << (bad % row_bytes) / info.block_bytes << ", byte "
                                << (bad % row_bytes) % info.block_bytes << ")";
  }
}

TEST_P(QuantFixture, ActivationTypeAndQuantizationEqualPeer) {
  POWER_REQUIRE_SHARED();
  FixtureMeta meta;
  ASSERT_TRUE(testing::load_fixture_meta(GetParam(), &meta));
  auto act = vec_dot_activation_type(type());
  ASSERT_TRUE(act.ok());
  // The peer's names are ggml's lower-case spellings ("q8_K", "f16").
  std::string want_name = meta.vec_dot_type;
  std::string our_name(ggml_type_name(*act));
  std::transform(want_name.begin(), want_name.end(), want_name.begin(), ::toupper);
  std::transform(our_name.begin(), our_name.end(), our_name.begin(), ::toupper);
  EXPECT_EQ(our_name, want_name);

  const std::vector<float> x = read_f32(meta.path(meta.x_file));
  const std::vector<uint8_t> want = read_bytes(meta.path(meta.x_quantized_file));
  ASSERT_EQ(static_cast<int64_t>(x.size()), meta.x_len);
  ASSERT_EQ(want.size(), testing::row_bytes_of(*act, meta.x_len));
  std::vector<uint8_t> got(want.size(), 0xcd);
  ASSERT_TRUE(quantize_activation_row(*act, x.data(), got.data(), meta.x_len).ok());
  const size_t bad = first_byte_mismatch(got, want);
  EXPECT_EQ(bad, want.size()) << ggml_type_name(*act) << " first differing byte " << bad
                              << " (block " << bad / ggml_type_info(*act).block_bytes << ")";
}

// Half an f16 ulp at |v| (normal range) or half the subnormal spacing 2^-24.
double f16_half_ulp(double v) {
  return std::max(std::fabs(v) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
}

// Upper bound on |x_i - dequant(quant(x))_i| for the activation types, from x alone.
// Q8_0/Q8_1 (32-blocks) and Q8_K (256-blocks): d = amax/127, q = round(x/d) within 127, so the
// rounding error is d/2; Q8_0/Q8_1 store d as f16, which moves each of up to 127 steps by at
// most half an f16 ulp of d. F16: half an ulp; BF16: 2^-8 relative (8-bit significand).
std::vector<double> activation_error_bound(GgmlType act, const float* x, int64_t n) {
  std::vector<double> e(static_cast<size_t>(n));
  const int block = act == GgmlType::Q8_K ? 256 : 32;
  for (int64_t b = 0; b < n; b += block) {
    double amax = 0.0;
    for (int j = 0; j < block && b + j < n; ++j) amax = std::max(amax, std::fabs(double{x[b + j]}));
    const double d = amax / 127.0;
    for (int j = 0; j < block && b + j < n; ++j) {
      const double xi = std::fabs(double{x[b + j]});
      double bound = 0.0;
      switch (act) {
        case GgmlType::Q8_0:
        case GgmlType::Q8_1:
          bound = 0.5 * d + 127.0 * f16_half_ulp(d);
          break;
        case GgmlType::Q8_K:
          bound = 0.5 * d * (1 + 1e-6);
          break;
        case GgmlType::F16:
          bound = f16_half_ulp(xi);
          break;
        case GgmlType::BF16:
          bound = std::ldexp(xi, -8);
          break;
        default:
          bound = 0.0;
          break;
      }
      e[static_cast<size_t>(b + j)] = bound + 1e-6 * d;  // f32 rounding of x * (1/d)
    }
  }
  return e;
}

// vec_dot of the peer's weight bytes with our activation quantization of x must equal the
// peer's ggml_mul_mat result bit for bit. Independently, it must be within a bound derived
// from the data of the exact float64 product of the dequantized row with x:
//   |dot - exact| <= sum_i |w_i| * e_i  (activation rounding, e_i above)
//                  + (nb + 8) * 2^-23 * sum_i |w_i x_i|  (float accumulation: at most one
//                    rounding per block per lane plus the final 8-lane tree, doubled for slack)
//                  + for Q8_1 only: per block |m| * half an f16 ulp of s = d*sum(q), because the
//                    Q4_1/Q5_1 kernels use the f16-rounded s for the min term; |m| (the block's
//                    lowest level) is at most 1.2 max|w| of the block, |s| <= sum|x| (1 + 2^-7).
TEST_P(QuantFixture, VecDotEqualsPeer) {
  POWER_REQUIRE_SHARED();
  FixtureMeta meta;
  ASSERT_TRUE(testing::load_fixture_meta(GetParam(), &meta));
  auto act = vec_dot_activation_type(type());
  ASSERT_TRUE(act.ok());
  const std::vector<float> x = read_f32(meta.path(meta.x_file));
  for (const auto& t : meta.tensors) {
    ASSERT_LE(t.ne0, static_cast<int64_t>(x.size()));
    const std::vector<uint8_t> raw = read_bytes(meta.path(t.raw));
    const std::vector<float> w = read_f32(meta.path(t.dequant));
    const std::vector<float> peer = read_f32(meta.path(t.dot_peer));
    const std::vector<double> exact = testing::read_f64(meta.path(t.dot_f64));
    ASSERT_EQ(peer.size(), static_cast<size_t>(t.ne1));
    ASSERT_EQ(exact.size(), static_cast<size_t>(t.ne1));
    const uint64_t row_bytes = testing::row_bytes_of(type(), t.ne0);
    std::vector<uint8_t> xq(testing::row_bytes_of(*act, t.ne0));
    ASSERT_TRUE(quantize_activation_row(*act, x.data(), xq.data(), t.ne0).ok());
    const std::vector<double> e = activation_error_bound(*act, x.data(), t.ne0);
    const double n_steps = static_cast<double>(t.ne0) / 32.0 + 8.0;
    for (int64_t r = 0; r < t.ne1; ++r) {
      auto got = vec_dot(type(), raw.data() + r * row_bytes, xq.data(), t.ne0);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(std::bit_cast<uint32_t>(*got), std::bit_cast<uint32_t>(peer[r]))
          << t.name << " row " << r << ": got " << *got << " peer " << peer[r];
      double act_bound = 0.0, sum_abs = 0.0;
      for (int64_t i = 0; i < t.ne0; ++i) {
        const double wi = std::fabs(double{w[r * t.ne0 + i]});
        act_bound += wi * e[static_cast<size_t>(i)];
        sum_abs += wi * std::fabs(double{x[i]});
      }
      double s_bound = 0.0;
      if (*act == GgmlType::Q8_1) {
        for (int64_t b = 0; b < t.ne0; b += 32) {
          double wmax = 0.0, xsum = 0.0;
          for (int64_t i = b; i < b + 32; ++i) {
            wmax = std::max(wmax, std::fabs(double{w[r * t.ne0 + i]}));
            xsum += std::fabs(double{x[i]});
          }
          s_bound += 1.2 * wmax * f16_half_ulp(xsum * (1 + 1.0 / 128));
        }
      }
      const double bound = act_bound + s_bound + n_steps * std::ldexp(sum_abs, -23);
      EXPECT_LE(std::fabs(*got - exact[r]), bound)
          << t.name << " row " << r << " sum|w x| = " << sum_abs;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Peer, QuantFixture, ::testing::ValuesIn(testing::fixture_type_names()),
                         type_param_name);

}  // namespace
}  // namespace power
