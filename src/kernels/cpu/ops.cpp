#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/isa.h"
#include "tensor/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace power {

// AVX2 / F16C versions of the attention row operations, chosen at run time (this file is
// compiled for the baseline ISA). Each gives the portable loop's bits: the same fused
// multiply-add per lane (std::fma there, one rounding, as llama.cpp's FMA dot products round),
// the same final summation order, the same f16 rounding (round to nearest even; only a NaN's
// payload may differ, it stays a NaN).
namespace {

// The sigmoid's exponential, e^a for a <= 0, with the operations of the vector exp (exp8 below)
// one value at a time: a = n ln 2 + r (ln 2 in two parts, fused multiply-adds), a degree-7
// polynomial in r, times 2^n from its exponent bits; 0 below -87.3 (e^-87.3 is about 1.2e-38,
// the smallest normal float). Every step is one IEEE operation (std::fma where the vector code
// fuses), so the vector path gives these bits.
constexpr float kSigmoidExpLo = -87.3f;
float exp_nonpositive(float a) {
  if (!(a >= kSigmoidExpLo)) return 0.0f;
  const float n = std::nearbyint(a * 1.44269504088896341f);
  float r = std::fma(-n, 0.693359375f, a);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float r2 = r * r;
  const float r1 = r + 1.0f;
  p = std::fma(p, r2, r1);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // n in [-126, 0]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace

#if defined(__x86_64__)
namespace {

bool use_avx2_rows() {
  return cpu_isa() != CpuIsa::kScalar;  // kAvx2 or kAvx512: the CPU has AVX2 and F16C
}

// The row the dot / axpy functions stream against (b in dot, x in axpy): f32, or an F16
// cache row converted on the fly (F16C; every f16 is exactly an f32, so the products are the
// f32 function's on the converted row).
struct RowF32 {
  using T = float;
  __attribute__((target("avx2,f16c"))) static __m256 load8(const float* p, int64_t i) {
    return _mm256_loadu_ps(p + i);
  }
  static float load1(const float* p, int64_t i) { return p[i]; }
};
struct RowF16 {
  using T = uint8_t;
  __attribute__((target("avx2,f16c"))) static __m256 load8(const uint8_t* p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
  static float load1(const uint8_t* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return f16_to_f32(h);
  }
};

template <class B>
__attribute__((target("avx2,f16c,fma"))) float dot_avx2(const float* a, const typename B::T* b,
                                                        int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), B::load8(b, i), acc);
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  for (; i < n; ++i) s = std::fma(a[i], B::load1(b, i), s);
  return s;
}

template <class B>
__attribute__((target("avx2,f16c,fma"))) void axpy_avx2(float* y, float a, const typename B::T* x,
                                                        int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, B::load8(x, i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, B::load1(x, i), y[i]);
}

// Four rows of a against C (1 or 2) columns of b: 4 x C independent accumulation chains (one
// row's chain alone is latency-bound), each b row loaded (and converted) once per 4 rows, each
// a row once per C columns. Per (row, column) the lanes, their fold and the tail are
// dot_avx2's: hadd of two chains gives (l0+l1, l2+l3) of each per 128-bit half, a second hadd
// ((l0+l1)+(l2+l3)) per half, and low half + high half adds the two halves; the 4 x C results
// come out in one vector (rows by columns), scaled with one multiply.
#define POWER_UNROLL_ROWS _Pragma("GCC unroll 4")
template <class B, int C>
__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dot4_cols_finish_avx2(
    const __m256 (&acc)[4][C], const float* a, int64_t lda, const typename B::T* const* b,
    int64_t i, int64_t n, float scale, float* out, int64_t ldo);

template <class B, int C>
__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dot4_cols_avx2(
    const float* a, int64_t lda, const typename B::T* const* b, int64_t n, float scale, float* out,
    int64_t ldo) {
  static_assert(C == 1 || C == 2);
  __m256 acc[4][C];
  POWER_UNROLL_ROWS
  for (int r = 0; r < 4; ++r) {
    POWER_UNROLL_ROWS
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 vb[C];
    POWER_UNROLL_ROWS
    for (int c = 0; c < C; ++c) vb[c] = B::load8(b[c], i);
    POWER_UNROLL_ROWS
    for (int r = 0; r < 4; ++r) {
      const __m256 va = _mm256_loadu_ps(a + r * lda + i);
      POWER_UNROLL_ROWS
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(va, vb[c], acc[r][c]);
    }
  }
  dot4_cols_finish_avx2<B, C>(acc, a, lda, b, i, n, scale, out, ldo);
}

// The 4 x C chains' fold (elements [0, i) are in acc), the tail from element i, the scale.
template <class B, int C>
__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dot4_cols_finish_avx2(
    const __m256 (&acc)[4][C], const float* a, int64_t lda, const typename B::T* const* b,
    int64_t i, int64_t n, float scale, float* out, int64_t ldo) {
  alignas(32) float sum[8];
  if constexpr (C == 2) {
    // Chains in the order (r0c0, r0c1, r1c0, r1c1, ..): the result vector is that order too.
    const __m256 g1 =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[0][0], acc[0][1]), _mm256_hadd_ps(acc[1][0], acc[1][1]));
    const __m256 g2 =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[2][0], acc[2][1]), _mm256_hadd_ps(acc[3][0], acc[3][1]));
    const __m256 r =
        _mm256_add_ps(_mm256_permute2f128_ps(g1, g2, 0x20), _mm256_permute2f128_ps(g1, g2, 0x31));
    if (i == n) {
      const __m256 rs = _mm256_mul_ps(r, _mm256_set1_ps(scale));
      const __m128 lo = _mm256_castps256_ps128(rs), hi = _mm256_extractf128_ps(rs, 1);
      _mm_storel_pi(reinterpret_cast<__m64*>(out), lo);
      _mm_storeh_pi(reinterpret_cast<__m64*>(out + ldo), lo);
      _mm_storel_pi(reinterpret_cast<__m64*>(out + 2 * ldo), hi);
      _mm_storeh_pi(reinterpret_cast<__m64*>(out + 3 * ldo), hi);
      return;
    }
    _mm256_store_ps(sum, r);
  } else {
    const __m256 g =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[0][0], acc[1][0]), _mm256_hadd_ps(acc[2][0], acc[3][0]));
    const __m128 r = _mm_add_ps(_mm256_castps256_ps128(g), _mm256_extractf128_ps(g, 1));
    if (i == n) {
      alignas(16) float rs[4];
      _mm_store_ps(rs, _mm_mul_ps(r, _mm_set1_ps(scale)));
      for (int k = 0; k < 4; ++k) out[k * ldo] = rs[k];
      return;
    }
    _mm_store_ps(sum, r);
  }
  // A length that is not a multiple of 8: the rest element by element, then the scale.
  for (int k = 0; k < 4; ++k) {
    for (int c = 0; c < C; ++c) {
      float s = sum[k * C + c];
      for (int64_t t = i; t < n; ++t) s = std::fma(a[k * lda + t], B::load1(b[c], t), s);
      out[k * ldo + c] = s * scale;
    }
  }
}

