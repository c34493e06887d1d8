// AVX-512 SGEMM block and depthwise plane of the kernels layer (sgemm.h; compiled with
// -mavx512f; called only when the kernels layer's ISA choice, kernels/cpu/isa.h, is AVX-512).
//
// C[i0:i1, j0:j1] (+)= A[i0:i1, 0:K] * B[0:K, j0:j1], row-major, with the AVX2 block's structure
// (sgemm_avx2.cpp) in 512-bit registers: per K panel, a 32-column strip of B is copied
// contiguous (zero past the last column; each row's part four strips on is prefetched, as in
// the AVX2 block), then register tiles of up to 12 rows x 32 columns
// (24 accumulators; per k two loads of the strip, one broadcast of A per row, two FMAs per row)
// pass over it. Row blocks are balanced (16 rows go as 8 + 8, not 12 + 4). Each C element is the
// same chain of fused multiply-adds in ascending k as in the AVX2 block, so both give the same
// bits. On a CPU with full-width 512-bit FMA units (AMD Zen 5, Intel server cores) this is up to
// twice the AVX2 block's rate; docs/ONNX.md has the figures.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/sgemm_internal.h"
#include "kernels/cpu/tile_epilogue_impl.h"

namespace power::kernels {

namespace {

constexpr int64_t kRows = 12;
constexpr int64_t kCols = 32;
constexpr int64_t kPanel = 256;
constexpr int64_t kPrefetch = 4 * kCols;  // floats ahead of a strip row (512 bytes)

__mmask16 lanes(int64_t n) {  // lanes < n set (n clamped to 0..16)
  n = std::clamp<int64_t>(n, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1u);
}

// C[0:R, 0:n] (+)= a[0:R, 0:k1] * strip[0:k1, 0:32]; the strip's rows are 32 floats.
template <int R, bool kFull>
void tile(int64_t k1, const float* a, int64_t lda, const float* strip, float* c, int64_t ldc,
          int64_t n, bool load_c, const TileEpilogue* ep, int64_t row) {
  const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    if (!load_c) {
      acc[r][0] = _mm512_setzero_ps();
      acc[r][1] = _mm512_setzero_ps();
    } else if constexpr (kFull) {
      acc[r][0] = _mm512_loadu_ps(c + r * ldc);
      acc[r][1] = _mm512_loadu_ps(c + r * ldc + 16);
    } else {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
    }
  }
  for (int64_t k = 0; k < k1; ++k) {
    const __m512 b0 = _mm512_load_ps(strip + k * kCols);
    const __m512 b1 = _mm512_load_ps(strip + k * kCols + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  if (ep) tile_epilogue<Ops512, R>(*ep, row, acc);
  for (int r = 0; r < R; ++r) {
    if constexpr (kFull) {
      _mm512_storeu_ps(c + r * ldc, acc[r][0]);
      _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    } else {
      _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
      _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
    }
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t,
                        bool, const TileEpilogue*, int64_t);
template <bool kFull>
constexpr TileFn kTiles[kRows] = {tile<1, kFull>,  tile<2, kFull>,  tile<3, kFull>,
                                  tile<4, kFull>,  tile<5, kFull>,  tile<6, kFull>,
                                  tile<7, kFull>,  tile<8, kFull>,  tile<9, kFull>,
                                  tile<10, kFull>, tile<11, kFull>, tile<12, kFull>};

// NR output rows (`row_ld` apart in the scratch, `y_ld` apart in the output) by NB vectors of 16
// columns, all taps summed in registers in the AVX2 block's order (bias, then tap (i, j) in
// row-major order, one fused multiply-add each); the last vector stores the lanes of `tail`.
template <int NR, int NB>
void dw_block(const DepthwiseTaps& t, const float* x, int64_t row_ld, float bias, float* y,
              int64_t y_ld, __mmask16 tail) {
  __m512 acc[1][NR * NB];  // row r's vector b is acc[0][r * NB + b]: all one channel
  for (int v = 0; v < NR * NB; ++v) acc[0][v] = _mm512_set1_ps(bias);
  for (int64_t i = 0; i < t.kh; ++i) {
    const float* xr = x + i * t.row_step;
    for (int64_t j = 0; j < t.kw; ++j) {
      const __m512 wv = _mm512_set1_ps(t.w[i * t.kw + j]);
      const float* xj = xr + t.off[j];
      for (int r = 0; r < NR; ++r)
        for (int b = 0; b < NB; ++b)
          acc[0][r * NB + b] =
              _mm512_fmadd_ps(wv, _mm512_loadu_ps(xj + r * row_ld + b * 16), acc[0][r * NB + b]);
    }
  }
  if (t.steps) epilogue_regs<Ops512, 1, NR * NB>(*t.steps, nullptr, t.c, acc);
  for (int r = 0; r < NR; ++r) {
    for (int b = 0; b + 1 < NB; ++b) _mm512_storeu_ps(y + r * y_ld + b * 16, acc[0][r * NB + b]);
    _mm512_mask_storeu_ps(y + r * y_ld + (NB - 1) * 16, tail, acc[0][r * NB + NB - 1]);
  }
}

template <int NR>
void dw_block_rows(int nb, const DepthwiseTaps& t, const float* x, int64_t row_ld, float bias,
                   float* y, int64_t y_ld, __mmask16 tail) {
  switch (nb) {
    case 1:
      return dw_block<NR, 1>(t, x, row_ld, bias, y, y_ld, tail);
    case 2:
      return dw_block<NR, 2>(t, x, row_ld, bias, y, y_ld, tail);
    case 3:
      return dw_block<NR, 3>(t, x, row_ld, bias, y, y_ld, tail);
    default:
      return dw_block<NR, 4>(t, x, row_ld, bias, y, y_ld, tail);
  }
}

}  // namespace

void gemm_block_avx512(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                       bool overwrite, const TileEpilogue* ep, const float* const* brows) {
  alignas(64) float strip[kPanel * kCols];
  const int64_t M = i1 - i0;
  // Short products (small K) are bound by C's loads and stores: rows of C often lie a multiple
  // of 4 KiB apart (one L1 set), and 12 of them at once overflow the set, so those keep 6 rows.
  const int64_t max_rows = K < 64 ? 6 : kRows;
  const int64_t blocks = (M + max_rows - 1) / max_rows;
  const int64_t per = blocks > 0 ? (M + blocks - 1) / blocks : 0;  // balanced row blocks
  for (int64_t kt = 0; kt < K; kt += kPanel) {
    const int64_t ke = std::min(K, kt + kPanel);
    const bool load_c = !(overwrite && kt == 0);
    const TileEpilogue* last = ke == K ? ep : nullptr;  // the steps go on the final sums
    for (int64_t j = j0; j < j1; j += kCols) {
      const int64_t n = std::min(kCols, j1 - j);
      const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
      for (int64_t k = kt; k < ke; ++k) {
        const float* bk = (brows ? brows[k] : B + k * ldb) + j;
        _mm_prefetch(reinterpret_cast<const char*>(bk + kPrefetch), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(bk + kPrefetch + 16), _MM_HINT_T0);
        _mm512_store_ps(strip + (k - kt) * kCols, _mm512_maskz_loadu_ps(m0, bk));
        _mm512_store_ps(strip + (k - kt) * kCols + 16, _mm512_maskz_loadu_ps(m1, bk + 16));
      }
      for (int64_t i = i0; i < i1; i += per) {
        const int64_t rows = std::min(per, i1 - i);
        const TileFn fn = n == kCols ? kTiles<true>[rows - 1] : kTiles<false>[rows - 1];
        fn(ke - kt, A + i * lda + kt, lda, strip, C + i * ldc + j, ldc, n, load_c, last, i);
      }
    }
  }
}

void depthwise_plane_avx512(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                            float* yout, float* scratch, const std::vector<EpilogueStep>* steps,
                            int64_t c) {
  if (g.OH <= 0 || g.OW <= 0) return;
  const DepthwiseTaps taps = depthwise_prepare(g, xin, w, scratch, steps, c);
  const int64_t vecs = (g.OW + 15) / 16;  // vectors per output row, the last maybe partial
  for (int64_t oh = 0; oh < g.OH; oh += 2) {
    const float* top = scratch + oh * taps.out_row_step;
    float* yr = yout + oh * g.OW;
    for (int64_t v = 0; v < vecs; v += 4) {
      const int nb = static_cast<int>(std::min<int64_t>(4, vecs - v));
      const __mmask16 tail = lanes(g.OW - (v + nb - 1) * 16);
      if (oh + 1 < g.OH) {  // two output rows per pass: up to 8 accumulator chains
        dw_block_rows<2>(nb, taps, top + v * 16, taps.out_row_step, bias, yr + v * 16, g.OW, tail);
      } else {
        dw_block_rows<1>(nb, taps, top + v * 16, taps.out_row_step, bias, yr + v * 16, g.OW, tail);
      }
    }
  }
}

}  // namespace power::kernels
