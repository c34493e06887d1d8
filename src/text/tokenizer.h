// Tokenizers built from GGUF metadata (tokenizer.ggml.*): text <-> token ids, exactly as the
// model was trained, checked against llama.cpp's own tokenizer test vectors.
//
// Models (tokenizer.ggml.model):
//  * "llama" -> SentencePiece BPE (SPM): a space prefix, spaces escaped to U+2581, merges of
//    adjacent pieces by descending score, byte fallback to <0xNN> pieces.
//  * "gpt2"  -> byte-level BPE: the pre-tokenizer named by tokenizer.ggml.pre splits the text
//    (pretokenize.h), each word's bytes are mapped to GPT-2's printable code points and merged
//    by merge rank (tokenizer.ggml.merges, lowest rank first).
//  * "bert"  -> WordPiece (WPM): BERT's basic normalization (lowercase, accents dropped by
//    taking the first code point of each character's NFD, control characters removed,
//    punctuation and CJK ideographs split into their own words, split on whitespace), then
//    greedy longest-match per word; a word with no full match becomes [UNK]. Vocabularies in
//    llama.cpp's form (word starts carry U+2581, continuations are bare) and in BERT's form
//    (continuations carry "##") are both read.
//
// Special tokens: control tokens (BOS, EOS, <|im_end|>, ...) and unknown-type tokens are
// recognised inside the text only with EncodeOptions::parse_special; user-defined tokens are
// always matched first (as HuggingFace and llama.cpp do). Longer tokens are matched first.
// Plain text never becomes a control, unknown or <0xNN> token through merges either.
//
// Malformed UTF-8 in the input (policy; see utf8.h for the exact definition):
//  * SPM: each malformed byte becomes its own piece and is written as its <0xNN> byte token,
//    so decode() gives back the exact input bytes.
//  * BPE and WPM: each malformed byte is replaced by U+FFFD before tokenizing (BPE then
//    encodes U+FFFD's three bytes; WPM drops U+FFFD like other unprintable characters).
//
// Decoding: decode() is the exact inverse of encode() for SPM (any bytes) and BPE (valid
// UTF-8); the space prefix SPM added at the start and after special tokens is removed again.
// Exceptions: U+2581 in SPM input decodes as a space (it is SPM's space mark), and special
// tokens with strip attributes (Phi-3's) swallow the whitespace next to them. WordPiece is
// lossy (lowercase, accents, whitespace, " , "). decode() returns raw bytes, which need not
// be valid UTF-8 (a byte token alone is half a character); StreamingDetokenizer returns only
// complete characters.
//
// Thread-safety: a Tokenizer is immutable after creation; encode/decode may run concurrently.
// A StreamingDetokenizer holds per-stream state: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace power {
class GgufFile;
}

namespace power::text {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

enum class TokenizerModel : uint8_t { kSpm, kBpe, kWpm };
std::string_view tokenizer_model_name(TokenizerModel model);

// Per-token attributes: the GGUF token type plus strip flags llama.cpp sets for some models.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 6,  // a special token match also eats whitespace on its left
  kAttrRstrip = 1u << 7,  // ... and on its right
};

// tokenizer.ggml.token_type values.
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct SpecialTokens {
  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  TokenId eot = kNoToken;  // end of turn (<|eot_id|>, <|im_end|>, ...)
  TokenId eom = kNoToken;
  TokenId unk = kNoToken;
  TokenId sep = kNoToken;
  TokenId pad = kNoToken;
  TokenId cls = kNoToken;
  TokenId mask = kNoToken;
  TokenId fim_pre = kNoToken;
  TokenId fim_suf = kNoToken;
  TokenId fim_mid = kNoToken;
  TokenId fim_pad = kNoToken;
  TokenId fim_rep = kNoToken;
  TokenId fim_sep = kNoToken;
};

