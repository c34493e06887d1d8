// matmul under every ISA this machine has (forced), against the scalar references: the SIMD
// paths against quant.h vec_dot on the same quantized activations (the peer's arithmetic), the
// scalar path against a double-precision dot of the dequantized rows. Odd row counts, 1 to 70
// tokens (decode tiles, batch tiles, the 64-token block edge), unaligned and padded rows.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/context.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_repack.h"
#include "tensor/quant.h"

namespace power {
namespace {

struct Case {
  GgmlType type;
  const char* name;
};

const Case kTypes[] = {
    {GgmlType::Q4_0, "Q4_0"}, {GgmlType::Q8_0, "Q8_0"},     {GgmlType::Q4_K, "Q4_K"},
    {GgmlType::Q6_K, "Q6_K"}, {GgmlType::Q5_0, "Q5_0"},     {GgmlType::Q5_1, "Q5_1"},
    {GgmlType::Q4_1, "Q4_1"}, {GgmlType::Q2_K, "Q2_K"},     {GgmlType::Q3_K, "Q3_K"},
    {GgmlType::Q5_K, "Q5_K"}, {GgmlType::IQ4_NL, "IQ4_NL"}, {GgmlType::IQ4_XS, "IQ4_XS"},
    {GgmlType::F16, "F16"},   {GgmlType::BF16, "BF16"},     {GgmlType::F32, "F32"},
};

bool is_float(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// Restores the process's ISA choice after a test forces one.
class IsaGuard {
 public:
  IsaGuard() : saved_(cpu_isa()) {}
  ~IsaGuard() { set_cpu_isa_for_testing(saved_); }

 private:
  CpuIsa saved_;
};

std::vector<CpuIsa> isas_here() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_available(isa)) out.push_back(isa);
  }
  return out;
}

struct Problem {
  GgmlType type;
  int64_t k, rows, n_tokens;
  uint64_t row_stride;  // bytes between weight rows (>= row bytes)
  size_t misalign;      // byte offset of row 0 from an aligned allocation
};

void run_problem(const Problem& p, CpuIsa isa, int threads, uint32_t seed) {
  SCOPED_TRACE(std::string("isa=") + std::string(cpu_isa_name(isa)) + " k=" + std::to_string(p.k) +
               " rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.n_tokens) +
               " threads=" + std::to_string(threads) + " misalign=" + std::to_string(p.misalign));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const GgmlTypeInfo& info = ggml_type_info(p.type);
  const uint64_t row_bytes = static_cast<uint64_t>(p.k) / info.block_elems * info.block_bytes;
  ASSERT_GE(p.row_stride, row_bytes);
  std::vector<uint8_t> wbuf(p.misalign + p.row_stride * static_cast<uint64_t>(p.rows) + 64);
  uint8_t* w0 = wbuf.data() + p.misalign;
  std::vector<float> wf(static_cast<size_t>(p.k));
  for (int64_t r = 0; r < p.rows; ++r) {
    for (auto& v : wf) v = nd(rng) * 0.5f;
    ASSERT_TRUE(quantize_row(p.type, wf.data(), w0 + r * p.row_stride, p.k).ok());
  }
  const int64_t ldx = p.k + 3;
  std::vector<float> x(static_cast<size_t>(ldx * p.n_tokens));
  for (auto& v : x) v = nd(rng);
  const int64_t ldy = p.rows + 2;
  std::vector<float> y(static_cast<size_t>(ldy * p.n_tokens), -999.0f);

  TensorView w;
  w.type = p.type;
  w.ne = {p.k, p.rows, 1, 1};
  w.nb = {info.block_bytes, p.row_stride, p.row_stride * static_cast<uint64_t>(p.rows),
          p.row_stride * static_cast<uint64_t>(p.rows)};
  w.data = w0;
  bool simd = false;
  {
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(isa));
    simd = matmul_has_simd_kernel(p.type);
    CpuContext ctx(threads, p.k, 16);
    matmul(ctx, w, x.data(), ldx, p.n_tokens, y.data(), ldy);
  }

  const GgmlType act = vec_dot_activation_type(p.type).value();
  std::vector<uint8_t> arow(static_cast<size_t>(p.k) * 4 + 64);
  std::vector<float> wd(static_cast<size_t>(p.k));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* xt = x.data() + t * ldx;
    // SIMD kernels of quantized types see the peer's quantized activations; float kernels
    // and the scalar path see the f32 activations.
    const bool simd_ref = simd && !is_float(p.type);
    if (simd_ref) {
      ASSERT_TRUE(quantize_activation_row(act, xt, arow.data(), p.k).ok());
    }
    for (int64_t r = 0; r < p.rows; ++r) {
      const uint8_t* wr = w0 + r * p.row_stride;
      ASSERT_TRUE(dequantize_row(p.type, wr, wd.data(), p.k).ok());
      double exact = 0.0, mag = 0.0;
      for (int64_t e = 0; e < p.k; ++e) {
        exact += static_cast<double>(wd[e]) * xt[e];
        mag += std::fabs(static_cast<double>(wd[e]) * xt[e]);
      }
      const float got = y[static_cast<size_t>(t * ldy + r)];
      if (simd_ref) {
        const float ref = vec_dot(p.type, wr, arow.data(), p.k).value();
        // Same integer sums; only the order of the f32 scale steps differs.
        ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-5) << "row " << r << " token " << t;
      } else {
        ASSERT_NEAR(got, exact, 1e-5 * mag + 1e-5) << "row " << r << " token " << t;
      }
    }
    // Columns past `rows` in each output row are untouched.
    EXPECT_EQ(y[static_cast<size_t>(t * ldy + p.rows)], -999.0f);
  }
}

class MatmulTest : public ::testing::TestWithParam<Case> {};

