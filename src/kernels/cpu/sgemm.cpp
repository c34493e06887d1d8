// The kernels layer's float32 products (sgemm.h): the driver that splits a product over the
// pool, the portable block, the dot-product paths for few rows or columns, and the depthwise
// plane's dispatch and portable loop. The register tiles are sgemm_avx2.cpp / sgemm_avx512.cpp.
#include "kernels/cpu/sgemm.h"

#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/epilogue_impl.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sgemm_internal.h"

namespace power {

namespace {

// C[i, j0:j1] += sum_k A[i,k] * B[k, j0:j1] for rows [i0, i1). A, B, C row-major normal; with
// brows, B's row k starts at brows[k].
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void gemm_block_portable(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                         int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                         const float* const* brows) {
  auto brow = [&](int64_t k) { return brows ? brows[k] : B + k * ldb; };
  constexpr int64_t kTile = 256;
  constexpr int64_t kKTile = 256;
  for (int64_t jt = j0; jt < j1; jt += kTile) {
    int64_t je = std::min(j1, jt + kTile);
    for (int64_t kt = 0; kt < K; kt += kKTile) {
      int64_t ke = std::min(K, kt + kKTile);
      for (int64_t i = i0; i < i1; ++i) {
        float* c = C + i * ldc;
        const float* a = A + i * lda;
        int64_t k = kt;
        for (; k + 4 <= ke; k += 4) {
          float a0 = a[k], a1 = a[k + 1], a2 = a[k + 2], a3 = a[k + 3];
          const float *b0 = brow(k), *b1 = brow(k + 1), *b2 = brow(k + 2), *b3 = brow(k + 3);
          for (int64_t j = jt; j < je; ++j)
            c[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        }
        for (; k < ke; ++k) {
          float av = a[k];
          const float* b = brow(k);
          for (int64_t j = jt; j < je; ++j) c[j] += av * b[j];
        }
      }
    }
  }
}

void gemm_few_columns(ThreadPool* pool, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, int64_t ldb, bool trans_b, float* C,
                      int64_t ldc) {
  std::vector<float> bt;
  const float* cols[kSgemmDotColumns];
  if (trans_b) {  // B stored [N, K]: its rows are the columns
    for (int64_t j = 0; j < N; ++j) cols[j] = B + j * ldb;
  } else {
    bt.resize(static_cast<size_t>(N * K));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) bt[j * K + k] = B[k * ldb + j];
    for (int64_t j = 0; j < N; ++j) cols[j] = bt.data() + j * K;
  }
  gemm_dot_columns(pool, M, N, K, A, lda, cols, C, ldc);
}

// The portable depthwise plane (bias included): each kernel tap adds w * (a shifted input row)
// to the output row over the output columns whose input column is inside the image, so the
// inner loop has no bounds test (and is contiguous, hence vectorized, at stride 1).
void depthwise_plane_portable(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                              float* yout) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    float* __restrict yr = yout + oh * g.OW;
    std::fill(yr, yr + g.OW, bias);
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh * g.sh - g.pt + i * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      const float* __restrict xr = xin + ih * g.W;
      for (int64_t j = 0; j < g.kw; ++j) {
        const float wv = w[i * g.kw + j];
        const int64_t off = j * g.dw - g.pl;  // input column = ow * sw + off
        int64_t lo, hi;
        conv_index_range(off, g.sw, g.W, g.OW, lo, hi);
        if (g.sw == 1) {
          const float* __restrict xs = xr + off;
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xs[ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * g.sw + off];
        }
      }
    }
  }
}

bool depthwise_simd(const DepthwiseGeo& g) {
#if defined(POWER_KERNELS_X86)
  return g.kw <= kernels::kDepthwiseMaxKw && cpu_isa() != CpuIsa::kScalar;
#else
  (void)g;
  return false;
#endif
}

}  // namespace

// The register tiles of the active ISA: AVX-512 (12 x 32), AVX2 (6 x 16), both reading a
// contiguous copy of B's strip and giving the same bits; POWER_FORCE_ISA=scalar keeps the
// portable loop (which zeroes C first for `overwrite`, and applies `ep` in a pass after it: the
// bits the tiles store).
void gemm_block(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, bool overwrite,
                const TileEpilogue* ep, const float* const* brows) {
#if defined(POWER_KERNELS_X86)
  if (cpu_isa() == CpuIsa::kAvx512)
    return kernels::gemm_block_avx512(i0, i1, j0, j1, K, A, lda, B, ldb, C, ldc, overwrite, ep,
                                      brows);
  if (cpu_isa() != CpuIsa::kScalar)
    return kernels::gemm_block_avx2(i0, i1, j0, j1, K, A, lda, B, ldb, C, ldc, overwrite, ep,
                                    brows);
#endif
  if (overwrite)
    for (int64_t i = i0; i < i1; ++i) std::fill(C + i * ldc + j0, C + i * ldc + j1, 0.0f);
  gemm_block_portable(i0, i1, j0, j1, K, A, lda, B, ldb, C, ldc, brows);
  if (ep)
    for (int64_t i = i0; i < i1; ++i)
      apply_epilogue(*ep->steps, ep->bias ? ep->bias + i : nullptr, ep->c + i, C + i * ldc + j0,
                     j1 - j0);
}

