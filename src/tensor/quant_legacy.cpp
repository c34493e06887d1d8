// The 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (dequantize and the reference
// quantizers of ggml-quants.c). Float expressions keep the peer's operand order; this file is
// built with -ffp-contract=off so a*b+c is two rounded operations, as in the peer's build.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "tensor/quant_internal.h"

namespace power::quant {
namespace {

// Element of largest magnitude (the first one on ties) and its magnitude.
struct SignedMax {
  float amax = 0.0f;
  float value = 0.0f;
};
SignedMax signed_max(const float* x, int n) {
  SignedMax r;
  for (int j = 0; j < n; ++j) {
    if (r.amax < std::fabs(x[j])) {
      r.amax = std::fabs(x[j]);
      r.value = x[j];
    }
  }
  return r;
}

// The peer narrows the biased value with a C cast (truncation toward zero) to int8_t/uint8_t
// and then clamps from above. For finite blocks the value is always in [0, 2^7); a block whose
// max - min overflows to inf can give NaN, where a C cast is undefined. We define it as the
// peer's x86 build computes it: cvttss2si to int32 (NaN/out of range -> INT32_MIN), keep the
// low 8 bits.
inline int32_t x86_trunc_i32(float v) {
  if (!(v > -2147483904.0f && v < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(v);
}
inline int trunc_to_int(float v) {
  return static_cast<int8_t>(static_cast<uint8_t>(x86_trunc_i32(v) & 0xff));
}
inline int trunc_to_uint(float v) {
  return static_cast<uint8_t>(x86_trunc_i32(v) & 0xff);
}

// 5th bits of 32 quants live in one little-endian u32: bit j for element j.
inline uint32_t load_qh(const uint8_t* qh) {
  return load_u32(qh);
}

}  // namespace

void dequant_q4_0(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const BlockQ4_0& b = blocks[i];
    const float d = load_f16(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>((b.qs[j] & 0x0f) - 8) * d;
      dst[j + kQK / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const BlockQ4_1& b = blocks[i];
    const float d = load_f16(b.d);
    const float m = load_f16(b.m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>(b.qs[j] & 0x0f) * d + m;
      dst[j + kQK / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q5_0(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const BlockQ5_0& b = blocks[i];
    const float d = load_f16(b.d);
    const uint32_t qh = load_qh(b.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      dst[j] = static_cast<float>(lo - 16) * d;
      dst[j + kQK / 2] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequant_q5_1(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const BlockQ5_1& b = blocks[i];
    const float d = load_f16(b.d);
    const float m = load_f16(b.m);
    const uint32_t qh = load_qh(b.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      dst[j] = static_cast<float>(lo) * d + m;
      dst[j + kQK / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const BlockQ8_0& b = blocks[i];
    const float d = load_f16(b.d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// Q4_0: symmetric, d = (element of largest magnitude) / -8 so that element maps to level 0
// exactly and the opposite extreme to 16 (clamped to 15).
void quant_q4_0(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    BlockQ4_0& b = blocks[i];
    const float d = signed_max(src, kQK).value / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, trunc_to_int(src[j] * id + 8.5f));
      const int hi = std::min(15, trunc_to_int(src[j + kQK / 2] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// Q4_1: affine over [min, max] in 15 steps.
void quant_q4_1(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    BlockQ4_1& b = blocks[i];
    float lo_v = FLT_MAX, hi_v = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      if (src[j] < lo_v) lo_v = src[j];
      if (src[j] > hi_v) hi_v = src[j];
    }
    const float d = (hi_v - lo_v) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    store_f16(b.m, lo_v);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, trunc_to_int((src[j] - lo_v) * id + 0.5f));
      const int hi = std::min(15, trunc_to_int((src[j + kQK / 2] - lo_v) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quant_q5_0(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    BlockQ5_0& b = blocks[i];
    const float d = signed_max(src, kQK).value / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, trunc_to_int(src[j] * id + 16.5f));
      const int hi = std::min(31, trunc_to_int(src[j + kQK / 2] * id + 16.5f));
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kQK / 2);
    }
    store_u32(b.qh, qh);
  }
}

void quant_q5_1(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    BlockQ5_1& b = blocks[i];
    float lo_v = FLT_MAX, hi_v = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      if (src[j] < lo_v) lo_v = src[j];
      if (src[j] > hi_v) hi_v = src[j];
    }
    const float d = (hi_v - lo_v) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    store_f16(b.m, lo_v);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      // No upper clamp in the peer: (max - min) * id rounds to at most 31.0 + a few ulp.
      const int lo = trunc_to_uint((src[j] - lo_v) * id + 0.5f);
      const int hi = trunc_to_uint((src[j + kQK / 2] - lo_v) * id + 0.5f);
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kQK / 2);
    }
    store_u32(b.qh, qh);
  }
}

// Q8_0 for weights (ggml's quantize_row_q8_0_ref): id = 1/d and round half away from zero.
// The activation quantizer (quant_act.cpp) differs in both, as the peer's AVX2 path does.
void quant_q8_0(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    BlockQ8_0& b = blocks[i];
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    for (int j = 0; j < kQK; ++j)
      b.qs[j] = static_cast<int8_t>(trunc_to_int(std::round(src[j] * id)));
  }
}

}  // namespace power::quant
