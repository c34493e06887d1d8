// AVX2/FMA SGEMM block and depthwise convolution plane of the kernels layer (sgemm.h; compiled with
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

#include "kernels/cpu/epilogue_impl.h"
#include "kernels/cpu/sgemm_internal.h"
#include "kernels/cpu/tile_epilogue_impl.h"

namespace power::kernels {

namespace {

constexpr int64_t kRows = 6;
constexpr int64_t kCols = 16;
constexpr int64_t kPanel = 256;
constexpr int64_t kPrefetch = 8 * kCols;  // floats ahead of a strip row (512 bytes)

__m256i lane_mask(int64_t n) {  // lanes < n set (n clamped to 0..8)
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))), idx);
}

template <int R, bool kFull>
void tile(int64_t k0, int64_t k1, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc, int64_t n, bool load_c, const TileEpilogue* ep, int64_t row) {
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
  // Row by row: with 16 vector registers, the step-by-step form over all rows (the AVX-512
  // tile's) makes the compiler keep the accumulators in memory through the k loop.
  if (ep)
    for (int r = 0; r < R; ++r) {
      __m256 t[1][2] = {{c0[r], c1[r]}};
      tile_epilogue<Ops256, 1>(*ep, row + r, t);
      c0[r] = t[0][0];
      c1[r] = t[0][1];
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
               int64_t ldb, float* c, int64_t ldc, int64_t n, bool load_c, const TileEpilogue* ep,
               int64_t row) {
  switch (rows) {
    case 1:
      return tile<1, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c, ep, row);
    case 2:
      return tile<2, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c, ep, row);
    case 3:
      return tile<3, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c, ep, row);
    case 4:
      return tile<4, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c, ep, row);
    case 5:
      return tile<5, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c, ep, row);
    default:
      return tile<6, kFull>(k0, k1, a, lda, b, ldb, c, ldc, n, load_c, ep, row);
  }
}

}  // namespace

void gemm_block_avx2(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                     bool overwrite, const TileEpilogue* ep, const float* const* brows) {
  alignas(32) float strip[kPanel * kCols];
  for (int64_t kt = 0; kt < K; kt += kPanel) {
    const int64_t ke = std::min(K, kt + kPanel);
    const bool load_c = !(overwrite && kt == 0);
    const TileEpilogue* last = ke == K ? ep : nullptr;  // the steps go on the final sums
    for (int64_t j = j0; j < j1; j += kCols) {
      const int64_t n = std::min(kCols, j1 - j);
      // The panel's 16-column strip of B, copied contiguous (zero past column n): its rows lie
      // ldb apart in B, often a multiple of 4 KiB (one L1 set); the row tiles read it in order.
      // Each row's part of the strip eight strips on is prefetched: the rows are more streams
      // than the hardware prefetcher follows. (A prefetch past the row's end does not fault.)
      const __m256i m0 = lane_mask(n), m1 = lane_mask(n - 8);
      for (int64_t k = kt; k < ke; ++k) {
        const float* bk = (brows ? brows[k] : B + k * ldb) + j;
        _mm_prefetch(reinterpret_cast<const char*>(bk + kPrefetch), _MM_HINT_T0);
        _mm256_store_ps(strip + (k - kt) * kCols, _mm256_maskload_ps(bk, m0));
        _mm256_store_ps(strip + (k - kt) * kCols + 8, _mm256_maskload_ps(bk + 8, m1));
      }
      for (int64_t i = i0; i < i1; i += kRows) {
        const int64_t rows = std::min(kRows, i1 - i);
        const float* a = A + i * lda + kt;
        float* c = C + i * ldc + j;
        if (n == kCols) {
          tile_rows<true>(rows, 0, ke - kt, a, lda, strip, kCols, c, ldc, n, load_c, last, i);
        } else {
          tile_rows<false>(rows, 0, ke - kt, a, lda, strip, kCols, c, ldc, n, load_c, last, i);
        }
      }
    }
  }
}

void apply_epilogue_avx2(const std::vector<EpilogueStep>& steps, const float* bias, int64_t c,
                         float* y, int64_t n) {
  epilogue_block_loop(steps, bias, c, y, n);
}

