// The peer's own tokenizer vectors (../shared/fixtures/tokenizer, from llama.cpp's
// test-tokenizer-0) and the stories260K sentences from ../shared/models/README.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace power::text {
namespace {

using power::testing::read_bytes;
using power::testing::shared_dir;

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> bytes = read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

// .inp: every test string is followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> split_inputs(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < all.size()) {
    const size_t hit = all.find(sep, pos);
    if (hit == std::string::npos) break;
    out.push_back(all.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  return out;
}

// .out: one line of space-separated ids per test string.
std::vector<std::vector<TokenId>> parse_outputs(const std::string& all) {
  std::vector<std::vector<TokenId>> out;
  std::istringstream lines(all);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<TokenId> ids;
    long long id = 0;
    while (fields >> id) ids.push_back(static_cast<TokenId>(id));
    out.push_back(std::move(ids));
  }
  return out;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) {
    ADD_FAILURE() << path << ": " << file.status().to_string();
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok.ok()) {
    ADD_FAILURE() << path << ": " << tok.status().to_string();
    return nullptr;
  }
  return std::move(tok).value();
}

struct VocabCase {
  const char* name;
  TokenizerModel model;
  bool lossless;  // decode(encode(s)) == s for every test string
};

class PeerVocabTest : public ::testing::TestWithParam<VocabCase> {};

TEST_P(PeerVocabTest, EveryStringGivesThePeerIds) {
  POWER_REQUIRE_SHARED();
  const VocabCase& vc = GetParam();
  const std::string base = shared_dir() + "/fixtures/tokenizer/ggml-vocab-" + vc.name + ".gguf";
  auto tok = load(base);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->model(), vc.model);
  const auto inputs = split_inputs(read_text(base + ".inp"));
  const auto expected = parse_outputs(read_text(base + ".out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(inputs.size(), expected.size());

  size_t passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // As the peer's test-tokenizer-0: no BOS/EOS, special tokens not parsed.
    const auto ids = tok->encode(inputs[i], {.add_special = false, .parse_special = false});
    if (ids == expected[i]) {
      ++passed;
    } else {
      ADD_FAILURE() << vc.name << " string " << i << " '" << inputs[i]
                    << "'\n  got:      " << ids_text(ids)
                    << "\n  expected: " << ids_text(expected[i]);
    }
  }
  std::printf("[   vocab  ] %s: %zu/%zu strings match the peer\n", vc.name, passed, inputs.size());
  EXPECT_EQ(passed, inputs.size());
}

