// Tokenizers on small hand-made vocabularies: special-token parsing, byte fallback, merge
// order, WordPiece forms, the invalid UTF-8 policy, decoding and the streaming detokenizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace power::text {
namespace {

using Ids = std::vector<TokenId>;
constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

std::string sp(const std::string& s) {  // "_abc" -> "\u2581abc"
  std::string out;
  for (char c : s) {
    if (c == '_') {
      out += kSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// SPM: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then pieces (score: longer is better)
// and one user-defined token.
struct SpmVocab {
  TokenizerSpec spec;
  TokenId byte(int b) const { return 3 + b; }
  TokenId id(const std::string& text) const {
    for (size_t i = 0; i < spec.tokens.size(); ++i) {
      if (spec.tokens[i] == text) return static_cast<TokenId>(i);
    }
    ADD_FAILURE() << "no token " << text;
    return kNoToken;
  }
};

SpmVocab make_spm() {
  SpmVocab v;
  TokenizerSpec& s = v.spec;
  s.model = "llama";
  auto add = [&](const std::string& text, float score, GgufTokenType type) {
    s.tokens.push_back(text);
    s.scores.push_back(score);
    s.token_types.push_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0, GgufTokenType::kUnknown);
  add("<s>", 0, GgufTokenType::kControl);
  add("</s>", 0, GgufTokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, GgufTokenType::kByte);
  }
  add(sp("_"), -6, GgufTokenType::kNormal);
  for (const char* c : {"a", "b", "c", "<", ">", "s", "/"}) add(c, -10, GgufTokenType::kNormal);
  add(sp("_a"), -5, GgufTokenType::kNormal);
  add("ab", -4, GgufTokenType::kNormal);
  add("abc", -3, GgufTokenType::kNormal);
  add(sp("_ab"), -2, GgufTokenType::kNormal);
  add(sp("_abc"), -1, GgufTokenType::kNormal);
  add("<|user|>", 0, GgufTokenType::kUserDefined);
  add("<s", -7, GgufTokenType::kNormal);  // "<s" + ">" would spell the control token <s>
  return v;
}

std::unique_ptr<Tokenizer> make(const TokenizerSpec& spec) {
  auto tok = Tokenizer::create(spec);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(Spm, ScoreOrderedMergesAndSpacePrefix) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->add_bos());  // SPM default
  EXPECT_EQ(tok->encode("abc"), (Ids{1, v.id(sp("_abc"))}));
  EXPECT_EQ(tok->encode("abc abc", {.add_special = false}),
            (Ids{v.id(sp("_abc")), v.id(sp("_abc"))}));
  // ▁ a b d: "ab" (-4) beats "▁a" (-5), then "▁ab" (-2) forms; "d" has no piece: its byte.
  EXPECT_EQ(tok->encode("abd", {.add_special = false}), (Ids{v.id(sp("_ab")), v.byte('d')}));
}

TEST(Spm, SpecialTokensOnlyWhenAsked) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  // Not parsed: "<s>" is text. ▁ < s > a b c: a+b, ab+c and <+s merge; "<s" + ">" would
  // be the control token <s>, which merges never produce.
  EXPECT_EQ(tok->encode("<s>abc", {.add_special = false}),
            (Ids{v.id(sp("_")), v.id("<s"), v.id(">"), v.id("abc")}));
  // Parsed: the BOS token, and the text after it gets the space prefix again.
  EXPECT_EQ(tok->encode("<s>abc", {.add_special = false, .parse_special = true}),
            (Ids{1, v.id(sp("_abc"))}));
  // User-defined tokens are always matched; 'x' has no piece -> byte fallback.
  EXPECT_EQ(tok->encode("x<|user|>abc", {.add_special = false}),
            (Ids{v.id(sp("_")), v.byte('x'), v.id("<|user|>"), v.id(sp("_abc"))}));
}

TEST(Spm, DecodeIsTheInverse) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  for (const std::string s :
       {"abc", " abc", "abc  ab", "x<|user|>abc", "caf\xC3\xA9 \xF0\x9F\x98\x81"}) {
    EXPECT_EQ(*tok->decode(tok->encode(s)), s);
    EXPECT_EQ(*tok->decode(tok->encode(s, {.add_special = false})), s);
  }
  const std::string special = "<s>abc</s>ab";
  const Ids ids = tok->encode(special, {.add_special = false, .parse_special = true});
  EXPECT_EQ(*tok->decode(ids, {.render_special = true}), special);
  EXPECT_EQ(*tok->decode(ids), "abcab");
  // Without stripping, pieces are concatenated as llama.cpp's token_to_piece gives them.
  EXPECT_EQ(*tok->decode(tok->encode("abc"), {.strip_space_prefix = false}), " abc");
  EXPECT_EQ(tok->token_to_piece(v.id(sp("_abc"))), " abc");
  EXPECT_EQ(tok->token_to_piece(v.byte(0xC3)), "\xC3");
  EXPECT_EQ(tok->token_to_piece(1), "");
  EXPECT_EQ(tok->token_to_piece(1, true), "<s>");
  EXPECT_EQ(tok->token_to_piece(99999), "");
}

