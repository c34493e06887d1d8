// WeightBinder: the host side of power/sdk/weights.h. Checks every tensor a package declares
// against the file (present, shape, accepted type), keeps all the errors and reports the
// first (with the count of the others) naming the tensor and the expected vs. actual shape or
// type, and hands the package a Weight whose handle is a BoundWeight (device/device.h): the
// tensor's view into the file's read-only mapping.
// Thread-safety: one load at a time; the BoundWeights are immutable afterwards.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "device/device.h"
#include "format/gguf.h"
#include "power/sdk/weights.h"

namespace power {

class WeightBinder final : public sdk::Weights {
 public:
  explicit WeightBinder(const GgufFile& file) : file_(file) {}

  sdk::Weight require(const std::string& name, std::vector<int64_t> shape, uint32_t uses,
                      sdk::TypeSet accepted) override {
    return bind(name, std::move(shape), uses, accepted, true);
  }
  sdk::Weight optional(const std::string& name, std::vector<int64_t> shape, uint32_t uses,
                       sdk::TypeSet accepted) override {
    return bind(name, std::move(shape), uses, accepted, false);
  }
  bool has(const std::string& name) const override { return file_.find_tensor(name) != nullptr; }
  void fail(Status status) override { errors_.push_back(std::move(status)); }
  void ignore(const std::string& name_or_prefix) override { ignored_.push_back(name_or_prefix); }

  // Ok, or the first error with the count of the others.
  Status status() const;
  // Warns about file tensors no declaration used and none ignored (except the MTP blocks a
  // file declares with <arch>.nextn_predict_layers, which the draft head binds).
  void warn_unused() const;

  // The bound tensors (stable addresses: Weight handles point into it).
  std::deque<BoundWeight>& bound() { return bound_; }

 private:
  sdk::Weight bind(const std::string& name, std::vector<int64_t> shape, uint32_t uses,
                   sdk::TypeSet accepted, bool required);
  const GgufFile& file_;
  std::vector<Status> errors_;
  std::deque<BoundWeight> bound_;
  std::vector<std::string> ignored_;
};

}  // namespace power
