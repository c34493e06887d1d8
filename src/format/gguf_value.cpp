// GgufValue conversions, the typed metadata lookups of GgufFile, and the small helpers the
// reader and writer share (gguf_internal.h).
#include <cstdint>
#include <limits>

#include "base/checked.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace power {

namespace gguf_internal {

uint64_t fixed_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

uint64_t min_encoded_size(GgufValueType t) {
  if (t == GgufValueType::kString) return 8;
  if (t == GgufValueType::kArray) return 12;
  return fixed_size(t);
}

bool is_unsigned_type(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64;
}

bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}

bool utf8_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong lead (C0/C1) or F5..FF
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;  // overlong
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;                            // surrogate
    if (cp > 0x10FFFF) return false;
    i += len;
  }
  return true;
}

bool shape_elements(std::span<const uint64_t> ne, uint64_t* n_elements) {
  constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonzero = 1;
  bool any_zero = false;
  for (uint64_t d : ne) {
    if (d > kInt64Max) return false;
    if (d == 0) {
      any_zero = true;
      continue;
    }
    if (!checked_mul(nonzero, d, &nonzero) || nonzero > kInt64Max) return false;
  }
  *n_elements = any_zero ? 0 : nonzero;
  return true;
}

}  // namespace gguf_internal

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "u8";
    case GgufValueType::kInt8:
      return "i8";
    case GgufValueType::kUint16:
      return "u16";
    case GgufValueType::kInt16:
      return "i16";
    case GgufValueType::kUint32:
      return "u32";
    case GgufValueType::kInt32:
      return "i32";
    case GgufValueType::kFloat32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "u64";
    case GgufValueType::kInt64:
      return "i64";
    case GgufValueType::kFloat64:
      return "f64";
  }
  return "invalid";
}

bool gguf_value_type_valid(uint32_t id) {
  return id <= 12;
}

GgufValue GgufValue::array(GgufValueType elem, std::vector<GgufValue> items) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = elem;
  v.v = std::move(items);
  return v;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (const auto& s : items) values.push_back(str(s));
  return array(GgufValueType::kString, std::move(values));
}

bool GgufValue::is_integer() const {
  return gguf_internal::is_unsigned_type(type) || gguf_internal::is_signed_type(type);
}

std::optional<uint64_t> GgufValue::as_u64() const {
  if (gguf_internal::is_unsigned_type(type)) {
    if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  } else if (gguf_internal::is_signed_type(type)) {
    if (const auto* i = std::get_if<int64_t>(&v); i != nullptr && *i >= 0) {
      return static_cast<uint64_t>(*i);
    }
  }
  return std::nullopt;
}

std::optional<int64_t> GgufValue::as_i64() const {
  if (gguf_internal::is_signed_type(type)) {
    if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  } else if (gguf_internal::is_unsigned_type(type)) {
    if (const auto* u = std::get_if<uint64_t>(&v);
        u != nullptr && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(*u);
    }
  }
  return std::nullopt;
}

std::optional<double> GgufValue::as_f64() const {
  if (is_float()) {
    if (const auto* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  }
  if (gguf_internal::is_unsigned_type(type)) {
    if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  } else if (gguf_internal::is_signed_type(type)) {
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  }
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type != GgufValueType::kBool) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v); u != nullptr && *u <= 1) return *u == 1;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const {
  return type == GgufValueType::kString ? std::get_if<std::string>(&v) : nullptr;
}

const std::vector<GgufValue>* GgufValue::as_array() const {
  return type == GgufValueType::kArray ? std::get_if<std::vector<GgufValue>>(&v) : nullptr;
}

uint64_t GgufTensor::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

uint64_t GgufTensor::rows() const {
  uint64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

// ---- GgufFile lookups ----

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status missing_key(std::string_view key) {
  return Status(StatusCode::kNotFound, "metadata key not found").with("key", key);
}

Status wrong_type(std::string_view key, const GgufValue& v, std::string_view wanted) {
  std::string actual(gguf_value_type_name(v.type));
  if (v.type == GgufValueType::kArray) {
    actual = fmt::format("array of {}", gguf_value_type_name(v.array_type));
  }
  return make_error(StatusCode::kInvalidArgument, "metadata key has type {}, expected {}", actual,
                    wanted)
      .with("key", key);
}

}  // namespace

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  const std::string* s = v->as_string();
  if (s == nullptr) return wrong_type(key, *v, "string");
  return *s;
}

Result<uint64_t> GgufFile::get_u64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (auto u = v->as_u64()) return *u;
  if (v->is_integer()) {
    return make_error(StatusCode::kInvalidArgument, "metadata key is negative ({}), expected >= 0",
                      v->as_i64().value_or(0))
        .with("key", key);
  }
  return wrong_type(key, *v, "a non-negative integer");
}

Result<int64_t> GgufFile::get_i64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (auto i = v->as_i64()) return *i;
  if (v->is_integer()) {
    return make_error(StatusCode::kInvalidArgument, "metadata key does not fit in int64 ({})",
                      v->as_u64().value_or(0))
        .with("key", key);
  }
  return wrong_type(key, *v, "an integer");
}

Result<double> GgufFile::get_f64(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (auto d = v->as_f64()) return *d;
  return wrong_type(key, *v, "a number");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  if (auto b = v->as_bool()) return *b;
  return wrong_type(key, *v, "bool");
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missing_key(key);
  const auto* items = v->as_array();
  if (items == nullptr || v->array_type != GgufValueType::kString) {
    return wrong_type(key, *v, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(items->size());
  for (const GgufValue& item : *items) {
    const std::string* s = item.as_string();
    if (s == nullptr) return wrong_type(key, *v, "array of string");
    out.push_back(*s);
  }
  return out;
}

}  // namespace power