namespace {

// NR output rows (rows `row_ld` apart in the scratch, `y_ld` apart in the output) by NB vectors
// of 8 columns, all taps summed in registers; the last vector stores its first `last` lanes.
template <int NR, int NB>
void dw_block(const DepthwiseTaps& t, const float* x, int64_t row_ld, float bias, float* y,
              int64_t y_ld, int64_t last) {
  __m256 acc[1][NR * NB];  // row r's vector b is acc[0][r * NB + b]: all one channel
  for (int r = 0; r < NR; ++r)
    for (int b = 0; b < NB; ++b) acc[0][r * NB + b] = _mm256_set1_ps(bias);
  for (int64_t i = 0; i < t.kh; ++i) {
    const float* xr = x + i * t.row_step;
    for (int64_t j = 0; j < t.kw; ++j) {
      const __m256 wv = _mm256_broadcast_ss(t.w + i * t.kw + j);
      const float* xj = xr + t.off[j];
      for (int r = 0; r < NR; ++r)
        for (int b = 0; b < NB; ++b)
          acc[0][r * NB + b] =
              _mm256_fmadd_ps(wv, _mm256_loadu_ps(xj + r * row_ld + b * 8), acc[0][r * NB + b]);
    }
  }
  if (t.steps) epilogue_regs<Ops256, 1, NR * NB>(*t.steps, nullptr, t.c, acc);
  const __m256i tail = lane_mask(last);
  for (int r = 0; r < NR; ++r) {
    for (int b = 0; b + 1 < NB; ++b) _mm256_storeu_ps(y + r * y_ld + b * 8, acc[0][r * NB + b]);
    if (last == 8) {
      _mm256_storeu_ps(y + r * y_ld + (NB - 1) * 8, acc[0][r * NB + NB - 1]);
    } else {
      _mm256_maskstore_ps(y + r * y_ld + (NB - 1) * 8, tail, acc[0][r * NB + NB - 1]);
    }
  }
}

template <int NR>
void dw_block_rows(int nb, const DepthwiseTaps& t, const float* x, int64_t row_ld, float bias,
                   float* y, int64_t y_ld, int64_t last) {
  switch (nb) {
    case 1:
      return dw_block<NR, 1>(t, x, row_ld, bias, y, y_ld, last);
    case 2:
      return dw_block<NR, 2>(t, x, row_ld, bias, y, y_ld, last);
    case 3:
      return dw_block<NR, 3>(t, x, row_ld, bias, y, y_ld, last);
    default:
      return dw_block<NR, 4>(t, x, row_ld, bias, y, y_ld, last);
  }
}

void dw_block_dispatch(int rows, int nb, const DepthwiseTaps& t, const float* x, int64_t row_ld,
                       float bias, float* y, int64_t y_ld, int64_t last) {
  if (rows == 2) return dw_block_rows<2>(nb, t, x, row_ld, bias, y, y_ld, last);
  dw_block_rows<1>(nb, t, x, row_ld, bias, y, y_ld, last);
}

}  // namespace

namespace {

// The padded, phase-split scratch: `rows` padded input rows of sw phases, each `wq` floats;
// phase p, index q holds input column q * sw + p - pl of the row's input row (zero outside).
struct DepthwiseLayout {
  int64_t rows, wq;
};

DepthwiseLayout depthwise_layout(const DepthwiseGeo& g) {
  const int64_t ow_round = (g.OW + 15) / 16 * 16;  // the 16-column blocks read whole vectors
  const int64_t qmax = (g.kw - 1) * g.dw / g.sw;
  return {(g.OH - 1) * g.sh + (g.kh - 1) * g.dh + 1, ow_round + qmax};
}

}  // namespace

int64_t depthwise_scratch_floats_simd(const DepthwiseGeo& g) {
  if (g.OH <= 0 || g.OW <= 0) return 0;
  const DepthwiseLayout pp = depthwise_layout(g);
  return pp.rows * g.sw * pp.wq;
}