// Four rows against four columns with AVX-512: each zmm holds two columns' 8 lanes (column c
// in the low half, c + 1 in the high half) against the row's 8 elements broadcast to both
// halves, so every (row, column) keeps dot_avx2's 8 chains and the halves are folded by
// dot4_cols_finish_avx2: the bits of the AVX2 tiles, with half the FMA instructions.
// (AVX-512F moves only: the 256-bit halves go in and out as f64x4, the same bits.)
__attribute__((target("avx512f,avx2"), always_inline)) inline __m512 halves512(__m256 lo,
                                                                               __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

template <class B>
__attribute__((target("avx512f,avx512vl,avx2,f16c,fma"))) void dot4x4_cols_avx512(
    const float* a, int64_t lda, const typename B::T* const* b, int64_t n, float scale, float* out,
    int64_t ldo) {
  __m512 acc[4][2];
  POWER_UNROLL_ROWS
  for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512 b01 = halves512(B::load8(b[0], i), B::load8(b[1], i));
    const __m512 b23 = halves512(B::load8(b[2], i), B::load8(b[3], i));
    POWER_UNROLL_ROWS
    for (int r = 0; r < 4; ++r) {
      const __m512 va = _mm512_castpd_ps(
          _mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(a + r * lda + i))));
      acc[r][0] = _mm512_fmadd_ps(va, b01, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(va, b23, acc[r][1]);
    }
  }
  for (int p = 0; p < 2; ++p) {
    __m256 half[4][2];
    POWER_UNROLL_ROWS
    for (int r = 0; r < 4; ++r) {
      half[r][0] = _mm512_castps512_ps256(acc[r][p]);
      half[r][1] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][p]), 1));
    }
    dot4_cols_finish_avx2<B, 2>(half, a, lda, b + 2 * p, i, n, scale, out + 2 * p, ldo);
  }
}