// Everything a tokenizer is built from: the tokenizer.ggml.* keys (from_gguf fills it), or
// written by hand for tests. Unset optionals take the defaults llama.cpp uses per model.
struct TokenizerSpec {
  std::string model;       // "llama" | "gpt2" | "bert"
  std::string pre;         // tokenizer.ggml.pre; empty = absent (BPE then uses "default")
  std::string model_name;  // general.name (a few per-model token attributes depend on it)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // empty: all 0
  std::vector<int32_t> token_types;  // empty: all normal; else GgufTokenType values
  std::vector<std::string> merges;   // BPE: "left right", highest priority first
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, cls, mask;
  std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

// Reads the tokenizer.ggml.* keys of a GGUF file. Errors name the key.
Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file);

struct EncodeOptions {
  // Add BOS/EOS as the vocabulary says (tokenizer.ggml.add_bos_token/add_eos_token; SPM
  // adds BOS by default). WordPiece adds [CLS] ... [SEP].
  bool add_special = true;
  // Recognise control tokens written in the text ("<s>", "<|im_start|>") as those tokens.
  bool parse_special = false;
};

struct DecodeOptions {
  // Write the text of control and unknown tokens; by default they produce nothing.
  bool render_special = false;
  // Drop the space SPM puts in front of the first word and of the text after a special token
  // (what makes decode the inverse of encode). WordPiece drops the space before its first
  // word. Turn off to get llama.cpp's token_to_piece concatenation.
  bool strip_space_prefix = true;
  // Apply llama.cpp's clean-up ("a , b" -> "a, b", " 's" -> "'s", ...) when the vocabulary
  // asks for it (clean_spaces()); off by default because it breaks the round trip.
  bool clean_spaces = false;
};

struct TokenizerImpl;

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
  static Result<std::unique_ptr<Tokenizer>> create(const TokenizerSpec& spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // invalid_argument naming the position when an id is out of range.
  Result<std::string> decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
  // The bytes one token stands for, as llama.cpp's token_to_piece: SPM pieces with U+2581 as
  // a space (the leading one kept), byte tokens as their byte, BPE tokens byte-decoded;
  // control/unknown tokens are "" unless render_special. "" for an id out of range.
  std::string token_to_piece(TokenId id, bool render_special = false) const;

  TokenizerModel model() const;
  std::string_view pre_tokenizer() const;  // the tokenizer.ggml.pre name in effect ("" if none)
  size_t n_tokens() const;
  bool is_valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < n_tokens(); }
  // Preconditions for the three below: is_valid(id).
  const std::string& token_text(TokenId id) const;  // as stored in the vocabulary
  float token_score(TokenId id) const;
  uint32_t token_attr(TokenId id) const;  // TokenAttr bits
  std::optional<TokenId> find_token(std::string_view text) const;
  bool is_control(TokenId id) const;
  // End of generation: EOS, EOT, EOM and tokens such as <|im_end|>, <|endoftext|>.
  bool is_eog(TokenId id) const;

  const SpecialTokens& special() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  bool clean_spaces() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  friend class StreamingDetokenizer;
  std::unique_ptr<TokenizerImpl> impl_;
};

struct StreamOptions {
  bool render_special = false;
  // The first token pushed begins a sequence (e.g. right after BOS), so its SPM space prefix
  // is dropped as decode() drops it. Leave false when streaming the continuation of a prompt.
  bool at_sequence_start = false;
};

// Turns tokens into text one at a time and never emits part of a UTF-8 character: bytes of
// an unfinished character wait for the next token. Bytes that cannot be part of a well-formed
// character are emitted as U+FFFD (one per byte), so the output is always valid UTF-8.
// After a special token the SPM space prefix is dropped, as in decode(). The tokenizer must
// outlive the detokenizer.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, StreamOptions options = {});

  // Appends the newly complete text to `out`; invalid_argument for an id out of range.
  Status push(TokenId id, std::string& out);
  // End of stream: bytes of an unfinished character become U+FFFD (one per byte).
  void finish(std::string& out);
  void reset();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  void emit_complete(std::string& out);

  const Tokenizer& tokenizer_;
  StreamOptions options_;
  std::string pending_;
  bool strip_next_;
};

}  // namespace power::text
