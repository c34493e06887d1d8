// libFuzzer targets for the tokenizers (src/text): random bytes as text, including malformed
// UTF-8 and special-token texts. Built three times, one per model: text_spm_fuzz,
// text_bpe_fuzz, text_wpm_fuzz (POWER_TEXT_FUZZ_MODEL_spm / _bpe / _wpm).
//
// Vocabularies: the peer's fixture vocabularies when ../shared is there ($POWER_SHARED_DIR or
// next to the source tree), plus small built-in ones (for BPE one per pre-tokenizer). The
// first input byte picks a vocabulary and the options; the rest is the text.
//
// Checked on every input (a failure traps):
//  * every id is in the vocabulary and decode() accepts them;
//  * SPM: decode(encode(text)) == text (byte fallback keeps malformed bytes) unless the text
//    holds U+2581 (SPM's own space mark, which decodes as a space);
//    BPE: decode(encode(text)) == text with malformed bytes as U+FFFD;
//    both only for vocabularies without strip attributes (Phi-3's "</s>" eats spaces);
//  * the streaming detokenizer's output is valid UTF-8 and equals decode() with malformed
//    bytes replaced.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/utf8.h"

using power::GgufFile;
using namespace power::text;

namespace {

#if defined(POWER_TEXT_FUZZ_MODEL_spm)
constexpr TokenizerModel kModel = TokenizerModel::kSpm;
#elif defined(POWER_TEXT_FUZZ_MODEL_bpe)
constexpr TokenizerModel kModel = TokenizerModel::kBpe;
#elif defined(POWER_TEXT_FUZZ_MODEL_wpm)
constexpr TokenizerModel kModel = TokenizerModel::kWpm;
#else
#error "define POWER_TEXT_FUZZ_MODEL_spm, _bpe or _wpm"
#endif

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "text fuzz: check failed: %s\n", what);
    __builtin_trap();
  }
}

std::string shared_dir() {
  if (const char* env = std::getenv("POWER_SHARED_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
#ifdef POWER_SOURCE_DIR
  return std::string(POWER_SOURCE_DIR) + "/../shared";
#else
  return "../shared";
#endif
}

std::unique_ptr<Tokenizer> from_file(const std::string& name) {
  auto file = GgufFile::open(shared_dir() + "/fixtures/tokenizer/ggml-vocab-" + name + ".gguf");
  if (!file.ok()) return nullptr;
  auto tok = Tokenizer::from_gguf(**file);
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::unique_ptr<Tokenizer> from_spec(const TokenizerSpec& spec) {
  auto tok = Tokenizer::create(spec);
  check(tok.ok(), "built-in vocabulary");
  return std::move(tok).value();
}

const std::string kSpaceMark = "\xE2\x96\x81";

TokenizerSpec builtin_spm() {
  TokenizerSpec s;
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
  const char* pieces[] = {"a", "b", "c", "ab", "bc", "abc", "<", ">", "s"};
  float score = -1;
  for (const char* p : pieces) {
    add(p, score, GgufTokenType::kNormal);
    add(kSpaceMark + p, score + 0.5f, GgufTokenType::kNormal);
    score -= 1;
  }
  add(kSpaceMark, -20, GgufTokenType::kNormal);
  add("<|user|>", 0, GgufTokenType::kUserDefined);
  return s;
}

TokenizerSpec builtin_bpe(const std::string& pre) {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = pre;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    utf8_append(t, byte_to_unicode(static_cast<uint8_t>(b)));
    s.tokens.push_back(t);
  }
  const std::string g = "\xC4\xA0";
  s.merges = {g + " t", "h e", g + "t he", "a a", "aa a", g + " a", "1 2", "\xC3 \xA9"};
  for (const std::string& m : s.merges) {
    const size_t space = m.find(' ');
    s.tokens.push_back(m.substr(0, space) + m.substr(space + 1));
  }
  s.tokens.push_back("<|endoftext|>");
  s.tokens.push_back("<|im_start|>");
  s.token_types.assign(s.tokens.size(), static_cast<int32_t>(GgufTokenType::kNormal));
  s.token_types[s.tokens.size() - 2] = static_cast<int32_t>(GgufTokenType::kControl);
  s.token_types[s.tokens.size() - 1] = static_cast<int32_t>(GgufTokenType::kUserDefined);
  return s;
}

TokenizerSpec builtin_wpm() {
  TokenizerSpec s;
  s.model = "bert";
  s.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b",
              "ab",    "##a",   "##b",   "##ab",  ",",      "!", "\xE4\xBD\xA0"};
  s.token_types.assign(s.tokens.size(), static_cast<int32_t>(GgufTokenType::kNormal));
  for (int i = 0; i < 5; ++i) s.token_types[i] = static_cast<int32_t>(GgufTokenType::kControl);
  s.unk = 1;
  s.cls = 2;
  s.sep = 3;
  return s;
}

std::vector<std::unique_ptr<Tokenizer>> make_tokenizers() {
  std::vector<std::unique_ptr<Tokenizer>> out;
  auto add_file = [&](const char* name) {
    if (auto tok = from_file(name)) out.push_back(std::move(tok));
  };
  switch (kModel) {
    case TokenizerModel::kSpm:
      add_file("llama-spm");
      add_file("phi-3");
      out.push_back(from_spec(builtin_spm()));
      break;
    case TokenizerModel::kBpe:
      add_file("gpt-2");
      add_file("deepseek-coder");
      for (const char* pre : {"default", "gpt-2", "llama-bpe", "qwen2", "deepseek-llm",
                              "deepseek-coder", "falcon", "starcoder", "bloom", "viking"}) {
        out.push_back(from_spec(builtin_bpe(pre)));
      }
      break;
    case TokenizerModel::kWpm:
      add_file("bert-bge");
      out.push_back(from_spec(builtin_wpm()));
      break;
  }
  return out;
}

const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
  static const std::vector<std::unique_ptr<Tokenizer>> all = make_tokenizers();
  return all;
}

