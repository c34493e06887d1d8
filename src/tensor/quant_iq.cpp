// Non-linear 4-bit types IQ4_NL (32-element blocks) and IQ4_XS (256-element super-blocks with
// 6-bit sub-block scales). Both map each element to one of 16 fixed levels (kIQ4Levels) times
// a scale. The quantizer is what the peer's ggml_quantize_chunk runs without importance matrix
// (quantize_iq4_nl / quantize_iq4_xs, i.e. the search with ntry = 7 and weights x^2; note this
// is not quantize_row_iq4_nl_ref, which skips the search).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant_internal.h"

namespace power::quant {
namespace {

constexpr float kGroupEps = 1e-15f;
constexpr int kSearchSteps = 7;

// Best scale for one 32-element block: start at -max/level[0], fit the weighted least-squares
// scale for that level assignment, then try 2*7+1 inverse scales (level[0] + k)/max and keep
// the fit with the largest sumqx^2/sumq2 (i.e. the smallest weighted squared error).
// Returns 0 for an all-(near-)zero block.
float iq4_block_scale(const float* xb, uint8_t* Lb) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupEps) return 0.0f;
  const float level0 = static_cast<float>(kIQ4Levels[0]);
  float d = -max / level0;
  float id = 1 / d;
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const int l = iq4_nearest_level(id * xb[j]);
    Lb[j] = static_cast<uint8_t>(l);
    const float q = static_cast<float>(kIQ4Levels[l]);
    const float w = xb[j] * xb[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int step = -kSearchSteps; step <= kSearchSteps; ++step) {
    id = static_cast<float>(step + kIQ4Levels[0]) / max;
    sumqx = sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(kIQ4Levels[iq4_nearest_level(id * xb[j])]);
      const float w = xb[j] * xb[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// 32 levels -> 16 bytes: element j in the low nibble of byte j, element j+16 in the high one.
void pack_nibbles32(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace

void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const BlockIQ4_NL& b = blocks[i];
    const float d = load_f16(b.d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(kIQ4Levels[b.qs[j] & 0x0f]);
      dst[j + 16] = d * static_cast<float>(kIQ4Levels[b.qs[j] >> 4]);
    }
  }
}

void dequant_iq4_xs(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockIQ4_XS& b = blocks[i];
    const float d = load_f16(b.d);
    const uint16_t scales_h = load_u16(b.scales_h);
    const uint8_t* qs = b.qs;
    for (int ib = 0; ib < 8; ++ib, qs += 16, dst += 32) {
      const int ls =
          ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * static_cast<float>(kIQ4Levels[qs[j] & 0x0f]);
        dst[j + 16] = dl * static_cast<float>(kIQ4Levels[qs[j] >> 4]);
      }
    }
  }
}

void quant_iq4_nl(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockIQ4_NL*>(dst);
  uint8_t L[32];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    BlockIQ4_NL& b = blocks[i];
    const float d = iq4_block_scale(x, L);
    store_f16(b.d, d);
    // Levels are re-derived with the f32 scale (not the f16-rounded one), as the peer does; a
    // zero block maps every element to the level nearest 0 (index 8, value 1).
    const float id = d != 0.0f ? 1 / d : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(iq4_nearest_level(id * x[j]));
    pack_nibbles32(L, b.qs);
  }
}

void quant_iq4_xs(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockIQ4_XS*>(dst);
  uint8_t L[kQKK];
  float scales[8];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockIQ4_XS& b = blocks[i];
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = iq4_block_scale(x + 32 * ib, L + 32 * ib);
      const float a = std::fabs(scales[ib]);
      if (a > amax_scale) {
        amax_scale = a;
        max_scale = scales[ib];
      }
    }
    // Sub-block scales are 6-bit signed multiples of d = -max_scale/32 (so the largest maps to
    // -32). An all-zero super-block gives d = -0.0f, stored as f16 0x8000, as in the peer.
    const float d = -max_scale / 32;
    store_f16(b.d, d);
    const float id = d != 0.0f ? 1 / d : 0.0f;
    uint16_t scales_h = 0;
    std::memset(b.scales_l, 0, sizeof(b.scales_l));
    for (int ib = 0; ib < 8; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1 / dl : 0.0f;
      uint8_t* Lb = L + 32 * ib;
      const float* xb = x + 32 * ib;
      for (int j = 0; j < 32; ++j) Lb[j] = static_cast<uint8_t>(iq4_nearest_level(idl * xb[j]));
      l += 32;
      b.scales_l[ib / 2] =
          static_cast<uint8_t>(b.scales_l[ib / 2] | ((l & 0x0f) << (4 * (ib % 2))));
      scales_h = static_cast<uint16_t>(scales_h | ((l >> 4) << (2 * ib)));
    }
    store_u16(b.scales_h, scales_h);
    for (int ib = 0; ib < 8; ++ib) pack_nibbles32(L + 32 * ib, b.qs + 16 * ib);
  }
}

}  // namespace power::quant
