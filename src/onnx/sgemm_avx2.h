// The AVX2/FMA SGEMM block of the ONNX kernels (sgemm_avx2.cpp). Private to src/onnx.
#pragma once

#include <cstdint>
#include <vector>

#include "onnx/graph.h"

namespace power::onnx {

// C[i0:i1, j0:j1] += A[i0:i1, 0:K] * B[0:K, j0:j1] (= when `overwrite`: C's old values are not
// read); row-major, leading dimensions given. K > 0.
// Only call when the CPU has AVX2 and FMA (kernels/cpu/isa.h cpu_isa() != kScalar).
void gemm_block_avx2(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                     bool overwrite);

// One channel of a depthwise convolution at column stride 1: yout[OH, OW] = bias + the kernel
// w[kh, kw] over the zero-padded input plane xin[H, W]. Rows of 32 output columns keep four
// accumulators in registers across all kernel taps, so each output is stored once; columns
// whose taps fall partly outside the plane are summed one by one. Same CPU condition as above.
struct DepthwiseGeo {
  int64_t H, W, OH, OW, kh, kw, sh, dh, dw, pt, pl;
};
void depthwise_plane_avx2(const DepthwiseGeo& g, const float* xin, const float* w, float bias,
                          float* yout);

// apply_epilogue (ops_internal.h) compiled for AVX2. Same CPU condition.
void apply_epilogue_avx2(const std::vector<FusedStep>& steps, const float* bias, int64_t c,
                         float* y, int64_t n);

}  // namespace power::onnx
