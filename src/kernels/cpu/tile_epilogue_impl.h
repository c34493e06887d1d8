// A Conv's bias and fused steps applied to one row of a register tile before the SGEMM block
// stores it (TileEpilogue, sgemm.h). Included by sgemm_avx2.cpp (256-bit registers) and
// sgemm_avx512.cpp (512-bit); both compile with -ffp-contract=off. Private to the kernels layer.
//
// Each step is the vector form of the scalar loop in epilogue_impl.h, lane by lane the same
// IEEE operation, so a fused tile stores the bits the separate pass would have written:
// add, sub, mul and div round once each; max/min take their operands in the order that gives
// std::max/std::min's answer when one is NaN (x86 max(a, b) is a > b ? a : b, min(a, b) is
// a < b ? a : b); HardSigmoid is a * t, then + b (two roundings, as in the scalar code). The
// Sigmoid step stores the block's vectors and runs the kernels layer's sigmoid over them, the
// function the separate pass calls, so every step kind goes into the tiles.
//
// Internal linkage on purpose (see epilogue_impl.h): every ISA object gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/sgemm_internal.h"

namespace power::kernels {
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
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
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
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
};
#endif

// f(0), f(1), ..., f(R - 1), each call inlined with its constant index, so arrays of registers
// indexed by it stay in registers.
template <int R, class F>
__attribute__((always_inline)) inline void each_row(F&& f) {
  [&]<int... r>(std::integer_sequence<int, r...>) __attribute__((always_inline)) {
    (f(r), ...);
  }
  (std::make_integer_sequence<int, R>());
}

// The bias and steps on R rows of N vectors each, held in registers t[r][n]: row r is output
// channel c + r and gets bias[r] first (none when bias is null). Step by step over all the
// vectors, so a step's kind is decided once per block rather than once per row, and the
// values stay in their registers but for a Sigmoid step (the SGEMM tiles: R rows of C, two
// vectors each; a depthwise plane: one channel, N vectors).
template <class O, int R, int N>
__attribute__((always_inline)) inline void epilogue_regs(const std::vector<EpilogueStep>& steps,
                                                         const float* bias, int64_t c,
                                                         typename O::V (&t)[R][N]) {
  using V = typename O::V;
  if (bias) {
    each_row<R>([&](int r) __attribute__((always_inline)) {
      const V b = O::set1(bias[r]);
      each_row<N>([&](int n) __attribute__((always_inline)) { t[r][n] = O::add(t[r][n], b); });
    });
  }
  const V zero = O::set1(0.0f), one = O::set1(1.0f);
  V h[R][N];  // the saved values (kSave)
  each_row<R>([&](int r) __attribute__((always_inline)) {
    each_row<N>([&](int n) __attribute__((always_inline)) { h[r][n] = zero; });
  });
  for (const EpilogueStep& st : steps) {
    const float* ch = st.channel.empty() ? nullptr : st.channel.data() + c;
    // Applies op(t, h, a) to every vector, a being the step's constant or the row's channel
    // value.
    auto all = [&](auto op) __attribute__((always_inline)) {
      each_row<R>([&](int r) __attribute__((always_inline)) {
        const V a = O::set1(ch ? ch[r] : st.a);
        each_row<N>([&](int n)
                        __attribute__((always_inline)) { t[r][n] = op(t[r][n], h[r][n], a); });
      });
    };
    switch (st.kind) {
      case EpilogueStep::kSave:
        each_row<R>([&](int r) __attribute__((always_inline)) {
          each_row<N>([&](int n) __attribute__((always_inline)) { h[r][n] = t[r][n]; });
        });
        break;
      case EpilogueStep::kAdd:
        all([](V t, V, V a) { return O::add(t, a); });
        break;
      case EpilogueStep::kSub:
        all([](V t, V, V a) { return O::sub(t, a); });
        break;
      case EpilogueStep::kRSub:
        all([](V t, V, V a) { return O::sub(a, t); });
        break;
      case EpilogueStep::kMul:
        all([](V t, V, V a) { return O::mul(t, a); });
        break;
      case EpilogueStep::kDiv:
        all([](V t, V, V a) { return O::div(t, a); });
        break;
      case EpilogueStep::kRDiv:
        all([](V t, V, V a) { return O::div(a, t); });
        break;
      case EpilogueStep::kAddS:
        all([](V t, V h, V) { return O::add(t, h); });
        break;
      case EpilogueStep::kSubS:
        all([](V t, V h, V) { return O::sub(t, h); });
        break;
      case EpilogueStep::kRSubS:
        all([](V t, V h, V) { return O::sub(h, t); });
        break;
      case EpilogueStep::kMulS:
        all([](V t, V h, V) { return O::mul(t, h); });
        break;
      case EpilogueStep::kDivS:
        all([](V t, V h, V) { return O::div(t, h); });
        break;
      case EpilogueStep::kRDivS:
        all([](V t, V h, V) { return O::div(h, t); });
        break;
      case EpilogueStep::kClip: {  // std::min(std::max(t, lo), hi)
        const V hi = O::set1(st.b);
        all([&](V t, V, V a) { return O::min(hi, O::max(a, t)); });
        break;
      }
      case EpilogueStep::kRelu:  // t > 0 ? t : 0
        all([&](V t, V, V) { return O::max(t, zero); });
        break;
      case EpilogueStep::kHardSigmoid: {  // std::max(0, std::min(1, a * t + b))
        const V b = O::set1(st.b);
        all([&](V t, V, V a) { return O::max(O::min(O::add(O::mul(a, t), b), one), zero); });
        break;
      }
      case EpilogueStep::kSigmoid: {  // the kernels layer's sigmoid over the block (its bits)
        constexpr int kLanes = static_cast<int>(sizeof(V) / sizeof(float));
        alignas(64) float buf[R * N * kLanes];
        each_row<R>([&](int r) __attribute__((always_inline)) {
          each_row<N>([&](int n) __attribute__((always_inline)) {
            O::store(buf + (r * N + n) * kLanes, t[r][n]);
          });
        });
        power::sigmoid(buf, buf, R * N * kLanes);
        each_row<R>([&](int r) __attribute__((always_inline)) {
          each_row<N>([&](int n) __attribute__((always_inline)) {
            t[r][n] = O::load(buf + (r * N + n) * kLanes);
          });
        });
        break;
      }
    }
  }
}

// Rows row .. row + R - 1 of an SGEMM register tile (two vectors each): e's bias and steps.
template <class O, int R>
__attribute__((always_inline)) inline void tile_epilogue(const TileEpilogue& e, int64_t row,
                                                         typename O::V (&t)[R][2]) {
  epilogue_regs<O, R, 2>(*e.steps, e.bias ? e.bias + row : nullptr, e.c + row, t);
}

}  // namespace
}  // namespace power::kernels
