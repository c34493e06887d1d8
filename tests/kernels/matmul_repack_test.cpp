// Repacked Q4_0 / Q8_0 / Q4_K weights (kernels/cpu/matmul_repack.h): matmul through the packed copy
// under every SIMD ISA this machine has (forced) against the peer's reference vec_dot
// (tensor/quant.h) on the same quantized activations; row counts that are not multiples of 8
// (the tail rows take the unpacked kernel), 1..17 tokens and a 70-token batch (tiles of 4,
// tails of 1..3, the 64-token block edge), padded and unaligned rows. Also the registry's
// rules: shared owners, views that must not match, POWER_REPACK=0, the scalar path.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/huge_pages.h"
#include "kernels/cpu/context.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_repack.h"
#include "tensor/quant.h"
#include "test_util.h"

namespace power {
namespace {

class IsaGuard {
 public:
  IsaGuard() : saved_(cpu_isa()) {}
  ~IsaGuard() { set_cpu_isa_for_testing(saved_); }

 private:
  CpuIsa saved_;
};

std::vector<CpuIsa> simd_isas_here() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_available(isa)) out.push_back(isa);
  }
  return out;
}

// A quantized weight matrix in a buffer of its own (rows `stride` bytes apart, row 0 at
// `misalign` bytes past the allocation) and activations.
struct Weights {
  GgmlType type;
  int64_t k, rows;
  uint64_t stride;
  std::vector<uint8_t> buf;
  TensorView view;
};

Weights make_weights(GgmlType type, int64_t k, int64_t rows, uint64_t pad, size_t misalign,
                     std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const GgmlTypeInfo& info = ggml_type_info(type);
  const uint64_t row_bytes = static_cast<uint64_t>(k) / info.block_elems * info.block_bytes;
  Weights w{type, k, rows, row_bytes + pad, {}, {}};
  w.buf.resize(misalign + w.stride * static_cast<uint64_t>(rows) + 64);
  uint8_t* w0 = w.buf.data() + misalign;
  std::vector<float> wf(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : wf) v = nd(rng) * 0.5f;
    EXPECT_TRUE(quantize_row(type, wf.data(), w0 + r * w.stride, k).ok());
  }
  w.view.type = type;
  w.view.ne = {k, rows, 1, 1};
  w.view.nb = {info.block_bytes, w.stride, w.stride * static_cast<uint64_t>(rows),
               w.stride * static_cast<uint64_t>(rows)};
  w.view.data = w0;
  return w;
}

// Runs matmul on `w` (whatever path the ISA and registry give) and checks every output
// against the reference vec_dot on the reference-quantized activations (SIMD ISAs) or
// against a double-precision dot of the dequantized rows (scalar).
void check_matmul(const Weights& w, int64_t n_tokens, int threads, std::mt19937& rng) {
  SCOPED_TRACE("k=" + std::to_string(w.k) + " rows=" + std::to_string(w.rows) +
               " tokens=" + std::to_string(n_tokens) + " threads=" + std::to_string(threads));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t ldx = w.k + 5;
  std::vector<float> x(static_cast<size_t>(ldx * n_tokens));
  for (auto& v : x) v = nd(rng);
  const int64_t ldy = w.rows + 3;
  std::vector<float> y(static_cast<size_t>(ldy * n_tokens), -999.0f);
  CpuContext ctx(threads, w.k, 16);
  matmul(ctx, w.view, x.data(), ldx, n_tokens, y.data(), ldy);

  const bool simd = cpu_isa() != CpuIsa::kScalar;
  std::vector<uint8_t> arow(static_cast<size_t>(w.k) * 4 + 64);
  std::vector<float> wd(static_cast<size_t>(w.k));
  const auto* w0 = static_cast<const uint8_t*>(w.view.data);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * ldx;
    if (simd) {
      ASSERT_TRUE(
          quantize_activation_row(*vec_dot_activation_type(w.type), xt, arow.data(), w.k).ok());
    }
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* wr = w0 + r * w.stride;
      ASSERT_TRUE(dequantize_row(w.type, wr, wd.data(), w.k).ok());
      double exact = 0.0, mag = 0.0;
      for (int64_t e = 0; e < w.k; ++e) {
        exact += static_cast<double>(wd[e]) * xt[e];
        mag += std::fabs(static_cast<double>(wd[e]) * xt[e]);
      }
      const float got = y[static_cast<size_t>(t * ldy + r)];
      const double ref = simd ? vec_dot(w.type, wr, arow.data(), w.k).value() : exact;
      // Same integer block sums as the reference; only the f32 scale steps' order differs.
      ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-5) << "row " << r << " token " << t;
    }
    for (int64_t r = w.rows; r < ldy; ++r) {
      ASSERT_EQ(y[static_cast<size_t>(t * ldy + r)], -999.0f) << "wrote past the rows";
    }
  }
}

class RepackTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(RepackTest, PackedMatchesReferenceUnderEverySimdIsa) {
  const GgmlType type = GetParam();
  const std::vector<CpuIsa> isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this machine: nothing is repacked";
  std::mt19937 rng(7);
  for (CpuIsa isa : isas) {
    SCOPED_TRACE(std::string("isa=") + std::string(cpu_isa_name(isa)));
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(isa));
    ASSERT_TRUE(matmul_repack_supported(type));
    struct Shape {
      int64_t k, rows;
      uint64_t pad;
      size_t misalign;
    };
    // 8 and 64 rows: groups only; 13, 37: 1 or 4 groups plus 5 tail rows; padded odd strides
    // and an unaligned row 0 (the packed copy is aligned, the tail rows are not).
    // Q4_K rows are super-blocks of 256: the same shapes with k rounded up to 256, 512, ....
    const bool k_quant = type == GgmlType::Q4_K;
    for (const Shape& s : {Shape{32, 8, 0, 0}, Shape{96, 13, 0, 0}, Shape{256, 37, 3, 1},
                           Shape{768, 64, 0, 0}, Shape{160, 21, 5, 3}}) {
      const int64_t k = k_quant ? (s.k + 255) / 256 * 256 + (s.k == 160 ? 256 : 0) : s.k;
      Weights w = make_weights(type, k, s.rows, s.pad, s.misalign, rng);
      RepackedWeights packs;
      ASSERT_TRUE(packs.add(w.view));
      EXPECT_EQ(packs.n_matrices(), 1);
      // The file's bytes per block and row (Q4_0 18 per 32, Q8_0 34 per 32), for Q4_K 144 per
      // 256 plus 4: its 12 bytes of 6-bit scales and mins are stored as 16 bytes.
      const uint64_t per_block_row = type == GgmlType::Q4_0   ? 18u
                                     : type == GgmlType::Q8_0 ? 34u
                                                              : 144u + 4u;
      EXPECT_EQ(packs.bytes(), static_cast<uint64_t>(s.rows / 8) * 8 *
                                   (static_cast<uint64_t>(k) / (k_quant ? 256 : 32)) *
                                   per_block_row);
      ASSERT_TRUE(matmul_uses_repacked(w.view));
      for (int64_t tokens = 1; tokens <= 17; ++tokens) {
        check_matmul(w, tokens, tokens % 2 == 0 ? 2 : 1, rng);
        if (HasFatalFailure()) return;
      }
      check_matmul(w, 70, 2, rng);
      if (HasFatalFailure()) return;
    }
  }
}

