// The AVX2/F16C row operations attention uses (kernels/cpu/ops.cpp: dot_f32, axpy_f32,
// round_to_f16) against the portable loops, and rope_apply_heads against rope_apply per head:
// bit-identical results for odd lengths (tails), misaligned pointers, ties to even, denormals,
// huge values, infinities. Each SIMD path is forced with set_cpu_isa_for_testing; the portable
// path is the scalar ISA's.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "tensor/half.h"

namespace power {
namespace {

class IsaScope {
 public:
  explicit IsaScope(CpuIsa isa) : saved_(cpu_isa()) { ok_ = set_cpu_isa_for_testing(isa); }
  ~IsaScope() { set_cpu_isa_for_testing(saved_); }
  bool ok() const { return ok_; }

 private:
  CpuIsa saved_;
  bool ok_ = false;
};

std::vector<CpuIsa> simd_isas_here() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_available(isa)) out.push_back(isa);
  }
  return out;
}

// The SIMD paths this CPU has, then the portable (scalar) one.
std::vector<CpuIsa> all_isas_here() {
  std::vector<CpuIsa> out = simd_isas_here();
  out.push_back(CpuIsa::kScalar);
  return out;
}

std::vector<float> random_row(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

TEST(OpsSimd, DotAndAxpyGiveThePortableBits) {
  const auto isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  std::mt19937 rng(7);
  for (int64_t n : {1, 7, 8, 9, 31, 64, 65, 127, 128, 200}) {
    for (float scale : {1e-3f, 1.0f, 1e4f}) {
      // One element of slack so the rows can start misaligned.
      std::vector<float> a = random_row(rng, n + 1, scale), b = random_row(rng, n + 1, scale);
      std::vector<float> y0 = random_row(rng, n + 1, scale);
      const float w = std::normal_distribution<float>(0.0f, 1.0f)(rng);
      float ref_dot;
      std::vector<float> ref_y = y0;
      {
        IsaScope s(CpuIsa::kScalar);
        ASSERT_TRUE(s.ok());
        ref_dot = dot_f32(a.data() + 1, b.data() + 1, n);
        axpy_f32(ref_y.data() + 1, w, a.data() + 1, n);
      }
      for (CpuIsa isa : isas) {
        IsaScope s(isa);
        ASSERT_TRUE(s.ok());
        SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " n=" + std::to_string(n));
        EXPECT_EQ(bits(dot_f32(a.data() + 1, b.data() + 1, n)), bits(ref_dot));
        std::vector<float> y = y0;
        axpy_f32(y.data() + 1, w, a.data() + 1, n);
        for (int64_t i = 0; i <= n; ++i) ASSERT_EQ(bits(y[i]), bits(ref_y[i])) << "i=" << i;
      }
    }
  }
}

// Pointers to each row of `rows` (what the column forms take: a paged KV cache's rows).
template <typename T>
std::vector<const T*> row_pointers(const std::vector<std::vector<T>>& rows, size_t offset) {
  std::vector<const T*> out;
  for (const auto& r : rows) out.push_back(r.data() + offset);
  return out;
}

