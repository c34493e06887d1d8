// The SIMD activation quantizers (kernels/cpu/matmul_act.inc: Q8_0, Q8_1, Q8_K) against the
// reference record writer (tensor/quant.h quantizers laid out as matmul_internal.h says):
// byte-identical records for random rows, rows full of exact .5 ties (round half to even), zeros,
// constant blocks, huge and tiny magnitudes and infinities, under every SIMD ISA this machine has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_internal.h"

namespace power {
namespace {

kernels::ActQuantFn quantizer(CpuIsa isa, GgmlType act) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx2) return kernels::act_quantizer_avx2(act);
  if (isa == CpuIsa::kAvx512) return kernels::act_quantizer_avx512(act);
#endif
  (void)isa;
  (void)act;
  return nullptr;
}

void expect_same_record(CpuIsa isa, GgmlType act, const std::vector<float>& x,
                        const std::string& what) {
  SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " " + std::string(ggml_type_info(act).name) + " " +
               what);
  const auto k = static_cast<int64_t>(x.size());
  const uint64_t bytes = kernels::act_record_bytes(act, k);
  ASSERT_GT(bytes, 0u);
  // Both records start filled with the same garbage: padding bytes must match too.
  std::vector<uint8_t> ref(bytes + 64, 0xa5), got(bytes + 64, 0xa5), tmp(k * 2 + 64);
  uint8_t* ref_rec = ref.data() + (64 - reinterpret_cast<uintptr_t>(ref.data()) % 64) % 64;
  uint8_t* got_rec = got.data() + (64 - reinterpret_cast<uintptr_t>(got.data()) % 64) % 64;
  kernels::quantize_act_record_reference(act, x.data(), k, tmp.data(), ref_rec);
  kernels::ActQuantFn fn = quantizer(isa, act);
  ASSERT_NE(fn, nullptr);
  fn(x.data(), k, got_rec);
  const bool q8k = act == GgmlType::Q8_K;
  const uint64_t used = q8k ? kernels::act_bsums_offset(k) + static_cast<uint64_t>(k / 16) * 2
                            : kernels::act_s_offset(k) + static_cast<uint64_t>(k / 32) * 4;
  for (uint64_t i = 0; i < used; ++i) {
    ASSERT_EQ(got_rec[i], ref_rec[i])
        << "byte " << i << " of " << used << " (q bytes: < " << k << ", then f32 d, then "
        << (q8k                     ? "int16 bsums"
            : act == GgmlType::Q8_1 ? "f32 s"
                                    : "int32 sums")
        << ")";
  }
}

std::vector<CpuIsa> simd_isas_here() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_available(isa)) out.push_back(isa);
  }
  return out;
}

TEST(ActQuantizerTest, SimdRecordsEqualTheReferenceBytes) {
  const std::vector<CpuIsa> isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this machine";
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-127, 127);
  for (CpuIsa isa : isas) {
    for (GgmlType act : {GgmlType::Q8_0, GgmlType::Q8_1}) {
      for (int64_t k : {32, 96, 768, 2048}) {
        for (int rep = 0; rep < 20; ++rep) {
          std::vector<float> x(static_cast<size_t>(k));
          const float scale = std::ldexp(1.0f, rep - 10);  // 2^-10 .. 2^9
          for (auto& v : x) v = nd(rng) * scale;
          expect_same_record(isa, act, x, "normal k=" + std::to_string(k));
        }
        // Ties: with amax = 127 the multiplier is exactly 1, so n + 0.5 stays a tie and must go
        // to even (-0.5 -> -0, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, ...).
        std::vector<float> ties(static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i) {
          ties[static_cast<size_t>(i)] =
              i % 32 == 0 ? 127.0f : static_cast<float>(small(rng) % 126) + 0.5f;
        }
        expect_same_record(isa, act, ties, "ties k=" + std::to_string(k));
        // Zeros, a constant block, one huge value among tiny ones, a denormal block.
        std::vector<float> mixed(static_cast<size_t>(k), 0.0f);
        for (int64_t i = 32; i < k && i < 64; ++i) mixed[static_cast<size_t>(i)] = -3.25f;
        if (k >= 96) {
          for (int64_t i = 64; i < 96; ++i) mixed[static_cast<size_t>(i)] = 1e-30f * (i - 80);
          mixed[70] = 3e38f;
        }
        if (k >= 768) {
          for (int64_t i = 96; i < 128; ++i) {
            mixed[static_cast<size_t>(i)] = std::numeric_limits<float>::denorm_min() * (i - 100);
          }
        }
        expect_same_record(isa, act, mixed, "mixed k=" + std::to_string(k));
      }
      // Infinities: amax = inf, multiplier 0, inf * 0 = NaN -> the integer indefinite value,
      // saturated to -128; the reference emulates exactly that.
      std::vector<float> inf(64, 1.0f);
      inf[3] = std::numeric_limits<float>::infinity();
      inf[40] = -std::numeric_limits<float>::infinity();
      expect_same_record(isa, act, inf, "infinities");
      if (HasFatalFailure()) return;
    }
  }
}