// A batch gives every token bit for bit what that token alone gives (the decode tile): the
// batch tiles (8 rows x 4 tokens; for Q4_0, and Q8_0 under VNNI, the token-major tiles: AVX2
// 4 rows x 16 tokens from 16 tokens on, AVX-512 8 rows x 32 / 16 / 8 tokens from 8 tokens on)
// sum the same integers and take the same f32 steps per row and token. Prompt cutting, chunked
// prefill, batched decoding and speculative rollback rely on it. Batches of 8 and 11 (one token
// group, then 3 tokens on the 8-row tiles), 16, 24 (16 + 8), 35, 56 (32 + 16 + 8), 70, 75 and
// 150 (64-token blocks with token-major tiles and remainders), 1 and 2 threads, rows with a
// tail past the groups.
TEST_P(RepackTest, BatchGivesTheBitsOfOneTokenAtATime) {
  const GgmlType type = GetParam();
  const std::vector<CpuIsa> isas = simd_isas_here();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this machine: nothing is repacked";
  std::mt19937 rng(29);
  const int64_t k = type == GgmlType::Q4_K ? 512 : 160;
  Weights w = make_weights(type, k, 43, 0, 0, rng);
  for (CpuIsa isa : isas) {
    SCOPED_TRACE(std::string("isa=") + std::string(cpu_isa_name(isa)));
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(isa));
    RepackedWeights packs;
    ASSERT_TRUE(packs.add(w.view));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int threads : {1, 2}) {
      CpuContext ctx(threads, k, 16);
      for (int64_t tokens : {8, 11, 16, 24, 35, 56, 70, 75, 150}) {
        SCOPED_TRACE("tokens=" + std::to_string(tokens) + " threads=" + std::to_string(threads));
        std::vector<float> x(static_cast<size_t>(k * tokens));
        for (float& v : x) v = nd(rng);
        const int64_t ldy = w.rows;
        std::vector<float> batch(static_cast<size_t>(ldy * tokens));
        matmul(ctx, w.view, x.data(), k, tokens, batch.data(), ldy);
        std::vector<float> one(static_cast<size_t>(ldy));
        for (int64_t t = 0; t < tokens; ++t) {
          matmul(ctx, w.view, x.data() + t * k, k, 1, one.data(), ldy);
          for (int64_t r = 0; r < w.rows; ++r) {
            ASSERT_EQ(std::bit_cast<uint32_t>(batch[static_cast<size_t>(t * ldy + r)]),
                      std::bit_cast<uint32_t>(one[static_cast<size_t>(r)]))
                << "token " << t << " row " << r << ": " << batch[static_cast<size_t>(t * ldy + r)]
                << " vs " << one[static_cast<size_t>(r)];
          }
        }
      }
    }
  }
}

TEST_P(RepackTest, ScalarPathIgnoresThePackedCopy) {
  const GgmlType type = GetParam();
  if (simd_isas_here().empty()) GTEST_SKIP() << "no SIMD ISA on this machine";
  std::mt19937 rng(11);
  Weights w = make_weights(type, 256, 19, 0, 0, rng);
  RepackedWeights packs;
  {
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(simd_isas_here().front()));
    ASSERT_TRUE(packs.add(w.view));
  }
  IsaGuard guard;
  ASSERT_TRUE(set_cpu_isa_for_testing(CpuIsa::kScalar));
  EXPECT_FALSE(matmul_uses_repacked(w.view));
  check_matmul(w, 3, 1, rng);
  // Loading under the scalar path packs nothing.
  RepackedWeights none;
  EXPECT_FALSE(none.add(w.view));
}

TEST_P(RepackTest, RegistrySharesCopiesAndRejectsOtherViews) {
  const GgmlType type = GetParam();
  if (simd_isas_here().empty()) GTEST_SKIP() << "no SIMD ISA on this machine";
  IsaGuard guard;
  ASSERT_TRUE(set_cpu_isa_for_testing(simd_isas_here().front()));
  std::mt19937 rng(13);
  Weights w = make_weights(type, 256, 24, 0, 0, rng);
  EXPECT_FALSE(matmul_uses_repacked(w.view));
  {
    auto a = std::make_unique<RepackedWeights>();
    auto b = std::make_unique<RepackedWeights>();
    ASSERT_TRUE(a->add(w.view));
    ASSERT_TRUE(a->add(w.view));  // idempotent per owner
    EXPECT_EQ(a->n_matrices(), 1);
    ASSERT_TRUE(b->add(w.view));  // a second model over the same mapping shares the copy
    a.reset();
    EXPECT_TRUE(matmul_uses_repacked(w.view));
    check_matmul(w, 5, 2, rng);

    // The first 16 rows of the same bytes: another view, never served by the 24-row copy.
    TensorView first16 = w.view;
    first16.ne[1] = 16;
    EXPECT_FALSE(matmul_uses_repacked(first16));
    RepackedWeights c;
    EXPECT_FALSE(c.add(first16));  // the bytes are registered with another shape
    Weights sub = w;
    sub.rows = 16;
    sub.view = first16;
    check_matmul(sub, 4, 1, rng);
  }
  EXPECT_FALSE(matmul_uses_repacked(w.view));  // last owner gone
  check_matmul(w, 2, 1, rng);

  // Too few rows, a 3-D view, a null view: nothing to pack.
  Weights small = make_weights(type, 256, 7, 0, 0, rng);
  RepackedWeights d;
  EXPECT_FALSE(d.add(small.view));
  TensorView three_d = w.view;
  three_d.ne = {256, 8, 3, 1};
  EXPECT_FALSE(d.add(three_d));
  EXPECT_FALSE(d.add(TensorView{}));
  EXPECT_EQ(d.n_matrices(), 0);
}

