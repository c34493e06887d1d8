#include "kernels/cpu/context.h"

namespace power {

CpuContext::CpuContext(int n_threads, int64_t max_row, int64_t max_span)
    : pool_(n_threads), max_row_(max_row), max_span_(max_span) {
  for (int t = 0; t < pool_.size(); ++t) {
    row_scratch_.emplace_back(static_cast<size_t>(max_row));
    span_scratch_.emplace_back(static_cast<size_t>(max_span));
  }
  tile_scratch_.resize(static_cast<size_t>(pool_.size()));
}

uint64_t CpuContext::scratch_bytes() const {
  uint64_t tile_bytes = 0;
  for (const auto& t : tile_scratch_) tile_bytes += t.size() * sizeof(float);
  return static_cast<uint64_t>(pool_.size()) * static_cast<uint64_t>(max_row_ + max_span_) *
             sizeof(float) +
         act_scratch_.size() + tile_bytes;
}

float* CpuContext::tile_scratch(int thread, uint64_t floats) {
  auto& buf = tile_scratch_[static_cast<size_t>(thread)];
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

uint8_t* CpuContext::act_scratch(uint64_t bytes) {
  constexpr uint64_t kAlign = 64;
  if (act_scratch_.size() < bytes + kAlign) act_scratch_.resize(bytes + kAlign);
  const auto base = reinterpret_cast<uintptr_t>(act_scratch_.data());
  return act_scratch_.data() + ((kAlign - base % kAlign) % kAlign);
}

}  // namespace power
