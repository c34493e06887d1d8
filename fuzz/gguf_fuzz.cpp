// libFuzzer entry point for the GGUF reader: any bytes must give a Status or a file whose every
// tensor byte and metadata value can be read (ASan/UBSan check the reads).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "format/gguf.h"

namespace {

uint64_t touch_value(const power::GgufValue& v) {
  uint64_t h = static_cast<uint64_t>(v.type);
  if (const auto* items = v.as_array()) {
    for (const auto& item : *items) h = h * 31 + touch_value(item);
  } else if (const auto* s = v.as_string()) {
    for (char c : *s) h = h * 31 + static_cast<unsigned char>(c);
  } else {
    h += v.as_u64().value_or(0) + static_cast<uint64_t>(v.as_i64().value_or(0));
    h += static_cast<uint64_t>(v.as_f64().value_or(0) != 0) + v.as_bool().value_or(false);
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  power::GgufLimits limits;
  limits.max_metadata_bytes = 64u << 20;  // stay far below libFuzzer's -rss_limit_mb
  auto file = power::GgufFile::parse(std::span<const uint8_t>(data, size), limits);
  if (!file.ok()) {
    volatile size_t n = file.status().to_string().size();
    (void)n;
    return 0;
  }
  const power::GgufFile& f = **file;
  uint64_t h = f.version() + f.alignment() + f.data_offset();
  for (const auto& kv : f.metadata()) {
    h = h * 31 + kv.key.size() + touch_value(kv.value);
    if (f.find(kv.key) != &kv.value) __builtin_trap();
  }
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    if (t.file_offset + t.n_bytes > size) __builtin_trap();
    for (uint8_t b : t.bytes()) h = h * 31 + b;
    h += t.n_elements() + t.rows();
  }
  // The typed getters on whatever keys exist.
  for (const auto& kv : f.metadata()) {
    h += f.get_u64(kv.key).ok() + f.get_i64(kv.key).ok() + f.get_f64(kv.key).ok();
    h += f.get_bool(kv.key).ok() + f.get_string(kv.key).ok() + f.get_string_array(kv.key).ok();
  }
  volatile uint64_t sink = h;
  (void)sink;
  return 0;
}
