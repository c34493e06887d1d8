#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa.h"
#include "tensor/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace power {

// AVX2 / F16C versions of the attention row operations, chosen at run time (this file is
// compiled for the baseline ISA). Each gives the portable loop's bits: the same multiply then
// add per lane (no fused multiply-add), the same final summation order, the same f16 rounding
// (round to nearest even; only a NaN's payload may differ, it stays a NaN).
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
__attribute__((target("avx2,f16c"))) float dot_avx2(const float* a, const typename B::T* b,
                                                    int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), B::load8(b, i)));
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
  float s = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
  for (; i < n; ++i) s += a[i] * B::load1(b, i);
  return s;
}

template <class B>
__attribute__((target("avx2,f16c"))) void axpy_avx2(float* y, float a, const typename B::T* x,
                                                    int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, B::load8(x, i))));
  }
  for (; i < n; ++i) y[i] += a * B::load1(x, i);
}

// dot_avx2 for four rows of a against one b: four independent accumulation chains (one
// row's is latency-bound), each lane's arithmetic and the final order as dot_avx2's. The
// horizontal sums of the four rows are done together: high half + low half gives
// (l0+l4, l1+l5, l2+l6, l3+l7) per row, and two rounds of hadd then add neighbours in the
// order ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)).
template <class B>
__attribute__((target("avx2,f16c"))) void dot4_avx2(const float* a, int64_t lda,
                                                    const typename B::T* b, int64_t n, float* out,
                                                    int64_t ldo) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vb = B::load8(b, i);
    c0 = _mm256_add_ps(c0, _mm256_mul_ps(_mm256_loadu_ps(a + i), vb));
    c1 = _mm256_add_ps(c1, _mm256_mul_ps(_mm256_loadu_ps(a + lda + i), vb));
    c2 = _mm256_add_ps(c2, _mm256_mul_ps(_mm256_loadu_ps(a + 2 * lda + i), vb));
    c3 = _mm256_add_ps(c3, _mm256_mul_ps(_mm256_loadu_ps(a + 3 * lda + i), vb));
  }
#define POWER_FOLD(v) _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))
  const __m128 s01 = _mm_hadd_ps(POWER_FOLD(c0), POWER_FOLD(c1));  // (r0: 04+15, 26+37, r1..)
  const __m128 s23 = _mm_hadd_ps(POWER_FOLD(c2), POWER_FOLD(c3));
#undef POWER_FOLD
  alignas(16) float r[4];
  _mm_store_ps(r, _mm_hadd_ps(s01, s23));
  for (int k = 0; k < 4; ++k) {
    float s = r[k];
    for (int64_t t = i; t < n; ++t) s += a[k * lda + t] * B::load1(b, t);
    out[k * ldo] = s;
  }
}

// axpy_avx2 on four rows of y with one x: x is loaded (and converted) once per 8 elements.
template <class B>
__attribute__((target("avx2,f16c"))) void axpy4_avx2(float* y, int64_t ldy, const float* w,
                                                     int64_t ldw, const typename B::T* x,
                                                     int64_t n) {
  const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[ldw]);
  const __m256 w2 = _mm256_set1_ps(w[2 * ldw]), w3 = _mm256_set1_ps(w[3 * ldw]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vx = B::load8(x, i);
    float* y0 = y + i;
    _mm256_storeu_ps(y0, _mm256_add_ps(_mm256_loadu_ps(y0), _mm256_mul_ps(w0, vx)));
    _mm256_storeu_ps(y0 + ldy, _mm256_add_ps(_mm256_loadu_ps(y0 + ldy), _mm256_mul_ps(w1, vx)));
    _mm256_storeu_ps(y0 + 2 * ldy,
                     _mm256_add_ps(_mm256_loadu_ps(y0 + 2 * ldy), _mm256_mul_ps(w2, vx)));
    _mm256_storeu_ps(y0 + 3 * ldy,
                     _mm256_add_ps(_mm256_loadu_ps(y0 + 3 * ldy), _mm256_mul_ps(w3, vx)));
  }
  for (int k = 0; k < 4; ++k) {
    for (int64_t t = i; t < n; ++t) y[k * ldy + t] += w[k * ldw] * B::load1(x, t);
  }
}

template <class B>
void dot_rows_avx2(const float* a, int64_t rows, int64_t lda, const typename B::T* b, int64_t n,
                   float* out, int64_t ldo) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) dot4_avx2<B>(a + r * lda, lda, b, n, out + r * ldo, ldo);
  for (; r < rows; ++r) out[r * ldo] = dot_avx2<B>(a + r * lda, b, n);
}

template <class B>
void axpy_rows_avx2(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                    const typename B::T* x, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) axpy4_avx2<B>(y + r * ldy, ldy, w + r * ldw, ldw, x, n);
  for (; r < rows; ++r) axpy_avx2<B>(y + r * ldy, w[r * ldw], x, n);
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

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
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

void softmax(float* x, int64_t n) {
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
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
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
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void dot_f32_rows(const float* a, int64_t rows, int64_t lda, const float* b, int64_t n, float* out,
                  int64_t ldo) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    dot_rows_avx2<RowF32>(a, rows, lda, b, n, out, ldo);
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r) out[r * ldo] = dot_f32(a + r * lda, b, n);
}

namespace {
// The portable path's F16 row as f32, in a per-thread buffer valid until the thread's next call.
const float* f16_row_as_f32(const uint8_t* h, int64_t n) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(n));
  f16_to_f32_row(h, row.data(), n);
  return row.data();
}
}  // namespace

void dot_f16_rows(const float* a, int64_t rows, int64_t lda, const uint8_t* b, int64_t n,
                  float* out, int64_t ldo) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    dot_rows_avx2<RowF16>(a, rows, lda, b, n, out, ldo);
    return;
  }
#endif
  dot_f32_rows(a, rows, lda, f16_row_as_f32(b, n), n, out, ldo);
}

void axpy_f32_rows(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw, const float* x,
                   int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    axpy_rows_avx2<RowF32>(y, rows, ldy, w, ldw, x, n);
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r) axpy_f32(y + r * ldy, w[r * ldw], x, n);
}

void axpy_f16_rows(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                   const uint8_t* x, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2_rows()) {
    axpy_rows_avx2<RowF16>(y, rows, ldy, w, ldw, x, n);
    return;
  }
#endif
  axpy_f32_rows(y, rows, ldy, w, ldw, f16_row_as_f32(x, n), n);
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