template <class B>
__attribute__((target("avx2,f16c,fma"))) void dot_cols_avx2(const float* a, int64_t rows,
                                                            int64_t lda,
                                                            const typename B::T* const* b,
                                                            int64_t cols, int64_t n, float scale,
                                                            float* out, int64_t ldo) {
  const bool avx512 = cpu_isa() == CpuIsa::kAvx512;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* ar = a + r * lda;
    float* o = out + r * ldo;
    int64_t c = 0;
    if (avx512)
      for (; c + 4 <= cols; c += 4) dot4x4_cols_avx512<B>(ar, lda, b + c, n, scale, o + c, ldo);
    for (; c + 2 <= cols; c += 2) dot4_cols_avx2<B, 2>(ar, lda, b + c, n, scale, o + c, ldo);
    if (c < cols) dot4_cols_avx2<B, 1>(ar, lda, b + c, n, scale, o + c, ldo);
  }
  for (; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r * ldo + c] = dot_avx2<B>(a + r * lda, b[c], n) * scale;
  }
}

// R rows of y (R <= 4) times V vectors of 8 elements from element i on, held in registers
// while every column adds its term: per element the multiply and add of axpy_avx2, in
// ascending c.
template <class B, int R, int V>
__attribute__((target("avx2,f16c,fma"))) void axpy_block_avx2(float* y, int64_t ldy, const float* w,
                                                              int64_t ldw,
                                                              const typename B::T* const* x,
                                                              int64_t cols, int64_t i) {
  __m256 acc[R][V];
  POWER_UNROLL_ROWS
  for (int r = 0; r < R; ++r) {
    POWER_UNROLL_ROWS
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_loadu_ps(y + r * ldy + i + 8 * v);
  }
  for (int64_t c = 0; c < cols; ++c) {
    __m256 vx[V];
    POWER_UNROLL_ROWS
    for (int v = 0; v < V; ++v) vx[v] = B::load8(x[c], i + 8 * v);
    POWER_UNROLL_ROWS
    for (int r = 0; r < R; ++r) {
      const __m256 vw = _mm256_set1_ps(w[r * ldw + c]);
      POWER_UNROLL_ROWS
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(vw, vx[v], acc[r][v]);
    }
  }
  POWER_UNROLL_ROWS
  for (int r = 0; r < R; ++r) {
    POWER_UNROLL_ROWS
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + r * ldy + i + 8 * v, acc[r][v]);
  }
}

template <class B, int R>
void axpy_rows_cols_avx2(float* y, int64_t ldy, const float* w, int64_t ldw,
                         const typename B::T* const* x, int64_t cols, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) axpy_block_avx2<B, R, 2>(y, ldy, w, ldw, x, cols, i);
  if (i + 8 <= n) {
    axpy_block_avx2<B, R, 1>(y, ldy, w, ldw, x, cols, i);
    i += 8;
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t t = i; t < n; ++t) {
      float s = y[r * ldy + t];
      for (int64_t c = 0; c < cols; ++c) s = std::fma(w[r * ldw + c], B::load1(x[c], t), s);
      y[r * ldy + t] = s;
    }
  }
}
#undef POWER_UNROLL_ROWS

template <class B>
void axpy_cols_avx2(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                    const typename B::T* const* x, int64_t cols, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    axpy_rows_cols_avx2<B, 4>(y + r * ldy, ldy, w + r * ldw, ldw, x, cols, n);
  }
  for (; r < rows; ++r) axpy_rows_cols_avx2<B, 1>(y + r * ldy, ldy, w + r * ldw, ldw, x, cols, n);
}

