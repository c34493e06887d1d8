// A Conv's bias and fused steps applied to one row of a register tile before the SGEMM block
// stores it (TileEpilogue, sgemm_avx2.h). Included by sgemm_avx2.cpp (256-bit registers) and
// sgemm_avx512.cpp (512-bit); both compile with -ffp-contract=off. Private to src/onnx.
//
// Each step is the vector form of the scalar loop in epilogue_impl.h, lane by lane the same
// IEEE operation, so a fused tile stores the bits the separate pass would have written:
// add, sub, mul and div round once each; max/min take their operands in the order that gives
// std::max/std::min's answer when one is NaN (x86 max(a, b) is a > b ? a : b, min(a, b) is
// a < b ? a : b); HardSigmoid is a * t, then + b (two roundings, as in the scalar code). The
// Sigmoid step (std::exp) has no vector form with the same bits: chains with one are not
// fused into tiles (tile_epilogue_supported).
//
// Internal linkage on purpose (see epilogue_impl.h): every ISA object gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "onnx/graph.h"
#include "onnx/sgemm_avx2.h"

namespace power::onnx {
namespace {

// The few vector operations a step needs, for 256- and 512-bit registers (structs rather than
// a template over the vector type, whose alignment attributes a template argument drops).
struct Ops256 {
  using V = __m256;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }  // a > b ? a : b
  static V min(V a, V b) { return _mm256_min_ps(a, b); }  // a < b ? a : b
};

#if defined(__AVX512F__)
struct Ops512 {
  using V = __m512;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  // The zero-masked forms with every lane set: the plain ones pass GCC 12 an "undefined"
  // source that -Wmaybe-uninitialized reports.
  static V max(V a, V b) { return _mm512_maskz_max_ps(0xffff, a, b); }
  static V min(V a, V b) { return _mm512_maskz_min_ps(0xffff, a, b); }
};
#endif

// Row `row` of C (output channel e.c + row) held in two vectors: bias, then each step.
template <class O>
__attribute__((always_inline)) inline void tile_row_epilogue(const TileEpilogue& e, int64_t row,
                                                             typename O::V& t0, typename O::V& t1) {
  using V = typename O::V;
  if (e.bias) {
    const V b = O::set1(e.bias[row]);
    t0 = O::add(t0, b);
    t1 = O::add(t1, b);
  }
  const V zero = O::set1(0.0f), one = O::set1(1.0f);
  V h0 = zero, h1 = zero;
  const int64_t c = e.c + row;
  for (const FusedStep& st : *e.steps) {
    const V a = O::set1(st.channel.empty() ? st.a : st.channel[static_cast<size_t>(c)]);
    switch (st.kind) {
      case FusedStep::kSave:
        h0 = t0;
        h1 = t1;
        break;
      case FusedStep::kAdd:
        t0 = O::add(t0, a);
        t1 = O::add(t1, a);
        break;
      case FusedStep::kSub:
        t0 = O::sub(t0, a);
        t1 = O::sub(t1, a);
        break;
      case FusedStep::kRSub:
        t0 = O::sub(a, t0);
        t1 = O::sub(a, t1);
        break;
      case FusedStep::kMul:
        t0 = O::mul(t0, a);
        t1 = O::mul(t1, a);
        break;
      case FusedStep::kDiv:
        t0 = O::div(t0, a);
        t1 = O::div(t1, a);
        break;
      case FusedStep::kRDiv:
        t0 = O::div(a, t0);
        t1 = O::div(a, t1);
        break;
      case FusedStep::kAddS:
        t0 = O::add(t0, h0);
        t1 = O::add(t1, h1);
        break;
      case FusedStep::kSubS:
        t0 = O::sub(t0, h0);
        t1 = O::sub(t1, h1);
        break;
      case FusedStep::kRSubS:
        t0 = O::sub(h0, t0);
        t1 = O::sub(h1, t1);
        break;
      case FusedStep::kMulS:
        t0 = O::mul(t0, h0);
        t1 = O::mul(t1, h1);
        break;
      case FusedStep::kDivS:
        t0 = O::div(t0, h0);
        t1 = O::div(t1, h1);
        break;
      case FusedStep::kRDivS:
        t0 = O::div(h0, t0);
        t1 = O::div(h1, t1);
        break;
      case FusedStep::kClip: {  // std::min(std::max(t, lo), hi)
        const V hi = O::set1(st.b);
        t0 = O::min(hi, O::max(a, t0));
        t1 = O::min(hi, O::max(a, t1));
        break;
      }
      case FusedStep::kRelu:  // t > 0 ? t : 0
        t0 = O::max(t0, zero);
        t1 = O::max(t1, zero);
        break;
      case FusedStep::kHardSigmoid: {  // std::max(0, std::min(1, a * t + b))
        const V b = O::set1(st.b);
        t0 = O::max(O::min(O::add(O::mul(a, t0), b), one), zero);
        t1 = O::max(O::min(O::add(O::mul(a, t1), b), one), zero);
        break;
      }
      case FusedStep::kSigmoid:  // excluded by tile_epilogue_supported
        break;
    }
  }
}

}  // namespace
}  // namespace power::onnx