// The row-by-column forms (blocks of 4 rows x 2 columns for the dot, 4 x 4 with AVX-512, 4 rows
// x 16 values for the axpy) give, entry by entry, what one dot_f32 times the scale per (row,
// column) and one axpy_f32 per column in ascending order give, under every ISA: row counts
// around the block of four, 1 to 9 columns (blocks of four, pairs and a single one), lengths
// around 8 and 16, strides wider than the rows; entries outside the rows and columns stay
// untouched.
TEST(OpsSimd, ColumnFormsEqualOneDotAtATime) {
  const std::vector<CpuIsa> isas = all_isas_here();
  std::mt19937 rng(5);
  for (CpuIsa isa : isas) {
    IsaScope s(isa);
    ASSERT_TRUE(s.ok());
    for (int64_t rows : {1, 3, 4, 5, 8, 11}) {
      for (int64_t cols : {1, 2, 3, 4, 5, 7, 9}) {
        for (int64_t n : {5, 8, 16, 24, 64, 67}) {
          SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " rows=" + std::to_string(rows) +
                       " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
          const int64_t lda = n + 3, ldo = cols + 2;
          const float scale = 0.125f;
          std::vector<float> a = random_row(rng, rows * lda, 1.0f);
          std::vector<std::vector<float>> b;
          for (int64_t c = 0; c < cols; ++c) b.push_back(random_row(rng, n, 1.0f));
          const std::vector<const float*> bp = row_pointers(b, 0);
          std::vector<float> out(static_cast<size_t>(rows * ldo), -1.0f), ref = out;
          dot_f32_cols(a.data(), rows, lda, bp.data(), cols, n, scale, out.data(), ldo);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              ref[static_cast<size_t>(r * ldo + c)] = dot_f32(a.data() + r * lda, bp[c], n) * scale;
            }
          }
          for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(bits(out[i]), bits(ref[i])) << i;

          std::vector<float> y = random_row(rng, rows * lda, 1.0f), yref = y;
          std::vector<float> w = random_row(rng, rows * ldo, 1.0f);
          axpy_f32_cols(y.data(), rows, lda, w.data(), ldo, bp.data(), cols, n);
          for (int64_t c = 0; c < cols; ++c) {
            for (int64_t r = 0; r < rows; ++r) {
              axpy_f32(yref.data() + r * lda, w[static_cast<size_t>(r * ldo + c)], bp[c], n);
            }
          }
          for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(bits(y[i]), bits(yref[i])) << i;
        }
      }
    }
  }
}

TEST(OpsSimd, RoundToF16GivesThePortableBits) {
  const auto isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  std::vector<float> x;
  std::mt19937 rng(11);
  for (float scale : {1e-7f, 1e-5f, 1e-3f, 1.0f, 100.0f, 6e4f}) {
    auto r = random_row(rng, 61, scale);
    x.insert(x.end(), r.begin(), r.end());
  }
  // Exact ties between two f16 values (normal and subnormal), both parities; the overflow
  // midpoint 65520 (rounds to infinity) and just below it; the smallest subnormal's half;
  // zeros, infinities.
  for (float t : {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1024.0f + 0.5f, 1024.0f + 1.5f,
                  std::ldexp(1.0f, -24) * 1.5f, std::ldexp(1.0f, -24) * 2.5f, 65520.0f, 65519.0f,
                  std::ldexp(1.0f, -25), std::ldexp(1.0f, -26), 0.0f, -0.0f,
                  std::numeric_limits<float>::infinity(), 1e30f, -1e30f,
                  std::numeric_limits<float>::denorm_min()}) {
    x.push_back(t);
    x.push_back(-t);
  }
  std::vector<float> ref = x;
  {
    IsaScope s(CpuIsa::kScalar);
    ASSERT_TRUE(s.ok());
    round_to_f16(ref.data(), static_cast<int64_t>(ref.size()));
  }
  for (CpuIsa isa : isas) {
    IsaScope s(isa);
    ASSERT_TRUE(s.ok());
    std::vector<float> got = x;
    round_to_f16(got.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(bits(got[i]), bits(ref[i])) << cpu_isa_name(isa) << " input " << x[i];
    }
  }
  // A NaN stays a NaN (its payload may differ).
  float nan = std::numeric_limits<float>::quiet_NaN();
  round_to_f16(&nan, 1);
  EXPECT_TRUE(std::isnan(nan));
}

