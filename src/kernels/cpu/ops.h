// CPU element-wise and row operations used by the transformer models. Scalar reference code;
// shapes are in elements, rows are contiguous f32. All functions are pure and thread-safe.
#pragma once

#include <cstdint>

namespace power {

// y = x / sqrt(mean(x^2) + eps) * w (w may be null: no scale). Sum of squares in double, as
// the peer does (8 partial sums, the same bits on every path). x and y may alias.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// Rotary position embedding in place over one head of `head_dim` values, rotating the first
// `n_rot` dimensions. kNorm rotates adjacent pairs (2i, 2i+1), kNeox rotates (i, i + n_rot/2).
// theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i (factor = 1 without freq_factors).
enum class RopeKind { kNorm, kNeox };
struct RopeParams {
  RopeKind kind = RopeKind::kNorm;
  int n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // n_rot/2 values (llama3 / longrope), or null
};
void rope_apply(float* head, int64_t pos, const RopeParams& p);
// rope_apply on n_heads heads of one position, head h at x + h * head_stride: the angles are
// computed once for all heads (the same values rope_apply computes for each).
void rope_apply_heads(float* x, int64_t n_heads, int64_t head_stride, int64_t pos,
                      const RopeParams& p);

// In-place softmax over n values; returns nothing. Max-subtracted, sum in double. The portable
// path uses std::exp, the AVX2 path the vector exp SwiGLU uses (within a few ulp; exponentials
// below about 1e-38 become 0), so the two paths may differ in the last bits.
void softmax(float* x, int64_t n);

// The logistic sigmoid, 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below (so small results
// keep their relative accuracy), with e^-|x| from a polynomial exponential within about 2 ulp
// of std::exp (0 below -87.3, where e^x is below the smallest normal float). The portable and
// AVX2 paths do the same IEEE operations, so every ISA gives the same bits. NaN stays NaN,
// +-inf give 1 and 0. sigmoid writes y[i] = sigmoid1(x[i]) for i < n (y may be x).
float sigmoid1(float x);
void sigmoid(const float* x, float* y, int64_t n);

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]. The portable path
// uses std::exp; the AVX2 path a vector exp within about 2 ulp (ops.cpp exp8), as llama.cpp's
// SIMD silu does, so the two paths may differ in the last bits.
void swiglu(float* gate, const float* up, int64_t n);
// One token of Mamba's selective scan over n_ch channels of n state values each. For channel c,
// with dt_soft = softplus(dt[c]) (log1p(exp(dt[c])), dt[c] itself above 20) and x_dt = x[c] *
// dt_soft:  h[c n + k] = h[c n + k] * exp(dt_soft * a[c n + k]) + b[k] * x_dt  for k < n, and
// y[c] = sum_k h[c n + k] * cc[k]  (h in place). The portable path is llama.cpp's
// ggml_ssm_scan_f32 arithmetic (std::exp, a multiply and an add, k summed in order); the AVX2
// path (n a multiple of 8) uses the vector exp of swiglu (about 2 ulp; arguments below -87.3
// give about 1e-38 instead of 0), fused multiply-adds and 8 partial sums, so the two paths
// differ in the last bits. A channel's result does not depend on n_ch or its neighbours.
void ssm_scan_step(float* h, const float* a, const float* b, const float* cc, const float* dt,
                   const float* x, int64_t n_ch, int64_t n, float* y);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// y[i] = fma(a, x[i], y[i]) (one rounding); y and x must not overlap.
void axpy_f32(float* y, float a, const float* x, int64_t n);
// Dot product of two f32 rows with 8 partial sums, each a chain of fused multiply-adds.
float dot_f32(const float* a, const float* b, int64_t n);
// Attention's two products over a run of cached rows (keys or values; each its own pointer, as
// a paged KV cache holds them):
// out[r * ldo + c] = dot_f32(a + r * lda, b[c], n) * scale for r < rows, c < cols, with the bits
// of dot_f32 and one multiply (the SIMD path computes 4 rows x 2 columns per pass: each b row
// is loaded once per 4 rows of a, each a row once per 2 columns).
void dot_f32_cols(const float* a, int64_t rows, int64_t lda, const float* const* b, int64_t cols,
                  int64_t n, float scale, float* out, int64_t ldo);
// For c = 0, 1, .. cols - 1 in turn and r < rows: axpy_f32(y + r * ldy, w[r * ldw + c], x[c], n),
// the same bits (per element one fused multiply-add per column, in ascending c); the SIMD path
// holds 4 rows x 16 elements of y in registers across all columns. y rows must not overlap x or w.
void axpy_f32_cols(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                   const float* const* x, int64_t cols, int64_t n);
// dot_f32_cols / axpy_f32_cols against F16 rows (b[c] / x[c]: n IEEE halves, 2 bytes each, as an
// F16 KV cache stores them): the bits of converting each row with f16_to_f32_row and calling the
// f32 function (the SIMD path converts 8 values per load instead of writing the rows out first).
void dot_f16_cols(const float* a, int64_t rows, int64_t lda, const uint8_t* const* b, int64_t cols,
                  int64_t n, float scale, float* out, int64_t ldo);
void axpy_f16_cols(float* y, int64_t rows, int64_t ldy, const float* w, int64_t ldw,
                   const uint8_t* const* x, int64_t cols, int64_t n);
// Rounds each value to the nearest f16 and back (to mirror an F16 cache's rounding of inputs).
void round_to_f16(float* x, int64_t n);
// The index the loop `best = 0; for i: if (x[i] > x[best]) best = i;` returns (n >= 1): the
// first largest value; NaNs never win, and a NaN at x[0] keeps 0. Greedy sampling runs it on
// every generated token's logits (32000+ values).
int64_t argmax_f32(const float* x, int64_t n);

}  // namespace power