// Policy: SPM writes each malformed byte as its own byte token; decode restores the bytes.
TEST(Spm, MalformedUtf8UsesByteFallback) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  const std::string bad =
      "a\xFF"
      "b\xC3";  // stray byte, then a truncated 2-byte sequence
  const Ids ids = tok->encode(bad, {.add_special = false});
  EXPECT_EQ(ids, (Ids{v.id(sp("_a")), v.byte(0xFF), v.id("b"), v.byte(0xC3)}));
  EXPECT_EQ(*tok->decode(ids), bad);
}

TEST(Spm, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tok = make(make_spm().spec);
  ASSERT_NE(tok, nullptr);
  const Ids ids = {1, -5};
  auto text = tok->decode(ids);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().to_string().find("position=1"), std::string::npos);
}

TEST(Streaming, HoldsSplitCharactersUntilComplete) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  // "é" = C3 A9 and "😁" = F0 9F 98 81 have no pieces: byte tokens, one byte at a time.
  const Ids ids = tok->encode("\xC3\xA9\xF0\x9F\x98\x81", {.add_special = true});
  ASSERT_EQ(ids, (Ids{1, v.id(sp("_")), v.byte(0xC3), v.byte(0xA9), v.byte(0xF0), v.byte(0x9F),
                      v.byte(0x98), v.byte(0x81)}));
  StreamingDetokenizer stream(*tok);
  std::vector<std::string> chunks;
  for (TokenId id : ids) {
    std::string out;
    ASSERT_TRUE(stream.push(id, out).ok());
    chunks.push_back(out);
  }
  // BOS: nothing; "▁" after BOS: its space is the prefix, dropped; then whole characters only.
  EXPECT_EQ(chunks,
            (std::vector<std::string>{"", "", "", "\xC3\xA9", "", "", "", "\xF0\x9F\x98\x81"}));
  EXPECT_EQ(stream.pending_bytes(), 0u);
}

TEST(Streaming, MalformedBytesBecomeReplacementCharacters) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  StreamingDetokenizer stream(*tok, {.at_sequence_start = true});
  std::string out;
  ASSERT_TRUE(stream.push(v.id(sp("_a")), out).ok());
  EXPECT_EQ(out, "a");                               // sequence start: the space prefix is dropped
  ASSERT_TRUE(stream.push(v.byte(0xFF), out).ok());  // can never start a character
  EXPECT_EQ(out, "a\xEF\xBF\xBD");
  ASSERT_TRUE(stream.push(v.byte(0xC3), out).ok());  // waits...
  EXPECT_EQ(stream.pending_bytes(), 1u);
  ASSERT_TRUE(stream.push(v.byte('A'), out).ok());  // ...and is not continued
  EXPECT_EQ(out,
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "A");
  ASSERT_TRUE(stream.push(v.byte(0xE2), out).ok());
  ASSERT_TRUE(stream.push(v.byte(0x82), out).ok());
  stream.finish(out);  // an unfinished character at the end: one U+FFFD per byte
  EXPECT_EQ(out,
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "A\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(utf8_is_valid(out));
  EXPECT_FALSE(stream.push(12345, out).ok());
}

TEST(Streaming, ContinuationKeepsTheLeadingSpace) {
  const SpmVocab v = make_spm();
  auto tok = make(v.spec);
  ASSERT_NE(tok, nullptr);
  StreamingDetokenizer stream(*tok);  // continuing a prompt: " abc" keeps its space
  std::string out;
  ASSERT_TRUE(stream.push(v.id(sp("_abc")), out).ok());
  ASSERT_TRUE(stream.push(2, out).ok());  // </s>: nothing
  ASSERT_TRUE(stream.push(v.id(sp("_ab")), out).ok());
  EXPECT_EQ(out, " abcab");
  StreamingDetokenizer shown(*tok, {.render_special = true});
  std::string out2;
  for (TokenId id : {v.id(sp("_abc")), TokenId{2}, v.id(sp("_ab"))}) {
    ASSERT_TRUE(shown.push(id, out2).ok());
  }
  EXPECT_EQ(out2, " abc</s>ab");
}

