// Private to src/kernels/cpu: the contract between matmul.cpp (dispatch, activation
// quantization, threading) and the per-ISA kernel sources (matmul_avx2.cpp,
// matmul_avx512.cpp, each compiled with its own -m flags).
//
// Activations are quantized once per matmul call into an internal, aligned layout per token
// (`act_stride` bytes apart, 64-byte aligned):
//   Q8_0 / Q8_1: int8 q[K] | float d[K/32] | Q8_1: float s[K/32], Q8_0: int32 sum(q)[K/32]
//   Q8_K:        int8 q[K] | float d[K/256] | int16 bsums[K/16]
//   F32 (for F32/F16/BF16 weights): the caller's f32 rows are used in place (x, ldx).
// The values are exactly the peer's activation quantizers' (tensor/quant.h), only laid out
// for aligned vector loads, so a kernel's integer sums equal the reference vec_dot's; only the
// float summation order differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

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
inline constexpr uint64_t act_isum_offset(int64_t k) {  // Q8_0 int32 block sums of q
  return act_s_offset(k);
}
inline constexpr uint64_t act_bsums_offset(int64_t k) {  // Q8_K
  return static_cast<uint64_t>(k) + static_cast<uint64_t>(k / 256) * 4;
}

// The kernel for a weight type on one ISA, or nullptr (the caller then takes the scalar
// path). Defined in the ISA's source; the AVX-512 one exists only when it was compiled.
MatmulRowsFn matmul_rows_avx2(GgmlType weight_type);
MatmulRowsFn matmul_rows_avx512(GgmlType weight_type);

// ---- Activation records ----
// Bytes of one token's record for `act` (Q8_0, Q8_1, Q8_K), 64-byte multiple; 0 for F32.
uint64_t act_record_bytes(GgmlType act, int64_t k);
// Writes one token's record with the reference quantizers of tensor/quant.h (`tmp` holds at
// least one quantized row in ggml blocks). The SIMD quantizers must match it byte for byte.
void quantize_act_record_reference(GgmlType act, const float* x, int64_t k, uint8_t* tmp,
                                   uint8_t* rec);
// A SIMD record writer for `act` on one ISA (Q8_0, Q8_1, Q8_K), or nullptr.
using ActQuantFn = void (*)(const float* x, int64_t k, uint8_t* rec);
ActQuantFn act_quantizer_avx2(GgmlType act);
ActQuantFn act_quantizer_avx512(GgmlType act);

// ---- Repacked weights (matmul_repack.h has the layout) ----
inline constexpr int kPackRows = 8;
// Elements per row of one packed block record: 32 (Q4_0, Q8_0) or 256 (Q4_K); 0 for types
// without a layout.
inline constexpr int64_t packed_block_elems(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q8_0 ? 32 : type == GgmlType::Q4_K ? 256 : 0;
}
// Bytes of one packed block record (8 rows x packed_block_elems), 0 for types without a layout.
inline constexpr uint64_t packed_block_bytes(GgmlType type) {
  return type == GgmlType::Q4_0   ? 16 + 128
         : type == GgmlType::Q8_0 ? 16 + 256
         : type == GgmlType::Q4_K ? 16 + 16 + 64 + 64 + 1024
                                  : 0;
}

struct PackedMatrix {
  GgmlType type = GgmlType::F32;
  int64_t k = 0;                  // elements per row
  int64_t rows = 0;               // rows of the original view (ne[1])
  uint64_t row_stride = 0;        // the original view's nb[1]
  int64_t n_groups = 0;           // rows / 8: packed groups; rows n_groups*8.. are not packed
  uint64_t group_bytes = 0;       // k / packed_block_elems block records
  std::shared_ptr<uint8_t> data;  // 64-byte aligned, n_groups * group_bytes
  uint64_t bytes() const { return static_cast<uint64_t>(n_groups) * group_bytes; }
};

// ---- Token-major activations (the prefill tiles of the repacked Q4_0 kernel) ----
// The Q8_0 records of 8 consecutive tokens (a token group) transposed so that one 256-bit load
// holds the same 4 quantized bytes of all 8 tokens; per 32-element block b, a record of
// kTokenMajorBlockBytes at b * kTokenMajorBlockBytes:
//   int8 q[8 groups j][8 tokens][4]   token i's q[32b + 4j .. 32b + 4j + 3]
//   int32 8 * isum[8 tokens]          8 times the token's int32 block sum (the Q4_0 offset)
//   f32 d[8 tokens]
// Group G of a call (tokens 8G .. 8G + 7) is at G * token_major_group_bytes(k). Only whole
// groups are written; matmul builds them when the packed kernel asks for them and n_tokens
// reaches kTokenMajorMinTokens (the AVX2 tiles: 4 rows x 16 tokens) or, under AVX-512 VNNI,
// kTokenMajorMinTokensVnni (a tile of one token group). matmul_repack.inc asserts both.
inline constexpr uint64_t kTokenMajorBlockBytes = 256 + 32 + 32;
inline constexpr int64_t kTokenMajorMinTokens = 16;
inline constexpr int64_t kTokenMajorMinTokensVnni = 8;
inline constexpr uint64_t token_major_group_bytes(int64_t k) {
  return static_cast<uint64_t>(k / 32) * kTokenMajorBlockBytes;
}
// Writes token groups [g0, g1) from the Q8_0 records (recs, `stride` bytes apart) to `out`.
using TokenMajorFn = void (*)(const uint8_t* recs, uint64_t stride, int64_t k, int64_t g0,
                              int64_t g1, uint8_t* out);

struct PackedArgs {
  const uint8_t* w = nullptr;  // group 0
  uint64_t group_bytes = 0;
  int64_t n_groups = 0;  // groups in w (a kernel may prefetch the group after its own)
  int64_t k = 0;
  const uint8_t* act = nullptr;  // Q8_0 (Q4_0, Q8_0) or Q8_K (Q4_K) records, token 0
  uint64_t act_stride = 0;
  // The token-major copy of tokens [0, 8 * (n_tokens / 8)) (layout above), or null.
  const uint8_t* act_tm = nullptr;
  int64_t n_tokens = 0;
  float* y = nullptr;  // y[t * ldy + r], r = 8 * group + row in group
  int64_t ldy = 0;
};
// Computes the rows of groups [g0, g1) for every token.
using PackedGroupsFn = void (*)(const PackedArgs& args, int64_t g0, int64_t g1);
PackedGroupsFn matmul_packed_avx2(GgmlType weight_type);
PackedGroupsFn matmul_packed_avx512(GgmlType weight_type);
// The token-major writer when the packed kernel for weight_type reads act_tm, else nullptr.
TokenMajorFn token_major_avx2(GgmlType weight_type);
TokenMajorFn token_major_avx512(GgmlType weight_type);

}  // namespace power::kernels