// exp of 8 floats: 2^n * e^r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2 split in two
// constants so that x - n ln 2 is exact to float precision), e^r by Cephes expf's degree-7
// polynomial; about 1-2 ulp from the correctly rounded value (OpsSimd.SwigluIsSiluTimesUp
// checks it against double precision). Inputs are clamped to [-87.3, 88] so 2^n stays a normal
// float: exp of larger inputs returns exp(88) ~ 1.7e38 instead of up to 3.4e38 / infinity, of
// smaller ones exp(-87.3) ~ 1.2e-38 instead of a subnormal or 0; SwiGLU divides by 1 + that,
// which changes its result by less than 1e-36 absolute there.
__attribute__((target("avx2,fma"))) __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// ssm_scan_step's AVX2 path: per channel, n / 8 vectors of state; the products with cc are
// summed in 8 lanes, then the lanes in a fixed order.
__attribute__((target("avx2,fma"))) void ssm_scan_step_avx2(float* h, const float* a,
                                                            const float* b, const float* cc,
                                                            const float* dt, const float* x,
                                                            int64_t n_ch, int64_t n, float* y) {
  for (int64_t c = 0; c < n_ch; ++c) {
    const float dv = dt[c];
    const float dt_soft = dv <= 20.0f ? std::log1p(std::exp(dv)) : dv;
    const __m256 vdt = _mm256_set1_ps(dt_soft), vxdt = _mm256_set1_ps(x[c] * dt_soft);
    float* hc = h + c * n;
    const float* ac = a + c * n;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k += 8) {
      const __m256 e = exp8(_mm256_mul_ps(vdt, _mm256_loadu_ps(ac + k)));
      const __m256 v =
          _mm256_fmadd_ps(_mm256_loadu_ps(hc + k), e, _mm256_mul_ps(_mm256_loadu_ps(b + k), vxdt));
      _mm256_storeu_ps(hc + k, v);
      acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(cc + k), acc);
    }
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    y[c] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
}

// gate = gate / (1 + exp(-gate)) * up, 8 at a time; the last n % 8 values go through the same
// vector code with masked loads and stores, so a value's result does not depend on where in
// the row it sits.
__attribute__((target("avx2,fma"))) __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
  return _mm256_mul_ps(_mm256_div_ps(g, d), u);
}

__attribute__((target("avx2,fma"))) void swiglu_avx2(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(gate + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(
        gate + i, mask,
        swiglu8(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask)));
  }
}

// softmax with the vector exp: the max over 8 lanes (a NaN never wins, as with the portable
// compare), exp8(x - max) with inputs below exp8's clamp (-87.3) giving 0 as the float exp
// underflows (it would give up to 1.2e-38 otherwise) and NaN inputs staying NaN, the
// exponentials summed in double (8 partial sums, folded in a fixed order), one multiply by the
// inverse. The last n % 8 values go through the same vector code under a mask, so a value's
// exponential does not depend on where in the row it sits.
__attribute__((target("avx2,fma"))) __m256 softmax_exp8(__m256 d) {
  __m256 e = exp8(d);
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(),
                       _mm256_cmp_ps(d, _mm256_set1_ps(-87.3f), _CMP_LT_OQ));
  return _mm256_blendv_ps(e, d, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
}

__attribute__((target("avx2,fma"))) void softmax_avx2(float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(_mm256_loadu_ps(x + i), vmax);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float max = -INFINITY;
  for (float v : lanes) max = v > max ? v : max;
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  const __m256 vm = _mm256_set1_ps(max);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  if (i < n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 e = softmax_exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), vm));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double part[4];
  _mm256_store_pd(part, _mm256_add_pd(s0, s1));
  const double sum = (part[0] + part[2]) + (part[1] + part[3]);
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
  for (; i < n; ++i) x[i] *= inv;
}

// sigmoid1 on 8 lanes with the same operations (exp8 is exp_nonpositive's vector form): e =
// e^-|x| (0 below -87.3), 1 / (1 + e) where x >= 0, e / (1 + e) below, NaN lanes kept.
__attribute__((target("avx2,fma"))) __m256 sigmoid8(__m256 x) {
  const __m256 a = _mm256_or_ps(x, _mm256_set1_ps(-0.0f));  // -|x|
  // exp8 clamps to [-87.3, 88] and runs exp_nonpositive's operations on a >= -87.3.
  const __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(a, _mm256_set1_ps(kSigmoidExpLo), _CMP_NGE_UQ),
                                    exp8(a));  // below: 0
  const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
  const __m256 y = _mm256_blendv_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d), _mm256_div_ps(e, d),
                                    _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

