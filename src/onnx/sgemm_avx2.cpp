// AVX2/FMA SGEMM block and depthwise convolution plane for the ONNX kernels (compiled with
// -mavx2 -mfma; called only when the kernels layer's ISA choice, kernels/cpu/isa.h, is AVX2 or
// better).
//
// C[i0:i1, j0:j1] += A[i0:i1, 0:K] * B[0:K, j0:j1], row-major. The product is computed in
// register tiles of up to 6 rows x 16 columns (12 accumulators): per k, two loads of B, one
// broadcast of A per row and two FMAs per row, so C stays in registers for a whole K panel.
// Loops: K panels of 256, then 16-column strips (each copied contiguous: a 256 x 16 strip of
// B is 16 KiB and stays in L1 while every row block of A passes over it), then 6-row blocks.
// Column remainders use masked loads/stores (no read past the row end). With `overwrite`, the first
// K panel stores its sums instead of adding them to C, so the caller need not zero C first.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "onnx/epilogue_impl.h"
#include "onnx/sgemm_avx2.h"

namespace power::onnx {

namespace {

constexpr int64_t kRows = 6;
constexpr int64_t kCols = 16;
constexpr int64_t kPanel = 256;

__m256i lane_mask(int64_t n) {  // lanes < n set (n clamped to 0..8)
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), idx);
}

template <int R, bool kFull>
void tile(int64_t k0, int64_t k1, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc, int64_t n, bool load_c) {
  const __m256i m0 = lane_mask(n), m1 = lane_mask(n - 8);
  __m256 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    if (!load_c) {
      c0[r] = _mm256_setzero_ps();
      c1[r] = _mm256_setzero_ps();
    } else if constexpr (kFull) {
      c0[r] = _mm256_loadu_ps(c + r * ldc);
      c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
    } else {
      c0[r] = _mm256_maskload_ps(c + r * ldc, m0);
      c1[r] = _mm256_maskload_ps(c + r * ldc + 8, m1);
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    __m256 b0, b1;
    if constexpr (kFull) {
      b0 = _mm256_loadu_ps(bk);
      b1 = _mm256_loadu_ps(bk + 8);
    } else {
      b0 = _mm256_maskload_ps(bk, m0);
      b1 = _mm256_maskload_ps(bk + 8, m1);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if constexpr (kFull) {
      _mm256_storeu_ps(c + r * ldc, c0[r]);
      _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
    } else {
      _mm256_maskstore_ps(c + r * ldc, m0, c0[r]);
      _mm256_maskstore_ps(c + r * ldc + 8, m1, c1[r]);
    }
  }
}

template <bool kFull>
void tile_rows(int64_t rows, int64_t k0, int64_t k1, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, int64_t n, bool load_c) {
  switch (rows) {
    case 1:
      return tile<1, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c);
    case 2:
      return tile<2, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c);
    case 3:
      return tile<3, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c);
    case 4:
      return tile<4, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c);
    case 5:
      return tile<5, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c);
    default:
      return tile<6, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c);
  }
}

}  // namespace

void gemm_block_avx2(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                     bool overwrite) {
  alignas(32) float strip[kPanel * kCols];
  for (int64_t kt = 0; kt < K; kt += kPanel) {
    const int64_t ke = std::min(K, kt + kPanel);
    const bool load_c = !(overwrite && kt == 0);
    for (int64_t j = j0; j < j1; j += kCols) {
      const int64_t n = std::min(kCols, j1 - j);
      // The panel's 16-column strip of B, copied contiguous (zero past column n): its rows lie
      // ldb apart in B, often a multiple of 4 KiB (one L1 set); the row tiles read it in order.
      const __m256i m0 = lane_mask(n), m1 = lane_mask(n - 8);
      for (int64_t k = kt; k < ke; ++k) {
        const float* bk = B + k * ldb + j;
        _mm256_store_ps(strip + (k - kt) * kCols, _mm256_maskload_ps(bk, m0));
        _mm256_store_ps(strip + (k - kt) * kCols + 8, _mm256_maskload_ps(bk + 8, m1));
      }
      for (int64_t i = i0; i < i1; i += kRows) {
        const int64_t rows = std::min(kRows, i1 - i);
        const float* a = A + i * lda + kt;
        float* c = C + i * ldc + j;
        if (n == kCols) {
          tile_rows<true>(rows, 0, ke - kt, a, lda, strip, kCols, c, ldc, n, load_c);
        } else {
          tile_rows<false>(rows, 0, ke - kt, a, lda, strip, kCols, c, ldc, n, load_c);
        }
      }
    }
  }
}

void apply_epilogue_avx2(const std::vector<FusedStep>& steps, const float* bias, int64_t c,
                         float* y, int64_t n) {
  epilogue_block_loop(steps, bias, c, y, n);
}

void depthwise_plane_avx2(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                          float* yout) {
  // Output columns [lo, hi) read only in-plane input columns for every tap j (ow + j*dw - pl).
  const int64_t last = (g.kw - 1) * g.dw - g.pl;
  const int64_t lo = std::min(g.OW, std::max<int64_t>(0, g.pl));
  const int64_t hi = std::max(lo, std::min(g.OW, g.W - last));
  const __m256 vb = _mm256_set1_ps(bias);
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    float* yr = yout + oh * g.OW;
    int64_t i0 = 0, i1 = g.kh;  // taps whose input row is inside the plane
    while (i0 < i1 && oh * g.sh - g.pt + i0 * g.dh < 0) ++i0;
    while (i1 > i0 && oh * g.sh - g.pt + (i1 - 1) * g.dh >= g.H) --i1;
    auto scalar = [&](int64_t ow) {
      float sum = bias;
      for (int64_t i = i0; i < i1; ++i) {
        const float* xr = xin + (oh * g.sh - g.pt + i * g.dh) * g.W;
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t col = ow + j * g.dw - g.pl;
          if (col >= 0 && col < g.W) sum += w[i * g.kw + j] * xr[col];
        }
      }
      yr[ow] = sum;
    };
    for (int64_t ow = 0; ow < lo; ++ow) scalar(ow);
    int64_t ow = lo;
    for (; ow + 32 <= hi; ow += 32) {
      __m256 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
      for (int64_t i = i0; i < i1; ++i) {
        const float* xr = xin + (oh * g.sh - g.pt + i * g.dh) * g.W + ow - g.pl;
        for (int64_t j = 0; j < g.kw; ++j) {
          const __m256 wv = _mm256_broadcast_ss(w + i * g.kw + j);
          const float* x = xr + j * g.dw;
          a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x), a0);
          a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 8), a1);
          a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 16), a2);
          a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 24), a3);
        }
      }
      _mm256_storeu_ps(yr + ow, a0);
      _mm256_storeu_ps(yr + ow + 8, a1);
      _mm256_storeu_ps(yr + ow + 16, a2);
      _mm256_storeu_ps(yr + ow + 24, a3);
    }
    for (; ow < hi; ow += 8) {
      const __m256i m = lane_mask(hi - ow);
      __m256 a = vb;
      for (int64_t i = i0; i < i1; ++i) {
        const float* xr = xin + (oh * g.sh - g.pt + i * g.dh) * g.W + ow - g.pl;
        for (int64_t j = 0; j < g.kw; ++j)
          a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + i * g.kw + j),
                              _mm256_maskload_ps(xr + j * g.dw, m), a);
      }
      _mm256_maskstore_ps(yr + ow, m, a);
    }
    for (ow = std::max(hi, lo); ow < g.OW; ++ow) scalar(ow);
  }
}

}  // namespace power::onnx
