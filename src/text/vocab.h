// Internal to power_text: the vocabulary a Tokenizer owns, and the per-model encoders that run
// on one stretch of plain text (no special tokens inside; tokenizer.cpp splits those off).
// Thread-safety: immutable after build_vocab(); the encoders only read it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"

namespace power::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// BPE merges over interned symbols. A symbol is any string that occurs in a merge; symbols
// that are tokens use their token id, the rest get ids from n_tokens upwards.
struct BpeMerges {
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of left+right
  };
  std::unordered_map<uint64_t, Merge> by_pair;  // (left << 32 | right) -> merge
  TokenIndex extra_symbols;                     // symbol strings that are not tokens
  std::array<int32_t, 256> byte_symbol{};       // symbol of each byte's GPT-2 code point, or -1

  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
};

struct TokenizerImpl {
  TokenizerModel model = TokenizerModel::kSpm;
  std::string pre_name;
  PreTokenizerKind pre_kind = PreTokenizerKind::kDefault;

  std::vector<TokenData> tokens;
  TokenIndex index;  // text -> id (the last id wins for duplicate texts)
  SpecialTokens special;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool ignore_merges = false;
  bool clean_spaces = false;
  bool wpm_hash_continuations = false;  // BERT form: "##" marks continuations
  // SPM: no piece has U+2581 after another character, so words can be merged one at a time.
  bool spm_words_split_at_space = false;
  size_t max_token_bytes = 0;

  // Tokens matched inside text before tokenizing (control, user-defined, unknown), longest
  // text first.
  std::vector<TokenId> partition_order;
  std::vector<uint8_t> eog;  // per token
  // SPM: the <0xNN> token of each byte; BPE: the token of each byte's code point.
  std::array<TokenId, 256> byte_tokens{};
  // token_to_piece(id, render_special = false) for every token.
  std::vector<std::string> pieces;
  BpeMerges merges;

  TokenId find(std::string_view text) const {
    auto it = index.find(text);
    return it == index.end() ? kNoToken : it->second;
  }
  bool valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < tokens.size(); }
  // A token that plain text may turn into: not control, unknown or byte-fallback. Keeps
  // "<s>" typed by a user from becoming BOS through merges (as in sentencepiece).
  TokenId find_text_piece(std::string_view text) const {
    const TokenId id = find(text);
    if (id == kNoToken) return kNoToken;
    return (tokens[id].attr & (kAttrControl | kAttrUnknown | kAttrByte)) ? kNoToken : id;
  }
};

Result<std::unique_ptr<TokenizerImpl>> build_vocab(const TokenizerSpec& spec);

// `text` is one stretch of plain text. SPM: `add_prefix` puts the U+2581 space prefix first.
void spm_encode(const TokenizerImpl& v, std::string_view text, bool add_prefix,
                std::vector<TokenId>& out);
void bpe_encode(const TokenizerImpl& v, std::string_view text, std::vector<TokenId>& out);
void wpm_encode(const TokenizerImpl& v, std::string_view text, std::vector<TokenId>& out);

// BERT basic normalization + whitespace/punctuation split (exposed for tests).
std::vector<std::string> wpm_words(std::string_view text);

}  // namespace power::text