__attribute__((target("avx2,fma"))) void sigmoid_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, sigmoid8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = sigmoid1(x[i]);  // the same bits, one at a time
}

// 8 values per compare against the best so far; only a block holding a larger value is walked
// one by one (in order, with the running best, exactly as the portable loop), which happens
// about log(n) times on logits. _CMP_GT_OQ is false for NaN on either side, as `>` is.
__attribute__((target("avx2"))) int64_t argmax_f32_avx2(const float* x, int64_t n) {
  int64_t best = 0;
  float bv = x[0];
  int64_t i = 1;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(bv), _CMP_GT_OQ)) == 0) continue;
    for (int64_t j = i; j < i + 8; ++j) {
      if (x[j] > bv) {
        bv = x[j];
        best = j;
      }
    }
  }
  for (; i < n; ++i) {
    if (x[i] > bv) {
      bv = x[i];
      best = i;
    }
  }
  return best;
}

__attribute__((target("avx,f16c"))) void round_to_f16_f16c(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

}  // namespace
#endif

namespace {
// Sum of x[i]^2 in double: 8 partial sums (element i into sum i % 8 over the blocks of 8),
// folded ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), then the tail in order. A float's square is exact
// in double, so the AVX2 path's fused multiply-add gives the portable loop's bits; the 8 chains
// replace one chain of dependent double adds (4 cycles each) per element.
double sum_squares_portable(const float* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) double sum_squares_avx2(const float* x, int64_t n) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    lo = _mm256_fmadd_pd(a, a, lo);
    hi = _mm256_fmadd_pd(b, b, hi);
  }
  alignas(32) double acc[8];
  _mm256_store_pd(acc, lo);
  _mm256_store_pd(acc + 4, hi);
  double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}
#endif
}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
#if defined(__x86_64__)
  const double sum = use_avx2_rows() ? sum_squares_avx2(x, n) : sum_squares_portable(x, n);
#else
  const double sum = sum_squares_portable(x, n);
#endif
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

namespace {

// cos and sin of theta_i for one position, i < n_rot / 2.
void rope_angles(int64_t pos, const RopeParams& p, float* cs, float* sn) {
  const int half = p.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    double theta = static_cast<double>(pos) * p.freq_scale *
                   std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
    if (p.freq_factors != nullptr) theta /= p.freq_factors[i];
    cs[i] = static_cast<float>(std::cos(theta));
    sn[i] = static_cast<float>(std::sin(theta));
  }
}

void rope_rotate(float* head, const RopeParams& p, const float* cs, const float* sn) {
  const int half = p.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int a = p.kind == RopeKind::kNorm ? 2 * i : i;
    const int b = p.kind == RopeKind::kNorm ? 2 * i + 1 : i + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cs[i] - x1 * sn[i];
    head[b] = x0 * sn[i] + x1 * cs[i];
  }
}

}  // namespace

void rope_apply(float* head, int64_t pos, const RopeParams& p) {
  rope_apply_heads(head, 1, 0, pos, p);
}

void rope_apply_heads(float* x, int64_t n_heads, int64_t head_stride, int64_t pos,
                      const RopeParams& p) {
  constexpr int kStack = 256;  // n_rot / 2 up to 256 (head_dim 512) without an allocation
  const int half = p.n_rot / 2;
  float stack[2 * kStack];
  std::vector<float> heap;
  float* cs = stack;
  if (half > kStack) {
    heap.resize(2 * static_cast<size_t>(half));
    cs = heap.data();
  }
  float* sn = cs + (half > kStack ? half : kStack);
  rope_angles(pos, p, cs, sn);
  for (int64_t h = 0; h < n_heads; ++h) rope_rotate(x + h * head_stride, p, cs, sn);
}

float sigmoid1(float x) {
  if (std::isnan(x)) return x;
  const float e = exp_nonpositive(-std::fabs(x));
  const float d = 1.0f + e;
  return x >= 0 ? 1.0f / d : e / d;
}

