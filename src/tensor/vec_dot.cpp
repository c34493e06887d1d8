// Scalar reference dot products (quant.h vec_dot), written to give the peer's bits.
//
// How the peer computes (x86-64, its AVX2 kernels, which AVX-512 machines also run for the
// quantized types): per block, integer products are summed exactly into 8 int32 "lanes" (lane
// k holds the elements whose position inside their 32-element group is 4k..4k+3), converted to
// float, and accumulated per lane with a fused multiply-add by the block's float scale. At the
// end the 8 lanes are added pairwise (hsum_float_8). Some kernels keep extra scalar terms (the
// Q4_1/Q5_1 min terms, the Q5_K min term), which the peer's compiler contracts into an FMA.
// Because the integer part is exact, only the float steps need the peer's order; we emulate
// them with std::fma on explicit lanes. F16, BF16 and F32 follow the peer's AVX-512 build (the
// fixture machine): 4 x 16 f32 lanes with FMA (F16, F32), or the AVX512-BF16 dot-pair
// instruction (BF16), reduced in the same tree.
#include <cmath>

#include "tensor/quant.h"
#include "tensor/quant_internal.h"
#include "tensor/vec_dot_internal.h"

namespace power {
namespace quant {

float Lanes8::hsum() const {
  const float r0 = v[4] + v[0], r1 = v[5] + v[1], r2 = v[6] + v[2], r3 = v[7] + v[3];
  return (r0 + r2) + (r1 + r3);
}

void Lanes8::fma(float d, const int32_t* lanes) {
  for (int k = 0; k < 8; ++k) v[k] = std::fma(d, static_cast<float>(lanes[k]), v[k]);
}

namespace {

// Exact lane sums of w[e] * a[e] over one 32-element group, added into lanes[8].
inline void add_lanes32(const int* w, const int8_t* a, int32_t* lanes) {
  for (int e = 0; e < 32; ++e) lanes[e / 4] += w[e] * a[e];
}

// The two halves of a 32-block of nibbles in element order.
inline void unpack_nibbles(const uint8_t* qs, int* out, int offset) {
  for (int j = 0; j < 16; ++j) {
    out[j] = (qs[j] & 0x0f) + offset;
    out[j + 16] = (qs[j] >> 4) + offset;
  }
}

float dot_q4_0(const uint8_t* w, const uint8_t* a, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ4_0*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    int q[32];
    unpack_nibbles(x[i].qs, q, -8);
    int32_t lanes[8] = {};
    add_lanes32(q, y[i].qs, lanes);
    acc.fma(load_f16(x[i].d) * load_f16(y[i].d), lanes);
  }
  return acc.hsum();
}

float dot_q4_1(const uint8_t* w, const uint8_t* a, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ4_1*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_1*>(a);
  Lanes8 acc;
  float summs = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    summs = std::fma(load_f16(x[i].m), load_f16(y[i].s), summs);
    int q[32];
    unpack_nibbles(x[i].qs, q, 0);
    int32_t lanes[8] = {};
    add_lanes32(q, y[i].qs, lanes);
    acc.fma(load_f16(x[i].d) * load_f16(y[i].d), lanes);
  }
  return acc.hsum() + summs;
}

inline void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int* out, int offset) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < 16; ++j) {
    out[j] = ((qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4)) + offset;
    out[j + 16] = ((qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) + offset;
  }
}

float dot_q5_0(const uint8_t* w, const uint8_t* a, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ5_0*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    int q[32];
    unpack_q5(x[i].qs, x[i].qh, q, -16);
    int32_t lanes[8] = {};
    add_lanes32(q, y[i].qs, lanes);
    acc.fma(load_f16(x[i].d) * load_f16(y[i].d), lanes);
  }
  return acc.hsum();
}

float dot_q5_1(const uint8_t* w, const uint8_t* a, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ5_1*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_1*>(a);
  Lanes8 acc;
  float summs = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    summs = std::fma(load_f16(x[i].m), load_f16(y[i].s), summs);
    int q[32];
    unpack_q5(x[i].qs, x[i].qh, q, 0);
    int32_t lanes[8] = {};
    add_lanes32(q, y[i].qs, lanes);
    acc.fma(load_f16(x[i].d) * load_f16(y[i].d), lanes);
  }
  return acc.hsum() + summs;
}

