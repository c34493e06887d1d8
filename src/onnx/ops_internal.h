// Shared helpers of the kernel sources (ops_*.cpp). Internal to src/onnx.
#pragma once

#include <cmath>
#include <vector>

#include "onnx/ops.h"

namespace power::onnx {

using Ins = std::vector<const Tensor*>;
using Outs = std::vector<Tensor>;

inline Status op_error(const Node& n, std::string msg) {
  return Status(StatusCode::kInvalidArgument, n.label() + ": " + msg);
}
inline Status op_unsupported(const Node& n, std::string msg) {
  return Status(StatusCode::kUnsupported, n.label() + ": " + msg);
}

// Normalizes a possibly negative axis against rank; false when out of range.
inline bool norm_axis(int64_t& axis, int64_t rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank;
}

// Writes v into element i of t, converted to t's element type.
void store_f64(Tensor& t, int64_t i, double v);

Status need_inputs(const Node& n, const Ins& in, size_t min_count);
Status need_f32(const Node& n, const Tensor* t, const char* what);

// Registries of each source file, concatenated by all_ops().
void register_elementwise_ops(std::vector<OpDef>& ops);
void register_tensor_ops(std::vector<OpDef>& ops);
void register_nn_ops(std::vector<OpDef>& ops);

}  // namespace power::onnx
