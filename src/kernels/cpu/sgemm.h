// Float32 products and convolution planes of the kernels layer: the packed, register-tiled
// SGEMM (AVX-512 12 x 32 and AVX2 6 x 16 tiles with the same bits, a portable loop under
// POWER_FORCE_ISA=scalar), its fused epilogues, and the depthwise convolution plane. The ONNX
// graphs' MatMul, Gemm, Conv, ConvTranspose and LSTM run on them (src/onnx/ops_nn.cpp); the
// language models' weight products are matmul.h. Every function picks its path from
// kernels/cpu/isa.h's cpu_isa().
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace power {

class ThreadPool;

// One step of an elementwise chain applied to a product's rows before they are stored (a
// Conv's fused Add/Mul/Relu/Sigmoid/...; onnx::FusedStep). `a` is the scalar operand, or
// channel[c] for output channel c when `channel` is not empty; kSave keeps the running value
// in a second register that the *S steps read.
struct EpilogueStep {
  enum Kind : uint8_t {
    kSave,         // s = t
    kAdd,          // t + a
    kSub,          // t - a
    kRSub,         // a - t
    kMul,          // t * a
    kDiv,          // t / a
    kRDiv,         // a / t
    kAddS,         // t + s
    kSubS,         // t - s
    kRSubS,        // s - t
    kMulS,         // t * s
    kDivS,         // t / s
    kRDivS,        // s / t
    kClip,         // min(max(t, a), b)
    kRelu,         // t > 0 ? t : 0
    kSigmoid,      // 1 / (1 + e^-t), power::sigmoid's (kernels/cpu/ops.h)
    kHardSigmoid,  // max(0, min(1, a * t + b))
  };
  Kind kind = kRelu;
  float a = 0, b = 0;
  std::vector<float> channel;
};

// The scalar forms of the steps, shared with the ONNX elementwise kernels, so a fused node
// computes the bits of the node it replaces.
inline float relu_f32(float x) {
  return x > 0 ? x : 0.0f;
}
inline float hard_sigmoid_f32(float x, float a, float b) {
  return std::max(0.0f, std::min(1.0f, a * x + b));
}
inline float clip_f32(float x, float lo, float hi) {
  return std::min(std::max(x, lo), hi);
}

// y[0..n) of output channel c: adds *bias when given, then applies the steps in order.
void apply_epilogue(const std::vector<EpilogueStep>& steps, const float* bias, int64_t c, float* y,
                    int64_t n);

// A product's bias and steps, applied by gemm_block to each register tile of its last K panel
// before the tile is stored: row i of C is output channel c + i and gets bias[i] (none when
// null), then the steps. The stored bits are those of the product followed by apply_epilogue.
struct TileEpilogue {
  const std::vector<EpilogueStep>* steps = nullptr;
  const float* bias = nullptr;
  int64_t c = 0;
};

// C[M,N] (+)= A[M,K] * B[K,N] (row-major, leading dims given; A stored [K,M] with trans_a, B
// stored [N,K] with trans_b); accumulate adds to C, else C is overwritten. Split over `pool`
// (may be null) above kSgemmMinParallelWork multiply-adds; the split never changes the bits.
// Paths: with trans_b (not trans_a) and M <= 4, every output is a dot_f32 (gemm_nt_rows); with
// N <= kSgemmDotColumns (not trans_a, not accumulate), a dot_f32_cols dot product
// (gemm_dot_columns); otherwise the tiles, whose chain for an element does not depend on M.
void sgemm(ThreadPool* pool, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           bool trans_a, const float* B, int64_t ldb, bool trans_b, float* C, int64_t ldc,
           bool accumulate);

// Products below this many multiply-adds (about 2 MFLOP, tens of microseconds) run on the
// calling thread: when the pool's workers sleep (a loaded machine turns their spinning off,
// base/thread_pool.h) a wake-up costs about as much. MNIST at 2 threads, wall time per image on
// the 2-vCPU EPYC: 0.109 ms at 64 Ki, 0.054-0.076 ms at 1 Mi.
constexpr double kSgemmMinParallelWork = 1024 * 1024;

// Products with a few output columns (a 1-D convolution over a short window: Silero VAD's
// convolutions have 1 to 4 output positions) waste most lanes of the 16-column register tile.
// Up to this many columns, sgemm instead takes each output as a dot product over K of A's row
// and B's column (transposed to a row when B is stored [K, N]), with dot_f32_cols: 8 partial
// sums per dot, so the bits differ from the tile's in the last place, and do not depend on the
// thread count (rows are split, never K).
constexpr int64_t kSgemmDotColumns = 8;

// C[i, j] = dot(A[i, :], cols[j]) for i < M, j < N (N <= kSgemmDotColumns), dot_f32_cols'
// bits, rows split over `pool` (may be null) above kSgemmMinParallelWork.
void gemm_dot_columns(ThreadPool* pool, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* const* cols, float* C, int64_t ldc);

// C[i, j] (+)= dot(A[i, :], B[j, :]) for rows of A against B stored [N, K] (A * B^T without
// transposing B: an LSTM step's h * R^T), on the calling thread. Each output has the bits of
// dot_f32, so a row's results do not depend on M.
void gemm_nt_rows(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float* C, int64_t ldc, bool accumulate);

// One block of the tiled product on the calling thread: C[i0:i1, j0:j1] += A[i0:i1, 0:K] *
// B[0:K, j0:j1] (= when `overwrite`: C's old values are not read), K > 0. With `ep`, rows
// [i0, i1) also get the bias and steps (TileEpilogue). With `brows`, row k of B starts at
// brows[k] (B and ldb are unused): a convolution's shifted input rows read in place instead of
// an im2col matrix; columns j0..j1 of every row must be readable.
void gemm_block(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, bool overwrite,
                const TileEpilogue* ep = nullptr, const float* const* brows = nullptr);

// The indices t in [0, count) with t * step + off inside [0, limit), as [lo, hi): a
// convolution tap's valid output columns (off: the tap's input column at t = 0).
inline void conv_index_range(int64_t off, int64_t step, int64_t limit, int64_t count, int64_t& lo,
                             int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + step - 1) / step;
  hi = limit - off <= 0 ? 0 : (limit - off + step - 1) / step;
  hi = std::min(hi, count);
  lo = std::min(lo, hi);
}

// A 2-D depthwise plane: input H x W, output OH x OW, kernel kh x kw, strides, dilations and
// the top/left pads.
struct DepthwiseGeo {
  int64_t H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl;
};
// Floats of per-thread scratch depthwise_plane needs for g on this CPU (0: none).
int64_t depthwise_scratch_floats(const DepthwiseGeo& g);
// One channel: yout[OH, OW] = bias + the kernel w[kh, kw] over the zero-padded plane xin[H, W],
// then (when `steps` is given) channel c's steps, with apply_epilogue's bits. On AVX2 and
// AVX-512 the plane is first copied into `scratch` (depthwise_scratch_floats) and the taps
// accumulate in registers with fused multiply-adds (both ISAs give the same bits); the portable
// loop (POWER_FORCE_ISA=scalar, kernels wider than 64 taps) adds each tap's shifted row, in the
// same tap order but rounding the product and the sum apart. `scratch` may be null when
// depthwise_scratch_floats(g) is 0.
void depthwise_plane(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                     float* yout, float* scratch, const std::vector<EpilogueStep>* steps,
                     int64_t c);

}  // namespace power
