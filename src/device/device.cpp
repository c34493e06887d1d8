#include "device/device.h"

#include <algorithm>

#include "tensor/quant.h"

namespace power {
namespace {

class CpuDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  bool supports(sdk::Op op) const override { return op < sdk::Op::kCount; }
  // Every use reads the tensor through the reference dequantizers (tensor/quant.h) or the
  // matmul kernels, which cover every type those can decode.
  bool supports_type(GgmlType type, uint32_t uses) const override {
    return uses != 0 && dequantize_supported(type);
  }
};

}  // namespace

const Device& cpu_device() {
  static const CpuDevice device;
  return device;
}

bool DeviceWithout::supports(sdk::Op op) const {
  return cpu_device().supports(op) &&
         std::find(missing_.begin(), missing_.end(), op) == missing_.end();
}

}  // namespace power
