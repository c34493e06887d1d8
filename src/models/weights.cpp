#include "models/weights.h"

#include <algorithm>
#include <cstdlib>

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
  // MTP blocks (the last nextn_predict_layers of block_count) are bound by models/mtp.cpp.
  int64_t first_mtp_block = -1;
  if (auto arch = file_.get_string("general.architecture"); arch.ok()) {
    auto n_mtp = file_.get_u64(*arch + ".nextn_predict_layers");
    auto n_blocks = file_.get_u64(*arch + ".block_count");
    if (n_mtp.ok() && n_blocks.ok() && *n_mtp > 0 && *n_mtp < *n_blocks) {
      first_mtp_block = static_cast<int64_t>(*n_blocks - *n_mtp);
    }
  }
  for (const GgufTensor& t : file_.tensors()) {
    if (first_mtp_block >= 0 && t.name.rfind("blk.", 0) == 0 &&
        std::atoll(t.name.c_str() + 4) >= first_mtp_block) {
      continue;
    }
    if (std::find(used_.begin(), used_.end(), t.name) == used_.end()) {
      POWER_LOG_WARN("tensor {} is not used by the model", t.name);
    }
  }
  return status();
}

Status WeightBinder::status() const {
  if (errors_.empty()) return Status();
  Status first = errors_.front();
  if (errors_.size() > 1) first.with("further_errors", errors_.size() - 1);
  return first;
}

}  // namespace power
