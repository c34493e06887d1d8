// Device: what a device can run, and the form weights take on it.
//
// A device implements the SDK's op set (power/sdk/ops.h) and says, per op and per weight type
// and use, whether it can run it; load refuses a model whose declared ops or bound tensors a
// device cannot run, naming the op or the tensor. The CPU device (cpu_device()) runs every op
// and every type Power can dequantize. A test may narrow a device (DeviceWithout) to check
// that refusal.
// BoundWeight is a tensor as the device keeps it: the view into the file's read-only mapping
// (matrices, row tables: never copied) plus, for tensors read as f32 values (norm weights,
// biases, rope factors, conv kernels), their decoded values.
// Thread-safety: devices are immutable; BoundWeights are immutable after load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/ggml_types.h"
#include "power/sdk/ops.h"
#include "tensor/tensor.h"

namespace power {

class CachedRows;

struct BoundWeight {
  std::string name;
  TensorView view;
  uint32_t uses = 0;       // sdk::Use bits
  std::vector<float> f32;  // kUseVector / kUseConv: the values as f32
  // Streamed by the model's WeightStreamer (device/residency.h): its (first) plan group, plan
  // tensor index and the number of groups it spans (row pieces of a large matrix, consecutive
  // groups); -1: resident (the kernels read `view` or its packed copy).
  int32_t stream_group = -1;
  int32_t stream_tensor = -1;
  int32_t stream_pieces = 0;
  // Row lookups (embed) read through the weights cache instead of `view` (the model owns it).
  const CachedRows* cached_rows = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual bool supports(sdk::Op op) const = 0;
  // Whether the device can use a tensor of this type in these ways (sdk::Use bits).
  virtual bool supports_type(GgmlType type, uint32_t uses) const = 0;
};

// The CPU device (kernels/cpu).
const Device& cpu_device();

// The CPU device without some ops (tests of load-time refusal).
class DeviceWithout final : public Device {
 public:
  explicit DeviceWithout(std::vector<sdk::Op> missing) : missing_(std::move(missing)) {}
  std::string name() const override { return "cpu (restricted)"; }
  bool supports(sdk::Op op) const override;
  bool supports_type(GgmlType type, uint32_t uses) const override {
    return cpu_device().supports_type(type, uses);
  }

 private:
  std::vector<sdk::Op> missing_;
};

}  // namespace power
