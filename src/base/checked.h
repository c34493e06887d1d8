// Overflow-safe integer arithmetic for sizes computed from untrusted input.
// Each returns false (and leaves *out unspecified) when the exact result does not fit.
#pragma once

#include <cstdint>

namespace power {

template <typename T>
[[nodiscard]] inline bool checked_add(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}
template <typename T>
[[nodiscard]] inline bool checked_mul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// Rounds x up to a multiple of align (align > 0).
[[nodiscard]] inline bool checked_align_up(uint64_t x, uint64_t align, uint64_t* out) {
  uint64_t rem = x % align;
  if (rem == 0) {
    *out = x;
    return true;
  }
  return checked_add<uint64_t>(x, align - rem, out);
}

}  // namespace power
