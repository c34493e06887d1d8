#include "kernels/cpu/context.h"

namespace power {

CpuContext::CpuContext(int n_threads, int64_t max_row, int64_t max_span)
    : pool_(n_threads), max_row_(max_row), max_span_(max_span) {
  for (int t = 0; t < pool_.size(); ++t) {
    row_scratch_.emplace_back(static_cast<size_t>(max_row));
    span_scratch_.emplace_back(static_cast<size_t>(max_span));
  }
}

uint64_t CpuContext::scratch_bytes() const {
  return static_cast<uint64_t>(pool_.size()) * static_cast<uint64_t>(max_row_ + max_span_) *
         sizeof(float);
}

}  // namespace power