// A loader's one add_all() call: every packable matrix gets its copy in one 2 MiB-aligned
// region advised for huge pages, in call order; a view another owner packed is shared, a
// repeated view is packed once, an unpackable one is skipped; the results are the reference's.
TEST_P(RepackTest, AddAllPacksIntoOneHugePageRegion) {
  const GgmlType type = GetParam();
  if (simd_isas_here().empty()) GTEST_SKIP() << "no SIMD ISA on this machine";
  IsaGuard guard;
  ASSERT_TRUE(set_cpu_isa_for_testing(simd_isas_here().front()));
  std::mt19937 rng(19);
  Weights a = make_weights(type, 512, 40, 0, 0, rng);
  Weights b = make_weights(type, 256, 16, 3, 1, rng);
  Weights shared = make_weights(type, 256, 24, 0, 0, rng);
  Weights small = make_weights(type, 256, 7, 0, 0, rng);  // fewer than 8 rows: not packable
  RepackedWeights other;
  ASSERT_TRUE(other.add(shared.view));
  const uint64_t shared_bytes = other.bytes();
  const uint8_t* shared_copy = kernels::find_packed(shared.view)->data.get();
  {
    RepackedWeights packs;
    const std::vector<TensorView> views = {a.view, small.view, b.view, a.view, shared.view};
    EXPECT_EQ(packs.add_all(views), 4);  // a (twice), b, shared; not small
    EXPECT_EQ(packs.n_matrices(), 3);
    EXPECT_FALSE(matmul_uses_repacked(small.view));
    auto pa = kernels::find_packed(a.view);
    auto pb = kernels::find_packed(b.view);
    ASSERT_TRUE(pa && pb);
    const auto* region = pa->data.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(region) % kHugePageBytes, 0u);
    EXPECT_EQ(pb->data.get(), region + (pa->bytes() + 63) / 64 * 64);       // the next 64-byte slot
    EXPECT_EQ(kernels::find_packed(shared.view)->data.get(), shared_copy);  // not copied again
    const uint64_t own = pa->bytes() + pb->bytes();
    EXPECT_EQ(packs.bytes(), own + shared_bytes);
    if (huge_pages_enabled() && !transparent_huge_page_mode().empty()) {
      EXPECT_GE(packs.huge_advised_bytes(), own);
    }
    for (const Weights* w : {&a, &b, &shared, &small}) {
      check_matmul(*w, 3, 2, rng);
      check_matmul(*w, 1, 1, rng);
      if (HasFatalFailure()) return;
    }
  }
  // The region went with its owner; the other owner's copy stays.
  EXPECT_FALSE(matmul_uses_repacked(a.view));
  EXPECT_TRUE(matmul_uses_repacked(shared.view));
}

