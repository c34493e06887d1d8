// The body of apply_epilogue (ops_internal.h), included by ops_nn.cpp (baseline x86-64) and by
// sgemm_avx2.cpp (AVX2; -ffp-contract=off there, so no step is contracted into an FMA and both
// compile to the same bits as the elementwise kernels). Private to src/onnx.
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
#include "onnx/graph.h"
#include "onnx/ops_internal.h"

namespace power::onnx {
namespace {

inline void epilogue_block_loop(const std::vector<FusedStep>& steps, const float* bias, int64_t c,
                                float* y, int64_t n) {
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
    for (const FusedStep& st : steps) {
      const float a = st.channel.empty() ? st.a : st.channel[c], b = st.b;
      switch (st.kind) {
        case FusedStep::kSave:
          std::copy(t, t + len, h);
          break;
        case FusedStep::kAdd:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] + a;
          break;
        case FusedStep::kSub:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] - a;
          break;
        case FusedStep::kRSub:
          for (int64_t i = 0; i < len; ++i) t[i] = a - t[i];
          break;
        case FusedStep::kMul:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] * a;
          break;
        case FusedStep::kDiv:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] / a;
          break;
        case FusedStep::kRDiv:
          for (int64_t i = 0; i < len; ++i) t[i] = a / t[i];
          break;
        case FusedStep::kAddS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] + h[i];
          break;
        case FusedStep::kSubS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] - h[i];
          break;
        case FusedStep::kRSubS:
          for (int64_t i = 0; i < len; ++i) t[i] = h[i] - t[i];
          break;
        case FusedStep::kMulS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] * h[i];
          break;
        case FusedStep::kDivS:
          for (int64_t i = 0; i < len; ++i) t[i] = t[i] / h[i];
          break;
        case FusedStep::kRDivS:
          for (int64_t i = 0; i < len; ++i) t[i] = h[i] / t[i];
          break;
        case FusedStep::kClip:
          for (int64_t i = 0; i < len; ++i) t[i] = clip_f32(t[i], a, b);
          break;
        case FusedStep::kRelu:
          for (int64_t i = 0; i < len; ++i) t[i] = relu_f32(t[i]);
          break;
        case FusedStep::kSigmoid:
          power::sigmoid(t, t, len);  // the Sigmoid kernel's (kernels layer, every ISA's bits)
          break;
        case FusedStep::kHardSigmoid:
          for (int64_t i = 0; i < len; ++i) t[i] = hard_sigmoid_f32(t[i], a, b);
          break;
      }
    }
  }
}

}  // namespace
}  // namespace power::onnx