// Byte-level BPE: all 256 byte symbols, a few merges and one control token.
TokenizerSpec make_bpe(const std::string& pre) {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = pre;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    utf8_append(t, byte_to_unicode(static_cast<uint8_t>(b)));
    s.tokens.push_back(t);
  }
  const std::string G = "\xC4\xA0";  // Ġ, the byte-level space
  for (const std::string& t : std::vector<std::string>{G + "t", "he", G + "the", "aa", "xyz"})
    s.tokens.push_back(t);
  s.tokens.push_back("<|endoftext|>");
  s.token_types.assign(s.tokens.size(), static_cast<int32_t>(GgufTokenType::kNormal));
  s.token_types.back() = static_cast<int32_t>(GgufTokenType::kControl);
  s.merges = {G + " t", "h e", G + "t he", "a a"};
  return s;
}

TEST(Bpe, MergesByRankLeftmostFirst) {
  auto tok = make(make_bpe("gpt-2"));
  ASSERT_NE(tok, nullptr);
  const TokenId the = *tok->find_token("\xC4\xA0the");
  const TokenId he = *tok->find_token("he");
  const TokenId aa = *tok->find_token("aa");
  EXPECT_EQ(tok->encode(" the"), (Ids{the}));
  EXPECT_EQ(tok->encode("the"), (Ids{'t', he}));  // printable ASCII bytes map to themselves
  EXPECT_EQ(tok->encode("aaa"), (Ids{aa, 'a'}));  // ties: the leftmost pair merges first
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(*tok->decode(tok->encode(" the aaa")), " the aaa");
}