// One angle table for all heads gives each head what rope_apply gives it alone, for both
// pair layouts and with frequency factors.
TEST(OpsSimd, RopeHeadsEqualsRopePerHead) {
  std::mt19937 rng(3);
  std::vector<float> factors(32);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i);
  for (RopeKind kind : {RopeKind::kNorm, RopeKind::kNeox}) {
    for (bool with_factors : {false, true}) {
      RopeParams p;
      p.kind = kind;
      p.n_rot = 64;
      p.freq_base = 500000.0f;
      p.freq_scale = 0.5f;
      p.freq_factors = with_factors ? factors.data() : nullptr;
      const int64_t heads = 5, stride = 80;  // head_dim 80, 64 of them rotated
      for (int64_t pos : {0, 1, 17, 4095}) {
        std::vector<float> x = random_row(rng, heads * stride, 1.0f), ref = x;
        for (int64_t h = 0; h < heads; ++h) rope_apply(ref.data() + h * stride, pos, p);
        rope_apply_heads(x.data(), heads, stride, pos, p);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits(x[i]), bits(ref[i])) << i;
      }
    }
  }
}

// argmax_f32 under every SIMD path against the portable loop: random rows of every length
// from 1 to 70 (blocks of 8 and tails), ties (the first wins), NaNs (never win; one at index 0
// keeps 0), infinities, all-equal rows, and a rising row (every block walked).
TEST(OpsSimd, ArgmaxGivesThePortableIndex) {
  const auto isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(11);
  std::vector<std::vector<float>> rows;
  for (int64_t n = 1; n <= 70; ++n) {
    rows.push_back(random_row(rng, n, 1.0f));
    std::vector<float> ties(static_cast<size_t>(n));
    std::uniform_int_distribution<int> small(0, 3);
    for (float& v : ties) v = static_cast<float>(small(rng));
    rows.push_back(ties);
    std::vector<float> rising(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rising[static_cast<size_t>(i)] = static_cast<float>(i);
    rows.push_back(rising);
    rows.push_back(std::vector<float>(static_cast<size_t>(n), -1.5f));
    std::vector<float> with_nan = random_row(rng, n, 1.0f);
    with_nan[static_cast<size_t>(n / 2)] = nan;
    rows.push_back(with_nan);
    with_nan[0] = nan;
    rows.push_back(with_nan);
    std::vector<float> with_inf = random_row(rng, n, 1.0f);
    with_inf[static_cast<size_t>(n - 1)] = inf;
    with_inf[static_cast<size_t>(n / 3)] = -inf;
    rows.push_back(with_inf);
  }
  // A long logits-like row whose maximum sits in the last block, and one with two equal maxima.
  std::vector<float> logits = random_row(rng, 32003, 3.0f);
  logits[32001] = 100.0f;
  rows.push_back(logits);
  logits[77] = 100.0f;
  rows.push_back(logits);
  std::vector<int64_t> expected;
  {
    IsaScope scope(CpuIsa::kScalar);
    ASSERT_TRUE(scope.ok());
    for (const auto& r : rows)
      expected.push_back(argmax_f32(r.data(), static_cast<int64_t>(r.size())));
  }
  EXPECT_EQ(expected[expected.size() - 2], 32001);
  EXPECT_EQ(expected.back(), 77);
  for (CpuIsa isa : isas) {
    IsaScope scope(isa);
    ASSERT_TRUE(scope.ok());
    for (size_t i = 0; i < rows.size(); ++i) {
      // Unaligned starts: the same row one float further into a copy.
      std::vector<float> shifted(rows[i].size() + 1);
      std::copy(rows[i].begin(), rows[i].end(), shifted.begin() + 1);
      EXPECT_EQ(argmax_f32(rows[i].data(), static_cast<int64_t>(rows[i].size())), expected[i])
          << cpu_isa_name(isa) << " row " << i;
      EXPECT_EQ(argmax_f32(shifted.data() + 1, static_cast<int64_t>(rows[i].size())), expected[i])
          << cpu_isa_name(isa) << " row " << i << " unaligned";
    }
  }
}

// dot_f16_cols / axpy_f16_cols (attention against F16 KV rows) give the bits of converting the
// rows with f16_to_f32_row and calling the f32 forms, on every path: 1 to 9 query rows (blocks
// of 4 and the rest), 1 to 6 columns, odd lengths, rows starting at odd addresses.
TEST(OpsSimd, F16RowOpsGiveTheConvertedRowsBits) {
  std::mt19937 rng(13);
  const std::vector<CpuIsa> isas = all_isas_here();
  for (int64_t n : {1, 7, 8, 9, 16, 64, 65, 128, 131}) {
    for (int64_t rows : {1, 3, 4, 5, 9}) {
      for (int64_t cols : {1, 2, 3, 4, 6}) {
        std::vector<float> a = random_row(rng, rows * (n + 1) + 1, 1.0f);
        // One byte of slack so each half row can start at an odd address.
        std::vector<std::vector<uint8_t>> half;
        std::vector<std::vector<float>> conv;
        for (int64_t c = 0; c < cols; ++c) {
          std::vector<float> src = random_row(rng, n, 3.0f);
          half.emplace_back(static_cast<size_t>(2 * n + 1));
          f32_to_f16_row(src.data(), half.back().data() + 1, n);
          conv.emplace_back(static_cast<size_t>(n));
          f16_to_f32_row(half.back().data() + 1, conv.back().data(), n);
        }
        const std::vector<const uint8_t*> hp = row_pointers(half, 1);
        const std::vector<const float*> cp = row_pointers(conv, 0);
        const int64_t ldo = cols + 1;
        std::vector<float> w = random_row(rng, rows * ldo, 1.0f);
        std::vector<float> y0 = random_row(rng, rows * (n + 1), 1.0f);
        for (CpuIsa isa : isas) {
          IsaScope scope(isa);
          ASSERT_TRUE(scope.ok());
          SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " n=" + std::to_string(n) +
                       " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
          std::vector<float> want(static_cast<size_t>(rows * ldo)), got(want.size());
          dot_f32_cols(a.data() + 1, rows, n + 1, cp.data(), cols, n, 0.5f, want.data(), ldo);
          dot_f16_cols(a.data() + 1, rows, n + 1, hp.data(), cols, n, 0.5f, got.data(), ldo);
          int dot_mismatches = 0;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < cols; ++c) {
              const auto i = static_cast<size_t>(r * ldo + c);
              dot_mismatches += bits(got[i]) != bits(want[i]);
            }
          }
          EXPECT_EQ(dot_mismatches, 0);
          std::vector<float> ya = y0, yb = y0;
          axpy_f32_cols(ya.data(), rows, n + 1, w.data(), ldo, cp.data(), cols, n);
          axpy_f16_cols(yb.data(), rows, n + 1, w.data(), ldo, hp.data(), cols, n);
          int mismatches = 0;
          for (size_t i = 0; i < ya.size(); ++i) mismatches += bits(ya[i]) != bits(yb[i]);
          EXPECT_EQ(mismatches, 0);
        }
      }
    }
  }
}