TEST_P(RepackTest, EnvironmentSwitchDisablesRepacking) {
  const GgmlType type = GetParam();
  if (simd_isas_here().empty()) GTEST_SKIP() << "no SIMD ISA on this machine";
  IsaGuard guard;
  ASSERT_TRUE(set_cpu_isa_for_testing(simd_isas_here().front()));
  std::mt19937 rng(17);
  Weights w = make_weights(type, 256, 16, 0, 0, rng);
  const testing::ScopedEnv env("POWER_REPACK");
  for (const char* off : {"0", "off", "false", "no"}) {
    env.set(off);
    EXPECT_FALSE(matmul_repack_enabled()) << off;
    RepackedWeights packs;
    EXPECT_FALSE(packs.add(w.view)) << off;
  }
  env.set("1");
  EXPECT_TRUE(matmul_repack_enabled());
}

TEST(RepackTypesTest, OnlyQ4_0Q8_0AndQ4_KHaveALayout) {
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F16,
                     GgmlType::F32}) {
    EXPECT_FALSE(matmul_repack_supported(t)) << ggml_type_info(t).name;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RepackTest,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return std::string(ggml_type_info(i.param).name);
                         });

// matmul_same_input (one activation quantization and one hand-off for several products of the
// same input) gives each product exactly what matmul gives it alone: packed Q4_0 / Q8_0 groups
// with tail rows, packed Q4_K next to unpacked Q6_K sharing Q8_K records, packed next to
// unpacked, and mixes that cannot share (different activation types), under every ISA incl.
// scalar, 1 and 2 threads.
TEST(MatmulSameInput, EachProductAsAlone) {
  std::vector<CpuIsa> isas = simd_isas_here();
  isas.push_back(CpuIsa::kScalar);
  std::mt19937 rng(21);
  const int64_t k = 256;
  Weights a = make_weights(GgmlType::Q4_0, k, 37, 0, 0, rng);
  Weights b = make_weights(GgmlType::Q4_0, k, 16, 0, 1, rng);
  Weights c = make_weights(GgmlType::Q8_0, k, 21, 2, 0, rng);
  Weights d = make_weights(GgmlType::Q4_K, k, 13, 0, 0, rng);
  Weights e = make_weights(GgmlType::Q6_K, k, 9, 0, 3, rng);
  // Packed copies exist only where a SIMD ISA runs (POWER_FORCE_ISA=scalar never packs):
  // add them under one, so the packed path is covered whatever ISA the run was started with.
  RepackedWeights packs;
  if (!simd_isas_here().empty()) {
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(simd_isas_here().front()));
    for (const Weights* w : {&a, &b, &c, &d}) ASSERT_TRUE(packs.add(w->view));
  }
  const std::vector<std::vector<const Weights*>> sets = {{&a, &b}, {&a, &b, &a}, {&c, &c}, {&d, &e},
                                                         {&a, &d}, {&a, &c},     {&e}};
  for (CpuIsa isa : isas) {
    IsaGuard guard;
    ASSERT_TRUE(set_cpu_isa_for_testing(isa));
    for (int threads : {1, 2}) {
      CpuContext ctx(threads, k, 64);
      for (int64_t tokens : {1, 3, 9, 40}) {  // 40: Q4_0's token-major tiles
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const int64_t ldx = k + 3;
        std::vector<float> x(static_cast<size_t>(ldx * tokens));
        for (float& v : x) v = nd(rng);
        for (const auto& set : sets) {
          SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " threads=" + std::to_string(threads) +
                       " tokens=" + std::to_string(tokens) +
                       " products=" + std::to_string(set.size()));
          std::vector<std::vector<float>> got(set.size()), want(set.size());
          std::vector<MatmulJob> jobs;
          for (size_t i = 0; i < set.size(); ++i) {
            const int64_t ldy = set[i]->rows + 2;
            got[i].assign(static_cast<size_t>(ldy * tokens), -7.0f);
            want[i] = got[i];
            matmul(ctx, set[i]->view, x.data(), ldx, tokens, want[i].data(), ldy);
            jobs.push_back({&set[i]->view, got[i].data(), ldy});
          }
          matmul_same_input(ctx, jobs, x.data(), ldx, tokens);
          for (size_t i = 0; i < set.size(); ++i) {
            for (size_t j = 0; j < got[i].size(); ++j) {
              ASSERT_EQ(got[i][j], want[i][j]) << "product " << i << " element " << j;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace power
