// Test helpers for the GGUF tests: a byte builder for hand-made (and deliberately malformed)
// files, and an assertion on parse errors. Header-only; used by the format test binaries.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"

namespace power::testing {

// Appends little-endian GGUF fields. Nothing is checked: that is the point.
class RawGguf {
 public:
  RawGguf& u8(uint8_t x) { return put(&x, 1); }
  RawGguf& u32(uint32_t x) { return put(&x, 4); }
  RawGguf& u64(uint64_t x) { return put(&x, 8); }
  RawGguf& i32(int32_t x) { return put(&x, 4); }
  RawGguf& f32(float x) { return put(&x, 4); }
  RawGguf& str(std::string_view s) {
    u64(s.size());
    return put(s.data(), s.size());
  }
  RawGguf& raw(std::string_view s) { return put(s.data(), s.size()); }
  RawGguf& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  RawGguf& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    raw("GGUF");
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  RawGguf& kv_u32(std::string_view key, uint32_t v) {
    str(key);
    u32(static_cast<uint32_t>(GgufValueType::kUint32));
    return u32(v);
  }
  RawGguf& kv_str(std::string_view key, std::string_view v) {
    str(key);
    u32(static_cast<uint32_t>(GgufValueType::kString));
    return str(v);
  }
  RawGguf& tensor(std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type,
                  uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(type);
    return u64(offset);
  }
  RawGguf& pad_to(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  size_t size() const { return bytes.size(); }
  std::span<const uint8_t> span() const { return bytes; }

  std::vector<uint8_t> bytes;

 private:
  RawGguf& put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
};

// Passes when parsing failed with `code` and the printed status contains every needle
// (e.g. "offset=24", "tensor=t0").
inline ::testing::AssertionResult ParseFails(const Result<std::unique_ptr<GgufFile>>& r,
                                             StatusCode code,
                                             std::initializer_list<std::string_view> needles) {
  if (r.ok()) return ::testing::AssertionFailure() << "parse succeeded";
  const std::string s = r.status().to_string();
  if (r.status().code() != code) {
    return ::testing::AssertionFailure() << "code " << status_code_name(r.status().code())
                                         << ", expected " << status_code_name(code) << ": " << s;
  }
  for (std::string_view n : needles) {
    if (s.find(n) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << n << "' not in: " << s;
    }
  }
  return ::testing::AssertionSuccess() << s;
}

// Reads every tensor byte and every metadata value, as a consumer would.
inline uint64_t TouchEverything(const GgufFile& f) {
  uint64_t h = 0;
  for (const GgufTensor& t : f.tensors()) {
    for (uint8_t b : t.bytes()) h = h * 31 + b;
  }
  std::function<void(const GgufValue&)> walk = [&](const GgufValue& v) {
    if (const auto* items = v.as_array()) {
      for (const GgufValue& item : *items) walk(item);
    } else if (const auto* s = v.as_string()) {
      h += s->size();
    } else {
      h += v.as_u64().value_or(0) + static_cast<uint64_t>(v.as_f64().value_or(0) != 0);
    }
  };
  for (const GgufKeyValue& kv : f.metadata()) {
    h += kv.key.size();
    walk(kv.value);
  }
  return h;
}

}  // namespace power::testing
