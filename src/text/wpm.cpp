// WordPiece (tokenizer.ggml.model = "bert").
//
// Normalization as BERT's uncased BasicTokenizer (and llama.cpp) does it: each character is
// replaced by the first code point of its NFD decomposition (which drops accents of
// precomposed letters) and lowercased; NUL, U+FFFD and control/format characters are
// removed; whitespace separates words; punctuation, ASCII symbols and CJK ideographs are
// words of their own. Each word is then covered greedily by the longest vocabulary piece at
// each position (a word start is looked up with its U+2581 prefix, or plain in BERT-form
// vocabularies; a continuation plain, or with "##"). If some position has no piece, the
// whole word becomes [UNK].
#include "text/unicode.h"
#include "text/utf8.h"
#include "text/vocab.h"

namespace power::text {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

}  // namespace

std::vector<std::string> wpm_words(std::string_view text) {
  std::vector<std::string> words;
  std::string current;
  auto finish_word = [&] {
    if (!current.empty()) words.push_back(std::move(current));
    current.clear();
  };
  for (uint32_t cp : utf8_decode(text)) {
    cp = cp_nfd_first(cp);
    const uint16_t flags = cp_flags(cp);
    if (flags & kCpWhitespace) {
      finish_word();
      continue;
    }
    if (cp == 0 || cp == kReplacementChar || (flags & kCpControl)) continue;
    const uint32_t lower = cp_to_lower(cp);
    if ((flags & kCpPunct) || (cp < 0x7F && (flags & kCpSymbol)) || cp_is_cjk_ideograph(cp)) {
      finish_word();
      utf8_append(current, lower);
      finish_word();
    } else {
      utf8_append(current, lower);
    }
  }
  finish_word();
  return words;
}

void wpm_encode(const TokenizerImpl& v, std::string_view text, std::vector<TokenId>& out) {
  const bool hash_form = v.wpm_hash_continuations;
  std::string word;
  std::string key;
  for (const std::string& w : wpm_words(text)) {
    word.clear();
    if (!hash_form) word.append(kSpaceMark);
    word.append(w);
    const size_t n = word.size();
    const size_t first_token = out.size();
    size_t i = 0;
    while (i < n) {
      bool matched = false;
      for (size_t j = std::min(n, i + v.max_token_bytes); j > i; --j) {
        std::string_view piece = std::string_view(word).substr(i, j - i);
        if (hash_form && i > 0) {
          key.assign("##");
          key.append(piece);
          piece = key;
        }
        const TokenId id = v.find_text_piece(piece);
        if (id != kNoToken) {
          out.push_back(id);
          i = j;
          matched = true;
          break;
        }
      }
      if (!matched) {
        out.resize(first_token);
        break;
      }
    }
    if (out.size() == first_token && v.special.unk != kNoToken) out.push_back(v.special.unk);
  }
}

}  // namespace power::text
