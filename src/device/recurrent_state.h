// RecurrentState: fixed-size per-sequence state of recurrent layers (conv windows, scan
// states), in slots the runtime hands to sequences.
//
// A model declares, per recurrent layer, how many f32 values one sequence needs
// (sdk::LayerState::recurrent: conv history + own values); a RecurrentState holds n_slots
// slots of all those layers, allocated whole when it is made (planned_bytes() for admission),
// never while decoding. A new slot is zeroed (a sequence's start). copy() copies one slot onto
// another: a snapshot before speculative drafting, and the restore after a rejection.
// Thread-safety: allocate/release are guarded by a mutex; a slot's values belong to the
// sequence that holds it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"

namespace power {

struct RecurrentStateConfig {
  std::vector<int64_t> layer_floats;  // per recurrent layer: f32 values per sequence
  int n_slots = 0;
};

class RecurrentState {
 public:
  static Result<std::unique_ptr<RecurrentState>> create(const RecurrentStateConfig& config);
  static Result<uint64_t> planned_bytes(const RecurrentStateConfig& config);

  const RecurrentStateConfig& config() const { return cfg_; }
  uint64_t slot_bytes() const { return slot_floats_ * sizeof(float); }
  uint64_t bytes_total() const { return slot_bytes() * static_cast<uint64_t>(cfg_.n_slots); }
  int slots_free() const;
  int64_t layer_floats(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < cfg_.layer_floats.size()
               ? cfg_.layer_floats[static_cast<size_t>(layer)]
               : 0;
  }

  // A zeroed slot; kResourceExhausted when none is free.
  Result<int> allocate();
  void release(int slot);
  // The values of recurrent layer `layer` in `slot`.
  float* layer(int slot, int layer);
  void zero(int slot);
  void copy(int src, int dst);

 private:
  explicit RecurrentState(const RecurrentStateConfig& cfg);
  RecurrentStateConfig cfg_;
  std::vector<int64_t> layer_offset_;
  int64_t slot_floats_ = 0;
  std::vector<float> values_;
  mutable std::mutex mu_;
  std::vector<int> free_;
};

}  // namespace power
