#include "runtime/admission.h"

#include <algorithm>

namespace power::runtime {

MemoryPlanner::MemoryPlanner(uint64_t kv_block_bytes, int block_tokens, uint64_t workspace_bytes,
                             int max_running, uint64_t state_slot_bytes)
    : kv_block_bytes_(kv_block_bytes),
      block_tokens_(block_tokens),
      scratch_share_bytes_(workspace_bytes /
                           static_cast<uint64_t>(max_running > 0 ? max_running : 1)),
      state_slot_bytes_(state_slot_bytes) {}

MemoryPlan MemoryPlanner::plan(int64_t positions, int snapshots) const {
  MemoryPlan p;
  p.positions = positions;
  p.kv_blocks = (positions + block_tokens_ - 1) / block_tokens_;
  p.kv_bytes = static_cast<uint64_t>(p.kv_blocks) * kv_block_bytes_;
  p.state_bytes = state_slot_bytes_ * static_cast<uint64_t>(1 + std::max(0, snapshots));
  p.scratch_bytes = scratch_share_bytes_;
  return p;
}

Status Admission::check_ever(const MemoryPlan& plan) const {
  if (plan.total_bytes() > limits_.budget_bytes || plan.kv_blocks > limits_.kv_pool_blocks) {
    return Status(StatusCode::kDoesNotFit, "the request can never fit the memory budget")
        .with("positions", plan.positions)
        .with("needed_bytes", plan.total_bytes())
        .with("kv_bytes", plan.kv_bytes)
        .with("state_bytes", plan.state_bytes)
        .with("scratch_bytes", plan.scratch_bytes)
        .with("budget_bytes", limits_.budget_bytes)
        .with("kv_blocks", plan.kv_blocks)
        .with("kv_pool_blocks", limits_.kv_pool_blocks);
  }
  return Status();
}

bool Admission::fits_now(const MemoryPlan& plan) const {
  return running_ < limits_.max_running &&
         reserved_bytes_ + plan.total_bytes() <= limits_.budget_bytes &&
         reserved_blocks_ + plan.kv_blocks <= limits_.kv_pool_blocks;
}

bool Admission::reserve(const MemoryPlan& plan) {
  if (!fits_now(plan)) return false;
  reserved_bytes_ += plan.total_bytes();
  reserved_blocks_ += plan.kv_blocks;
  ++running_;
  if (reserved_bytes_ > peak_reserved_bytes_) peak_reserved_bytes_ = reserved_bytes_;
  return true;
}

void Admission::release(const MemoryPlan& plan) {
  POWER_CHECK(running_ > 0 && reserved_bytes_ >= plan.total_bytes() &&
              reserved_blocks_ >= plan.kv_blocks);
  reserved_bytes_ -= plan.total_bytes();
  reserved_blocks_ -= plan.kv_blocks;
  --running_;
}

}  // namespace power::runtime