// dot_f32_cols' 4-row x 2-column tiles load each row of B once per 4 rows of A.
void gemm_nt_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  constexpr int64_t kCols = 256;  // B rows per dot_f32_cols call
  const float* cols[kCols];
  float sums[4 * kCols];
  for (int64_t j0 = 0; j0 < N; j0 += kCols) {
    const int64_t nc = std::min(kCols, N - j0);
    for (int64_t j = 0; j < nc; ++j) cols[j] = B + (j0 + j) * ldb;
    if (!accumulate) {
      dot_f32_cols(A, M, lda, cols, nc, K, 1.0f, C + j0, ldc);
      continue;
    }
    for (int64_t i0 = 0; i0 < M; i0 += 4) {
      const int64_t nr = std::min<int64_t>(4, M - i0);
      dot_f32_cols(A + i0 * lda, nr, lda, cols, nc, K, 1.0f, sums, kCols);
      for (int64_t i = 0; i < nr; ++i)
        for (int64_t j = 0; j < nc; ++j) C[(i0 + i) * ldc + j0 + j] += sums[i * kCols + j];
    }
  }
}

void gemm_dot_columns(ThreadPool* pool, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* const* cols, float* C, int64_t ldc) {
  auto rows = [&](int64_t r0, int64_t r1) {
    dot_f32_cols(A + r0 * lda, r1 - r0, lda, cols, N, K, 1.0f, C + r0 * ldc, ldc);
  };
  const int threads = pool ? pool->size() : 1;
  if (threads <= 1 || static_cast<double>(M) * N * K < kSgemmMinParallelWork) return rows(0, M);
  pool->parallel_for(static_cast<size_t>(M), [&](size_t b, size_t e, int) {
    rows(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

void sgemm(ThreadPool* pool, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           bool trans_a, const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc,
           bool accumulate) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  const bool overwrite = !accumulate;
  if (trans_b && !trans_a && M <= 4) {  // a transpose of B would cost more than the product
    gemm_nt_rows(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    return;
  }
  if (N <= kSgemmDotColumns && !trans_a && !accumulate) {
    gemm_few_columns(pool, M, N, K, A, lda, B, ldb, trans_b, C, ldc);
    return;
  }
  std::vector<float> at, bt;
  if (trans_a) {  // A stored [K, M]
    at.resize(static_cast<size_t>(M * K));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < M; ++i) at[i * K + k] = A[k * lda + i];
    A = at.data();
    lda = K;
  }
  if (trans_b) {  // B stored [N, K]
    bt.resize(static_cast<size_t>(N * K));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) bt[k * N + j] = B[j * ldb + k];
    B = bt.data();
    ldb = N;
  }
  int threads = pool ? pool->size() : 1;
  double work = static_cast<double>(M) * N * K;
  if (threads <= 1 || work < kSgemmMinParallelWork) {
    gemm_block(0, M, 0, N, K, A, lda, B, ldb, C, ldc, overwrite);
    return;
  }
  if (N >= 64 * threads || N >= M) {
    int64_t chunk = ((N + threads - 1) / threads + 15) / 16 * 16;
    int64_t parts = (N + chunk - 1) / chunk;
    pool->parallel_for(static_cast<size_t>(parts), [&](size_t b, size_t e, int) {
      for (size_t p = b; p < e; ++p) {
        int64_t j0 = static_cast<int64_t>(p) * chunk, j1 = std::min(N, j0 + chunk);
        gemm_block(0, M, j0, j1, K, A, lda, B, ldb, C, ldc, overwrite);
      }
    });
  } else {
    pool->parallel_for(static_cast<size_t>(M), [&](size_t b, size_t e, int) {
      gemm_block(static_cast<int64_t>(b), static_cast<int64_t>(e), 0, N, K, A, lda, B, ldb, C, ldc,
                 overwrite);
    });
  }
}

void apply_epilogue(const std::vector<EpilogueStep>& steps, const float* bias, int64_t c, float* y,
                    int64_t n) {
#if defined(POWER_KERNELS_X86)
  if (cpu_isa() != CpuIsa::kScalar) return kernels::apply_epilogue_avx2(steps, bias, c, y, n);
#endif
  kernels::epilogue_block_loop(steps, bias, c, y, n);
}

int64_t depthwise_scratch_floats(const DepthwiseGeo& g) {
#if defined(POWER_KERNELS_X86)
  if (depthwise_simd(g)) return kernels::depthwise_scratch_floats_simd(g);
#endif
  return 0;
}

void depthwise_plane(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                     float* yout, float* scratch, const std::vector<EpilogueStep>* steps,
                     int64_t c) {
#if defined(POWER_KERNELS_X86)
  if (depthwise_simd(g)) {  // the steps in registers
    if (cpu_isa() == CpuIsa::kAvx512) {
      kernels::depthwise_plane_avx512(g, xin, w, bias, yout, scratch, steps, c);
    } else {
      kernels::depthwise_plane_avx2(g, xin, w, bias, yout, scratch, steps, c);
    }
    return;
  }
#endif
  depthwise_plane_portable(g, xin, w, bias, yout);
  if (steps && !steps->empty()) apply_epilogue(*steps, nullptr, c, yout, g.OH * g.OW);
}

}  // namespace power
