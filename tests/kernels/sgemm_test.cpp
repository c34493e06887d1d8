// power::sgemm (kernels/cpu/sgemm.h) under every ISA this CPU has (POWER_FORCE_ISA's choices): odd
// shapes (rows not a multiple of the 6-row tile, columns not a multiple of 16, K across the 256
// panel), both transpose flags, accumulate and overwrite, strided leading dimensions — against a
// float64 reference. Tolerance: each output is a K-term float sum; |error| <= K * 2^-23 * sum|a*b|
// bounds any summation order (the tiles reorder it), times 2 for the f32 products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/sgemm.h"

namespace power {
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

TEST(KernelsSgemm, MatchesFloat64ReferenceUnderEveryIsa) {
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
TEST(KernelsSgemm, ThreadsSplitWithoutChangingBits) {
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
TEST(KernelsSgemm, Avx2AndAvx512TilesGiveTheSameBits) {
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

// depthwise_plane, the public entry the ONNX Conv calls, under every ISA: the plane against a
// float64 reference of the same taps (zero padding), then a per-channel Mul and a Relu applied
// by the kernel (kernel widths up to 64 run in registers, a 65-wide one on the portable loop on
// every ISA), and the AVX2 and AVX-512 planes against each other bit for bit.
TEST(KernelsSgemm, DepthwisePlaneMatchesFloat64ReferenceUnderEveryIsa) {
  struct Case {
    int64_t H, W, k, s, d, pad;
  };
  const Case cases[] = {{9, 70, 3, 1, 1, 1},
                        {7, 131, 5, 2, 1, 2},
                        {6, 100, 3, 3, 1, 1},
                        {5, 17, 3, 1, 2, 2},
                        {1, 200, 65, 1, 1, 32}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<EpilogueStep> steps(2);
  steps[0].kind = EpilogueStep::kMul;
  steps[0].channel = {0.5f, -2.0f, 1.5f};
  steps[1].kind = EpilogueStep::kRelu;
  const CpuIsa saved = cpu_isa();
  for (const Case& cs : cases) {
    const int64_t kh = cs.H == 1 ? 1 : cs.k, ph = cs.H == 1 ? 0 : cs.pad;
    const int64_t OH = (cs.H + 2 * ph - cs.d * (kh - 1) - 1) / cs.s + 1;
    const int64_t OW = (cs.W + 2 * cs.pad - cs.d * (cs.k - 1) - 1) / cs.s + 1;
    const DepthwiseGeo g{cs.H, cs.W, OH, OW, kh, cs.k, cs.s, cs.s, cs.d, cs.d, ph, cs.pad};
    std::vector<float> x(cs.H * cs.W), w(kh * cs.k);
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = u(rng);
    std::vector<std::vector<float>> simd_planes;
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!set_cpu_isa_for_testing(isa)) continue;
      SCOPED_TRACE(::testing::Message() << cpu_isa_name(isa) << " " << cs.H << "x" << cs.W << " k"
                                        << cs.k << " s" << cs.s << " d" << cs.d);
      std::vector<float> scratch(static_cast<size_t>(depthwise_scratch_floats(g)));
      std::vector<float> y(OH * OW, 7.0f);
      depthwise_plane(g, x.data(), w.data(), 0.25f, y.data(),
                      scratch.empty() ? nullptr : scratch.data(), &steps, 1);
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          double ref = 0.25, mag = 0.25;
          for (int64_t i = 0; i < kh; ++i) {
            for (int64_t j = 0; j < cs.k; ++j) {
              const int64_t ih = oh * cs.s - ph + i * cs.d, iw = ow * cs.s - cs.pad + j * cs.d;
              if (ih < 0 || ih >= cs.H || iw < 0 || iw >= cs.W) continue;
              const double t = static_cast<double>(w[i * cs.k + j]) * x[ih * cs.W + iw];
              ref += t;
              mag += std::fabs(t);
            }
          }
          ref = std::max(0.0, ref * -2.0);  // channel 1's Mul, then the Relu
          const double tol =
              2.0 * static_cast<double>(kh * cs.k + 1) * std::ldexp(1.0, -23) * mag * 2.0;
          ASSERT_NEAR(y[oh * OW + ow], ref, tol) << "at (" << oh << "," << ow << ")";
        }
      }
      if (isa != CpuIsa::kScalar) simd_planes.push_back(y);
    }
    if (simd_planes.size() == 2) {
      EXPECT_EQ(0, std::memcmp(simd_planes[0].data(), simd_planes[1].data(),
                               simd_planes[0].size() * sizeof(float)))
          << "AVX2 and AVX-512 planes differ";
    }
  }
  set_cpu_isa_for_testing(saved);
}

}  // namespace
}  // namespace power
