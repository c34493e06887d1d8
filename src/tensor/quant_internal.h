// Private to src/tensor: ggml block layouts as byte structs, little-endian loads, the rounding
// helpers every reference quantizer shares, and the per-type kernels quant.cpp dispatches to.
//
// Layout structs contain only byte arrays (alignment 1), so they can overlay any byte pointer.
// Their sizes must equal the ggml type table (format/ggml_types.h); quant.cpp checks that on
// every dispatch and tests/tensor checks it once, so a layout typo cannot go unnoticed.
// Kernels take whole blocks: `nb` is the number of blocks.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "base/status.h"
#include "format/ggml_types.h"
#include "tensor/half.h"

namespace power::quant {

inline constexpr int kQK = 32;    // elements per block of the 32-element types
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint8_t d[2];
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint8_t d[2];
  uint8_t m[2];
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint8_t d[2];
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint8_t d[2];
  uint8_t m[2];
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint8_t d[2];
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint8_t d[2];
  uint8_t s[2];
  int8_t qs[32];
};
// Q2_K: 16 sub-blocks of 16; scales[j] = scale (low nibble) | min (high nibble).
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint8_t d[2];
  uint8_t dmin[2];
};
// Q3_K: 16 sub-blocks of 16 with 6-bit signed (biased by 32) scales packed in 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint8_t d[2];
};
// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes.
struct BlockQ4_K {
  uint8_t d[2];
  uint8_t dmin[2];
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint8_t d[2];
  uint8_t dmin[2];
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Q6_K: 16 sub-blocks of 16 with int8 scales.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint8_t d[2];
};
// Q8_K: activation super-block (f32 scale).
struct BlockQ8_K {
  uint8_t d[4];
  int8_t qs[256];
  uint8_t bsums[32];
};
struct BlockIQ4_NL {
  uint8_t d[2];
  uint8_t qs[16];
};
struct BlockIQ4_XS {
  uint8_t d[2];
  uint8_t scales_h[2];
  uint8_t scales_l[4];
  uint8_t qs[128];
};

// The 16 levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl), sorted ascending.
inline constexpr int8_t kIQ4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline float load_f16(const uint8_t* p) {
  return f16_to_f32(load_u16(p));
}
inline void store_f16(uint8_t* p, float v) {
  store_u16(p, f32_to_f16(v));
}
inline float load_f32(const uint8_t* p) {
  return std::bit_cast<float>(load_u32(p));
}
inline void store_f32(uint8_t* p, float v) {
  store_u32(p, std::bit_cast<uint32_t>(v));
}

// ggml's nearest_int: adding 1.5 * 2^23 makes the float's ulp exactly 1, so the addition itself
// rounds to nearest-even and the low 23 mantissa bits then hold the integer offset by 2^22.
// Exact for |v| <= 2^22 - 1; beyond that it wraps the same way the peer's does, which keeps
// even degenerate inputs bit-compatible.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  const int32_t bits = std::bit_cast<int32_t>(shifted);
  return (bits & 0x007fffff) - 0x00400000;
}

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
inline void k4_scale_min(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

// Packs 6-bit scale ls and min lm of sub-block j into the 12-byte Q4_K/Q5_K scale array
// (which must start zeroed for j >= 4 to combine correctly: the high bits are OR-ed in).
inline void k4_pack_scale_min(int j, uint8_t ls, uint8_t lm, uint8_t* packed) {
  if (j < 4) {
    packed[j] = ls;
    packed[j + 4] = lm;
  } else {
    packed[j + 4] = static_cast<uint8_t>((ls & 0x0f) | ((lm & 0x0f) << 4));
    packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// The signed 6-bit scale (-32..31) of sub-block j (0..15) of a Q3_K block.
inline int q3k_scale(int j, const uint8_t* packed) {
  const int low = j < 8 ? (packed[j] & 0x0f) : (packed[j - 8] >> 4);
  const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Index of the IQ4 level nearest to v (ties to the lower level only when strictly closer).
inline int iq4_nearest_level(float v) {
  if (v <= kIQ4Levels[0]) return 0;
  if (v >= kIQ4Levels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < kIQ4Levels[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - kIQ4Levels[hi - 1] < kIQ4Levels[hi] - v ? hi - 1 : hi;
}

// ---- argument checks shared by quant.cpp and vec_dot.cpp ----
// Blocks in n elements of `type` (a known type), or kInvalidArgument naming the type.
Result<int64_t> block_count(GgmlType type, int64_t n);
// kUnsupported naming the type (or its raw id when the value is not a ggml type at all).
Status unsupported_type(GgmlType type, const char* what);

// ---- per-type kernels (nb = number of blocks) ----
void dequant_q4_0(const uint8_t* src, float* dst, int64_t nb);
void dequant_q4_1(const uint8_t* src, float* dst, int64_t nb);
void dequant_q5_0(const uint8_t* src, float* dst, int64_t nb);
void dequant_q5_1(const uint8_t* src, float* dst, int64_t nb);
void dequant_q8_0(const uint8_t* src, float* dst, int64_t nb);
void dequant_q2_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q3_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q4_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q5_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q6_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t nb);
void dequant_iq4_xs(const uint8_t* src, float* dst, int64_t nb);

void quant_q4_0(const float* src, uint8_t* dst, int64_t nb);
void quant_q4_1(const float* src, uint8_t* dst, int64_t nb);
void quant_q5_0(const float* src, uint8_t* dst, int64_t nb);
void quant_q5_1(const float* src, uint8_t* dst, int64_t nb);
void quant_q8_0(const float* src, uint8_t* dst, int64_t nb);
void quant_q2_k(const float* src, uint8_t* dst, int64_t nb);
void quant_q3_k(const float* src, uint8_t* dst, int64_t nb);
void quant_q4_k(const float* src, uint8_t* dst, int64_t nb);
void quant_q5_k(const float* src, uint8_t* dst, int64_t nb);
void quant_q6_k(const float* src, uint8_t* dst, int64_t nb);
void quant_iq4_nl(const float* src, uint8_t* dst, int64_t nb);
void quant_iq4_xs(const float* src, uint8_t* dst, int64_t nb);

void act_q8_0(const float* src, uint8_t* dst, int64_t nb);
void act_q8_1(const float* src, uint8_t* dst, int64_t nb);
void act_q8_k(const float* src, uint8_t* dst, int64_t nb);

}  // namespace power::quant
