// Scalar reference quantization, dequantization and dot products for ggml's tensor types.
//
// Contract:
// * Bit-compatible with the peer (llama.cpp ggml, commit c392e50, see ../shared/fixtures):
//   dequantize_row equals ggml's `to_float` bit for bit (same float operations in the same
//   order; this target is compiled with -ffp-contract=off so no FMA changes the rounding).
//   quantize_row reproduces what `ggml_quantize_chunk(type, ..., imatrix = NULL)` writes, i.e.
//   what `llama-quantize` writes without --imatrix. Activation quantizers reproduce the peer's
//   CPU `from_float` on x86 (AVX2 build), which is what ggml_mul_mat feeds to vec_dot.
// * Data is raw little-endian bytes in ggml's block layouts, no alignment requirement. A row of
//   n elements of a blocked type is n / block_elems blocks (block sizes: format/ggml_types.h).
// * Errors: n not a multiple of the block size, n < 0 -> kInvalidArgument; a type without an
//   implementation -> kUnsupported naming the type. Nothing here aborts on bad data.
// * Non-finite values. Dequantization is plain IEEE arithmetic on the stored scales (an inf or
//   NaN f16 scale gives inf/NaN outputs, as in the peer; rejecting such files is the loader's
//   job). quantize_row rejects NaN/inf input with kInvalidArgument naming the index (the peer's
//   quantizers have no defined result for them), except F32/F16/BF16 which store or convert
//   them (half.h). The activation quantizers never fail on values: they reproduce x86
//   conversion semantics (NaN or out-of-range -> -128 after saturation), so a blown-up
//   activation gives garbage, not UB.
// * Dot products are references for the SIMD kernels: see vec_dot() below.
// Thread-safety: pure functions, no global state.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "format/ggml_types.h"

namespace power {

bool dequantize_supported(GgmlType type);
bool quantize_supported(GgmlType type);

// dst[0..n) = the values encoded in `src` (n elements of `type`).
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Encodes n floats as `type` into dst (n / block_elems * block_bytes bytes). The reference
// algorithms without importance matrix. Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS.
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

// Activation quantizers (the peer's CPU from_float used by ggml_mul_mat; n multiple of 32 or
// 256). Q8_0: {f16 d, int8 q[32]}, d = amax/127, q = round_half_even(x * (127/amax)).
// Q8_1: as Q8_0 plus f16 s = d * sum(q). Q8_K: {f32 d, int8 q[256], int16 bsums[16]},
// d = 1/(-127/max) where max is the element of largest magnitude, q = nearest(x * -127/max)
// clamped to 127, bsums = sums of 16 consecutive q.
Status quantize_row_q8_0(const float* src, void* dst, int64_t n);
Status quantize_row_q8_1(const float* src, void* dst, int64_t n);
Status quantize_row_q8_K(const float* src, void* dst, int64_t n);

// The activation type the peer's vec_dot pairs with a weight type: Q8_0 for Q4_0, Q5_0, Q8_0,
// IQ4_NL; Q8_1 for Q4_1, Q5_1; Q8_K for the K-quants and IQ4_XS; the type itself for F32,
// F16, BF16. kUnsupported for other types.
Result<GgmlType> vec_dot_activation_type(GgmlType weight_type);

// Quantizes an f32 activation row to `act_type` (F32 copy, F16, BF16, Q8_0, Q8_1, Q8_K).
Status quantize_activation_row(GgmlType act_type, const float* src, void* dst, int64_t n);

// Scalar reference dot product of one weight row (n elements of `weight_type`) with one
// activation row already in vec_dot_activation_type(weight_type). It reproduces the peer's
// x86-64 vec_dot: for the quantized types the AVX2 kernels (also what AVX-512 machines run):
// exact integer sums in 8 lanes, then the same float steps in the same order, fused where the
// peer fuses; for F16/BF16/F32 the AVX-512 build of the fixture machine (4 x 16 FMA lanes;
// BF16 with the AVX512-BF16 pair instruction, denormals flushed). On the fixtures this equals
// the peer's result bit for bit for all 14 types (F32 has no fixture). It is the reference
// the SIMD kernels are tested against; it is not fast.
Result<float> vec_dot(GgmlType weight_type, const void* weight_row, const void* act_row, int64_t n);

}  // namespace power
