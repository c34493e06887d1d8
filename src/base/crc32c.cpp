#include "base/crc32c.h"

#include <array>
#include <cstring>

#include "base/cpu.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace power {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
__attribute__((target("sse4.2"))) void crc32c_x3_sse42(const uint8_t* const b[3], size_t n,
                                                       uint32_t out[3]) {
  uint64_t c0 = 0xFFFFFFFFu, c1 = 0xFFFFFFFFu, c2 = 0xFFFFFFFFu;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v0, v1, v2;
    std::memcpy(&v0, b[0] + i, 8);
    std::memcpy(&v1, b[1] + i, 8);
    std::memcpy(&v2, b[2] + i, 8);
    c0 = _mm_crc32_u64(c0, v0);
    c1 = _mm_crc32_u64(c1, v1);
    c2 = _mm_crc32_u64(c2, v2);
  }
  auto d0 = static_cast<uint32_t>(c0), d1 = static_cast<uint32_t>(c1),
       d2 = static_cast<uint32_t>(c2);
  for (; i < n; ++i) {
    d0 = _mm_crc32_u8(d0, b[0][i]);
    d1 = _mm_crc32_u8(d1, b[1][i]);
    d2 = _mm_crc32_u8(d2, b[2][i]);
  }
  out[0] = ~d0;
  out[1] = ~d1;
  out[2] = ~d2;
}
#endif

}  // namespace

void crc32c_x3(const uint8_t* const blocks[3], size_t n, uint32_t out[3]) {
#if defined(__x86_64__)
  static const bool hw = cpu_features().sse42;
  if (hw) return crc32c_x3_sse42(blocks, n, out);
#endif
  for (int k = 0; k < 3; ++k) out[k] = crc32c_portable(blocks[k], n);
}

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__x86_64__)
  static const bool hw = cpu_features().sse42;
  if (hw) return crc32c_sse42(static_cast<const uint8_t*>(data), size, crc);
#endif
  return crc32c_portable(data, size, crc);
}

}  // namespace power
