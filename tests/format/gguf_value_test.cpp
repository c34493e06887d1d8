// GgufValue conversions and the shared helpers of the reader and writer.
#include <gtest/gtest.h>

#include <limits>

#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace power {
namespace {

using V = GgufValue;
using VT = GgufValueType;

TEST(GgufValue, ConversionsNeverTruncateOrFlipSign) {
  EXPECT_EQ(V::u8(200).as_u64(), 200u);
  EXPECT_EQ(V::u8(200).as_i64(), 200);
  EXPECT_EQ(V::i32(-5).as_i64(), -5);
  EXPECT_FALSE(V::i32(-5).as_u64().has_value());
  EXPECT_EQ(V::i64(5).as_u64(), 5u);
  EXPECT_FALSE(V::u64(uint64_t{1} << 63).as_i64().has_value());
  EXPECT_EQ(V::u64(uint64_t{1} << 63).as_u64(), uint64_t{1} << 63);
  EXPECT_FALSE(V::f32(1.0f).as_u64().has_value());
  EXPECT_FALSE(V::f64(1.0).as_i64().has_value());
  EXPECT_EQ(V::f32(0.25f).as_f64(), 0.25);
  EXPECT_EQ(V::i16(-7).as_f64(), -7.0);
  EXPECT_FALSE(V::str("1").as_f64().has_value());
  EXPECT_EQ(V::boolean(true).as_bool(), true);
  EXPECT_FALSE(V::boolean(true).as_u64().has_value());  // bool is not an integer
  EXPECT_FALSE(V::u8(1).as_bool().has_value());
  EXPECT_FALSE(V::boolean(true).is_integer());
  EXPECT_TRUE(V::i8(1).is_integer());
  EXPECT_TRUE(V::f64(1).is_float());
  EXPECT_EQ(*V::str("x").as_string(), "x");
  EXPECT_EQ(V::u8(1).as_string(), nullptr);
  EXPECT_EQ(V::str("x").as_array(), nullptr);
  EXPECT_EQ(V::string_array({"a", "b"}).as_array()->size(), 2u);
  EXPECT_EQ(V::string_array({"a", "b"}).array_type, VT::kString);
  // A mismatched alternative (only constructible by hand) converts to nothing.
  EXPECT_FALSE((GgufValue{VT::kUint32, int64_t{3}}.as_u64().has_value()));
}

TEST(GgufValue, Equality) {
  EXPECT_EQ(V::u8(1), V::u8(1));
  EXPECT_NE(V::u8(1), V::u16(1));
  EXPECT_NE(V::array(VT::kUint8, {}), V::array(VT::kInt8, {}));
  EXPECT_EQ(V::string_array({"a"}), V::array(VT::kString, {V::str("a")}));
}

TEST(GgufValue, TypeNames) {
  EXPECT_EQ(gguf_value_type_name(VT::kFloat64), "f64");
  EXPECT_EQ(gguf_value_type_name(static_cast<VT>(99)), "invalid");
  EXPECT_TRUE(gguf_value_type_valid(12));
  EXPECT_FALSE(gguf_value_type_valid(13));
}

TEST(GgufInternal, Utf8Validation) {
  using gguf_internal::utf8_valid;
  EXPECT_TRUE(utf8_valid(""));
  EXPECT_TRUE(utf8_valid("token_embd.weight"));
  EXPECT_TRUE(utf8_valid("\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80"));  // é ☃ 😀
  EXPECT_TRUE(utf8_valid(std::string_view("a\0b", 3)));
  EXPECT_FALSE(utf8_valid("\x80"));              // lone continuation
  EXPECT_FALSE(utf8_valid("\xc3"));              // truncated
  EXPECT_FALSE(utf8_valid("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(utf8_valid("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(utf8_valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8_valid("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8_valid("\xff"));
}

TEST(GgufInternal, ShapeElements) {
  using gguf_internal::shape_elements;
  uint64_t n = 0;
  const uint64_t big = uint64_t{1} << 62;
  EXPECT_TRUE(shape_elements(std::vector<uint64_t>{2, 3, 4}, &n));
  EXPECT_EQ(n, 24u);
  EXPECT_TRUE(shape_elements(std::vector<uint64_t>{big, 0, 1}, &n));  // zero dim: 0 elements
  EXPECT_EQ(n, 0u);
  EXPECT_FALSE(shape_elements(std::vector<uint64_t>{big, 0, big}, &n));  // nonzero dims overflow
  EXPECT_FALSE(shape_elements(std::vector<uint64_t>{big, 2}, &n));       // 2^63 > INT64_MAX
  EXPECT_FALSE(shape_elements(std::vector<uint64_t>{uint64_t{1} << 63}, &n));
  EXPECT_FALSE(shape_elements(std::vector<uint64_t>{big, 0, big, 4}, &n));
  EXPECT_TRUE(shape_elements(std::vector<uint64_t>{0}, &n));
}

}  // namespace
}  // namespace power
