// Activation quantizers: what the peer's CPU backend does to the f32 input of ggml_mul_mat
// before the weight type's vec_dot (type_traits_cpu[...].from_float).
//
// Q8_0 and Q8_1: the peer's x86 build (AVX2) does NOT run quantize_row_q8_0_ref. Per 32-block:
// amax by a tree of vector max operations, d = amax / 127, multiplier id = 127 / amax (not
// 1/d), products rounded half-to-even (vroundps), converted to int32 and narrowed with signed
// saturation. Both differences from the scalar reference change bytes: 127/amax and 1/(amax/127)
// differ in the last bit for some amax, and ties (x.5) go to even instead of away from zero.
// We emulate that path lane by lane, including the max tree, so NaN behaves as on x86.
// Q8_K: the peer runs quantize_row_q8_K_ref on x86 (there is no AVX2 version).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tensor/quant_internal.h"

namespace power::quant {
namespace {

// x86 maxps semantics: a > b ? a : b (the second operand wins on NaN or equality).
inline float x86_max(float a, float b) {
  return a > b ? a : b;
}

// Max |x| over 32 values in the peer's AVX2 order: 8 lanes reduce the four 8-wide vectors in
// sequence, then the upper 128-bit half is folded onto the lower, then pairs, then lanes 0/1.
float amax32_avx2_order(const float* x) {
  float lane[8];
  for (int k = 0; k < 8; ++k) lane[k] = std::fabs(x[k]);
  for (int v = 1; v < 4; ++v) {
    for (int k = 0; k < 8; ++k) lane[k] = x86_max(lane[k], std::fabs(x[8 * v + k]));
  }
  float m4[4];
  for (int k = 0; k < 4; ++k) m4[k] = x86_max(lane[4 + k], lane[k]);
  const float m0 = x86_max(m4[0], m4[2]);
  const float m1 = x86_max(m4[1], m4[3]);
  return x86_max(m0, m1);
}

// Round half to even, independent of the current FP rounding mode (|v| small or non-finite).
inline float round_half_even(float v) {
  if (!std::isfinite(v) || std::fabs(v) >= 8388608.0f) return v;  // already integral (or NaN/inf)
  const float f = std::floor(v);
  const float frac = v - f;  // exact for |v| < 2^23
  if (frac > 0.5f) return f + 1.0f;
  if (frac < 0.5f) return f;
  return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

// cvtps2dq: out of range or NaN gives INT32_MIN ("integer indefinite").
inline int32_t x86_cvt_i32(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}

// packssdw + packsswb: signed saturation to int8.
inline int8_t saturate_i8(int32_t v) {
  return static_cast<int8_t>(v < -128 ? -128 : (v > 127 ? 127 : v));
}

// One 32-block of the AVX2 Q8_0/Q8_1 path. Returns d; writes q and the int32 sum of the
// rounded values before narrowing (what the peer's Q8_1 path sums).
float q8_block_avx2(const float* x, int8_t* q, int32_t* sum) {
  const float amax = amax32_avx2_order(x);
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) {
    const int32_t v = x86_cvt_i32(round_half_even(x[j] * id));
    s = static_cast<int32_t>(static_cast<uint32_t>(s) +
                             static_cast<uint32_t>(v));  // wraps like paddd
    q[j] = saturate_i8(v);
  }
  *sum = s;
  return d;
}

}  // namespace

void act_q8_0(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    int32_t sum = 0;
    store_f16(blocks[i].d, q8_block_avx2(src, blocks[i].qs, &sum));
  }
}

void act_q8_1(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQK) {
    int32_t sum = 0;
    const float d = q8_block_avx2(src, blocks[i].qs, &sum);
    store_f16(blocks[i].d, d);
    store_f16(blocks[i].s, d * static_cast<float>(sum));
  }
}

void act_q8_k(const float* src, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, src += kQKK) {
    BlockQ8_K& b = blocks[i];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(src[j]);
      if (ax > amax) {
        amax = ax;
        max = src[j];
      }
    }
    if (amax == 0.0f) {
      // The peer leaves bsums untouched here; we zero them so the block is fully defined
      // (all-zero q makes zero the only consistent value).
      std::memset(&b, 0, sizeof(b));
      continue;
    }
    // -127 (not -128) keeps every q in [-127, 127], which the peer's IQ kernels rely on.
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[j])));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
      store_u16(b.bsums + 2 * j, static_cast<uint16_t>(static_cast<int16_t>(sum)));
    }
    store_f32(b.d, 1 / iscale);
  }
}

}  // namespace power::quant