bool has_strip_attrs(const Tokenizer& tok) {
  for (size_t id = 0; id < tok.n_tokens(); ++id) {
    if (tok.token_attr(static_cast<TokenId>(id)) & (kAttrLstrip | kAttrRstrip)) return true;
  }
  return false;
}

const std::vector<bool>& round_trips() {
  static const std::vector<bool> flags = [] {
    std::vector<bool> f;
    for (const auto& tok : tokenizers()) f.push_back(!has_strip_attrs(*tok));
    return f;
  }();
  return flags;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  round_trips();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = tokenizers();
  const uint8_t control = data[0];
  const size_t which = (control >> 3) % all.size();
  const Tokenizer& tok = *all[which];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const EncodeOptions options{.add_special = (control & 1) != 0,
                              .parse_special = (control & 2) != 0};

  const std::vector<TokenId> ids = tok.encode(text, options);
  for (TokenId id : ids) check(tok.is_valid(id), "id in the vocabulary");
  auto decoded = tok.decode(ids);
  check(decoded.ok(), "decode accepts encode's ids");

  if (!options.parse_special && round_trips()[which]) {
    if (kModel == TokenizerModel::kSpm && text.find(kSpaceMark) == std::string::npos) {
      check(*decoded == text, "SPM round trip");
    }
    if (kModel == TokenizerModel::kBpe) check(*decoded == utf8_sanitize(text), "BPE round trip");
  }

  StreamingDetokenizer stream(tok, {.at_sequence_start = true});
  std::string streamed;
  for (TokenId id : ids) check(stream.push(id, streamed).ok(), "stream push");
  stream.finish(streamed);
  check(utf8_is_valid(streamed), "stream output is valid UTF-8");
  check(streamed == utf8_sanitize(*decoded), "stream equals decode");

  for (TokenId id : ids) (void)tok.token_to_piece(id, (control & 4) != 0);
  (void)tok.decode(ids, {.render_special = true, .clean_spaces = true});
  return 0;
}