float dot_q8_0(const uint8_t* w, const uint8_t* a, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockQ8_0*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
  Lanes8 acc;
  for (int64_t i = 0; i < nb; ++i) {
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = x[i].qs[j];
    int32_t lanes[8] = {};
    add_lanes32(q, y[i].qs, lanes);
    acc.fma(load_f16(x[i].d) * load_f16(y[i].d), lanes);
  }
  return acc.hsum();
}

// IQ4_NL: even and odd blocks go to two accumulators that are added lane-wise at the end; an
// odd trailing block is added in scalar code (contracted to an FMA by the peer's compiler).
float dot_iq4_nl(const uint8_t* w, const uint8_t* a, int64_t nb) {
  const auto* x = reinterpret_cast<const BlockIQ4_NL*>(w);
  const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
  Lanes8 acc[2];
  int64_t i = 0;
  auto block_lanes = [&](int64_t b, int32_t* lanes) {
    int q[32];
    for (int j = 0; j < 16; ++j) {
      q[j] = kIQ4Levels[x[b].qs[j] & 0x0f];
      q[j + 16] = kIQ4Levels[x[b].qs[j] >> 4];
    }
    add_lanes32(q, y[b].qs, lanes);
  };
  for (; i + 1 < nb; i += 2) {
    for (int p = 0; p < 2; ++p) {
      int32_t lanes[8] = {};
      block_lanes(i + p, lanes);
      acc[p].fma(load_f16(y[i + p].d) * load_f16(x[i + p].d), lanes);
    }
  }
  Lanes8 both;
  for (int k = 0; k < 8; ++k) both.v[k] = acc[0].v[k] + acc[1].v[k];
  float sum = both.hsum();
  for (; i < nb; ++i) {
    int32_t lanes[8] = {};
    block_lanes(i, lanes);
    int32_t total = 0;
    for (int k = 0; k < 8; ++k) total += lanes[k];
    sum = std::fma(load_f16(y[i].d) * load_f16(x[i].d), static_cast<float>(total), sum);
  }
  return sum;
}

// ---- plain float types (AVX-512 build of the peer) ----

// _mm512_reduce_add_ps: halves added recursively (16 -> 8 -> 4 -> 2 -> 1).
float reduce16(const float* v) {
  float t8[8], t4[4];
  for (int k = 0; k < 8; ++k) t8[k] = v[8 + k] + v[k];
  for (int k = 0; k < 4; ++k) t4[k] = t8[4 + k] + t8[k];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// 4 accumulators of 16 lanes over steps of 64 elements with FMA, reduced as sum0+sum2,
// sum1+sum3, then those two, then across lanes. Returns the reduced value and sets *done.
template <typename LoadW, typename LoadA>
float f32x64_fma_reduce(const LoadW& load_w, const LoadA& load_a, int64_t n, int64_t* done) {
  float acc[4][16] = {};
  const int64_t np = n & ~int64_t{63};
  for (int64_t i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 16; ++k) {
        const int64_t e = i + 16 * j + k;
        acc[j][k] = std::fma(load_w(e), load_a(e), acc[j][k]);
      }
    }
  }
  for (int k = 0; k < 16; ++k) {
    acc[0][k] = acc[0][k] + acc[2][k];
    acc[1][k] = acc[1][k] + acc[3][k];
  }
  for (int k = 0; k < 16; ++k) acc[0][k] = acc[0][k] + acc[1][k];
  *done = np;
  return reduce16(acc[0]);
}

float dot_f32(const uint8_t* w, const uint8_t* a, int64_t n) {
  auto lw = [w](int64_t e) { return load_f32(w + 4 * e); };
  auto la = [a](int64_t e) { return load_f32(a + 4 * e); };
  int64_t i = 0;
  float sum = f32x64_fma_reduce(lw, la, n, &i);
  for (; i < n; ++i) sum = std::fma(lw(i), la(i), sum);
  return sum;
}

