// The body of apply_epilogue (sgemm.h), included by sgemm.cpp (baseline x86-64) and by
// sgemm_avx2.cpp (AVX2; -ffp-contract=off there, so no step is contracted into an FMA and both
// compile to the same bits as the elementwise kernels). Private to the kernels layer.
//
// The function has internal linkage (an unnamed namespace) on purpose: an `inline` function with
// external linkage is one symbol that the linker takes from either object, so the AVX2 wrapper
// ran the baseline copy, and a link in the other order would run AVX2 code on any CPU.
// tests/isa_objects_test.cmake checks that the ISA objects define no such shared symbol.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/sgemm.h"

namespace power::kernels {
namespace {

inline void epilogue_block_loop(const std::vector<EpilogueStep>& steps, const float* bias,
                                int64_t c, float* y, int64_t n) {
  // Block by block, so the register's copy stays in L1 and each step is its own
  // vectorizable loop.
  constexpr int64_t kBlock = 512;
  float reg[kBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t len = std::min(kBlock, n - j0);
    float* __restrict t = y + j0;
    if (bias) {
      const float bv = *bias;
      for (int64_t i = 0; i < len; ++i) t[i] += bv;
    }
    float* __restrict h = reg;
    for (const EpilogueStep& st : steps) {
      const float a = st.channel.empty() ? st.a : st.channel[c], b = st.b;
      switch (st.kind) {
        case EpilogueStep::kSave:
          std::copy(t, t + len, h);
          break;
        case EpilogueStep::kAdd:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] + a;
          break;
        case EpilogueStep::kSub:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] - a;
          break;
        case EpilogueStep::kRSub:
          for (int64_t i = 0; i < len; ++i) t[i] = a - t[i];
          break;
        case EpilogueStep::kMul:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] * a;
          break;
        case EpilogueStep::kDiv:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] / a;
          break;
        case EpilogueStep::kRDiv:
          for (int64_t i = 0; i < len; ++i) t[i] = a / t[i];
          break;
        case EpilogueStep::kAddS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] + h[i];
          break;
        case EpilogueStep::kSubS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] - h[i];
          break;
        case EpilogueStep::kRSubS:
          for (int64_t i = 0; i < len; ++i) t[i] = h[i] - t[i];
          break;
        case EpilogueStep::kMulS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] * h[i];
          break;
        case EpilogueStep::kDivS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] / h[i];
          break;
        case EpilogueStep::kRDivS:
          for (int64_t i = 0; i < len; ++i) t[i] = h[i] / t[i];
          break;
        case EpilogueStep::kClip:
          for (int64_t i = 0; i < len; ++i) t[i] = clip_f32(t[i], a, b);
          break;
        case EpilogueStep::kRelu:
          for (int64_t i = 0; i < len; ++i) t[i] = relu_f32(t[i]);
          break;
        case EpilogueStep::kSigmoid:
          power::sigmoid(t, t, len);  // the Sigmoid kernel's (kernels layer, every ISA's bits)
          break;
        case EpilogueStep::kHardSigmoid:
          for (int64_t i = 0; i < len; ++i) t[i] = hard_sigmoid_f32(t[i], a, b);
          break;
      }
    }
  }
}

}  // namespace
}  // namespace power::kernels