TEST(Bpe, IgnoreMergesTakesWholeWordTokens) {
  // "xyz" is a token but no merge builds it: llama3-style vocabularies use it whole.
  auto gpt2 = make(make_bpe("gpt-2"));
  auto llama3 = make(make_bpe("llama-bpe"));
  ASSERT_NE(gpt2, nullptr);
  ASSERT_NE(llama3, nullptr);
  const TokenId xyz = *gpt2->find_token("xyz");
  EXPECT_EQ(gpt2->encode("xyz"), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(llama3->encode("xyz", {.add_special = false}), (Ids{xyz}));
}

TEST(Bpe, SpecialTokensOnlyWhenAsked) {
  auto tok = make(make_bpe("gpt-2"));
  ASSERT_NE(tok, nullptr);
  const TokenId eot = *tok->find_token("<|endoftext|>");
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_EQ(tok->encode("a<|endoftext|>", {.parse_special = true}), (Ids{'a', eot}));
  const Ids plain = tok->encode("a<|endoftext|>");
  EXPECT_EQ(plain.size(), 14u);  // no merges apply: one token per byte
  EXPECT_EQ(*tok->decode(plain), "a<|endoftext|>");
}

// Policy: BPE replaces each malformed byte by U+FFFD (its three bytes are then encoded).
TEST(Bpe, MalformedUtf8BecomesReplacementCharacters) {
  auto tok = make(make_bpe("gpt-2"));
  ASSERT_NE(tok, nullptr);
  const Ids ids = tok->encode("a\xFF\xC3");
  auto byte_id = [](int b) { return static_cast<TokenId>(b); };  // token i is byte i's symbol
  EXPECT_EQ(ids, (Ids{'a', byte_id(0xEF), byte_id(0xBF), byte_id(0xBD), byte_id(0xEF),
                      byte_id(0xBF), byte_id(0xBD)}));
  EXPECT_EQ(*tok->decode(ids), "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

// WordPiece in llama.cpp's form (U+2581 marks word starts) and in BERT's ("##" marks
// continuations) gives the same ids.
TokenizerSpec make_wpm(bool hash_form) {
  TokenizerSpec s;
  s.model = "bert";
  s.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  s.token_types.assign(5, static_cast<int32_t>(GgufTokenType::kControl));
  const std::vector<std::pair<std::string, bool>> pieces = {
      {"hello", true}, {"play", true}, {"ing", false},         {",", true},
      {"!", true},     {"cafe", true}, {"\xE4\xBD\xA0", true}, {"s", false}};
  for (const auto& [text, word_start] : pieces) {
    if (hash_form) {
      s.tokens.push_back(word_start ? text : "##" + text);
    } else {
      s.tokens.push_back(word_start ? sp("_") + text : text);
    }
    s.token_types.push_back(static_cast<int32_t>(GgufTokenType::kNormal));
  }
  s.unk = 1;
  s.cls = 2;
  s.sep = 3;
  s.pad = 0;
  s.mask = 4;
  return s;
}

TEST(Wpm, NormalizesAndMatchesLongestPieces) {
  for (bool hash_form : {false, true}) {
    auto tok = make(make_wpm(hash_form));
    ASSERT_NE(tok, nullptr);
    // hello , playing ! cafe(é -> e) 你 [UNK](xyz) plays
    const Ids ids = tok->encode("Hello, PLAYING! Caf\xC3\xA9\t\xE4\xBD\xA0xyz plays");
    EXPECT_EQ(ids, (Ids{2, 5, 8, 6, 7, 9, 10, 11, 1, 6, 12, 3})) << hash_form;
    EXPECT_EQ(*tok->decode(ids), "hello , playing ! cafe \xE4\xBD\xA0 plays") << hash_form;
    EXPECT_EQ(*tok->decode(ids, {.render_special = true, .clean_spaces = true}),
              "[CLS] hello, playing! cafe \xE4\xBD\xA0 [UNK] plays [SEP]")
        << hash_form;
  }
}

// Policy: WordPiece replaces malformed bytes by U+FFFD and drops it with other unprintables.
TEST(Wpm, MalformedUtf8IsDropped) {
  auto tok = make(make_wpm(false));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("hel\xFFlo", {.add_special = false}), (Ids{5}));
  EXPECT_EQ(tok->encode("\xC3", {.add_special = false}), (Ids{}));
}

TEST(TokenizerCreate, RejectsBadSpecs) {
  TokenizerSpec empty;
  empty.model = "llama";
  EXPECT_FALSE(Tokenizer::create(empty).ok());

  TokenizerSpec t5 = make_spm().spec;
  t5.model = "t5";
  EXPECT_EQ(Tokenizer::create(t5).status().code(), StatusCode::kUnsupported);

  TokenizerSpec bad_scores = make_spm().spec;
  bad_scores.scores.pop_back();
  EXPECT_EQ(Tokenizer::create(bad_scores).status().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(Tokenizer::create(make_bpe("tekken-unknown")).status().code(),
            StatusCode::kUnsupported);
  TokenizerSpec no_merges = make_bpe("gpt-2");
  no_merges.merges.clear();
  EXPECT_FALSE(Tokenizer::create(no_merges).ok());
}

TEST(TokenizerCreate, OutOfRangeSpecialIdsKeepDefaults) {
  TokenizerSpec s = make_spm().spec;
  s.bos = 1000000;
  s.eos = 1;
  auto tok = make(s);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->special().bos, 1);
  EXPECT_EQ(tok->special().eos, 1);
  EXPECT_TRUE(tok->is_eog(1));
}

// The GGUF path: write the tokenizer keys, read them back.
TEST(TokenizerGguf, ReadsTokenizerKeys) {
  const SpmVocab v = make_spm();
  GgufWriter writer;
  writer.set("general.architecture", GgufValue::str("llama"));
  writer.set("tokenizer.ggml.model", GgufValue::str("llama"));
  writer.set("tokenizer.ggml.tokens", GgufValue::string_array(v.spec.tokens));
  std::vector<GgufValue> scores;
  std::vector<GgufValue> types;
  for (float f : v.spec.scores) scores.push_back(GgufValue::f32(f));
  for (int32_t t : v.spec.token_types) types.push_back(GgufValue::i32(t));
  writer.set("tokenizer.ggml.scores", GgufValue::array(GgufValueType::kFloat32, scores));
  writer.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::kInt32, types));
  writer.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  writer.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  writer.set("tokenizer.ggml.padding_token_id", GgufValue::u32(0xFFFFFFFFu));  // "none"
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto file = GgufFile::parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->model(), TokenizerModel::kSpm);
  EXPECT_FALSE((*tok)->add_bos());
  EXPECT_EQ((*tok)->special().pad, kNoToken);
  EXPECT_EQ((*tok)->encode("abc"), (Ids{v.id(sp("_abc"))}));
  EXPECT_EQ((*tok)->token_attr(1), static_cast<uint32_t>(kAttrControl));

  GgufWriter no_model;
  no_model.set("tokenizer.ggml.tokens", GgufValue::string_array(v.spec.tokens));
  auto bytes2 = no_model.serialize();
  ASSERT_TRUE(bytes2.ok());
  auto file2 = GgufFile::parse(*bytes2);
  ASSERT_TRUE(file2.ok());
  EXPECT_FALSE(Tokenizer::from_gguf(**file2).ok());
}

}  // namespace
}  // namespace power::text