// rms_norm on the SIMD path gives the portable path's bits (the same 8 partial sums of squares
// in double), for lengths around the blocks of 8, model widths, and values from 1e-3 to 1e4;
// and the portable result is within 3 ulp of the norm computed in long double. (After the
// float rounding of the mean, the order of the double sum almost never shows; what this
// catches is a lost or doubled element, a wrong tail, a wrong scale: dropping the SIMD tail's
// last element fails it.)
TEST(OpsSimd, RmsNormGivesThePortableBits) {
  std::mt19937 rng(29);
  const auto isas = simd_isas_here();
  for (int64_t n : {1, 7, 8, 9, 64, 65, 768, 2048, 2051}) {
    for (float scale : {1e-3f, 1.0f, 1e4f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " scale=" + std::to_string(scale));
      const std::vector<float> x = random_row(rng, n, scale), w = random_row(rng, n, 1.0f);
      std::vector<float> ref(static_cast<size_t>(n));
      {
        IsaScope s(CpuIsa::kScalar);
        ASSERT_TRUE(s.ok());
        rms_norm(x.data(), w.data(), ref.data(), n, 1e-5f);
      }
      long double ss = 0;
      for (float v : x) ss += static_cast<long double>(v) * v;
      const long double inv = 1.0L / std::sqrt(ss / n + 1e-5L);
      int far = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(static_cast<long double>(x[i]) * inv * w[i]);
        const double err = std::fabs(static_cast<double>(ref[i]) - want);
        far += want != 0 && err > 3.0 * std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
      }
      EXPECT_EQ(far, 0);
      for (CpuIsa isa : isas) {
        IsaScope s(isa);
        ASSERT_TRUE(s.ok());
        std::vector<float> y(static_cast<size_t>(n));
        rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
        int differ = 0;
        for (int64_t i = 0; i < n; ++i) differ += bits(y[i]) != bits(ref[i]);
        EXPECT_EQ(differ, 0) << cpu_isa_name(isa);
      }
    }
  }
}

