// The operator kernels (CPU, float32 plus the integer/bool types shape arithmetic needs) and
// their load-time attribute checks. Internal to src/onnx.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "onnx/graph.h"

namespace power {
class ThreadPool;
}

namespace power::onnx {

struct OpContext {
  ThreadPool* pool = nullptr;
};

// in: one pointer per node input (nullptr when omitted); out: sized to the node's outputs.
using KernelFn = Status (*)(const Node& node, const std::vector<const Tensor*>& in,
                            std::vector<Tensor>& out, OpContext& ctx);
// Load-time check of attributes and input counts: kUnsupported/kInvalidArgument naming the node.
using CheckFn = Status (*)(const Node& node);

struct OpDef {
  const char* name;
  KernelFn run;
  CheckFn check;  // may be null
  bool view;      // output 0 shares input 0's bytes (Reshape, Squeeze, ...)
};

const OpDef* find_op(const std::string& op);
const std::vector<OpDef>& all_ops();

// BatchNormalization's per-channel factors as its kernel applies them (y = x * scale + shift):
// scale = gamma / sqrt(var + eps) and shift = beta - mean * scale, in float. The loader uses
// them to fold or fuse a BatchNormalization with the kernel's bits. shift may be null.
void batch_norm_factors(const float* gamma, const float* beta, const float* mean, const float* var,
                        float eps, int64_t channels, float* scale, float* shift);

// The products (MatMul, Gemm, Conv, LSTM) run on the kernels layer's sgemm and gemm_block
// (kernels/cpu/sgemm.h).

}  // namespace power::onnx
