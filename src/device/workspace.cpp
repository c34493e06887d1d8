#include "device/workspace.h"

#include <algorithm>

#include "base/cpu.h"

namespace power {

Workspace::Workspace(const WorkspacePlan& plan, int64_t max_tokens_, int64_t n_ctx_, int n_threads)
    : cpu(n_threads, std::max<int64_t>(plan.max_row, 1), std::max<int64_t>(n_ctx_, 1)),
      max_tokens(max_tokens_),
      n_ctx(n_ctx_),
      widths(plan.widths),
      names(plan.names) {
  buffers.reserve(widths.size());
  for (int64_t w : widths) buffers.emplace_back(static_cast<size_t>(max_tokens * w));
  const auto n = static_cast<size_t>(max_tokens);
  token_ids.assign(n, 0);
  pos.assign(n, 0);
  chunk_of.assign(n, 0);
  output_rows.assign(n, 0);
  chunk_start.assign(n + 1, 0);
  encoder_chunks.reserve(n);
  row_tmp_.resize(static_cast<size_t>(std::max<int64_t>(plan.max_row, 1)));
}

uint64_t Workspace::planned_bytes(const WorkspacePlan& plan, int64_t max_tokens, int64_t n_ctx,
                                  int n_threads) {
  uint64_t floats = 0;
  for (int64_t w : plan.widths) floats += static_cast<uint64_t>(max_tokens * w);
  const int64_t max_row = std::max<int64_t>(plan.max_row, 1);
  floats += static_cast<uint64_t>(max_row);  // row_tmp
  const uint64_t threads =
      static_cast<uint64_t>(n_threads > 0 ? n_threads : cpu_features().logical_cores);
  // CpuContext: per thread a row and an attention span of scratch.
  floats += threads * static_cast<uint64_t>(max_row + std::max<int64_t>(n_ctx, 1));
  const uint64_t batch_ints = 5 * static_cast<uint64_t>(max_tokens) + 1;
  return floats * sizeof(float) + batch_ints * sizeof(int32_t);
}

uint64_t Workspace::bytes() const {
  uint64_t floats = row_tmp_.size() + exact_tile_.size();
  for (const auto& b : buffers) floats += b.size();
  const uint64_t ints =
      token_ids.size() + pos.size() + chunk_of.size() + output_rows.size() + chunk_start.size();
  return floats * sizeof(float) + ints * sizeof(int32_t) + cpu.scratch_bytes();
}

const float* Workspace::hidden_row(int64_t t) const {
  if (hidden.buffer < 0 || static_cast<size_t>(hidden.buffer) >= buffers.size()) return nullptr;
  return buffers[static_cast<size_t>(hidden.buffer)].data() + t * hidden.ld + hidden.col0;
}

float* Workspace::exact_tile(uint64_t floats) {
  if (exact_tile_.size() < floats) exact_tile_.resize(floats);
  return exact_tile_.data();
}

}  // namespace power
