// Helpers the CPU op files share (private to src/device).
#pragma once

#include <cstdint>

#include "device/device.h"
#include "device/workspace.h"
#include "power/sdk/tensor.h"

namespace power::cpu_ops {

inline const BoundWeight* bound(const sdk::Weight& w) {
  return static_cast<const BoundWeight*>(w.handle);
}

// The f32 values of a vector weight (null when absent).
inline const float* values_of(const sdk::Weight* w) {
  if (w == nullptr || !*w) return nullptr;
  const BoundWeight* b = bound(*w);
  return b->f32.empty() ? nullptr : b->f32.data();
}
inline int64_t values_size(const sdk::Weight* w) {
  return (w == nullptr || !*w) ? 0 : static_cast<int64_t>(bound(*w)->f32.size());
}

// Runs fn(r) for rows [0, n) over the compute threads when there are several (the row
// operations between the matmuls would otherwise run on one thread while the others wait).
template <typename Fn>
void for_each_row(Workspace& ws, int64_t n, Fn fn) {
  if (n <= 1) {
    if (n == 1) fn(int64_t{0});
    return;
  }
  ws.cpu.pool().parallel_for(static_cast<size_t>(n), [&](size_t b, size_t e, int) {
    for (size_t t = b; t < e; ++t) fn(static_cast<int64_t>(t));
  });
}

}  // namespace power::cpu_ops
