#include "text/pretokenize.h"

#include <algorithm>
#include <array>

#include "text/unicode.h"
#include "text/utf8.h"

namespace power::text {
namespace {

// A matcher returns the length of the regex's match starting exactly at `pos` (0: none),
// looking no further than `end`, the end of the piece being split.
using Matcher = size_t (*)(const uint32_t* c, size_t pos, size_t end);
// A pass splits one piece and appends the resulting pieces.
using Pass = void (*)(const uint32_t* c, CpRange piece, std::vector<CpRange>& out);

inline bool is_ws(uint32_t cp) {
  return cp_is_whitespace(cp);
}
inline bool is_nl(uint32_t cp) {
  return cp == '\r' || cp == '\n';
}
// [^\s\p{L}\p{N}]
inline bool is_other(uint32_t cp) {
  return (cp_flags(cp) & (kCpWhitespace | kCpLetter | kCpNumber)) == 0;
}

// Regexes without \p{..} classes are run by llama.cpp on code points in which every
// non-ASCII White_Space character was replaced by U+000B; their literal character classes
// therefore never contain such a character. view() reproduces that substitution.
inline uint32_t view(uint32_t cp) {
  return (cp > 0x7F && is_ws(cp)) ? 0x0B : cp;
}

template <typename Pred>
size_t run_while(const uint32_t* c, size_t pos, size_t end, Pred pred) {
  while (pos < end && pred(c[pos])) ++pos;
  return pos;
}

// Finds every leftmost match of m in the piece, splitting off the text between matches.
template <Matcher M>
void split_by(const uint32_t* c, CpRange piece, std::vector<CpRange>& out) {
  size_t gap = piece.begin;
  size_t pos = piece.begin;
  while (pos < piece.end) {
    const size_t n = M(c, pos, piece.end);
    if (n == 0) {
      ++pos;
      continue;
    }
    if (pos > gap) out.push_back({gap, pos});
    out.push_back({pos, pos + n});
    pos += n;
    gap = pos;
  }
  if (gap < piece.end) out.push_back({gap, piece.end});
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive ((?i:...) / [sS] forms).
size_t match_contraction(const uint32_t* c, size_t pos, size_t end, bool ignore_case) {
  if (c[pos] != '\'' || pos + 1 >= end) return 0;
  auto low = [ignore_case](uint32_t cp) {
    return (ignore_case && cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  };
  const uint32_t a = low(c[pos + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= end) return 0;
  const uint32_t b = low(c[pos + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The whitespace tail shared by several regexes: \s+(?!\S)|\s+ at a whitespace code point.
// Greedy \s+ backs off one character when a non-space follows, so that character can carry
// the space into the next word.
size_t match_space_run(const uint32_t* c, size_t pos, size_t end) {
  const size_t k = run_while(c, pos, end, is_ws) - pos;
  if (k == 0) return 0;
  if (pos + k == end) return k;  // nothing follows: (?!\S) holds
  return k > 1 ? k - 1 : k;      // \s+(?!\S) backs off one; a single space is plain \s+
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const uint32_t* c, size_t pos, size_t end) {
  if (size_t n = match_contraction(c, pos, end, false)) return n;
  // " ?" takes a leading space only when the class after it matches; otherwise the space
  // cannot start those alternatives (it is \s) and falls through to the whitespace ones.
  const size_t start = (c[pos] == ' ' && pos + 1 < end) ? pos + 1 : pos;
  const uint16_t f = cp_flags(c[start]);
  if (f & kCpLetter) return run_while(c, start, end, cp_is_letter) - pos;
  if (f & kCpNumber) return run_while(c, start, end, cp_is_number) - pos;
  if (!(f & kCpWhitespace)) return run_while(c, start, end, is_other) - pos;
  return match_space_run(c, pos, end);
}

// llama3 / qwen2:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
template <size_t kMaxDigits>
size_t match_llama3(const uint32_t* c, size_t pos, size_t end) {
  if (size_t n = match_contraction(c, pos, end, true)) return n;
  const uint32_t cp = c[pos];
  const uint16_t f = cp_flags(cp);
  if (f & kCpLetter) return run_while(c, pos, end, cp_is_letter) - pos;
  if (!is_nl(cp) && !(f & kCpNumber) && pos + 1 < end && cp_is_letter(c[pos + 1])) {
    return run_while(c, pos + 1, end, cp_is_letter) - pos;  // one leading non-letter
  }
  if (f & kCpNumber) {
    return std::min(kMaxDigits, run_while(c, pos, end, cp_is_number) - pos);
  }
  const size_t start = (cp == ' ' && pos + 1 < end) ? pos + 1 : pos;
  if (is_other(c[start])) {
    const size_t q = run_while(c, start, end, is_other);
    return run_while(c, q, end, is_nl) - pos;
  }
  // Whitespace. \s*[\r\n]+ ends after the last newline of the run, if it has one.
  const size_t run_end = run_while(c, pos, end, is_ws);
  for (size_t i = run_end; i > pos; --i) {
    if (is_nl(c[i - 1])) return i - pos;
  }
  return match_space_run(c, pos, end);
}

// [\r\n]
size_t match_newline(const uint32_t* c, size_t pos, size_t) {
  return is_nl(c[pos]) ? 1 : 0;
}

// \p{N}
size_t match_one_number(const uint32_t* c, size_t pos, size_t) {
  return cp_is_number(c[pos]) ? 1 : 0;
}

// \p{N}+
size_t match_numbers(const uint32_t* c, size_t pos, size_t end) {
  return run_while(c, pos, end, cp_is_number) - pos;
}

// [0-9][0-9][0-9]
size_t match_three_ascii_digits(const uint32_t* c, size_t pos, size_t end) {
  auto digit = [](uint32_t cp) { return cp >= '0' && cp <= '9'; };
  if (pos + 3 > end) return 0;
  return (digit(c[pos]) && digit(c[pos + 1]) && digit(c[pos + 2])) ? 3 : 0;
}

// [\p{P}\$\+<=>\^~\|]+
bool is_punct_or_ascii_math(uint32_t cp) {
  switch (cp) {
    case '$':
    case '+':
    case '<':
    case '=':
    case '>':
    case '^':
    case '~':
    case '|':
      return true;
    default:
      return cp_is_punct(cp);
  }
}
size_t match_punct_run(const uint32_t* c, size_t pos, size_t end) {
  return run_while(c, pos, end, is_punct_or_ascii_math) - pos;
}

// \s?X+ for a class X: the optional space is taken only when X follows it.
template <typename Pred>
size_t match_space_then_run(const uint32_t* c, size_t pos, size_t end, Pred in_class) {
  if (is_ws(c[pos]) && pos + 1 < end && in_class(c[pos + 1])) {
    return run_while(c, pos + 1, end, in_class) - pos;
  }
  return run_while(c, pos, end, in_class) - pos;
}

// \s?\p{L}+ and \s?\p{P}+ (deepseek-coder)
size_t match_space_letters(const uint32_t* c, size_t pos, size_t end) {
  return match_space_then_run(c, pos, end, cp_is_letter);
}
size_t match_space_punct(const uint32_t* c, size_t pos, size_t end) {
  return match_space_then_run(c, pos, end, cp_is_punct);
}

struct CpInterval {
  uint32_t lo;
  uint32_t hi;
};

bool in_intervals(std::span<const CpInterval> set, uint32_t cp) {
  for (const auto& r : set) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

// [一-龥ࠀ-一가-퟿]+ (both deepseek vocabularies): U+4E00..U+9FA5, U+0800..U+4E00,
// U+AC00..U+D7FF.
bool is_deepseek_cjk(uint32_t cp) {
  const uint32_t v = view(cp);
  return (v >= 0x0800 && v <= 0x9FA5) || (v >= 0xAC00 && v <= 0xD7FF);
}
size_t match_deepseek_cjk(const uint32_t* c, size_t pos, size_t end) {
  return run_while(c, pos, end, is_deepseek_cjk) - pos;
}

// The cased-letter class of deepseek-llm's \s?[A-Za-zµÀ-ÖØ-ö...]+ (its tokenizer.json lists
// these code point ranges explicitly).
constexpr CpInterval kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
bool is_deepseek_letter(uint32_t cp) {
  const uint32_t v = view(cp);
  return in_intervals(kDeepseekLetters, v);
}
size_t match_deepseek_letters(const uint32_t* c, size_t pos, size_t end) {
  return match_space_then_run(c, pos, end, is_deepseek_letter);
}

// deepseek-llm's \s?[!-/:-~！-／：-～‘-‟　-。]+
constexpr CpInterval kDeepseekPunct[] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0xFF01, 0xFF0F},
    {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002},
};
bool is_deepseek_punct(uint32_t cp) {
  return in_intervals(kDeepseekPunct, view(cp));
}
size_t match_deepseek_punct(const uint32_t* c, size_t pos, size_t end) {
  return match_space_then_run(c, pos, end, is_deepseek_punct);
}

// \s+$ : the whitespace run that ends the piece. A dedicated pass keeps this linear (a
// matcher tried at every position of a long space run not at the end would be quadratic).
void split_trailing_space(const uint32_t* c, CpRange piece, std::vector<CpRange>& out) {
  size_t start = piece.end;
  while (start > piece.begin && is_ws(c[start - 1])) --start;
  if (start > piece.begin) out.push_back({piece.begin, start});
  if (start < piece.end) out.push_back({start, piece.end});
}

// bloom:  ?[^(\s|.,!?…。，、।۔،)]+
bool is_bloom_word(uint32_t cp) {
  const uint32_t v = view(cp);
  if (is_ws(v)) return false;
  switch (v) {
    case '(':
    case '|':
    case '.':
    case ',':
    case '!':
    case '?':
    case ')':
    case 0x2026:  // …
    case 0x3002:  // 。
    case 0xFF0C:  // ，
    case 0x3001:  // 、
    case 0x0964:  // ।
    case 0x06D4:  // ۔
    case 0x060C:  // ،
      return false;
    default:
      return true;
  }
}
size_t match_bloom(const uint32_t* c, size_t pos, size_t end) {
  if (c[pos] == ' ' && pos + 1 < end && is_bloom_word(c[pos + 1])) {
    return run_while(c, pos + 1, end, is_bloom_word) - pos;
  }
  return run_while(c, pos, end, is_bloom_word) - pos;
}

struct PassList {
  std::array<Pass, 6> passes{};
  size_t count = 0;
};

PassList passes_for(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return {{split_by<match_gpt2>}, 1};
    case PreTokenizerKind::kLlama3:
      return {{split_by<match_llama3<3>>}, 1};
    case PreTokenizerKind::kQwen2:
      return {{split_by<match_llama3<1>>}, 1};
    case PreTokenizerKind::kDeepseekLlm:
      return {{split_by<match_newline>, split_by<match_deepseek_letters>,
               split_by<match_deepseek_punct>, split_trailing_space, split_by<match_deepseek_cjk>,
               split_by<match_numbers>},
              6};
    case PreTokenizerKind::kDeepseekCoder:
      return {{split_by<match_newline>, split_by<match_space_letters>, split_by<match_space_punct>,
               split_by<match_deepseek_cjk>, split_by<match_one_number>},
              5};
    case PreTokenizerKind::kFalcon:
      return {{split_by<match_punct_run>, split_by<match_gpt2>, split_by<match_three_ascii_digits>},
              3};
    case PreTokenizerKind::kStarcoder:
      return {{split_by<match_one_number>, split_by<match_gpt2>}, 2};
    case PreTokenizerKind::kBloom:
      return {{split_by<match_bloom>}, 1};
    case PreTokenizerKind::kViking:
      return {{split_by<match_bloom>, split_by<match_one_number>}, 2};
    case PreTokenizerKind::kDefault:
    default:
      return {{split_by<match_punct_run>, split_by<match_gpt2>, split_by<match_numbers>,
               split_by<match_three_ascii_digits>},
              4};
  }
}

struct NamedPre {
  std::string_view name;
  PreTokenizerInfo info;
};

constexpr PreTokenizerInfo info(PreTokenizerKind kind, bool clean_spaces = true) {
  PreTokenizerInfo i;
  i.kind = kind;
  i.clean_spaces = clean_spaces;
  return i;
}
constexpr PreTokenizerInfo llama3_info() {
  PreTokenizerInfo i = info(PreTokenizerKind::kLlama3);
  i.ignore_merges = true;
  i.add_bos = true;
  return i;
}

using K = PreTokenizerKind;
constexpr NamedPre kPreTokenizers[] = {
    {"default", info(K::kDefault)},
    {"llama3", llama3_info()},
    {"llama-v3", llama3_info()},
    {"llama-bpe", llama3_info()},
    {"falcon3", llama3_info()},
    {"dbrx", info(K::kLlama3)},
    {"smaug-bpe", info(K::kLlama3)},
    {"chatglm-bpe", info(K::kLlama3)},
    {"deepseek-llm", info(K::kDeepseekLlm, false)},
    {"deepseek-coder", info(K::kDeepseekCoder, false)},
    {"falcon", info(K::kFalcon)},
    {"mpt", info(K::kGpt2)},
    {"olmo", info(K::kGpt2)},
    {"jais", info(K::kGpt2)},
    {"gpt-2", info(K::kGpt2)},
    {"phi-2", info(K::kGpt2)},
    {"jina-es", info(K::kGpt2)},
    {"jina-de", info(K::kGpt2)},
    {"gigachat", info(K::kGpt2)},
    {"jina-v1-en", info(K::kGpt2)},
    {"jina-v2-es", info(K::kGpt2)},
    {"jina-v2-de", info(K::kGpt2)},
    {"jina-v2-code", info(K::kGpt2)},
    {"roberta-bpe", info(K::kGpt2)},
    {"starcoder", info(K::kStarcoder)},
    {"refact", info(K::kStarcoder)},
    {"command-r", info(K::kStarcoder, false)},
    {"smollm", info(K::kStarcoder, false)},
    {"codeshell", info(K::kStarcoder)},
    {"exaone", info(K::kStarcoder)},
    {"minerva-7b", info(K::kStarcoder)},
    {"qwen2", info(K::kQwen2, false)},
    {"deepseek-r1-qwen", info(K::kQwen2, false)},
    {"stablelm2", info(K::kQwen2)},
    {"megrez", info(K::kQwen2)},
    {"poro-chat", info(K::kBloom, false)},
    {"bloom", info(K::kBloom)},
    {"gpt3-finnish", info(K::kBloom)},
    {"viking", info(K::kViking, false)},
};

}  // namespace

std::optional<PreTokenizerInfo> pre_tokenizer_from_name(std::string_view name) {
  if (name.empty()) return std::nullopt;
  for (const auto& p : kPreTokenizers) {
    if (p.name == name) return p.info;
  }
  return std::nullopt;
}

std::string_view pre_tokenizer_kind_name(PreTokenizerKind kind) {
  switch (kind) {
    case K::kDefault:
      return "default";
    case K::kGpt2:
      return "gpt-2";
    case K::kLlama3:
      return "llama3";
    case K::kQwen2:
      return "qwen2";
    case K::kDeepseekLlm:
      return "deepseek-llm";
    case K::kDeepseekCoder:
      return "deepseek-coder";
    case K::kFalcon:
      return "falcon";
    case K::kStarcoder:
      return "starcoder";
    case K::kBloom:
      return "bloom";
    case K::kViking:
      return "viking";
  }
  return "unknown";
}

void pre_tokenize(PreTokenizerKind kind, std::span<const uint32_t> cps, std::vector<CpRange>& out) {
  out.clear();
  if (cps.empty()) return;
  const PassList list = passes_for(kind);
  std::vector<CpRange> pieces{{0, cps.size()}};
  for (size_t p = 0; p < list.count; ++p) {
    out.clear();
    for (const CpRange& piece : pieces) list.passes[p](cps.data(), piece, out);
    pieces.swap(out);
  }
  out.swap(pieces);
}

std::vector<std::string> pre_tokenize_words(PreTokenizerKind kind, std::string_view text) {
  const std::vector<uint32_t> cps = utf8_decode(text);
  std::vector<CpRange> ranges;
  pre_tokenize(kind, cps, ranges);
  std::vector<std::string> words;
  words.reserve(ranges.size());
  for (const CpRange& r : ranges) {
    std::string w;
    for (size_t i = r.begin; i < r.end; ++i) utf8_append(w, cps[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace power::text
