// The ISA entry points behind sgemm.h: the AVX2/FMA objects (sgemm_avx2.cpp) and the AVX-512 ones
// (sgemm_avx512.cpp). Internal to the kernels layer (tests call them to compare the ISAs).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/sgemm.h"

namespace power::kernels {

// C[i0:i1, j0:j1] += A[i0:i1, 0:K] * B[0:K, j0:j1] (= when `overwrite`: C's old values are not
// read); row-major, leading dimensions given. K > 0. With `ep`, each stored tile gets the
// bias and steps first (above). With `brows`, row k of B starts at brows[k] (B and ldb are not
// used): a convolution's rows of shifted input planes, read in place instead of copied into an
// im2col matrix. Columns j0..j1 of every row must be readable.
// Only call when the CPU has AVX2 and FMA (kernels/cpu/isa.h cpu_isa() != kScalar).
void gemm_block_avx2(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                     bool overwrite, const TileEpilogue* ep = nullptr,
                     const float* const* brows = nullptr);

// The same product with 512-bit registers (sgemm_avx512.cpp), the same bits. Only call when
// cpu_isa() is kAvx512.
void gemm_block_avx512(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                       bool overwrite, const TileEpilogue* ep = nullptr,
                       const float* const* brows = nullptr);

// One channel of a depthwise convolution: yout[OH, OW] = bias + the kernel w[kh, kw] over the
// zero-padded input plane xin[H, W], any strides and dilations, then (when `steps` is given)
// the fused steps of channel c in registers before the store (the bits of apply_epilogue after
// the plane). The plane is
// first copied into `scratch` with its zero border and each row split into `sw` phases (phase
// p holds the padded columns p, p + sw, p + 2 sw, ...), so every tap of every output column is
// an in-bounds, unit-stride read: two output rows by up to four vectors keep up to eight
// accumulators in registers across all taps and store once (the row's last vector masked). No
// column is summed one by one. scratch holds depthwise_scratch_floats_simd(g) floats. Same CPU
// condition as above. Kernel widths up to kDepthwiseMaxKw (wider ones take the portable loop).
constexpr int64_t kDepthwiseMaxKw = 64;
int64_t depthwise_scratch_floats_simd(const DepthwiseGeo& g);
void depthwise_plane_avx2(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                          float* yout, float* scratch,
                          const std::vector<EpilogueStep>* steps = nullptr, int64_t c = 0);
// The same plane with 512-bit registers (sgemm_avx512.cpp; two rows by up to 64 columns), the
// same bits. Only call when cpu_isa() is kAvx512.
void depthwise_plane_avx512(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                            float* yout, float* scratch,
                            const std::vector<EpilogueStep>* steps = nullptr, int64_t c = 0);

// What both plane kernels need once the scratch is written: the weights, each kernel column's
// offset within a padded scratch row (phase and index), the distance between kernel rows and
// between output rows in the scratch, and the steps (may be null) with the plane's channel.
struct DepthwiseTaps {
  const float* w;
  int64_t off[kDepthwiseMaxKw];
  int64_t kh, kw, row_step, out_row_step;
  const std::vector<EpilogueStep>* steps;
  int64_t c;
};
// Copies the plane into `scratch` (zero border, rows split into sw phases; every row holds whole
// 16-column vectors past OW plus the widest tap's reach) and returns its taps. Compiled for AVX2
// (the stride-2 split); same CPU condition as above.
DepthwiseTaps depthwise_prepare(const DepthwiseGeo& g, const float* xin, const float* w,
                                float* scratch, const std::vector<EpilogueStep>* steps, int64_t c);

// apply_epilogue (sgemm.h) compiled for AVX2. Same CPU condition.
void apply_epilogue_avx2(const std::vector<EpilogueStep>& steps, const float* bias, int64_t c,
                         float* y, int64_t n);

}  // namespace power::kernels
