// The AVX2/FMA SGEMM block of the ONNX kernels (sgemm_avx2.cpp). Private to src/onnx.
#pragma once

#include <cstdint>

namespace power::onnx {

// C[i0:i1, j0:j1] += A[i0:i1, 0:K] * B[0:K, j0:j1] (= when `overwrite`: C's old values are not
// read); row-major, leading dimensions given. K > 0.
// Only call when the CPU has AVX2 and FMA (kernels/cpu/isa.h cpu_isa() != kScalar).
void gemm_block_avx2(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t K, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                     bool overwrite);

}  // namespace power::onnx
