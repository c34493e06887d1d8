// IEEE binary16 (f16) and bfloat16 (bf16) <-> binary32 conversions, scalar and portable.
//
// Contract: every function is a pure bit-level conversion that gives the same bits as the
// peer (llama.cpp ggml) on every input, so quantized files and fixtures round-trip exactly.
//   f32 -> f16:  round to nearest, ties to even; results below the f16 normal range become
//                f16 subnormals (rounded the same way), |x| >= 65520 becomes +-inf, inf stays
//                inf, and every NaN becomes the canonical quiet NaN 0x7e00 with its sign
//                (ggml's scalar converter drops the payload).
//   f16 -> f32:  exact (every f16 value is an f32 value); a NaN keeps sign and payload and gets
//                its quiet bit set, as ggml's table and the F16C instruction do.
//   f32 -> bf16: ggml_compute_fp32_to_bf16: round to nearest even on the upper 16 bits, no
//                flush of subnormals, values that round past the largest finite become inf,
//                NaN -> (bits >> 16) | 0x40 (forced quiet, sign and top payload kept).
//   bf16 -> f32: bits << 16 (exact, NaN payloads untouched).
// Thread-safety: pure functions. Endianness: values, not bytes; callers load little-endian.
#pragma once

#include <bit>
#include <cstdint>

namespace power {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    // inf (mant == 0) or NaN: keep the payload, set the quiet bit on NaN.
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // f16 subnormal mant * 2^-24: shift the leading one up to the implicit-bit position.
    uint32_t m = mant;
    uint32_t e = 127 - 15 + 1;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;  // NaN
  // 65520 = 0x477ff000 is the midpoint between the largest f16 (65504) and 2^16; ties go to
  // the even neighbour, which is the infinity encoding.
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a >= 0x38800000u) {
    // Normal f16 range (>= 2^-14): round the 23-bit mantissa to 10 bits, ties to even; a carry
    // out of the mantissa correctly bumps the exponent.
    const uint32_t rounded = a + 0x0fffu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - ((127u - 15u) << 23)) >> 13);
  }
  // Subnormal f16 (or zero): result = round_even(value / 2^-24).
  const uint32_t exp = a >> 23;
  const uint32_t shift = 126 - exp;  // value / 2^-24 = mant24 >> shift, exp <= 112 -> shift >= 14
  if (shift > 24) return sign;       // below 2^-25: rounds to zero
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 0x400 encodes the smallest normal
  return sign | static_cast<uint16_t>(q);
}

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Row converters over n elements. The 16-bit side is raw little-endian bytes with no alignment
// requirement (rows inside mapped files need not be 2-byte aligned).
void f16_to_f32_row(const void* src, float* dst, int64_t n);
void f32_to_f16_row(const float* src, void* dst, int64_t n);
void bf16_to_f32_row(const void* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, void* dst, int64_t n);

}  // namespace power
