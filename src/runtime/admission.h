// Admission: what a request costs in memory, and whether it may start now, later or never.
//
// MemoryPlanner turns a request's positions (prompt + max new tokens) into a MemoryPlan: the
// KV blocks it needs at the cache's dtype and geometry, their bytes, the fixed-size recurrent
// state one sequence holds (models with recurrent layers: a slot of the replica's pool), and
// its share of the activation scratch (workspace bytes / max running sequences; the workspace is
// allocated once at load, so the shares of all running work add up to it). Admission holds the
// limits (request budget in bytes, KV pool blocks, max running) and the reservations of running
// work. check_ever() says whether a plan could ever fit (else kDoesNotFit with the numbers);
// fits_now() whether it fits beside current reservations. Reservations are never exceeded:
// reserve() checks fits_now() itself. Thread-safety: none; the scheduler that owns it serializes
// access.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace power::runtime {

struct MemoryPlan {
  int64_t positions = 0;  // KV positions the request may write (prompt + max new tokens)
  int64_t kv_blocks = 0;
  uint64_t kv_bytes = 0;
  uint64_t state_bytes = 0;    // recurrent state slot (0 without recurrent layers)
  uint64_t scratch_bytes = 0;  // share of the activation workspace
  uint64_t total_bytes() const { return kv_bytes + state_bytes + scratch_bytes; }
};

class MemoryPlanner {
 public:
  MemoryPlanner(uint64_t kv_block_bytes, int block_tokens, uint64_t workspace_bytes,
                int max_running, uint64_t state_slot_bytes = 0);
  // `snapshots`: state snapshot copies the request holds besides its own slot (speculation on a
  // model with recurrent layers).
  MemoryPlan plan(int64_t positions, int snapshots = 0) const;
  uint64_t kv_block_bytes() const { return kv_block_bytes_; }

 private:
  uint64_t kv_block_bytes_;
  int block_tokens_;
  uint64_t scratch_share_bytes_;
  uint64_t state_slot_bytes_;
};

struct AdmissionLimits {
  uint64_t budget_bytes = 0;  // bytes requests may reserve in all (device budget - weights)
  int64_t kv_pool_blocks = 0;
  int max_running = 1;
};

class Admission {
 public:
  explicit Admission(const AdmissionLimits& limits) : limits_(limits) {}

  // kDoesNotFit naming needed vs. available bytes/blocks when the plan exceeds the limits
  // even with nothing else running.
  Status check_ever(const MemoryPlan& plan) const;
  bool fits_now(const MemoryPlan& plan) const;
  // Takes the reservation; false (nothing changed) when it does not fit now.
  bool reserve(const MemoryPlan& plan);
  void release(const MemoryPlan& plan);

  const AdmissionLimits& limits() const { return limits_; }
  uint64_t reserved_bytes() const { return reserved_bytes_; }
  int64_t reserved_blocks() const { return reserved_blocks_; }
  int running() const { return running_; }
  uint64_t peak_reserved_bytes() const { return peak_reserved_bytes_; }

 private:
  AdmissionLimits limits_;
  uint64_t reserved_bytes_ = 0;
  uint64_t peak_reserved_bytes_ = 0;
  int64_t reserved_blocks_ = 0;
  int running_ = 0;
};

}  // namespace power::runtime
