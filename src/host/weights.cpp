#include "host/weights.h"

#include <algorithm>
#include <cstdlib>

#include "base/log.h"
#include "host/model_file.h"

namespace power {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    t += (i ? ", " : "") + (s[i] == sdk::kAnyDim ? std::string("*") : std::to_string(s[i]));
  }
  return t + "]";
}

// Trailing dimensions of 1 are equivalent ([256] == [256, 1]).
std::vector<int64_t> trimmed(std::vector<int64_t> s) {
  while (s.size() > 1 && s.back() == 1) s.pop_back();
  return s;
}

bool shape_matches(const std::vector<int64_t>& want, const std::vector<int64_t>& actual) {
  if (want.size() != actual.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != sdk::kAnyDim && want[i] != actual[i]) return false;
  }
  return true;
}

sdk::Weight handle_of(const BoundWeight& b) {
  sdk::Weight w;
  w.handle = &b;
  w.dtype = to_sdk(b.view.type);
  w.ne = b.view.ne;
  return w;
}

}  // namespace

sdk::Weight WeightBinder::bind(const std::string& name, std::vector<int64_t> shape, uint32_t uses,
                               sdk::TypeSet accepted, bool required) {
  const GgufTensor* t = file_.find_tensor(name);
  if (t == nullptr) {
    if (required) {
      errors_.push_back(Status(StatusCode::kNotFound, "missing required tensor")
                            .with("tensor", name)
                            .with("expected_shape", shape_text(shape)));
    }
    return sdk::Weight{};
  }
  const std::vector<int64_t> actual = trimmed(std::vector<int64_t>(t->ne.begin(), t->ne.end()));
  const std::vector<int64_t> want = trimmed(shape);
  if (shape.empty() || shape.size() > 4 || !shape_matches(want, actual)) {
    errors_.push_back(Status(StatusCode::kInvalidArgument, "tensor has the wrong shape")
                          .with("tensor", name)
                          .with("expected", shape_text(shape))
                          .with("actual", shape_text(actual)));
    return sdk::Weight{};
  }
  const sdk::DType dtype = to_sdk(t->type);
  if (!accepted.contains(dtype)) {
    errors_.push_back(Status(StatusCode::kUnsupported, "tensor type is not accepted by the model")
                          .with("tensor", name)
                          .with("type", ggml_type_name(t->type))
                          .with("accepted", accepted.names()));
    return sdk::Weight{};
  }
  // A second declaration of the same tensor adds its uses.
  for (BoundWeight& b : bound_) {
    if (b.name == name) {
      b.uses |= uses;
      return handle_of(b);
    }
  }
  // The view takes the declared shape (with the file's sizes where the model left them open,
  // and the declared number of dimensions).
  std::vector<int64_t> view_shape = shape;
  for (size_t i = 0; i < view_shape.size(); ++i) {
    if (view_shape[i] == sdk::kAnyDim) view_shape[i] = i < actual.size() ? actual[i] : 1;
  }
  auto v = TensorView::contiguous(t->type, view_shape, t->data, t->n_bytes);
  if (!v.ok()) {
    errors_.push_back(std::move(v).take_status().with("tensor", name));
    return sdk::Weight{};
  }
  BoundWeight& b = bound_.emplace_back();
  b.name = name;
  b.view = *v;
  b.uses = uses;
  return handle_of(b);
}

Status WeightBinder::status() const {
  if (errors_.empty()) return Status();
  Status first = errors_.front();
  if (errors_.size() > 1) first.with("further_errors", errors_.size() - 1);
  return first;
}

void WeightBinder::warn_unused() const {
  // MTP blocks (the last nextn_predict_layers of block_count) are the draft head's.
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
    const bool used = std::any_of(bound_.begin(), bound_.end(),
                                  [&](const BoundWeight& b) { return b.name == t.name; });
    const bool ignored = std::any_of(ignored_.begin(), ignored_.end(), [&](const std::string& p) {
      return p == t.name || (!p.empty() && p.back() == '*' &&
                             t.name.compare(0, p.size() - 1, p, 0, p.size() - 1) == 0);
    });
    if (!used && !ignored) POWER_LOG_WARN("tensor {} is not used by the model", t.name);
  }
}

}  // namespace power