void sigmoid(const float* x, float* y, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    sigmoid_avx2(x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid1(x[i]);
}

void softmax(float* x, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    softmax_avx2(x, n);
    return;
  }
#endif
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void ssm_scan_step(float* h, const float* a, const float* b, const float* cc, const float* dt,
                   const float* x, int64_t n_ch, int64_t n, float* y) {
#if defined(__x86_64__)
  if (use_avx2_rows() && n % 8 == 0) {
    ssm_scan_step_avx2(h, a, b, cc, dt, x, n_ch, n, y);
    return;
  }
#endif
  for (int64_t c = 0; c < n_ch; ++c) {
    const float dv = dt[c];
    const float dt_soft = dv <= 20.0f ? std::log1p(std::exp(dv)) : dv;
    const float x_dt = x[c] * dt_soft;
    float* hc = h + c * n;
    const float* ac = a + c * n;
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      const float v = hc[k] * std::exp(dt_soft * ac[k]) + b[k] * x_dt;
      sum += v * cc[k];
      hc[k] = v;
    }
    y[c] = sum;
  }
}

void swiglu(float* gate, const float* up, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    swiglu_avx2(gate, up, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void axpy_f32(float* __restrict y, float a, const float* __restrict x, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    axpy_avx2<RowF32>(y, a, x, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float dot_f32(const float* a, const float* b, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) return dot_avx2<RowF32>(a, b, n);
#endif
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] = std::fma(a[i + j], b[i + j], acc[j]);
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

namespace {

// A cache row as f32 for the portable path: an f32 row as it is, an F16 row converted into a
// per-thread buffer valid until the thread's next call.
const float* row_as_f32(const float* row, int64_t) {
  return row;
}
const float* row_as_f32(const uint8_t* h, int64_t n) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(n));
  f16_to_f32_row(h, row.data(), n);
  return row.data();
}

// The row-by-column products for f32 (T = float) or F16 (T = uint8_t) cache rows: the AVX2
// tiles when the CPU has them, else one dot_f32 / axpy_f32 per (row, column).
template <typename T>
void dot_cols(const float* a, int64_t rows, int64_t lda, const T* const* b, int64_t cols, int64_t n,
              float scale, float* out, int64_t ldo) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    dot_cols_avx2<std::conditional_t<std::is_same_v<T, float>, RowF32, RowF16>>(
        a, rows, lda, b, cols, n, scale, out, ldo);
    return;
  }
#endif
  for (int64_t c = 0; c < cols; ++c) {
    const float* row = row_as_f32(b[c], n);
    for (int64_t r = 0; r < rows; ++r) out[r * ldo + c] = dot_f32(a + r * lda, row, n) * scale;
  }
}

template <typename T>
void axpy_cols(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw, const T* const* x,
               int64_t cols, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    axpy_cols_avx2<std::conditional_t<std::is_same_v<T, float>, RowF32, RowF16>>(y, rows, ldy, w,
                                                                                 ldw, x, cols, n);
    return;
  }
#endif
  for (int64_t c = 0; c < cols; ++c) {
    const float* row = row_as_f32(x[c], n);
    for (int64_t r = 0; r < rows; ++r) axpy_f32(y + r * ldy, w[r * ldw + c], row, n);
  }
}

}  // namespace

void dot_f32_cols(const float* a, int64_t rows, int64_t lda, const float* const* b, int64_t cols,
                  int64_t n, float scale, float* out, int64_t ldo) {
  dot_cols(a, rows, lda, b, cols, n, scale, out, ldo);
}

void dot_f16_cols(const float* a, int64_t rows, int64_t lda, const uint8_t* const* b, int64_t cols,
                  int64_t n, float scale, float* out, int64_t ldo) {
  dot_cols(a, rows, lda, b, cols, n, scale, out, ldo);
}

void axpy_f32_cols(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                   const float* const* x, int64_t cols, int64_t n) {
  axpy_cols(y, rows, ldy, w, ldw, x, cols, n);
}

void axpy_f16_cols(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                   const uint8_t* const* x, int64_t cols, int64_t n) {
  axpy_cols(y, rows, ldy, w, ldw, x, cols, n);
}

void round_to_f16(float* x, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    round_to_f16_f16c(x, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

int64_t argmax_f32(const float* x, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) return argmax_f32_avx2(x, n);
#endif
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace power
