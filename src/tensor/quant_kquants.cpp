// K-quants (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Dequantization and the
// peer's reference quantizers without importance matrix (ggml-quants.c quantize_row_*_ref).
//
// Every float expression keeps the peer's operand order and association (a*b*c is (a*b)*c,
// ints are converted where the peer converts them); the file is built with -ffp-contract=off.
// The scale searches (kq_search_*) are our own rewrite of ggml's make_qx_quants,
// make_q3_quants and make_qkx2_quants: same candidates, same accumulation order, same
// tie-breaking, because a different rounding in a sum can flip a choice and change bytes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant_internal.h"

namespace power::quant {
namespace {

// Below this every element of a group counts as zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupEps = 1e-15f;

inline int clamp_int(int v, int lo, int hi) {
  return std::max(lo, std::min(hi, v));
}

// Symmetric levels in [-nmax, nmax-1] for n values, weighted by x^2 (ggml make_qx_quants with
// rmse_type 1 and no importance weights). Writes L = level + nmax and returns the scale that
// minimizes the weighted squared error among 19 candidate inverse scales around -nmax/max.
float kq_search_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float lf = static_cast<float>(l);
    sumlx += w * x[i] * lf;
    suml2 += w * lf * lf;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float lf = static_cast<float>(clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * lf;
      suml2 += w * lf * lf;
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric levels for Q3_K (ggml make_q3_quants with do_rmse): start from -nmax/max, then up
// to 5 passes of coordinate descent moving single levels while the x^2-weighted fit improves.
// Writes L = level + nmax (or all 0 for a zero group) and returns sumlx/suml2.
float kq_search_q3(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0.0f) {
        float sl2 = suml2 - w * li * li;
        const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const float nl = static_cast<float>(new_l);
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// Affine levels 0..nmax with an offset (ggml make_qkx2_quants): x ~ scale*L - the_min with
// the_min >= 0. Tries nstep+1 inverse scales (rmin + rdelta*k + nmax)/(max-min), solving the
// weighted least-squares scale/offset for each level assignment, and keeps the best by
// weighted |error| (use_mad) or squared error. `work` is scratch for n levels.
float kq_search_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* work, float rmin, float rdelta, int nstep,
                       bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_err = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_err += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      work[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0.0f;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(work[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        err += weights[i] * diff;
      }
      if (err < best_err) {
        std::memcpy(L, work, static_cast<size_t>(n));
        best_err = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Packs 256 2-bit levels: byte l of each 32-byte group holds elements l, l+32, l+64, l+96 of
// the corresponding 128-element half.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQKK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- dequantization

void dequant_q2_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = load_f16(b.d);
    const float dmin = load_f16(b.dmin);
    const uint8_t* q = b.qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0f);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

void dequant_q3_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d_all = load_f16(b.d);
    const uint8_t* q = b.qs;
    uint8_t mask = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(q3k_scale(is++, b.scales));
          for (int l = 0; l < 16; ++l) {
            const int k = l + 16 * part;
            const int v = ((q[k] >> shift) & 3) - ((b.hmask[k] & mask) ? 0 : 4);
            *dst++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequant_q4_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_K& b = blocks[i];
    const float d = load_f16(b.d);
    const float dmin = load_f16(b.dmin);
    const uint8_t* q = b.qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      k4_scale_min(is, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      k4_scale_min(is + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ5_K& b = blocks[i];
    const float d = load_f16(b.d);
    const float dmin = load_f16(b.dmin);
    const uint8_t* ql = b.qs;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      uint8_t sc, m;
      k4_scale_min(is, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      k4_scale_min(is + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const int v = (ql[l] & 0x0f) + ((b.qh[l] & u1) ? 16 : 0);
        *dst++ = d1 * static_cast<float>(v) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0);
        *dst++ = d2 * static_cast<float>(v) - m2;
      }
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequant_q6_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_K& b = blocks[i];
    const float d = load_f16(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// ---------------------------------------------------------------- quantization

void quant_q2_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ2_K*>(dst);
  uint8_t L[kQKK];
  uint8_t work[16];
  float weights[16];
  float mins[16];
  float scales[16];
  const float kScaleLevels = 15.0f;  // scales and mins are stored as 4-bit multiples
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ2_K& b = blocks[i];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = kq_search_affine(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], work, -0.5f,
                                   0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0.0f) {
      const float iscale = kScaleLevels / max_scale;
      for (int j = 0; j < 16; ++j)
        b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      store_f16(b.d, max_scale / kScaleLevels);
    } else {
      std::memset(b.scales, 0, sizeof(b.scales));
      store_f16(b.d, 0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = kScaleLevels / max_min;
      for (int j = 0; j < 16; ++j) {
        b.scales[j] = static_cast<uint8_t>(b.scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      store_f16(b.dmin, max_min / kScaleLevels);
    } else {
      store_f16(b.dmin, 0.0f);
    }
    // Re-derive the levels against the scales as stored (f16 super-scale times 4-bit scale).
    for (int j = 0; j < 16; ++j) {
      const float d = load_f16(b.d) * static_cast<float>(b.scales[j] & 0x0f);
      if (d == 0.0f) continue;
      const float dm = load_f16(b.dmin) * static_cast<float>(b.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
      }
    }
    pack_2bit(L, b.qs);
  }
}

void quant_q3_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ3_K*>(dst);
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ3_K& b = blocks[i];
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = kq_search_q3(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    std::memset(b.scales, 0, sizeof(b.scales));
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        // The peer narrows to int8_t before clamping; the value is within [-32, 32] anyway.
        int l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = clamp_int(l, -32, 31) + 32;
        if (j < 8) {
          b.scales[j] = static_cast<uint8_t>(l & 0x0f);
        } else {
          b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | ((l & 0x0f) << 4));
        }
        b.scales[j % 4 + 8] =
            static_cast<uint8_t>(b.scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
      }
      store_f16(b.d, 1 / iscale);
    } else {
      store_f16(b.d, 0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = load_f16(b.d) * static_cast<float>(q3k_scale(j, b.scales));
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
      }
    }
    // High bit of each 3-bit level: element j sets bit (j / 32) of hmask[j % 32].
    std::memset(b.hmask, 0, sizeof(b.hmask));
    uint8_t low[kQKK];
    for (int j = 0; j < kQKK; ++j) {
      int l = L[j];
      if (l > 3) {
        b.hmask[j % 32] = static_cast<uint8_t>(b.hmask[j % 32] | (1u << (j / 32)));
        l -= 4;
      }
      low[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(low, b.qs);
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-element sub-block an affine fit weighted
// by rms(x) + |x|, then 6-bit scales/mins relative to the largest, then levels re-derived
// against the stored scales. Writes the packed scales, d, dmin; returns the levels in L.
template <typename Block>
void quant_k4_common(const float* x, Block& b, uint8_t* L, int nmax, float rmin, float rdelta,
                     int nstep) {
  uint8_t work[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = kq_search_affine(32, nmax, xs, weights, L + 32 * j, &mins[j], work, rmin, rdelta,
                                 nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  std::memset(b.scales, 0, sizeof(b.scales));
  for (int j = 0; j < 8; ++j) {
    // The peer stores nearest_int into uint8_t (mod 256) and then clamps to 63.
    const uint8_t ls =
        std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    k4_pack_scale_min(j, ls, lm, b.scales);
  }
  store_f16(b.d, max_scale / 63.0f);
  store_f16(b.dmin, max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, b.scales, &sc, &m);
    const float d = load_f16(b.d) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = load_f16(b.dmin) * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] =
          static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
  }
}

void quant_q4_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ4_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ4_K& b = blocks[i];
    quant_k4_common(x, b, L, 15, -1.0f, 0.1f, 20);
    uint8_t* q = b.qs;
    for (int j = 0; j < kQKK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quant_q5_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ5_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ5_K& b = blocks[i];
    quant_k4_common(x, b, L, 31, -0.5f, 0.1f, 15);
    std::memset(b.qh, 0, sizeof(b.qh));
    uint8_t* ql = b.qs;
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQKK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          b.qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          b.qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quant_q6_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ6_K*>(dst);
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ6_K& b = blocks[i];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = kq_search_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
      const float a = std::fabs(scales[ib]);
      if (a > max_abs_scale) {
        max_abs_scale = a;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupEps) {
      std::memset(&b, 0, sizeof(b));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    store_f16(b.d, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib) {
      b.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < 16; ++j) {
      const float d = load_f16(b.d) * static_cast<float>(b.scales[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = b.ql;
    uint8_t* qh = b.qh;
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0x0f) | ((q3 & 0x0f) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0x0f) | ((q4 & 0x0f) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}

}  // namespace power::quant