// softmax on every path against the exponentials in double precision of the same float
// differences x - max (both paths subtract in float): within 4 ulp of the float result for
// values above 1e-37 (the vector exp is within about 2 ulp, the inverse and the product round
// once each), below that absolutely; -inf entries give exactly 0, and one NaN makes every
// output NaN, as with the portable loop. Lengths around the 8-wide body and its masked tail.
TEST(OpsSimd, SoftmaxMatchesDoublePrecision) {
  const std::vector<CpuIsa> isas = all_isas_here();
  std::mt19937 rng(23);
  for (CpuIsa isa : isas) {
    IsaScope scope(isa);
    ASSERT_TRUE(scope.ok());
    for (int64_t n : {1, 3, 8, 13, 64, 200, 515}) {
      for (float spread : {0.1f, 3.0f, 30.0f}) {
        SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " n=" + std::to_string(n) +
                     " spread=" + std::to_string(spread));
        std::vector<float> x = random_row(rng, n, spread);
        if (n > 4) x[3] = -INFINITY;
        float max = -INFINITY;
        for (float v : x) max = v > max ? v : max;
        std::vector<double> e(x.size());
        double sum = 0.0;
        for (size_t i = 0; i < x.size(); ++i) {
          e[i] = std::exp(static_cast<double>(x[i] - max));
          sum += e[i];
        }
        std::vector<float> got = x;
        softmax(got.data(), n);
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const double want = e[i] / sum;
          if (std::isinf(x[i])) {
            bad += got[i] != 0.0f;
            continue;
          }
          const double err = std::fabs(static_cast<double>(got[i]) - want);
          const bool ok =
              want < 1e-37
                  ? err < 1e-37
                  : err <= 4.0 * std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
          if (!ok && ++bad <= 3)
            ADD_FAILURE() << "i=" << i << " got " << got[i] << " want " << want;
        }
        EXPECT_EQ(bad, 0);
        std::vector<float> with_nan = x;
        with_nan[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
        softmax(with_nan.data(), n);
        int not_nan = 0;
        for (float v : with_nan) not_nan += !std::isnan(v);
        EXPECT_EQ(not_nan, 0);
      }
    }
  }
}