TEST_P(MatmulTest, MatchesReferenceUnderEveryIsa) {
  const Case c = GetParam();
  const GgmlTypeInfo& info = ggml_type_info(c.type);
  const bool kquant = info.block_elems == 256;
  std::vector<int64_t> ks = {768};
  if (!kquant) ks.push_back(96);
  if (is_float(c.type)) ks.push_back(100);
  uint32_t seed = 1;
  for (CpuIsa isa : isas_here()) {
    for (int64_t k : ks) {
      const uint64_t rb = static_cast<uint64_t>(k) / info.block_elems * info.block_bytes;
      for (int64_t rows : {1, 5, 37}) {
        for (int64_t tokens : {1, 4, 7, 9}) {
          run_problem({c.type, k, rows, tokens, rb, 0}, isa, 2, seed++);
        }
      }
      // Unaligned first row, padded odd stride (every row unaligned), one thread.
      run_problem({c.type, k, 13, 7, rb + 3, 1}, isa, 1, seed++);
      run_problem({c.type, k, 6, 1, rb + 5, 3}, isa, 2, seed++);
      if (HasFatalFailure()) return;
    }
    // Crosses the 64-token block edge of the batch driver.
    const uint64_t rb0 = static_cast<uint64_t>(ks[0]) / info.block_elems * info.block_bytes;
    run_problem({c.type, ks[0], 11, 70, rb0, 0}, isa, 2, seed++);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The K-quant tiles (1 row x 4 tokens for batches, 4 rows x 1 token for decode, with the
// leftover rows and tokens in smaller tiles): every token count 1..17 (every remainder of the
// 4-token tile, several tiles in a row), odd row counts around the 4-row decode tile, several
// super-blocks per row, and rows at odd byte offsets.
TEST(MatmulTest, KQuantTilesEveryTokenCount) {
  uint32_t seed = 1000;
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K}) {
    const GgmlTypeInfo& info = ggml_type_info(type);
    SCOPED_TRACE(info.name);
    for (CpuIsa isa : isas_here()) {
      for (int64_t tokens = 1; tokens <= 17; ++tokens) {
        const int64_t k = tokens % 2 == 0 ? 512 : 1280;
        const uint64_t rb = static_cast<uint64_t>(k) / info.block_elems * info.block_bytes;
        const int64_t rows = 3 + 2 * (tokens % 4);  // 3, 5, 7, 9
        run_problem({type, k, rows, tokens, rb, 0}, isa, 1, seed++);
        run_problem(
            {type, k, rows + 4, tokens, rb + 1 + tokens % 3, static_cast<size_t>(1 + tokens % 5)},
            isa, 2, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A token's products do not depend on which other tokens share the call: n tokens at once give,
// bit for bit, what each token gives alone. Batched decode (#6: N concurrent greedy requests
// equal each alone) and speculative verification (#10: greedy equals plain decoding) rely on
// it, so the batch tiles and the decode tiles must do the same arithmetic in the same order
// per token (a decode tile that reduced its row sums in another order broke greedy parity on
// phi3 Q4_K_M). Every type under every ISA, the packed Q4_0/Q8_0 layout too, odd row counts
// (tiles' tail rows), 13 tokens (8 + 4 + 1 with 8-token tiles, 4 + 4 + 4 + 1 with 4), 1 and 2
// threads.
TEST_P(MatmulTest, TokensInOneCallEqualEachAlone) {
  const GgmlType type = GetParam().type;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t k = 512, rows = 21, n_tokens = 13, ldx = k + 1;
  const GgmlTypeInfo& info = ggml_type_info(type);
  const uint64_t row_bytes = static_cast<uint64_t>(k) / info.block_elems * info.block_bytes;
  std::vector<uint8_t> wbuf(row_bytes * rows);
  std::vector<float> wf(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : wf) v = nd(rng) * 0.3f;
    ASSERT_TRUE(quantize_row(type, wf.data(), wbuf.data() + r * row_bytes, k).ok());
  }
  TensorView w;
  w.type = type;
  w.ne = {k, rows, 1, 1};
  w.nb = {info.block_bytes, row_bytes, row_bytes * rows, row_bytes * rows};
  w.data = wbuf.data();
  std::vector<float> x(static_cast<size_t>(ldx * n_tokens));
  for (float& v : x) v = nd(rng);
  for (CpuIsa isa : isas_here()) {
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(isa));
    // The packed copy (Q4_0 / Q8_0 under a SIMD ISA); nothing for other types.
    RepackedWeights packs;
    packs.add(w);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " threads=" + std::to_string(threads));
      CpuContext ctx(threads, k, 64);
      std::vector<float> all(static_cast<size_t>(rows * n_tokens));
      matmul(ctx, w, x.data(), ldx, n_tokens, all.data(), rows);
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<float> one(static_cast<size_t>(rows));
        matmul(ctx, w, x.data() + t * ldx, ldx, 1, one.data(), rows);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(std::bit_cast<uint32_t>(all[t * rows + r]), std::bit_cast<uint32_t>(one[r]))
              << "token " << t << " row " << r << ": " << all[t * rows + r] << " vs " << one[r];
        }
      }
    }
  }
}

TEST(CpuIsaTest, ScalarAlwaysAvailableAndNamed) {
  EXPECT_TRUE(cpu_isa_available(CpuIsa::kScalar));
  EXPECT_EQ(cpu_isa_name(CpuIsa::kAvx2), "avx2");
  EXPECT_EQ(cpu_isa_name(CpuIsa::kAvx512), "avx512");
  IsaGuard guard;
  EXPECT_TRUE(set_cpu_isa_for_testing(CpuIsa::kScalar));
  EXPECT_EQ(cpu_isa(), CpuIsa::kScalar);
}

}  // namespace
}  // namespace power
