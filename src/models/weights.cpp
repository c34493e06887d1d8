#include "models/weights.h"

#include <algorithm>

#include "base/log.h"
#include "tensor/quant.h"

namespace power {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

TensorView WeightBinder::require(const std::string& name, std::vector<int64_t> shape) {
  return bind(name, std::move(shape), true);
}

TensorView WeightBinder::optional(const std::string& name, std::vector<int64_t> shape) {
  return bind(name, std::move(shape), false);
}

TensorView WeightBinder::bind(const std::string& name, std::vector<int64_t> shape, bool required) {
  const GgufTensor* t = file_.find_tensor(name);
  if (t == nullptr) {
    if (required) {
      errors_.push_back(Status(StatusCode::kNotFound, "missing required tensor")
                            .with("tensor", name)
                            .with("expected_shape", shape_text(shape)));
    }
    return TensorView{};
  }
  used_.push_back(name);
  std::vector<int64_t> actual(t->ne.begin(), t->ne.end());
  // Trailing dimensions of 1 are equivalent ([256] == [256, 1]).
  while (actual.size() > 1 && actual.back() == 1) actual.pop_back();
  std::vector<int64_t> want = shape;
  while (want.size() > 1 && want.back() == 1) want.pop_back();
  if (actual != want) {
    errors_.push_back(Status(StatusCode::kInvalidArgument, "tensor has the wrong shape")
                          .with("tensor", name)
                          .with("expected", shape_text(shape))
                          .with("actual", shape_text(actual)));
    return TensorView{};
  }
  if (!dequantize_supported(t->type)) {
    errors_.push_back(Status(StatusCode::kUnsupported, "tensor type is not supported")
                          .with("tensor", name)
                          .with("type", ggml_type_name(t->type)));
    return TensorView{};
  }
  auto v = TensorView::contiguous(t->type, shape, t->data, t->n_bytes);
  if (!v.ok()) {
    errors_.push_back(std::move(v).take_status().with("tensor", name));
    return TensorView{};
  }
  return *v;
}

Status WeightBinder::finish() const {
  for (const GgufTensor& t : file_.tensors()) {
    if (std::find(used_.begin(), used_.end(), t.name) == used_.end()) {
      POWER_LOG_WARN("tensor {} is not used by the model", t.name);
    }
  }
  if (errors_.empty()) return Status();
  Status first = errors_.front();
  if (errors_.size() > 1) first.with("further_errors", errors_.size() - 1);
  return first;
}

}  // namespace power
