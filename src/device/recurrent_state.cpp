#include "device/recurrent_state.h"

#include <algorithm>
#include <cstring>

#include "base/checked.h"

namespace power {

RecurrentState::RecurrentState(const RecurrentStateConfig& cfg) : cfg_(cfg) {
  for (int64_t f : cfg_.layer_floats) {
    layer_offset_.push_back(slot_floats_);
    slot_floats_ += f;
  }
}

Result<uint64_t> RecurrentState::planned_bytes(const RecurrentStateConfig& config) {
  uint64_t floats = 0;
  for (int64_t f : config.layer_floats) {
    if (f < 0) return Status(StatusCode::kInvalidArgument, "negative recurrent state size");
    floats += static_cast<uint64_t>(f);
  }
  if (config.n_slots < 0) return Status(StatusCode::kInvalidArgument, "negative slot count");
  uint64_t bytes = 0;
  if (!checked_mul(floats, static_cast<uint64_t>(config.n_slots), &bytes) ||
      !checked_mul(bytes, uint64_t{sizeof(float)}, &bytes)) {
    return Status(StatusCode::kOutOfRange, "recurrent state size overflows");
  }
  return bytes;
}

Result<std::unique_ptr<RecurrentState>> RecurrentState::create(const RecurrentStateConfig& config) {
  POWER_ASSIGN_OR_RETURN(uint64_t bytes, planned_bytes(config));
  std::unique_ptr<RecurrentState> s(new RecurrentState(config));
  s->values_.assign(bytes / sizeof(float), 0.0f);
  for (int i = config.n_slots - 1; i >= 0; --i) s->free_.push_back(i);
  return s;
}

int RecurrentState::slots_free() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int>(free_.size());
}

Result<int> RecurrentState::allocate() {
  int slot;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.empty()) {
      return Status(StatusCode::kResourceExhausted, "no free recurrent state slot")
          .with("slots", cfg_.n_slots);
    }
    slot = free_.back();
    free_.pop_back();
  }
  zero(slot);
  return slot;
}

void RecurrentState::release(int slot) {
  POWER_CHECK(slot >= 0 && slot < cfg_.n_slots);
  std::lock_guard<std::mutex> lk(mu_);
  POWER_CHECK(std::find(free_.begin(), free_.end(), slot) == free_.end());
  free_.push_back(slot);
}

float* RecurrentState::layer(int slot, int layer) {
  POWER_CHECK(slot >= 0 && slot < cfg_.n_slots);
  POWER_CHECK(layer >= 0 && static_cast<size_t>(layer) < layer_offset_.size());
  return values_.data() + static_cast<int64_t>(slot) * slot_floats_ +
         layer_offset_[static_cast<size_t>(layer)];
}

void RecurrentState::zero(int slot) {
  POWER_CHECK(slot >= 0 && slot < cfg_.n_slots);
  std::fill_n(values_.data() + static_cast<int64_t>(slot) * slot_floats_, slot_floats_, 0.0f);
}

void RecurrentState::copy(int src, int dst) {
  POWER_CHECK(src >= 0 && src < cfg_.n_slots && dst >= 0 && dst < cfg_.n_slots);
  if (src == dst) return;
  std::memcpy(values_.data() + static_cast<int64_t>(dst) * slot_floats_,
              values_.data() + static_cast<int64_t>(src) * slot_floats_,
              static_cast<size_t>(slot_floats_) * sizeof(float));
}

}  // namespace power