TEST_P(PeerVocabTest, RoundTrip) {
  POWER_REQUIRE_SHARED();
  const VocabCase& vc = GetParam();
  const std::string base = shared_dir() + "/fixtures/tokenizer/ggml-vocab-" + vc.name + ".gguf";
  auto tok = load(base);
  ASSERT_NE(tok, nullptr);
  const auto inputs = split_inputs(read_text(base + ".inp"));
  size_t same = 0;
  for (const std::string& s : inputs) {
    for (bool add_special : {false, true}) {
      const auto ids = tok->encode(s, {.add_special = add_special});
      auto text = tok->decode(ids);
      ASSERT_TRUE(text.ok()) << text.status().to_string();
      if (!vc.lossless) continue;
      EXPECT_EQ(*text, s) << vc.name << " add_special=" << add_special;
      if (*text == s && !add_special) ++same;
    }
  }
  if (vc.lossless) {
    EXPECT_EQ(same, inputs.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PeerVocabTest,
                         ::testing::Values(VocabCase{"llama-spm", TokenizerModel::kSpm, true},
                                           VocabCase{"phi-3", TokenizerModel::kSpm, true},
                                           VocabCase{"bert-bge", TokenizerModel::kWpm, false},
                                           VocabCase{"gpt-2", TokenizerModel::kBpe, true},
                                           VocabCase{"deepseek-coder", TokenizerModel::kBpe, true}),
                         [](const ::testing::TestParamInfo<VocabCase>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// WordPiece lowercases, drops accents and puts spaces around punctuation; decode with the
// vocabulary's clean-up gives this normalized text back.
TEST(PeerVocab, BertDecodeIsNormalizedText) {
  POWER_REQUIRE_SHARED();
  auto tok = load(shared_dir() + "/fixtures/tokenizer/ggml-vocab-bert-bge.gguf");
  ASSERT_NE(tok, nullptr);
  const auto ids = tok->encode("Hello, World! Führer café", {.add_special = true});
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), 101);  // [CLS]
  EXPECT_EQ(ids.back(), 102);   // [SEP]
  EXPECT_EQ(*tok->decode(ids), "hello , world ! fuhrer cafe");
  EXPECT_EQ(*tok->decode(ids, {.clean_spaces = true}), "hello, world! fuhrer cafe");
  EXPECT_EQ(*tok->decode(ids, {.render_special = true}), "[CLS] hello , world ! fuhrer cafe [SEP]");
}

// SPM merges word by word when no piece has U+2581 after another character (llama-spm has
// none). Adding one such piece (that never occurs) forces one merge run over the whole text:
// the ids must not change.
TEST(PeerVocab, SpmWordByWordEqualsWholeText) {
  POWER_REQUIRE_SHARED();
  const std::string base = shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf";
  auto file = GgufFile::open(base);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto spec = tokenizer_spec_from_gguf(**file);
  ASSERT_TRUE(spec.ok());
  auto by_word = Tokenizer::create(*spec);
  spec->tokens.push_back("\x01\xE2\x96\x81\x01");
  spec->scores.push_back(0.0f);
  spec->token_types.push_back(1);
  auto whole = Tokenizer::create(*spec);
  ASSERT_TRUE(by_word.ok() && whole.ok());
  std::string all;
  for (const std::string& s : split_inputs(read_text(base + ".inp"))) {
    all += s + " ";
    EXPECT_EQ((*by_word)->encode(s), (*whole)->encode(s)) << s;
  }
  EXPECT_EQ((*by_word)->encode(all), (*whole)->encode(all));
}

class Stories260KTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!power::testing::shared_available()) return;
    tok_ = load(shared_dir() + "/models/stories260K/stories260K-F32.gguf");
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Stories260KTest, ShortSentence) {
  POWER_REQUIRE_SHARED();
  ASSERT_NE(tok_, nullptr);
  EXPECT_TRUE(tok_->add_bos());
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  const std::vector<TokenId> expected = {1,   403, 407, 261, 378, 432, 383, 286,
                                         261, 376, 298, 315, 421, 395, 317, 426};
  EXPECT_EQ(tok_->encode(text), expected);
  EXPECT_EQ(*tok_->decode(expected), text);
}

TEST_F(Stories260KTest, LongSentence) {
  POWER_REQUIRE_SHARED();
  ASSERT_NE(tok_, nullptr);
  const std::string text =
      "Once upon a time, there was a little boy named Tim. He had a big red ball. One day, he "
      "went to the park to play with his good friend Sue.";
  const std::vector<TokenId> expected = {
      1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 268, 414, 422, 395, 326, 426,
      346, 381, 261, 370, 352, 266, 268, 388, 426, 385, 328, 432, 281, 263, 377, 267,
      265, 282, 295, 433, 267, 337, 335, 345, 298, 347, 418, 374, 301, 425, 411, 426};
  ASSERT_EQ(expected.size(), 48u);
  EXPECT_EQ(tok_->encode(text), expected);
  // The same ids as ../shared/fixtures/models/stories260K/tokens.txt.
  const std::vector<uint8_t> file =
      read_bytes(shared_dir() + "/fixtures/models/stories260K/tokens.txt");
  EXPECT_EQ(parse_outputs(std::string(file.begin(), file.end())).at(0), expected);
  EXPECT_EQ(*tok_->decode(expected), text);
}

}  // namespace
}  // namespace power::text
