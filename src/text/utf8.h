// UTF-8 decoding and encoding with one policy for malformed input, shared by every tokenizer.
//
// Policy (documented in tokenizer.h): a byte that does not begin a well-formed UTF-8 sequence
// (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF, no
// truncated sequences) decodes to U+FFFD, and decoding resumes at the next byte. So every
// malformed byte costs exactly one U+FFFD and valid text around it is never lost.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace power::text {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length in bytes of the well-formed sequence starting at s[pos], or 0 when s[pos] does not
// begin one (malformed or truncated by the end of s).
size_t utf8_sequence_length(std::string_view s, size_t pos);

// Like utf8_sequence_length, but tells apart a sequence cut short by the end of s (a valid
// prefix that more bytes could complete) from a malformed one.
enum class Utf8Prefix { kComplete, kIncomplete, kInvalid };
Utf8Prefix utf8_classify_prefix(std::string_view s, size_t pos, size_t* length);

// Decodes the well-formed sequence of `length` bytes at s[pos] (length from the functions above).
uint32_t utf8_decode_at(std::string_view s, size_t pos, size_t length);

// Appends the UTF-8 encoding of cp (cp must be a scalar value; others append U+FFFD).
void utf8_append(std::string& out, uint32_t cp);

// Whole-string decode with the policy above. If offsets is non-null it receives the byte
// offset where each code point starts, plus a final entry equal to s.size().
std::vector<uint32_t> utf8_decode(std::string_view s, std::vector<size_t>* offsets = nullptr);

// s with every malformed byte replaced by U+FFFD (valid input comes back unchanged).
std::string utf8_sanitize(std::string_view s);

bool utf8_is_valid(std::string_view s);

}  // namespace power::text
