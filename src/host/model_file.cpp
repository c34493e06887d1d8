#include "host/model_file.h"

namespace power {
namespace {

Status missing(std::string_view key) {
  return Status(StatusCode::kNotFound, "missing metadata key").with("key", key);
}

Status per_layer(std::string_view key) {
  return Status(StatusCode::kUnsupported, "per-layer arrays are not supported for this key")
      .with("key", key);
}

}  // namespace

sdk::DType to_sdk(GgmlType t) {
  return static_cast<sdk::DType>(static_cast<uint32_t>(t));
}
GgmlType from_sdk(sdk::DType t) {
  return static_cast<GgmlType>(static_cast<uint32_t>(t));
}

GgufModelFile::GgufModelFile(std::shared_ptr<const GgufFile> file, std::string sha256_hex)
    : file_(std::move(file)), sha256_(std::move(sha256_hex)) {
  tensors_.reserve(file_->tensors().size());
  for (const GgufTensor& t : file_->tensors()) {
    sdk::TensorInfo info;
    info.name = t.name;
    info.dtype = to_sdk(t.type);
    info.shape.assign(t.ne.begin(), t.ne.end());
    info.offset = t.file_offset;
    info.n_bytes = t.n_bytes;
    tensors_.push_back(std::move(info));
  }
}

std::string GgufModelFile::architecture() const {
  auto a = file_->get_string("general.architecture");
  return a.ok() ? *a : std::string();
}

Result<int64_t> GgufModelFile::get_int(std::string_view key) const {
  const GgufValue* v = file_->find(key);
  if (v == nullptr) return missing(key);
  if (v->as_array() != nullptr) return per_layer(key);
  if (v->type == GgufValueType::kBool) return static_cast<int64_t>(v->as_bool().value_or(false));
  return file_->get_i64(key);
}

Result<double> GgufModelFile::get_float(std::string_view key) const {
  const GgufValue* v = file_->find(key);
  if (v == nullptr) return missing(key);
  if (v->as_array() != nullptr) return per_layer(key);
  return file_->get_f64(key);
}

Result<bool> GgufModelFile::get_bool(std::string_view key) const {
  return file_->get_bool(key);
}

Result<std::string> GgufModelFile::get_string(std::string_view key) const {
  return file_->get_string(key);
}

namespace {

// The elements of an array key, each converted by `as` (an optional of T); errors name the key.
template <typename T, typename As>
Result<std::vector<T>> array_of(const GgufFile& file, std::string_view key, As as,
                                const char* element) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return missing(key);
  const auto* a = v->as_array();
  if (a == nullptr) {
    return Status(StatusCode::kInvalidArgument, "metadata key is not an array").with("key", key);
  }
  std::vector<T> out;
  out.reserve(a->size());
  for (const GgufValue& e : *a) {
    auto x = as(e);
    if (!x) {
      return Status(StatusCode::kInvalidArgument, std::string("array element is not ") + element)
          .with("key", key);
    }
    out.push_back(*x);
  }
  return out;
}

}  // namespace

Result<std::vector<int64_t>> GgufModelFile::get_int_array(std::string_view key) const {
  return array_of<int64_t>(
      *file_, key, [](const GgufValue& e) { return e.as_i64(); }, "an integer");
}

Result<std::vector<double>> GgufModelFile::get_float_array(std::string_view key) const {
  return array_of<double>(
      *file_, key, [](const GgufValue& e) { return e.as_f64(); }, "a number");
}

Result<std::vector<std::string>> GgufModelFile::get_string_array(std::string_view key) const {
  return file_->get_string_array(key);
}

const sdk::TensorInfo* GgufModelFile::find_tensor(std::string_view name) const {
  const GgufTensor* t = file_->find_tensor(name);
  if (t == nullptr) return nullptr;
  return &tensors_[static_cast<size_t>(t - file_->tensors().data())];
}

}  // namespace power
