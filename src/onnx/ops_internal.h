// Shared helpers of the kernel sources (ops_*.cpp). Internal to src/onnx.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/sgemm.h"
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

// f(begin, end) over [0, count) items of `per_item` elements each: split across the pool's
// threads when it has several and there are at least 64 Ki elements, else one call.
template <typename F>
inline void for_ranges(ThreadPool* pool, int64_t count, int64_t per_item, F f) {
  if (pool && pool->size() > 1 && count > 1 && count * per_item >= 65536) {
    pool->parallel_for(static_cast<size_t>(count), [&](size_t b, size_t e, int) {
      f(static_cast<int64_t>(b), static_cast<int64_t>(e));
    });
  } else {
    f(0, count);
  }
}

// relu_f32, clip_f32, hard_sigmoid_f32 and apply_epilogue (a fused chain's steps over a row) are
// the kernels layer's (kernels/cpu/sgemm.h), shared by the elementwise kernels and the fused
// epilogues.

// Writes v into element i of t, converted to t's element type.
void store_f64(Tensor& t, int64_t i, double v);

Status need_inputs(const Node& n, const Ins& in, size_t min_count);
Status need_f32(const Node& n, const Tensor* t, const char* what);

// Registries of each source file, concatenated by all_ops().
void register_elementwise_ops(std::vector<OpDef>& ops);
void register_tensor_ops(std::vector<OpDef>& ops);
void register_nn_ops(std::vector<OpDef>& ops);

}  // namespace power::onnx
