// Preemption policy: which running sequence gives way to a waiting one of higher priority.
//
// A victim must have a strictly lower base priority than the incoming request and must not
// have aged to the incoming request's level (so that aging, which protects low-priority work
// from starvation, also protects it from being preempted forever). Among victims the lowest
// priority goes first, then the most recently admitted. A preempted sequence keeps its
// tokens and returns to the waiting queue; it recomputes its KV when readmitted (mostly from
// the prefix cache, where its blocks are left).
// Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <span>

namespace power::runtime {

struct PreemptCandidate {
  int priority = 1;        // 0 high, 1 normal, 2 low
  int effective_rank = 1;  // priority lowered by aging
  uint64_t order = 0;      // admission order; larger = newer
};

class Preemption {
 public:
  // Index into `running` of the victim, or -1.
  static int pick_victim(std::span<const PreemptCandidate> running, int incoming_priority) {
    int best = -1;
    for (size_t i = 0; i < running.size(); ++i) {
      const PreemptCandidate& c = running[i];
      if (c.priority <= incoming_priority || c.effective_rank <= incoming_priority) continue;
      if (best < 0 || c.priority > running[static_cast<size_t>(best)].priority ||
          (c.priority == running[static_cast<size_t>(best)].priority &&
           c.order > running[static_cast<size_t>(best)].order)) {
        best = static_cast<int>(i);
      }
    }
    return best;
  }
};

}  // namespace power::runtime
