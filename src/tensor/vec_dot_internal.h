// Private to src/tensor: the float-lane accumulator the vec_dot references share, and the
// K-quant dot kernels (vec_dot_kquants.cpp). See vec_dot.cpp for the emulated order.
#pragma once

#include <cstdint>

namespace power::quant {

// Eight f32 lanes of an AVX2 __m256 accumulator.
struct Lanes8 {
  float v[8] = {};
  // v[k] = fma(d, float(lanes[k]), v[k]) (int32 -> f32 rounds to nearest even, like cvtdq2ps).
  void fma(float d, const int32_t* lanes);
  // hsum_float_8: upper half onto lower, then pairs (0+2, 1+3), then those two.
  float hsum() const;
};

// nb = number of 256-element super-blocks; `a` is a Q8_K row.
float dot_q2_k(const uint8_t* w, const uint8_t* a, int64_t nb);
float dot_q3_k(const uint8_t* w, const uint8_t* a, int64_t nb);
float dot_q4_k(const uint8_t* w, const uint8_t* a, int64_t nb);
float dot_q5_k(const uint8_t* w, const uint8_t* a, int64_t nb);
float dot_q6_k(const uint8_t* w, const uint8_t* a, int64_t nb);
float dot_iq4_xs(const uint8_t* w, const uint8_t* a, int64_t nb);

}  // namespace power::quant