float dot_f16(const uint8_t* w, const uint8_t* a, int64_t n) {
  auto lw = [w](int64_t e) { return load_f16(w + 2 * e); };
  auto la = [a](int64_t e) { return load_f16(a + 2 * e); };
  int64_t i = 0;
  double sum = f32x64_fma_reduce(lw, la, n, &i);
  for (; i < n; ++i) sum += static_cast<double>(lw(i) * la(i));
  return static_cast<float>(sum);
}

// AVX512-BF16 vdpbf16ps flushes denormal inputs and results to zero (DAZ/FTZ).
inline float flush_denormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}

float dot_bf16(const uint8_t* w, const uint8_t* a, int64_t n) {
  auto lw = [w](int64_t e) { return flush_denormal(bf16_to_f32(load_u16(w + 2 * e))); };
  auto la = [a](int64_t e) { return flush_denormal(bf16_to_f32(load_u16(a + 2 * e))); };
  // Two accumulators of 16 lanes; lane k of a 32-element half takes the pair (2k, 2k+1), odd
  // element first, each product (exact for bf16 inputs) rounded into the lane on its own.
  float acc[2][16] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 16; ++k) {
        const int64_t e = i + 32 * h + 2 * k;
        float c = acc[h][k];
        c = flush_denormal(c + flush_denormal(lw(e + 1) * la(e + 1)));
        c = flush_denormal(c + flush_denormal(lw(e) * la(e)));
        acc[h][k] = c;
      }
    }
  }
  double sum = 0.0;
  sum += static_cast<double>(reduce16(acc[0]));
  sum += static_cast<double>(reduce16(acc[1]));
  auto tw = [w](int64_t e) { return bf16_to_f32(load_u16(w + 2 * e)); };
  auto ta = [a](int64_t e) { return bf16_to_f32(load_u16(a + 2 * e)); };
  for (; i < n; ++i) sum += static_cast<double>(tw(i) * ta(i));
  return static_cast<float>(sum);
}

}  // namespace
}  // namespace quant

Result<float> vec_dot(GgmlType weight_type, const void* weight_row, const void* act_row,
                      int64_t n) {
  // Unknown types first: block_count needs a type the table knows.
  if (!vec_dot_activation_type(weight_type).ok()) {
    return quant::unsupported_type(weight_type, "vec_dot");
  }
  POWER_ASSIGN_OR_RETURN(const int64_t nb, quant::block_count(weight_type, n));
  const auto* w = static_cast<const uint8_t*>(weight_row);
  const auto* a = static_cast<const uint8_t*>(act_row);
  using namespace quant;
  switch (weight_type) {
    case GgmlType::F32:
      return dot_f32(w, a, n);
    case GgmlType::F16:
      return dot_f16(w, a, n);
    case GgmlType::BF16:
      return dot_bf16(w, a, n);
    case GgmlType::Q4_0:
      return dot_q4_0(w, a, nb);
    case GgmlType::Q4_1:
      return dot_q4_1(w, a, nb);
    case GgmlType::Q5_0:
      return dot_q5_0(w, a, nb);
    case GgmlType::Q5_1:
      return dot_q5_1(w, a, nb);
    case GgmlType::Q8_0:
      return dot_q8_0(w, a, nb);
    case GgmlType::IQ4_NL:
      return dot_iq4_nl(w, a, nb);
    case GgmlType::Q2_K:
      return dot_q2_k(w, a, nb);
    case GgmlType::Q3_K:
      return dot_q3_k(w, a, nb);
    case GgmlType::Q4_K:
      return dot_q4_k(w, a, nb);
    case GgmlType::Q5_K:
      return dot_q5_k(w, a, nb);
    case GgmlType::Q6_K:
      return dot_q6_k(w, a, nb);
    case GgmlType::IQ4_XS:
      return dot_iq4_xs(w, a, nb);
    default:
      return quant::unsupported_type(weight_type, "vec_dot");
  }
}

}  // namespace power
