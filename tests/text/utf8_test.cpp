// The malformed-UTF-8 policy (utf8.h): one U+FFFD per byte that does not begin a well-formed
// sequence, decoding resumes at the next byte.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/unicode.h"
#include "text/utf8.h"

namespace power::text {
namespace {

using Cps = std::vector<uint32_t>;
constexpr uint32_t R = kReplacementChar;

TEST(Utf8, DecodesWellFormedText) {
  EXPECT_EQ(utf8_decode("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x81"),
            (Cps{'a', 0xE9, 0x20AC, 0x1F601}));
  std::vector<size_t> offsets;
  utf8_decode("a\xC3\xA9z", &offsets);
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 1, 3, 4}));
}

TEST(Utf8, EachMalformedByteIsOneReplacement) {
  EXPECT_EQ(utf8_decode("\x80"), (Cps{R}));                       // stray continuation
  EXPECT_EQ(utf8_decode("\xC0\x80"), (Cps{R, R}));                // overlong NUL
  EXPECT_EQ(utf8_decode("\xE0\x80\xAF"), (Cps{R, R, R}));         // overlong '/'
  EXPECT_EQ(utf8_decode("\xED\xA0\x80"), (Cps{R, R, R}));         // surrogate U+D800
  EXPECT_EQ(utf8_decode("\xF4\x90\x80\x80"), (Cps{R, R, R, R}));  // above U+10FFFF
  EXPECT_EQ(utf8_decode("\xE2\x82"
                        "A"),
            (Cps{R, R, 'A'}));                                   // truncated, then ASCII
  EXPECT_EQ(utf8_decode("a\xF0\x9F\x98"), (Cps{'a', R, R, R}));  // truncated at the end
  EXPECT_EQ(utf8_decode("\xFF\xFE"), (Cps{R, R}));
  EXPECT_EQ(utf8_sanitize("a\xFFz"), "a\xEF\xBF\xBDz");
  EXPECT_FALSE(utf8_is_valid("a\xFFz"));
  EXPECT_TRUE(utf8_is_valid(utf8_sanitize("\xC0\x80\xED\xA0\x80\xF4\x90")));
}

TEST(Utf8, ClassifiesPrefixes) {
  size_t len = 0;
  EXPECT_EQ(utf8_classify_prefix("\xE2\x82", 0, &len), Utf8Prefix::kIncomplete);
  EXPECT_EQ(utf8_classify_prefix("\xE2\x82\xAC", 0, &len), Utf8Prefix::kComplete);
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(utf8_classify_prefix("\xE2"
                                 "A",
                                 0, &len),
            Utf8Prefix::kInvalid);
  EXPECT_EQ(utf8_classify_prefix("\xF5", 0, &len), Utf8Prefix::kInvalid);
}

TEST(Unicode, Categories) {
  EXPECT_TRUE(cp_is_letter('a'));
  EXPECT_TRUE(cp_is_letter(0x4F60));  // 你
  EXPECT_TRUE(cp_is_number(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(cp_is_number(0x00BD));  // 1/2
  EXPECT_TRUE(cp_is_punct(','));
  EXPECT_FALSE(cp_is_punct('$'));  // Sc
  EXPECT_TRUE(cp_flags('~') & kCpSymbol);
  EXPECT_TRUE(cp_is_whitespace(0x3000));
  EXPECT_TRUE(cp_is_whitespace(0x85));
  EXPECT_FALSE(cp_is_whitespace(0x200B));  // zero width space is Cf, not White_Space
  EXPECT_FALSE(cp_is_whitespace(0x1C));
  EXPECT_TRUE(cp_flags(0x1F601) & kCpSymbol);
  EXPECT_TRUE(cp_flags(0xE0001) & kCpControl);  // language tag (Cf)
  EXPECT_EQ(cp_to_lower('A'), uint32_t{'a'});
  EXPECT_EQ(cp_to_lower(0x0130), uint32_t{'i'});  // İ, simple mapping
  EXPECT_EQ(cp_nfd_first(0xE9), uint32_t{'e'});
  EXPECT_EQ(cp_nfd_first(0xD55C), 0x1112u);  // 한 -> its leading jamo
}

TEST(Unicode, Gpt2ByteMap) {
  EXPECT_EQ(byte_to_unicode('!'), uint32_t{'!'});
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // Ċ
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(byte_to_unicode(b)), b);
  EXPECT_EQ(unicode_to_byte(' '), -1);
}

}  // namespace
}  // namespace power::text
