// Private to src/kernels/cpu: the contract between matmul.cpp (dispatch, activation
// quantization, threading) and the per-ISA kernel sources (matmul_avx2.cpp,
// matmul_avx512.cpp, each compiled with its own -m flags).
//
// Activations are quantized once per matmul call into an internal, aligned layout per token
// (`act_stride` bytes apart, 64-byte aligned):
//   Q8_0 / Q8_1: int8 q[K] | float d[K/32] | (Q8_1 only) float s[K/32]
//   Q8_K:        int8 q[K] | float d[K/256] | int16 bsums[K/16]
//   F32 (for F32/F16/BF16 weights): the caller's f32 rows are used in place (x, ldx).
// The values are exactly the peer's activation quantizers' (tensor/quant.h), only laid out
// for aligned vector loads, so a kernel's integer sums equal the reference vec_dot's; only the
// float summation order differs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/ggml_types.h"

namespace power::kernels {

struct MatmulArgs {
  const uint8_t* w = nullptr;    // row 0 of the weights
  uint64_t w_row_bytes = 0;      // byte stride between weight rows
  int64_t k = 0;                 // elements per row
  const uint8_t* act = nullptr;  // quantized activations (layout above), token 0
  uint64_t act_stride = 0;
  const float* x = nullptr;  // f32 activations (float weight types)
  int64_t ldx = 0;
  int64_t n_tokens = 0;
  float* y = nullptr;  // y[t * ldy + r]
  int64_t ldy = 0;
};

// Computes rows [r0, r1) of the product for every token.
using MatmulRowsFn = void (*)(const MatmulArgs& args, int64_t r0, int64_t r1);

// Offsets inside one token's quantized activation record.
inline constexpr uint64_t act_d_offset(int64_t k) {
  return static_cast<uint64_t>(k);
}
inline constexpr uint64_t act_s_offset(int64_t k) {  // Q8_1 sums
  return static_cast<uint64_t>(k) + static_cast<uint64_t>(k / 32) * 4;
}
inline constexpr uint64_t act_bsums_offset(int64_t k) {  // Q8_K
  return static_cast<uint64_t>(k) + static_cast<uint64_t>(k / 256) * 4;
}

// The kernel for a weight type on one ISA, or nullptr (the caller then takes the scalar
// path). Defined in the ISA's source; the AVX-512 one exists only when it was compiled.
MatmulRowsFn matmul_rows_avx2(GgmlType weight_type);
MatmulRowsFn matmul_rows_avx512(GgmlType weight_type);

}  // namespace power::kernels