// sigmoid on every path: the same bits as the portable path (sigmoid1, the same operations one
// value at a time) for every value, in the 8-wide body and in the tail, and within 4 ulp of
// the double-precision logistic; below -87.3 (a result under e^-87.3 = 1.209e-38, returned as 0) it
// is compared absolutely (below 1.21e-38). Inputs: [-100, 100] in steps of 1/64, random values, and
// NaN, +-inf, +-0, subnormals, +-FLT_MAX, the clamp's edge.
TEST(OpsSimd, SigmoidIsTheLogisticWithTheSameBitsOnEveryIsa) {
  std::vector<float> x;
  for (int i = -6400; i <= 6400; ++i) x.push_back(static_cast<float>(i) / 64.0f);
  std::mt19937 rng(29);
  const std::vector<float> extra = random_row(rng, 4099, 10.0f);
  x.insert(x.end(), extra.begin(), extra.end());
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            inf,
                            -inf,
                            0.0f,
                            -0.0f,
                            1e-45f,
                            -1e-45f,
                            1e-40f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            87.3f,
                            -87.3f,
                            std::nextafter(87.3f, 0.0f),
                            std::nextafter(-87.3f, 0.0f),
                            88.8f,
                            -88.8f,
                            -103.0f};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> portable(x.size());
  {
    IsaScope scope(CpuIsa::kScalar);
    ASSERT_TRUE(scope.ok());
    sigmoid(x.data(), portable.data(), n);
  }
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(portable[i]), std::bit_cast<uint32_t>(sigmoid1(x[i])));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(portable[i]));
      continue;
    }
    const double xd = x[i];
    const double want = xd >= 0 ? 1.0 / (1.0 + std::exp(-xd)) : std::exp(xd) / (1.0 + std::exp(xd));
    const double err = std::fabs(static_cast<double>(portable[i]) - want);
    const bool ok = want < 1.21e-38  // e^-87.3 = 1.209e-38
                        ? err < 1.21e-38
                        : err <= 4.0 * std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << "x=" << x[i] << " got " << portable[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(portable[x.size() - std::size(specials) + 1], 1.0f);  // +inf
  EXPECT_EQ(portable[x.size() - std::size(specials) + 2], 0.0f);  // -inf
  EXPECT_EQ(portable[x.size() - std::size(specials) + 3], 0.5f);  // 0
  for (CpuIsa isa : simd_isas_here()) {
    IsaScope scope(isa);
    ASSERT_TRUE(scope.ok());
    for (int shift = 0; shift < 8; ++shift) {  // every value once in each lane and in the tail
      std::vector<float> in(x.begin() + shift, x.end()), got(in.size() + 1, 7.0f);
      sigmoid(in.data(), got.data() + 1, static_cast<int64_t>(in.size()));  // misaligned output
      int diff = 0;
      for (size_t i = 0; i < in.size(); ++i)
        if (std::bit_cast<uint32_t>(got[i + 1]) != std::bit_cast<uint32_t>(portable[i + shift]) &&
            ++diff <= 3)
          ADD_FAILURE() << cpu_isa_name(isa) << " x=" << in[i] << " got " << got[i + 1]
                        << ", portable " << portable[i + shift];
      EXPECT_EQ(diff, 0) << cpu_isa_name(isa) << " shift " << shift;
      EXPECT_EQ(got[0], 7.0f);
    }
    std::vector<float> inplace = x;
    sigmoid(inplace.data(), inplace.data(), n);
    EXPECT_EQ(std::memcmp(inplace.data(), portable.data(), x.size() * sizeof(float)), 0);
  }
}

