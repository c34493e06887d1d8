// Declaring and binding a model's tensors: each architecture lists what it needs (name,
// expected shape, required or optional) and WeightBinder checks all of them against the file
// before any compute. GGUF tensor names are built from the one table in tensor_names.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"
#include "tensor/tensor.h"

namespace power {

class WeightBinder {
 public:
  explicit WeightBinder(const GgufFile& file) : file_(file) {}

  // Binds `name` with shape {ne0, ne1, ...}; a missing required tensor, a shape mismatch or a
  // type Power cannot compute with is recorded as an error (all are reported at once by
  // finish()). A missing optional tensor gives a view with data == nullptr.
  TensorView require(const std::string& name, std::vector<int64_t> shape);
  TensorView optional(const std::string& name, std::vector<int64_t> shape);
  // True when the file has a tensor of this name (whatever its shape).
  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

  // Ok, or the first error with a count of the others; also warns about file tensors that no
  // declaration used (except the MTP blocks a file declares with <arch>.nextn_predict_layers:
  // models/mtp.h binds those separately).
  Status finish() const;
  // The same errors without the unused-tensor warnings (a binder of part of a file).
  Status status() const;

 private:
  TensorView bind(const std::string& name, std::vector<int64_t> shape, bool required);
  const GgufFile& file_;
  std::vector<Status> errors_;
  std::vector<std::string> used_;
};

}  // namespace power
