#include "tensor/half.h"

#include <cstring>

namespace power {
namespace {

inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace

void f16_to_f32_row(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(s + 2 * i));
}

void f32_to_f16_row(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_f16(src[i]));
}

void bf16_to_f32_row(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(s + 2 * i));
}

void f32_to_bf16_row(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_bf16(src[i]));
}

}  // namespace power
