// Canonical JSON against RFC 8785's own examples. The number table is the RFC's Appendix B
// (IEEE-754 bit patterns and their ECMAScript strings; node's Number#toString prints the same
// strings, the check we ran when writing this test); the object and string examples are the
// RFC's sections 3.2.2 and 3.2.3.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>

#include "receipt/canonical_json.h"

namespace power::receipt {
namespace {

double from_bits(uint64_t bits) {
  return std::bit_cast<double>(bits);
}

TEST(CanonicalJson, NumbersAsEcmascriptWritesThem) {
  const std::pair<uint64_t, const char*> table[] = {
      {0x0000000000000000, "0"},
      {0x8000000000000000, "0"},
      {0x0000000000000001, "5e-324"},
      {0x8000000000000001, "-5e-324"},
      {0x7fefffffffffffff, "1.7976931348623157e+308"},
      {0xffefffffffffffff, "-1.7976931348623157e+308"},
      {0x4340000000000000, "9007199254740992"},
      {0xc340000000000000, "-9007199254740992"},
      {0x4430000000000000, "295147905179352830000"},
      {0x44b52d02c7e14af5, "9.999999999999997e+22"},
      {0x44b52d02c7e14af6, "1e+23"},
      {0x44b52d02c7e14af7, "1.0000000000000001e+23"},
      {0x444b1ae4d6e2ef4e, "999999999999999700000"},
      {0x444b1ae4d6e2ef4f, "999999999999999900000"},
      {0x444b1ae4d6e2ef50, "1e+21"},
      {0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
      {0x3eb0c6f7a0b5ed8d, "0.000001"},
      {0x41b3de4355555553, "333333333.3333332"},
      {0x41b3de4355555554, "333333333.33333325"},
      {0x41b3de4355555555, "333333333.3333333"},
      {0x41b3de4355555556, "333333333.3333334"},
      {0x41b3de4355555557, "333333333.33333343"},
      {0xbecbf647612f3696, "-0.0000033333333333333333"},
      {0x43143ff3c1cb0959, "1424953923781206.2"},
  };
  for (const auto& [bits, expected] : table) {
    EXPECT_EQ(ecmascript_number(from_bits(bits)), expected) << std::hex << bits;
    auto c = canonical_json(nlohmann::json(from_bits(bits)));
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(*c, expected);
  }
}

TEST(CanonicalJson, RfcSection322Example) {
  // The input of RFC 8785 section 3.2.2 (whitespace, escapes, numbers in other spellings).
  const char* input = R"({
    "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
    "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
    "literals": [null, true, false]
  })";
  auto j = parse_json_strict(input);
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  auto c = canonical_json(*j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c,
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
            "\"string\":\"\xE2\x82\xAC$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
}

TEST(CanonicalJson, MembersSortByUtf16CodeUnits) {
  // RFC 8785 section 3.2.3: U+1F600 (surrogates D83D DE00) sorts before U+FB33 in UTF-16,
  // after it in UTF-8 byte order, so a byte-wise sort would get this wrong.
  const char* input = R"({
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\ud83d\ude00": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis"
  })";
  auto j = parse_json_strict(input);
  ASSERT_TRUE(j.ok());
  auto c = canonical_json(*j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c,
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xC2\x80\":\"Control\","
            "\"\xC3\xB6\":\"Latin Small Letter O With Diaeresis\",\"\xE2\x82\xAC\":\"Euro Sign\","
            "\"\xF0\x9F\x98\x80\":\"Emoji: Grinning Face\","
            "\"\xEF\xAC\xB3\":\"Hebrew Letter Dalet With Dagesh\"}");
}

TEST(CanonicalJson, ControlCharactersAndNesting) {
  nlohmann::json j = {{"b", {{"z", 1}, {"a", nlohmann::json::array({2, "x\x01\x1f\b\t"})}}},
                      {"a", nullptr}};
  auto c = canonical_json(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, R"({"a":null,"b":{"a":[2,"x\u0001\u001f\b\t"],"z":1}})");
}

TEST(CanonicalJson, RefusesWhatHasNoCanonicalForm) {
  EXPECT_FALSE(canonical_json(nlohmann::json(std::numeric_limits<double>::quiet_NaN())).ok());
  EXPECT_FALSE(canonical_json(nlohmann::json(std::numeric_limits<double>::infinity())).ok());
  // Integers beyond 2^53 would be read back differently by JCS (double) implementations.
  EXPECT_TRUE(canonical_json(nlohmann::json(int64_t{9007199254740992})).ok());
  EXPECT_FALSE(canonical_json(nlohmann::json(int64_t{9007199254740993})).ok());
  EXPECT_FALSE(canonical_json(nlohmann::json(uint64_t{18446744073709551615u})).ok());
  EXPECT_FALSE(canonical_json(nlohmann::json(std::string("\xC3\x28"))).ok());      // bad UTF-8
  EXPECT_FALSE(canonical_json(nlohmann::json(std::string("\xED\xA0\x80"))).ok());  // surrogate
}

TEST(CanonicalJson, StrictParserRejectsAmbiguousInput) {
  EXPECT_EQ(parse_json_strict(R"({"a":1,"a":2})").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(parse_json_strict(R"({"a":{"b":1,"b":1}})").status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(parse_json_strict(R"({"a":{"b":1},"c":{"b":1}})").ok());
  EXPECT_EQ(parse_json_strict("{\"a\":\"\xff\"}").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(parse_json_strict("[1] x").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(parse_json_strict(std::string(100, '[') + std::string(100, ']')).status().code(),
            StatusCode::kCorrupt);
}

}  // namespace
}  // namespace power::receipt