// swiglu on every path against silu(g) * u in double precision: within 4 ulp of the float
// result (the AVX2 path's exp is a polynomial, the portable path's std::exp), over g in
// [-100, 100] in steps of 1/64 and random values; past the clamp (g < -87.3) the result is
// below 1e-35 in magnitude and compared absolutely. On the SIMD path a value's result is the
// same in the 8-wide body and in the masked tail (the row shifted by 1 to 7 places).
TEST(OpsSimd, SwigluIsSiluTimesUp) {
  std::vector<float> g, u;
  for (int i = -6400; i <= 6400; ++i) g.push_back(static_cast<float>(i) / 64.0f);
  std::mt19937 rng(19);
  const std::vector<float> extra = random_row(rng, 4099, 6.0f);
  g.insert(g.end(), extra.begin(), extra.end());
  std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
  for (size_t i = 0; i < g.size(); ++i) u.push_back(ud(rng));
  const std::vector<CpuIsa> isas = all_isas_here();
  for (CpuIsa isa : isas) {
    IsaScope scope(isa);
    ASSERT_TRUE(scope.ok());
    std::vector<float> out = g;
    swiglu(out.data(), u.data(), static_cast<int64_t>(out.size()));
    int bad = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double gd = g[i];
      const double want = gd / (1.0 + std::exp(-gd)) * static_cast<double>(u[i]);
      const double err = std::fabs(static_cast<double>(out[i]) - want);
      // One float ulp at want's magnitude (ilogb only of values away from 0: ilogb(0) is
      // INT_MIN).
      const bool ok = std::fabs(want) < 1e-35
                          ? err < 1e-35
                          : err <= 4.0 * std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << cpu_isa_name(isa) << " g=" << g[i] << " u=" << u[i] << " got " << out[i]
                      << " want " << want;
      }
    }
    EXPECT_EQ(bad, 0) << cpu_isa_name(isa);
    if (isa == CpuIsa::kScalar) continue;
    for (int shift = 1; shift < 8; ++shift) {
      const int64_t n = 203;  // 25 blocks of 8 and a tail of 3
      std::vector<float> a(g.begin(), g.begin() + n), b(static_cast<size_t>(n + shift));
      std::vector<float> ua(u.begin(), u.begin() + n), ub(static_cast<size_t>(n + shift));
      std::copy(a.begin(), a.end(), b.begin() + shift);
      std::copy(ua.begin(), ua.end(), ub.begin() + shift);
      swiglu(a.data(), ua.data(), n);
      swiglu(b.data(), ub.data(), n + shift);
      int differ = 0;
      for (int64_t i = 0; i < n; ++i)
        differ += bits(a[static_cast<size_t>(i)]) != bits(b[static_cast<size_t>(i + shift)]);
      EXPECT_EQ(differ, 0) << cpu_isa_name(isa) << " shift " << shift;
    }
  }
}