DepthwiseTaps depthwise_prepare(const DepthwiseGeo& g, const float* xin, const float* w,
                                float* scratch, const std::vector<EpilogueStep>* steps, int64_t c) {
  const DepthwiseLayout pp = depthwise_layout(g);
  const int64_t ld = g.sw * pp.wq;
  for (int64_t r = 0; r < pp.rows; ++r) {
    float* dst = scratch + r * ld;
    const int64_t ih = r - g.pt;
    if (ih < 0 || ih >= g.H) {
      std::fill(dst, dst + ld, 0.0f);
      continue;
    }
    const float* src = xin + ih * g.W;
    // Stride 2: indices q where both phases' columns (2q - pl, 2q + 1 - pl) lie in the row are
    // split 8 at a time from 16 loaded columns; the loop below does the rest.
    int64_t qa = 0, qb = 0;
    if (g.sw == 2) {
      qa = std::min((g.pl + 1) / 2, pp.wq);
      qb = qa;
      for (; qb + 8 <= pp.wq && 2 * qb - g.pl + 16 <= g.W; qb += 8) {
        const __m256 v0 = _mm256_loadu_ps(src + 2 * qb - g.pl);
        const __m256 v1 = _mm256_loadu_ps(src + 2 * qb - g.pl + 8);
        // shuffle_ps picks within 128-bit lanes: [a0 a2 b0 b2 | a4 a6 b4 b6]; the 64-bit
        // permute puts the pairs in order.
        const __m256d even = _mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0x88));
        const __m256d odd = _mm256_castps_pd(_mm256_shuffle_ps(v0, v1, 0xDD));
        _mm256_storeu_ps(dst + qb, _mm256_castpd_ps(_mm256_permute4x64_pd(even, 0xD8)));
        _mm256_storeu_ps(dst + pp.wq + qb, _mm256_castpd_ps(_mm256_permute4x64_pd(odd, 0xD8)));
      }
    }
    for (int64_t p = 0; p < g.sw; ++p) {
      float* ph = dst + p * pp.wq;
      // Indices q whose input column q * sw + p - pl lies in [0, W).
      const int64_t lo = std::clamp<int64_t>((g.pl - p + g.sw - 1) / g.sw, 0, pp.wq);
      const int64_t hi = std::clamp<int64_t>(
          g.W - 1 + g.pl - p >= 0 ? (g.W - 1 + g.pl - p) / g.sw + 1 : 0, lo, pp.wq);
      std::fill(ph, ph + lo, 0.0f);
      if (g.sw == 1) {
        std::copy(src + lo - g.pl, src + hi - g.pl, ph + lo);
      } else {  // [qa, qb) was split above (empty unless sw is 2)
        for (int64_t q = lo; q < std::min(qa, hi); ++q) ph[q] = src[q * g.sw + p - g.pl];
        for (int64_t q = std::max(qb, lo); q < hi; ++q) ph[q] = src[q * g.sw + p - g.pl];
      }
      std::fill(ph + hi, ph + pp.wq, 0.0f);
    }
  }
  // Tap (i, j) of output (oh, ow) reads row oh * sh + i * dh at phase (j * dw) % sw, index
  // ow + (j * dw) / sw.
  DepthwiseTaps t{w, {}, g.kh, g.kw, g.dh * ld, g.sh * ld, steps, c};
  for (int64_t j = 0; j < g.kw; ++j) t.off[j] = (j * g.dw) % g.sw * pp.wq + (j * g.dw) / g.sw;
  return t;
}

void depthwise_plane_avx2(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                          float* yout, float* scratch, const std::vector<EpilogueStep>* steps,
                          int64_t c) {
  if (g.OH <= 0 || g.OW <= 0) return;
  const DepthwiseTaps taps = depthwise_prepare(g, xin, w, scratch, steps, c);
  const int64_t full = g.OW / 8, rem = g.OW % 8;  // whole vectors per row; columns after them
  const int64_t vecs = full + (rem ? 1 : 0);
  for (int64_t oh = 0; oh < g.OH; oh += 2) {
    // Two output rows per pass when there are two: up to 8 independent accumulator chains.
    const int rows = oh + 1 < g.OH ? 2 : 1;
    const float* top = scratch + oh * taps.out_row_step;
    float* yr = yout + oh * g.OW;
    for (int64_t v = 0; v < vecs; v += 4) {
      const int nb = static_cast<int>(std::min<int64_t>(4, vecs - v));
      const int64_t last = v + nb == vecs && rem ? rem : 8;  // columns of the block's last vector
      dw_block_dispatch(rows, nb, taps, top + v * 8, taps.out_row_step, bias, yr + v * 8, g.OW,
                        last);
    }
  }
}

}  // namespace power::kernels
