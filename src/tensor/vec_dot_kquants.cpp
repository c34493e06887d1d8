// Reference dot products of K-quant and IQ4_XS weight rows with Q8_K activations, in the float
// order of the peer's AVX2 kernels (see vec_dot.cpp). Each super-block is first turned into
// exact integers: per element the integer weight (sub-block scale times level) and per lane
// the sum of weight * activation; only the few float steps per super-block need care.
#include <cmath>

#include "tensor/quant_internal.h"
#include "tensor/vec_dot_internal.h"

namespace power::quant {
namespace {

inline int16_t bsum(const BlockQ8_K& y, int j) {
  return static_cast<int16_t>(load_u16(y.bsums + 2 * j));
}

// lanes[k] = sum over the super-block of w[e] * a[e] for elements with (e % 32) / 4 == k.
inline void lanes256(const int* w, const int8_t* a, int32_t* lanes) {
  for (int k = 0; k < 8; ++k) lanes[k] = 0;
  for (int e = 0; e < kQKK; ++e) lanes[(e % 32) / 4] += w[e] * a[e];
}

}  // namespace

float dot_q2_k(const uint8_t* wp, const uint8_t* ap, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ2_K*>(wp);
  const auto* y = reinterpret_cast<const BlockQ8_K*>(ap);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    const float yd = load_f32(y[i].d);
    const float d = yd * load_f16(x[i].d);
    const float dmin = -yd * load_f16(x[i].dmin);
    // Min term: lane k pairs the mins of sub-blocks 2k, 2k+1 with their activation sums.
    int32_t prod[8];
    for (int k = 0; k < 8; ++k) {
      prod[k] = (x[i].scales[2 * k] >> 4) * bsum(y[i], 2 * k) +
                (x[i].scales[2 * k + 1] >> 4) * bsum(y[i], 2 * k + 1);
    }
    acc.fma(dmin, prod);
    int w[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      const int half = e / 128, r = e % 128;
      const int q = (x[i].qs[32 * half + r % 32] >> (2 * (r / 32))) & 3;
      w[e] = (x[i].scales[e / 16] & 0x0f) * q;
    }
    int32_t lanes[8];
    lanes256(w, y[i].qs, lanes);
    acc.fma(d, lanes);
  }
  return acc.hsum();
}

float dot_q3_k(const uint8_t* wp, const uint8_t* ap, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ3_K*>(wp);
  const auto* y = reinterpret_cast<const BlockQ8_K*>(ap);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = load_f32(y[i].d) * load_f16(x[i].d);
    int scale[16];
    for (int j = 0; j < 16; ++j) scale[j] = q3k_scale(j, x[i].scales);
    int w[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      const int half = e / 128, r = e % 128, s = r / 32, b = r % 32;
      const int low = (x[i].qs[32 * half + b] >> (2 * s)) & 3;
      const bool high = (x[i].hmask[b] >> (4 * half + s)) & 1;
      w[e] = scale[e / 16] * (low - (high ? 0 : 4));
    }
    int32_t lanes[8];
    lanes256(w, y[i].qs, lanes);
    acc.fma(d, lanes);
  }
  return acc.hsum();
}

float dot_q4_k(const uint8_t* wp, const uint8_t* ap, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ4_K*>(wp);
  const auto* y = reinterpret_cast<const BlockQ8_K*>(ap);
  Lanes8 acc;
  float acc_m[4] = {};  // a 4-lane __m128 accumulator for the min term
  for (int64_t i = 0; i < nb; ++i) {
    const float yd = load_f32(y[i].d);
    const float d = yd * load_f16(x[i].d);
    const float dmin = -yd * load_f16(x[i].dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    for (int k = 0; k < 4; ++k) {
      const int s0 = bsum(y[i], 4 * k) + bsum(y[i], 4 * k + 1);
      const int s1 = bsum(y[i], 4 * k + 2) + bsum(y[i], 4 * k + 3);
      const int32_t prod = mn[2 * k] * s0 + mn[2 * k + 1] * s1;
      acc_m[k] = std::fma(dmin, static_cast<float>(prod), acc_m[k]);
    }
    int w[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      const int r = e % 64;
      const uint8_t byte = x[i].qs[32 * (e / 64) + r % 32];
      w[e] = sc[e / 32] * (r < 32 ? (byte & 0x0f) : (byte >> 4));
    }
    int32_t lanes[8];
    lanes256(w, y[i].qs, lanes);
    acc.fma(d, lanes);
  }
  const float m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
  return acc.hsum() + m;
}

float dot_q5_k(const uint8_t* wp, const uint8_t* ap, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ5_K*>(wp);
  const auto* y = reinterpret_cast<const BlockQ8_K*>(ap);
  Lanes8 acc;
  float summs = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const float yd = load_f32(y[i].d);
    const float d = yd * load_f16(x[i].d);
    const float dmin = -yd * load_f16(x[i].dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    int32_t total = 0;
    for (int j = 0; j < 8; ++j) total += mn[j] * (bsum(y[i], 2 * j) + bsum(y[i], 2 * j + 1));
    summs = std::fma(dmin, static_cast<float>(total), summs);
    int w[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      const int r = e % 64, b = r % 32;
      const uint8_t byte = x[i].qs[32 * (e / 64) + b];
      const int low = r < 32 ? (byte & 0x0f) : (byte >> 4);
      const int high = (x[i].qh[b] >> (e / 32)) & 1;
      w[e] = sc[e / 32] * (low + 16 * high);
    }
    int32_t lanes[8];
    lanes256(w, y[i].qs, lanes);
    acc.fma(d, lanes);
  }
  return acc.hsum() + summs;
}

float dot_q6_k(const uint8_t* wp, const uint8_t* ap, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ6_K*>(wp);
  const auto* y = reinterpret_cast<const BlockQ8_K*>(ap);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = load_f32(y[i].d) * load_f16(x[i].d);
    int w[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      const int half = e / 128, r = e % 128, g = r / 32, l = r % 32;
      const uint8_t lbyte = x[i].ql[64 * half + 32 * (g & 1) + l];
      const int low = g < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
      const int high = (x[i].qh[32 * half + l] >> (2 * g)) & 3;
      w[e] = x[i].scales[e / 16] * ((low | (high << 4)) - 32);
    }
    int32_t lanes[8];
    lanes256(w, y[i].qs, lanes);
    acc.fma(d, lanes);
  }
  return acc.hsum();
}

float dot_iq4_xs(const uint8_t* wp, const uint8_t* ap, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockIQ4_XS*>(wp);
  const auto* y = reinterpret_cast<const BlockQ8_K*>(ap);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    const uint16_t scales_h = load_u16(x[i].scales_h);
    int w[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      const int ib = e / 32, j = e % 32;
      const int ls =
          ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((scales_h >> (2 * ib)) & 3) << 4);
      const uint8_t byte = x[i].qs[16 * ib + j % 16];
      w[e] = (ls - 32) * kIQ4Levels[j < 16 ? (byte & 0x0f) : (byte >> 4)];
    }
    int32_t lanes[8];
    lanes256(w, y[i].qs, lanes);
    acc.fma(load_f16(x[i].d) * load_f32(y[i].d), lanes);
  }
  return acc.hsum();
}

}  // namespace power::quant