// Mamba's scan step on every path against the recurrence in double precision, five tokens in a
// row (the state carries the error forward): the state and the outputs stay within 2e-5 of the
// scale of their terms (float rounding is 6e-8 per operation, the vector exp about 2 ulp). The
// portable path is llama.cpp's float arithmetic bit for bit (replayed here in float), and on
// the SIMD paths a channel's result does not depend on the channels processed with it.
TEST(OpsSimd, SsmScanStepFollowsTheRecurrence) {
  constexpr int64_t kCh = 37, kN = 16, kSteps = 5;
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), dts(-6.0f, 24.0f);
  std::vector<float> a(kCh * kN), h0(kCh * kN);
  for (int64_t c = 0; c < kCh; ++c) {
    for (int64_t k = 0; k < kN; ++k) {
      a[c * kN + k] = -static_cast<float>(k + 1) * (0.5f + 0.5f * std::fabs(unit(rng)));
      h0[c * kN + k] = unit(rng);
    }
  }
  struct Step {
    std::vector<float> b, cc, dt, x;
  };
  std::vector<Step> steps(kSteps);
  for (Step& st : steps) {
    for (int64_t k = 0; k < kN; ++k) {
      st.b.push_back(unit(rng));
      st.cc.push_back(unit(rng));
    }
    for (int64_t c = 0; c < kCh; ++c) {
      st.dt.push_back(dts(rng));
      st.x.push_back(2 * unit(rng));
    }
  }
  // References: double, and llama.cpp's float arithmetic.
  std::vector<double> hd(h0.begin(), h0.end());
  std::vector<float> hf = h0;
  std::vector<std::vector<double>> yd(kSteps, std::vector<double>(kCh)), scale_y = yd;
  std::vector<std::vector<float>> yf(kSteps, std::vector<float>(kCh));
  std::vector<std::vector<double>> hd_at(kSteps), hscale_at(kSteps);
  std::vector<double> hscale(kCh * kN, 0.0);
  for (int64_t t = 0; t < kSteps; ++t) {
    const Step& st = steps[static_cast<size_t>(t)];
    for (int64_t c = 0; c < kCh; ++c) {
      const double dv = st.dt[c];
      const double sp = dv <= 20.0 ? std::log1p(std::exp(dv)) : dv;
      const float dvf = st.dt[c];
      const float spf = dvf <= 20.0f ? std::log1p(std::exp(dvf)) : dvf;
      double y = 0, ys = 0;
      float yfl = 0.0f;
      for (int64_t k = 0; k < kN; ++k) {
        const size_t i = static_cast<size_t>(c * kN + k);
        const double decay = std::exp(sp * a[i]);
        hscale[i] =
            std::fabs(hd[i] * decay) + std::fabs(st.b[k] * st.x[c] * sp) + hscale[i] * decay;
        hd[i] = hd[i] * decay + st.b[k] * (st.x[c] * sp);
        y += hd[i] * st.cc[k];
        ys += hscale[i] * std::fabs(st.cc[k]);
        const float v = hf[i] * std::exp(spf * a[i]) + st.b[k] * (st.x[c] * spf);
        yfl += v * st.cc[k];
        hf[i] = v;
      }
      yd[t][c] = y;
      scale_y[t][c] = ys;
      yf[t][c] = yfl;
    }
    hd_at[t] = hd;
    hscale_at[t] = hscale;
  }
  for (CpuIsa isa : all_isas_here()) {
    IsaScope scope(isa);
    ASSERT_TRUE(scope.ok());
    std::vector<float> h = h0, y(kCh);
    int bad = 0;
    for (int64_t t = 0; t < kSteps; ++t) {
      const Step& st = steps[static_cast<size_t>(t)];
      ssm_scan_step(h.data(), a.data(), st.b.data(), st.cc.data(), st.dt.data(), st.x.data(), kCh,
                    kN, y.data());
      for (int64_t c = 0; c < kCh; ++c) {
        if (isa == CpuIsa::kScalar) {
          EXPECT_EQ(bits(y[c]), bits(yf[t][c])) << "step " << t << " channel " << c;
        }
        if (std::fabs(y[c] - yd[t][c]) > 2e-5 * scale_y[t][c] + 1e-30 && ++bad <= 5) {
          ADD_FAILURE() << cpu_isa_name(isa) << " step " << t << " channel " << c << ": y " << y[c]
                        << " want " << yd[t][c];
        }
        for (int64_t k = 0; k < kN; ++k) {
          const size_t i = static_cast<size_t>(c * kN + k);
          if (std::fabs(h[i] - hd_at[t][i]) > 2e-5 * hscale_at[t][i] + 1e-30 && ++bad <= 5) {
            ADD_FAILURE() << cpu_isa_name(isa) << " step " << t << " state " << i << ": " << h[i]
                          << " want " << hd_at[t][i];
          }
        }
      }
    }
    EXPECT_EQ(bad, 0) << cpu_isa_name(isa);
    // One channel alone gives the bits it got among the others.
    std::vector<float> h1(h0.begin() + 5 * kN, h0.begin() + 6 * kN), y1(1);
    for (int64_t t = 0; t < kSteps; ++t) {
      const Step& st = steps[static_cast<size_t>(t)];
      ssm_scan_step(h1.data(), a.data() + 5 * kN, st.b.data(), st.cc.data(), st.dt.data() + 5,
                    st.x.data() + 5, 1, kN, y1.data());
    }
    EXPECT_EQ(bits(y1[0]), bits(y[5])) << cpu_isa_name(isa);
    for (int64_t k = 0; k < kN; ++k) EXPECT_EQ(bits(h1[k]), bits(h[5 * kN + k]));
  }
}

}  // namespace
}  // namespace power
