// Bit-exactness against the peer (llama.cpp) fixtures: dequantization, quantization,
// activation quantization and vec_dot, for all 14 fixture types and their 3 tensors each.
// Every expected value here was written by the peer; nothing is compared to our own output.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quant_fixture.h"
#include "tensor/quant.h"

namespace power {
namespace {

using testing::activation_file;
using testing::kFixtureShapes;
using testing::quant_fixture_path;
using testing::read_bytes;
using testing::read_f32;
using testing::tensor_file;

class QuantFixture : public ::testing::TestWithParam<std::string> {
 protected:
  GgmlType type() const { return *ggml_type_from_name(GetParam()); }
  std::string path(const std::string& file) const { return quant_fixture_path(GetParam(), file); }
};

std::string type_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// Index of the first differing 32-bit word, or -1.
int64_t first_bit_mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

TEST_P(QuantFixture, DequantizeEqualsPeerBitForBit) {
  POWER_REQUIRE_SHARED();
  ASSERT_TRUE(dequantize_supported(type()));
  for (int t = 0; t < 3; ++t) {
    const auto [ne0, ne1] = kFixtureShapes[t];
    const std::vector<uint8_t> raw = read_bytes(path(tensor_file(t, ".raw.bin")));
    const std::vector<float> want = read_f32(path(tensor_file(t, ".f32")));
    const uint64_t row_bytes = testing::row_bytes_of(type(), ne0);
    ASSERT_EQ(raw.size(), row_bytes * static_cast<uint64_t>(ne1)) << "t" << t;
    ASSERT_EQ(want.size(), static_cast<size_t>(ne0 * ne1)) << "t" << t;
    std::vector<float> got(want.size());
    for (int64_t r = 0; r < ne1; ++r) {
      ASSERT_TRUE(
          dequantize_row(type(), raw.data() + r * row_bytes, got.data() + r * ne0, ne0).ok());
    }
    const int64_t bad = first_bit_mismatch(got, want);
    EXPECT_EQ(bad, -1) << "t" << t << " first mismatch at element " << bad << " (row " << bad / ne0
                       << "): got " << (bad >= 0 ? got[bad] : 0.0f) << " want "
                       << (bad >= 0 ? want[bad] : 0.0f);
  }
}

TEST_P(QuantFixture, QuantizeSourceGivesPeerBytes) {
  POWER_REQUIRE_SHARED();
  ASSERT_TRUE(quantize_supported(type()));
  const GgmlTypeInfo& info = ggml_type_info(type());
  for (int t = 0; t < 3; ++t) {
    const auto [ne0, ne1] = kFixtureShapes[t];
    const std::vector<float> src = read_f32(path(tensor_file(t, ".src.f32")));
    const std::vector<uint8_t> want = read_bytes(path(tensor_file(t, ".raw.bin")));
    ASSERT_EQ(src.size(), static_cast<size_t>(ne0 * ne1));
    const uint64_t row_bytes = testing::row_bytes_of(type(), ne0);
    std::vector<uint8_t> got(want.size(), 0xcd);
    for (int64_t r = 0; r < ne1; ++r) {
      ASSERT_TRUE(quantize_row(type(), src.data() + r * ne0, got.data() + r * row_bytes, ne0).ok());
    }
    size_t bad = 0;
    while (bad < want.size() && got[bad] == want[bad]) ++bad;
    EXPECT_EQ(bad, want.size()) << "t" << t << " first differing byte " << bad << " (row "
                                << bad / row_bytes << ", block "
                                << (bad % row_bytes) / info.block_bytes << ", byte "
                                << (bad % row_bytes) % info.block_bytes << ")";
  }
}

TEST_P(QuantFixture, ActivationQuantizationEqualsPeer) {
  POWER_REQUIRE_SHARED();
  auto act = vec_dot_activation_type(type());
  ASSERT_TRUE(act.ok());
  const std::vector<float> x = read_f32(path("x.f32"));
  const std::vector<uint8_t> want = read_bytes(path(activation_file(*act)));
  ASSERT_EQ(x.size(), 1024u);
  ASSERT_EQ(want.size(), testing::row_bytes_of(*act, 1024));
  std::vector<uint8_t> got(want.size(), 0xcd);
  ASSERT_TRUE(quantize_activation_row(*act, x.data(), got.data(), 1024).ok());
  size_t bad = 0;
  while (bad < want.size() && got[bad] == want[bad]) ++bad;
  EXPECT_EQ(bad, want.size()) << ggml_type_name(*act) << " first differing byte " << bad
                              << " (block " << bad / ggml_type_info(*act).block_bytes << ")";
}

// vec_dot of the peer's weight bytes with our activation quantization of x must give the
// peer's ggml_mul_mat result exactly; independently of that, it must be within the error the
// activation rounding alone explains (see the bound below) of the float64 dot product.
TEST_P(QuantFixture, VecDotEqualsPeer) {
  POWER_REQUIRE_SHARED();
  auto act = vec_dot_activation_type(type());
  ASSERT_TRUE(act.ok());
  const std::vector<float> x = read_f32(path("x.f32"));
  for (int t = 0; t < 3; ++t) {
    const auto [ne0, ne1] = kFixtureShapes[t];
    const std::vector<uint8_t> raw = read_bytes(path(tensor_file(t, ".raw.bin")));
    const std::vector<float> w = read_f32(path(tensor_file(t, ".f32")));
    const std::vector<float> peer = read_f32(path(tensor_file(t, ".dot_peer_f32.bin")));
    const std::vector<double> exact = testing::read_f64(path(tensor_file(t, ".dot.f64")));
    ASSERT_EQ(peer.size(), static_cast<size_t>(ne1));
    ASSERT_EQ(exact.size(), static_cast<size_t>(ne1));
    const uint64_t row_bytes = testing::row_bytes_of(type(), ne0);
    std::vector<uint8_t> xq(testing::row_bytes_of(*act, ne0));
    ASSERT_TRUE(quantize_activation_row(*act, x.data(), xq.data(), ne0).ok());
    for (int64_t r = 0; r < ne1; ++r) {
      auto got = vec_dot(type(), raw.data() + r * row_bytes, xq.data(), ne0);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(std::bit_cast<uint32_t>(*got), std::bit_cast<uint32_t>(peer[r]))
          << "t" << t << " row " << r << ": got " << *got << " peer " << peer[r] << " (diff "
          << (*got - peer[r]) << ")";
      // Bound: each activation is rounded to 8 bits per block, |x - xq| <= amax_block/254
      // (Q8_0/Q8_1/Q8_K, about 0.4% of the block's largest |x|), or 2^-11 (F16) / 2^-8 (BF16)
      // relative. With N(0,1) activations the block amax is at most ~4 |x| on average, so the
      // error relative to sum|w x| stays below ~1%; the peer measures 2.1e-3..3.7e-3. We allow
      // 1e-2 relative to sum|w*x| plus float32 accumulation (n * 2^-24).
      double sum_abs = 0.0;
      for (int64_t i = 0; i < ne0; ++i) {
        sum_abs += std::fabs(static_cast<double>(w[r * ne0 + i]) * x[i]);
      }
      const double tol = 1e-2 * sum_abs + 1e-30;
      EXPECT_LE(std::fabs(*got - exact[r]), tol) << "t" << t << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Peer, QuantFixture, ::testing::ValuesIn(testing::fixture_type_names()),
                         type_param_name);

}  // namespace
}  // namespace power
