// AVX-512 SGEMM block for the ONNX kernels (compiled with -mavx512f; called only when the kernels
// layer's ISA choice, kernels/cpu/isa.h, is AVX-512).
//
// C[i0:i1, j0:j1] (+)= A[i0:i1, 0:K] * B[0:K, j0:j1], row-major: the AVX2 block's loop order
// (sgemm_avx2.cpp) with 512-bit registers. A register tile is up to 12 rows x 32 columns (24
// accumulators, two loads of B and one broadcast of A per row and k), so C stays in registers
// for a whole K panel of 256. Column remainders use AVX-512 lane masks (no read past the row
// end). With `overwrite`, the first K panel stores its sums instead of adding them to C, so the
// caller need not zero C first.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "onnx/sgemm_avx2.h"

namespace power::onnx {

namespace {

constexpr int64_t kRows = 12;
constexpr int64_t kCols = 32;
constexpr int64_t kPanel = 256;

__mmask16 lanes(int64_t n) {  // lanes < n set (n clamped to 0..16)
  n = std::clamp<int64_t>(n, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1u);
}

template <int R>
void tile(int64_t k0, int64_t k1, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc, int64_t n, bool load_c) {
  const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
  __m512 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    if (load_c) {
      c0[r] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
      c1[r] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
    } else {
      c0[r] = _mm512_setzero_ps();
      c1[r] = _mm512_setzero_ps();
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, bk + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

using TileFn = void (*)(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                        int64_t, int64_t, bool);
constexpr TileFn kTiles[kRows] = {tile<1>, tile<2>, tile<3>, tile<4>,  tile<5>,  tile<6>,
                                  tile<7>, tile<8>, tile<9>, tile<10>, tile<11>, tile<12>};

}  // namespace

void gemm_block_avx512(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                       bool overwrite) {
  for (int64_t kt = 0; kt < K; kt += kPanel) {
    const int64_t ke = std::min(K, kt + kPanel);
    const bool load_c = !(overwrite && kt == 0);
    for (int64_t j = j0; j < j1; j += kCols) {
      const int64_t n = std::min(kCols, j1 - j);
      for (int64_t i = i0; i < i1; i += kRows) {
        const int64_t rows = std::min(kRows, i1 - i);
        kTiles[rows - 1](kt, ke, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, n, load_c);
      }
    }
  }
}

}  // namespace power::onnx
