// onnx::sgemm under every ISA this CPU has (POWER_FORCE_ISA's choices): odd shapes (rows not a
// multiple of the 6-row tile, columns not a multiple of 16, K across the 256 panel), both transpose
// flags, accumulate and overwrite, strided leading dimensions — against a float64 reference.
// Tolerance: each output is a K-term float sum; |error| <= K * 2^-23 * sum|a*b| bounds any
// summation order (the tiles reorder it), times 2 for the f32 products.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "onnx/ops.h"

namespace power::onnx {
namespace {

void check_shape(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool acc, std::mt19937& rng,
                 ThreadPool* pool = nullptr) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
  std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc);
  for (auto& v : A) v = u(rng);
  for (auto& v : B) v = u(rng);
  for (auto& v : C) v = u(rng);
  const std::vector<float> C0 = C;
  sgemm(pool, M, N, K, A.data(), lda, ta, B.data(), ldb, tb, C.data(), ldc, acc);
  if (pool) {  // the split changes which thread computes a block, never the bits
    std::vector<float> solo = C0;
    sgemm(nullptr, M, N, K, A.data(), lda, ta, B.data(), ldb, tb, solo.data(), ldc, acc);
    ASSERT_EQ(0, std::memcmp(solo.data(), C.data(), C.size() * sizeof(float)))
        << "M=" << M << " N=" << N << " K=" << K << ": threads changed the bits";
  }
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = acc ? C0[i * ldc + j] : 0.0, mag = std::fabs(ref);
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        ref += a * b;
        mag += std::fabs(a * b);
      }
      const double tol = 2.0 * static_cast<double>(K + 1) * std::ldexp(1.0, -23) * mag + 1e-30;
      ASSERT_NEAR(C[i * ldc + j], ref, tol)
          << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " acc=" << acc
          << " at (" << i << "," << j << ")";
    }
    for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << "pad written";
  }
}

TEST(OnnxSgemm, MatchesFloat64ReferenceUnderEveryIsa) {
  const CpuIsa saved = cpu_isa();
  int paths = 0;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!set_cpu_isa_for_testing(isa)) continue;
    ++paths;
    std::mt19937 rng(1234);
    for (int64_t M : {1, 5, 6, 7, 12, 13, 25, 37}) {
      for (int64_t N : {1, 2, 4, 7, 8, 9, 15, 16, 17, 32, 40, 65}) {
        for (int64_t K : {1, 3, 256, 300}) {
          for (int flags = 0; flags < 8; ++flags) {
            check_shape(M, N, K, flags & 1, flags & 2, flags & 4, rng);
            if (HasFatalFailure()) {
              set_cpu_isa_for_testing(saved);
              FAIL() << "isa " << cpu_isa_name(isa);
            }
          }
        }
      }
    }
  }
  set_cpu_isa_for_testing(saved);
  EXPECT_GE(paths, 1);
}

// With a pool: products large enough to split (rows, or column blocks) — including the
// few-column dot-product path (N <= 8: a short 1-D convolution) — give the float64 reference and
// the single-thread bits.
TEST(OnnxSgemm, ThreadsSplitWithoutChangingBits) {
  const CpuIsa saved = cpu_isa();
  ThreadPool pool(3);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!set_cpu_isa_for_testing(isa)) continue;
    std::mt19937 rng(99);
    // Each above sgemm's 1 Mi multiply-adds, below which it stays on the calling thread.
    const int64_t shapes[][3] = {{1024, 4, 512}, {2048, 1, 600}, {512, 8, 384},
                                 {40, 700, 96},  {300, 80, 64},  {7, 6000, 33}};
    for (const auto& s : shapes) {
      for (int flags = 0; flags < 8; ++flags) {
        check_shape(s[0], s[1], s[2], flags & 1, flags & 2, flags & 4, rng, &pool);
        if (HasFatalFailure()) {
          set_cpu_isa_for_testing(saved);
          FAIL() << "isa " << cpu_isa_name(isa);
        }
      }
    }
  }
  set_cpu_isa_for_testing(saved);
}

// The AVX2 (6 x 16) and AVX-512 (12 x 32) tiles compute each output as the same chain of fused
// multiply-adds in ascending k, so they agree bit for bit (the ISA a machine picks does not
// change a model's outputs). Skipped where the CPU lacks AVX-512.
TEST(OnnxSgemm, Avx2AndAvx512TilesGiveTheSameBits) {
  const CpuIsa saved = cpu_isa();
  if (!set_cpu_isa_for_testing(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t shapes[][3] = {{24, 700, 864}, {16, 333, 144}, {37, 65, 16}, {8, 100, 72},
                               {96, 40, 96},   {1, 17, 3},     {13, 31, 600}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    std::vector<float> A(M * K), B(K * N), C0(M * N);
    for (auto& v : A) v = u(rng);
    for (auto& v : B) v = u(rng);
    for (auto& v : C0) v = u(rng);
    for (bool acc : {false, true}) {
      std::vector<float> c512 = C0, c2 = C0;
      ASSERT_TRUE(set_cpu_isa_for_testing(CpuIsa::kAvx512));
      sgemm(nullptr, M, N, K, A.data(), K, false, B.data(), N, false, c512.data(), N, acc);
      ASSERT_TRUE(set_cpu_isa_for_testing(CpuIsa::kAvx2));
      sgemm(nullptr, M, N, K, A.data(), K, false, B.data(), N, false, c2.data(), N, acc);
      EXPECT_EQ(0, std::memcmp(c512.data(), c2.data(), c2.size() * sizeof(float)))
          << "M=" << M << " N=" << N << " K=" << K << " acc=" << acc;
    }
  }
  set_cpu_isa_for_testing(saved);
}

}  // namespace
}  // namespace power::onnx
