// f16 / bf16 conversions checked against values computed independently in double precision
// (exhaustive over every f16, every bf16 rounding boundary), plus the peer's NaN conventions.
#include "tensor/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace power {
namespace {

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

// The value an f16 bit pattern denotes, from the IEEE definition (finite patterns only).
double f16_value(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  return sign * std::ldexp(static_cast<double>(1024 + mant), exp - 25);
}

TEST(Half, F16ToF32IsExactForEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    if (exp == 0x1f && mant == 0) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else if (exp == 0x1f) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // Payload kept in the top mantissa bits, quiet bit forced (ggml's table, F16C).
      ASSERT_EQ(bits(f) & 0xffc00000u, ((h & 0x8000u) << 16) | 0x7fc00000u) << std::hex << h;
      ASSERT_EQ((bits(f) >> 13) & 0x1ffu, static_cast<uint32_t>(mant) & 0x1ffu) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), f16_value(static_cast<uint16_t>(h))) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(Half, F32ToF16RoundTripsEveryFiniteF16) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0) continue;  // NaN: checked below
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

// Between every two adjacent positive f16 values the midpoint (exact in f32) must round to the
// one with the even mantissa, and one f32 ulp either side to the nearer one. This covers the
// subnormal range, every binade and the carry into the next exponent.
TEST(Half, F32ToF16RoundsToNearestEvenAtEveryBoundary) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = f16_to_f32(h);
    const float hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << h;
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : h;
    ASSERT_EQ(f32_to_f16(mid), even) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
    ASSERT_EQ(f32_to_f16(-mid), even | 0x8000) << std::hex << h;
  }
}

TEST(Half, F32ToF16OverflowUnderflowAndSpecials) {
  // 65504 is the largest f16; 65520 is halfway to 2^16 and rounds to even = inf.
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e30f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  // Smallest f16 subnormal is 2^-24; 2^-25 is the tie between 0 and it -> 0 (even).
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie -> even (2)
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  // ggml's scalar converter: every NaN -> 0x7e00 with the sign, payload dropped.
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(f32_to_f16(std::bit_cast<float>(0xffa00001u)), 0xfe00);
  EXPECT_EQ(f32_to_f16(std::bit_cast<float>(0x7f800001u)), 0x7e00);
}

// Independent bf16 rounding: pick the nearer of the two bf16 neighbours in double precision,
// the even one on a tie; a value at or beyond the midpoint above FLT_MAX becomes inf.
uint16_t bf16_expected(uint32_t u) {
  const uint32_t down = u & 0xffff0000u;
  const double x = static_cast<double>(std::bit_cast<float>(u));
  const double lo = static_cast<double>(std::bit_cast<float>(down));
  const uint32_t up = down + 0x10000u;
  double hi;
  if ((up & 0x7fffffffu) == 0x7f800000u) {
    hi = std::copysign(std::ldexp(1.0, 128), x);  // the "next" value past FLT_MAX
  } else {
    hi = static_cast<double>(std::bit_cast<float>(up));
  }
  const double dlo = std::fabs(x - lo), dhi = std::fabs(hi - x);
  if (dlo < dhi) return static_cast<uint16_t>(down >> 16);
  if (dhi < dlo) return static_cast<uint16_t>(up >> 16);
  return ((down >> 16) & 1u) ? static_cast<uint16_t>(up >> 16) : static_cast<uint16_t>(down >> 16);
}

TEST(Half, F32ToBf16MatchesNearestEvenOnEveryUpperHalf) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  for (uint32_t upper = 0; upper <= 0xffff; ++upper) {
    for (uint32_t low : lows) {
      const uint32_t u = (upper << 16) | low;
      if ((u & 0x7fffffffu) > 0x7f800000u) {
        ASSERT_EQ(f32_to_bf16(std::bit_cast<float>(u)), static_cast<uint16_t>((u >> 16) | 0x40))
            << std::hex << u;
        continue;
      }
      if ((upper & 0x7fff) == 0x7f80) continue;  // inf itself: checked below
      ASSERT_EQ(f32_to_bf16(std::bit_cast<float>(u)), bf16_expected(u)) << std::hex << u;
    }
  }
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // Subnormals are rounded, not flushed (ggml's reference converter).
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00008001u)), 0x0001);
}

TEST(Half, Bf16ToF32IsAShift) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    ASSERT_EQ(bits(bf16_to_f32(static_cast<uint16_t>(h))), h << 16);
  }
}

TEST(Half, RowConvertersHandleUnalignedBytes) {
  const float src[3] = {1.0f, -2.5f, 65504.0f};
  uint8_t buf[1 + 6];
  f32_to_f16_row(src, buf + 1, 3);
  EXPECT_EQ(buf[1], 0x00);
  EXPECT_EQ(buf[2], 0x3c);  // 1.0 = 0x3c00, little-endian
  float back[3];
  f16_to_f32_row(buf + 1, back, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], src[i]);
  f32_to_bf16_row(src, buf + 1, 3);
  EXPECT_EQ(buf[1], 0x80);
  EXPECT_EQ(buf[2], 0x3f);  // 1.0 = 0x3f80
  bf16_to_f32_row(buf + 1, back, 3);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_EQ(back[2], 65536.0f);  // 65504 rounds to 2^16 in bf16 (8-bit significand)
}

}  // namespace
}  // namespace power
