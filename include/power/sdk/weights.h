// Declaring the tensors a model needs. A package's load() asks for each tensor by name with
// the shape it must have, how it will be used and which types it accepts; Power checks every
// declaration against the file before any compute, collects all mismatches and fails the
// load with the first one (and the count of the others), naming the tensor and the expected
// vs. actual shape or type. A missing optional tensor gives an empty Weight.
//
// Shapes: ne0 first; kAnyDim matches any size (read the size off the returned Weight);
// trailing dimensions of 1 are equivalent ([256] == [256, 1]).
// Uses tell the device what it must be able to do with the tensor (matmul over its type,
// row lookups, or reading it as f32 values); a device that cannot is named in the error at
// load. Declaring the same tensor twice adds the uses (a tied output head is the token
// embedding declared again for kMatmul) and returns the same binding.
// Thread-safety: a Weights binder is used by one load() call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "power/sdk/tensor.h"
#include "power/status.h"

namespace power::sdk {

inline constexpr int64_t kAnyDim = -1;

enum Use : uint32_t {
  kUseMatmul = 1u << 0,  // a weight matrix of linear(): y = W x
  kUseRows = 1u << 1,    // rows read as f32 (embed(), add_row())
  kUseVector = 1u << 2,  // the whole tensor as f32 values (norm weights, biases, factors)
  kUseConv = 1u << 3,    // a conv1d kernel [kernel_size, channels] (conv1d())
};

class Weights {
 public:
  virtual ~Weights() = default;

  virtual Weight require(const std::string& name, std::vector<int64_t> shape, uint32_t uses,
                         TypeSet accepted = TypeSet::any()) = 0;
  virtual Weight optional(const std::string& name, std::vector<int64_t> shape, uint32_t uses,
                          TypeSet accepted = TypeSet::any()) = 0;
  // True when the file has a tensor of this name (whatever its shape or type).
  virtual bool has(const std::string& name) const = 0;
  // Records a model-level error found while binding (e.g. a pair of tensors of which only
  // one is present); load fails with it like with a tensor mismatch.
  virtual void fail(Status status) = 0;
  // Tensors the model leaves unbound on purpose (no "unused tensor" warning for them); a
  // name ending in '*' is a prefix.
  virtual void ignore(const std::string& name_or_prefix) = 0;
};

}  // namespace power::sdk
