// Unicode properties the tokenizers need, answered by utf8proc (Unicode 15 in Debian bookworm)
// plus the two tables that are not general categories: White_Space and GPT-2's byte map.
//
// cp_flags() classifies a code point by general category the way the pre-tokenizer regexes
// mean it: \p{L} letters, \p{N} numbers, \p{P} punctuation, \p{S} symbols, \p{M} marks,
// \p{Z} separators, \p{C} control/format/private/surrogate, Cn "undefined", and \s = the
// White_Space property (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A,
// U+2028, U+2029, U+202F, U+205F, U+3000) -- the same set regex engines use for \s.
// Thread-safety: pure functions; the lookup tables are built once, thread-safely.
#pragma once

#include <cstdint>

namespace power::text {

enum CpFlag : uint16_t {
  kCpUndefined = 1u << 0,  // Cn
  kCpNumber = 1u << 1,     // Nd Nl No
  kCpLetter = 1u << 2,     // Lu Ll Lt Lm Lo
  kCpSeparator = 1u << 3,  // Zs Zl Zp
  kCpMark = 1u << 4,       // Mn Mc Me
  kCpPunct = 1u << 5,      // Pc Pd Ps Pe Pi Pf Po
  kCpSymbol = 1u << 6,     // Sm Sc Sk So
  kCpControl = 1u << 7,    // Cc Cf Co Cs
  kCpWhitespace = 1u << 8,
};

uint16_t cp_flags(uint32_t cp);
inline bool cp_is_whitespace(uint32_t cp) {
  return (cp_flags(cp) & kCpWhitespace) != 0;
}
inline bool cp_is_letter(uint32_t cp) {
  return (cp_flags(cp) & kCpLetter) != 0;
}
inline bool cp_is_number(uint32_t cp) {
  return (cp_flags(cp) & kCpNumber) != 0;
}
inline bool cp_is_punct(uint32_t cp) {
  return (cp_flags(cp) & kCpPunct) != 0;
}

// Simple (one-to-one) lowercase mapping from UnicodeData.txt.
uint32_t cp_to_lower(uint32_t cp);
// First code point of the canonical decomposition (NFD) of cp; cp itself when it has none.
// For precomposed Latin letters this is the base letter, i.e. accents are dropped.
uint32_t cp_nfd_first(uint32_t cp);
// BERT's "Chinese character" ranges (CJK ideographs and their extensions), the ranges
// HuggingFace's tokenizers library uses.
bool cp_is_cjk_ideograph(uint32_t cp);

// GPT-2 byte-level encoding: each byte maps to one printable code point (printable Latin-1
// bytes to themselves, the other 68 bytes to U+0100.. in byte order).
uint32_t byte_to_unicode(uint8_t b);
// The byte a code point stands for, or -1 when cp is not in the map.
int unicode_to_byte(uint32_t cp);

}  // namespace power::text
