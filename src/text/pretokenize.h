// Pre-tokenizers of byte-level BPE vocabularies: split text into words before merges run.
//
// tokenizer.ggml.pre names a list of regexes (from the model's tokenizer.json as llama.cpp
// converts it). Each regex in turn splits every piece the previous ones produced: its matches
// and the text between matches both become pieces. Here each regex is a hand-written matcher
// over code points with the regex's exact semantics (leftmost match, alternatives tried in
// order, greedy quantifiers with backtracking) and real Unicode categories (unicode.h).
// Two details follow how llama.cpp runs the regexes, which the models' GGUF files are
// checked against: \s is the White_Space property, and a regex sees only the piece it
// splits, so `$` and look-ahead stop at the piece's end.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace power::text {

enum class PreTokenizerKind : uint8_t {
  kDefault,        // no or "default" pre: punctuation runs, GPT-2 regex, numbers, 3 digits
  kGpt2,           // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,         // case-insensitive contractions, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,3}, ...
  kQwen2,          // llama3's regex with single digits (\p{N})
  kDeepseekLlm,    // newlines, Latin/Greek/Cyrillic... letters, ASCII/fullwidth punct, CJK, numbers
  kDeepseekCoder,  // newlines, \s?\p{L}+, \s?\p{P}+, CJK, single digits
  kFalcon,         // punctuation runs, GPT-2 regex, 3 ASCII digits
  kStarcoder,      // single digits, then the GPT-2 regex (also refact, command-r, smollm, ...)
  kBloom,          //  ?[^(\s|.,!?…。，、।۔،)]+  (bloom, poro-chat, gpt3-finnish)
  kViking,         // bloom's regex, then single digits
};

// What a tokenizer.ggml.pre name selects, with the vocabulary defaults it implies
// (as llama.cpp applies them; explicit GGUF keys still override add_bos).
struct PreTokenizerInfo {
  PreTokenizerKind kind = PreTokenizerKind::kDefault;
  bool ignore_merges = false;  // a word that is itself a token skips the merges
  bool add_bos = false;
  bool clean_spaces = true;  // decode may remove spaces before punctuation
};

// nullopt for a name Power does not implement.
std::optional<PreTokenizerInfo> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_kind_name(PreTokenizerKind kind);

// A half-open range of code point indices.
struct CpRange {
  size_t begin = 0;
  size_t end = 0;
};

// Splits cps into words; `out` receives the ranges in order, covering cps exactly.
void pre_tokenize(PreTokenizerKind kind, std::span<const uint32_t> cps, std::vector<CpRange>& out);

// The same over UTF-8 text (malformed bytes become U+FFFD first), returning the words.
std::vector<std::string> pre_tokenize_words(PreTokenizerKind kind, std::string_view text);

}  // namespace power::text