// Q8_K (K-quant activations, the peer's quantize_row_q8_K_ref): the scale comes from the
// first value of largest magnitude (its sign included), products are rounded half to even by
// the 1.5 * 2^23 trick, and the record carries int16 sums of each 16 values.
TEST(ActQuantizerTest, SimdQ8KRecordsEqualTheReferenceBytes) {
  const std::vector<CpuIsa> isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this machine";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-126, 125);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  for (CpuIsa isa : isas) {
    for (int64_t k : {256, 768, 2048}) {
      for (int rep = 0; rep < 24; ++rep) {
        std::vector<float> x(static_cast<size_t>(k));
        const float scale = std::ldexp(1.0f, 3 * rep - 36);  // 2^-36 .. 2^33
        for (auto& v : x) v = nd(rng) * scale;
        expect_same_record(isa, GgmlType::Q8_K, x, "normal k=" + std::to_string(k));
        if (HasFatalFailure()) return;
      }
    }
    // Ties: max = -127 makes the multiplier exactly 1, so n + 0.5 must round to even.
    std::vector<float> ties(512);
    for (size_t i = 0; i < ties.size(); ++i) {
      ties[i] = i % 256 == 7 ? -127.0f : static_cast<float>(small(rng)) + 0.5f;
    }
    expect_same_record(isa, GgmlType::Q8_K, ties, "ties");
    // Equal magnitudes of both signs: the FIRST one sets the sign of the scale (block 0 has -2
    // first, block 1 has +2 first), so q flips sign between the two orders.
    std::vector<float> signs(512, 0.25f);
    signs[5] = -2.0f;
    signs[9] = 2.0f;
    signs[256 + 100] = 2.0f;
    signs[256 + 200] = -2.0f;
    expect_same_record(isa, GgmlType::Q8_K, signs, "first maximum");
    // Block 0 all zeros; block 1 zeros and NaNs (NaN never becomes the maximum, the block counts
    // as zero); block 2 a NaN before a finite maximum; block 3 an infinity (scale 0, inf * 0 =
    // NaN); block 4 denormals (127 / amax overflows to inf); block 5 one huge value among tiny
    // ones; block 6 a single negative value; block 7 sums that need all 16 bits of a bsum lane.
    std::vector<float> mixed(2048, 0.0f);
    mixed[256 + 3] = nan;
    mixed[256 + 200] = -nan;
    for (int i = 512; i < 768; ++i) mixed[static_cast<size_t>(i)] = nd(rng);
    mixed[512 + 1] = nan;
    for (int i = 768; i < 1024; ++i) mixed[static_cast<size_t>(i)] = nd(rng);
    mixed[768 + 17] = -inf;
    for (int i = 1024; i < 1280; ++i) mixed[static_cast<size_t>(i)] = denorm * (i % 7 - 3);
    for (int i = 1280; i < 1536; ++i) mixed[static_cast<size_t>(i)] = 1e-30f * (i % 11 - 5);
    mixed[1280 + 77] = 3e38f;
    mixed[1536 + 255] = -0.5f;
    for (int i = 1792; i < 2048; ++i) mixed[static_cast<size_t>(i)] = i % 16 == 0 ? 1.0f : -1.0f;
    expect_same_record(isa, GgmlType::Q8_K, mixed, "mixed");
    if (HasFatalFailure()) return;
  }
}

TEST(ActQuantizerTest, Q8_0Q8_1AndQ8_KHaveASimdQuantizer) {
  for (CpuIsa isa : simd_isas_here()) {
    EXPECT_NE(quantizer(isa, GgmlType::Q8_0), nullptr);
    EXPECT_NE(quantizer(isa, GgmlType::Q8_1), nullptr);
    EXPECT_NE(quantizer(isa, GgmlType::Q8_K), nullptr);
    EXPECT_EQ(quantizer(isa, GgmlType::F32), nullptr);
  }
}

}  // namespace
}  // namespace power
