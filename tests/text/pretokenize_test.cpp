// Pre-tokenizers on hand-made strings. Only gpt-2 and deepseek-coder have peer fixtures, so
// the expected splits here are derived by hand from each regex (see the comments): a regex
// splits every piece into its leftmost matches and the text between them, and the regexes of
// a pre-tokenizer run one after another over all pieces.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "text/pretokenize.h"
#include "text/utf8.h"

namespace power::text {
namespace {

using Words = std::vector<std::string>;
using K = PreTokenizerKind;

Words split(K kind, const std::string& text) {
  return pre_tokenize_words(kind, text);
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
TEST(PreTokenizeGpt2, SpacesAttachToTheFollowingWord) {
  EXPECT_EQ(split(K::kGpt2, "Hello world"), (Words{"Hello", " world"}));
  // Two spaces before a word: \s+(?!\S) backs off one space, which then starts " fine".
  EXPECT_EQ(split(K::kGpt2, "I'm  fine!!"), (Words{"I", "'m", " ", " fine", "!!"}));
  EXPECT_EQ(split(K::kGpt2, "F\xC3\xBChrer 123"), (Words{"F\xC3\xBChrer", " 123"}));
  // Trailing spaces: (?!\S) holds at the end, so the whole run is one piece.
  EXPECT_EQ(split(K::kGpt2, "x   "), (Words{"x", "   "}));
}

TEST(PreTokenizeGpt2, ContractionsAreCaseSensitive) {
  EXPECT_EQ(split(K::kGpt2, "don't"), (Words{"don", "'t"}));
  // 'S is no contraction here: "'" is [^\s\p{L}\p{N}]+ and "S" a letter run.
  EXPECT_EQ(split(K::kGpt2, "IT'S"), (Words{"IT", "'", "S"}));
}

TEST(PreTokenizeGpt2, UnicodeWhitespaceAndCategories) {
  // U+00A0 is \s but not " ": it cannot be the optional space of " ?\p{L}+".
  EXPECT_EQ(split(K::kGpt2, "x\xC2\xA0y"), (Words{"x", "\xC2\xA0", "y"}));
  // U+0663.. are \p{N} (Arabic-Indic digits); U+00BD (1/2) is \p{N} too.
  EXPECT_EQ(split(K::kGpt2, "a \xD9\xA3\xD9\xA4 \xC2\xBD"),
            (Words{"a", " \xD9\xA3\xD9\xA4", " \xC2\xBD"}));
  // Emoji are [^\s\p{L}\p{N}] (So).
  EXPECT_EQ(split(K::kGpt2, "hi \xF0\x9F\xA6\x99!"), (Words{"hi", " \xF0\x9F\xA6\x99!"}));
}

// llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
TEST(PreTokenizeLlama3, NumbersInGroupsOfThree) {
  EXPECT_EQ(split(K::kLlama3, "1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(split(K::kLlama3, "x 12"), (Words{"x", " ", "12"}));
}

TEST(PreTokenizeLlama3, OneNonLetterMayLeadAWord) {
  // [^\r\n\p{L}\p{N}]? takes the comma (or a space) in front of the letter run.
  EXPECT_EQ(split(K::kLlama3, "Hello,world"), (Words{"Hello", ",world"}));
  EXPECT_EQ(split(K::kLlama3, "a \xE4\xBD\xA0\xE5\xA5\xBD"),
            (Words{"a", " \xE4\xBD\xA0\xE5\xA5\xBD"}));
  // CJK ideographs are letters, so they run together with Latin letters.
  EXPECT_EQ(split(K::kLlama3,
                  "\xE6\x88\x91"
                  "apple\xE5\xB7\xA5"),
            (Words{"\xE6\x88\x91"
                   "apple\xE5\xB7\xA5"}));
}

TEST(PreTokenizeLlama3, ContractionsIgnoreCase) {
  EXPECT_EQ(split(K::kLlama3, "WE'RE"), (Words{"WE", "'RE"}));
  EXPECT_EQ(split(K::kLlama3, "it's"), (Words{"it", "'s"}));
}

TEST(PreTokenizeLlama3, Newlines) {
  // Punctuation takes the newlines that follow it: ` ?[^\s\p{L}\p{N}]+[\r\n]*`.
  EXPECT_EQ(split(K::kLlama3, "hi!!\n\nthere"), (Words{"hi", "!!\n\n", "there"}));
  // \s*[\r\n]+ ends at the last newline of a whitespace run; the space after it leads " b".
  EXPECT_EQ(split(K::kLlama3, "a \n b"), (Words{"a", " \n", " b"}));
  EXPECT_EQ(split(K::kLlama3, "  x"), (Words{" ", " x"}));
}

// qwen2: llama3's regex with \p{N} instead of \p{N}{1,3}.
TEST(PreTokenizeQwen2, SingleDigits) {
  EXPECT_EQ(split(K::kQwen2, "v1234"), (Words{"v", "1", "2", "3", "4"}));
  EXPECT_EQ(split(K::kQwen2, "I'LL go"), (Words{"I", "'LL", " go"}));
}

// deepseek-coder: [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [一-龥ࠀ-一가-퟿]+ | \p{N}
TEST(PreTokenizeDeepseekCoder, PassesInOrder) {
  // [\r\n] splits off "\n"; \s?\p{L}+ finds "Hello" and " world", leaving "," and " 123";
  // \p{N} then splits " 123" into " ", "1", "2", "3".
  EXPECT_EQ(split(K::kDeepseekCoder, "Hello, world 123\n"),
            (Words{"Hello", ",", " world", " ", "1", "2", "3", "\n"}));
  // $ is \p{S}, not \p{P}: it stays with the space before it.
  EXPECT_EQ(split(K::kDeepseekCoder, "a $x"), (Words{"a", " $", "x"}));
}

// deepseek-llm: [\r\n] | \s?[A-Za-zµÀ-ÖØ-ö...]+ | \s?[!-/:-~！-／：-～‘-‟　-。]+ | \s+$ |
//               [一-龥ࠀ-一가-퟿]+ | \p{N}+
TEST(PreTokenizeDeepseekLlm, PassesInOrder) {
  // After the letter pass: "Hello", " world", "! 42 " and "\n". [:-~] spans ASCII letters,
  // so the punctuation pass keeps the words and takes "!"; digits are in neither class.
  // \s+$ then splits the trailing space off " 42 ", and \p{N}+ splits " 42".
  EXPECT_EQ(split(K::kDeepseekLlm, "Hello world! 42 \n"),
            (Words{"Hello", " world", "!", " ", "42", " ", "\n"}));
  // Hangul and CJK: their own pass.
  EXPECT_EQ(split(K::kDeepseekLlm, "ab\xEA\xB0\x80\xEA\xB0\x81"),
            (Words{"ab", "\xEA\xB0\x80\xEA\xB0\x81"}));
}

// falcon: [\p{P}\$\+<=>\^~\|]+ | GPT-2 | [0-9][0-9][0-9]
TEST(PreTokenizeFalcon, PunctuationThenGpt2ThenThreeDigits) {
  EXPECT_EQ(split(K::kFalcon, "a+b=12345,"), (Words{"a", "+", "b", "=", "123", "45", ","}));
  // Non-ASCII digits are \p{N} for GPT-2 but not [0-9].
  EXPECT_EQ(split(K::kFalcon, "x \xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6"),
            (Words{"x", " \xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6"}));
}

// default: falcon's passes plus \p{N}+ before the three-digit split.
TEST(PreTokenizeDefault, NumbersSplitFromTheirSpace) {
  EXPECT_EQ(split(K::kDefault, "x \xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6"),
            (Words{"x", " ", "\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6"}));
  EXPECT_EQ(split(K::kDefault, "x 12345"), (Words{"x", " ", "123", "45"}));
}

// starcoder / refact / command-r: \p{N} | GPT-2
TEST(PreTokenizeStarcoder, SingleDigitsFirst) {
  EXPECT_EQ(split(K::kStarcoder, "abc 123"), (Words{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(split(K::kStarcoder, "x=42;"), (Words{"x", "=", "4", "2", ";"}));
}

// bloom:  ?[^(\s|.,!?…。，、।۔،)]+   viking: the same, then \p{N}
TEST(PreTokenizeBloom, SplitsAtListedPunctuation) {
  // " (" is a gap: the space cannot be followed by '(', and both are excluded.
  EXPECT_EQ(split(K::kBloom, "Hello, world (x)"), (Words{"Hello", ",", " world", " (", "x", ")"}));
  EXPECT_EQ(split(K::kViking, "ab12"), (Words{"ab", "1", "2"}));
}

TEST(PreTokenizeNames, GgufNamesSelectRegexesAndDefaults) {
  struct Case {
    const char* name;
    K kind;
  };
  for (const Case& c :
       {Case{"gpt-2", K::kGpt2}, Case{"mpt", K::kGpt2}, Case{"llama3", K::kLlama3},
        Case{"llama-bpe", K::kLlama3}, Case{"qwen2", K::kQwen2},
        Case{"deepseek-llm", K::kDeepseekLlm}, Case{"deepseek-coder", K::kDeepseekCoder},
        Case{"falcon", K::kFalcon}, Case{"starcoder", K::kStarcoder}, Case{"refact", K::kStarcoder},
        Case{"command-r", K::kStarcoder}, Case{"default", K::kDefault}}) {
    auto info = pre_tokenizer_from_name(c.name);
    ASSERT_TRUE(info.has_value()) << c.name;
    EXPECT_EQ(info->kind, c.kind) << c.name;
  }
  EXPECT_TRUE(pre_tokenizer_from_name("llama-bpe")->ignore_merges);
  EXPECT_TRUE(pre_tokenizer_from_name("llama-bpe")->add_bos);
  EXPECT_FALSE(pre_tokenizer_from_name("qwen2")->clean_spaces);
  EXPECT_FALSE(pre_tokenizer_from_name("no-such-pre").has_value());
  EXPECT_FALSE(pre_tokenizer_from_name("").has_value());
}

// Whatever the input, the words cover it exactly, in order, with no empty word.
TEST(PreTokenize, WordsCoverTheInput) {
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a",
                                             "Z",
                                             " ",
                                             "  ",
                                             "\n",
                                             "\r",
                                             "\t",
                                             "1",
                                             "9",
                                             "'",
                                             "s",
                                             "RE",
                                             ",",
                                             "!",
                                             "$",
                                             "\xC2\xA0",
                                             "\xE3\x80\x80",
                                             "\xE4\xBD\xA0",
                                             "\xEA\xB0\x80",
                                             "\xD9\xA3",
                                             "\xF0\x9F\x98\x81",
                                             "\xCC\x81",
                                             "\xC3\xA9",
                                             "~",
                                             "(",
                                             "|",
                                             "\xE2\x80\xA6"};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    for (K kind : {K::kDefault, K::kGpt2, K::kLlama3, K::kQwen2, K::kDeepseekLlm, K::kDeepseekCoder,
                   K::kFalcon, K::kStarcoder, K::kBloom, K::kViking}) {
      std::string joined;
      for (const std::string& w : split(kind, text)) {
        EXPECT_FALSE(w.empty());
        joined += w;
      }
      EXPECT_EQ(joined, text) << pre_tokenizer_kind_name(kind);
    }
  }
}

// A long run of whitespace must not make any pass quadratic (this would not finish).
TEST(PreTokenize, LongWhitespaceRunsStayLinear) {
  const std::string text = std::string(300000, ' ') + "a" + std::string(300000, '\n') + "b";
  for (K kind : {K::kDefault, K::kGpt2, K::kLlama3, K::kQwen2, K::kDeepseekLlm, K::kDeepseekCoder,
                 K::kFalcon, K::kStarcoder, K::kBloom}) {
    size_t total = 0;
    for (const std::string& w : split(kind, text)) total += w.size();
    EXPECT_EQ(total, text.size());
  }
}

}  // namespace
}  // namespace power::text
