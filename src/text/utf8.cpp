#include "text/utf8.h"

namespace power::text {
namespace {

inline bool is_continuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Allowed range of the second byte for a given lead byte (table 3-7); the remaining
// continuation bytes are always 80..BF.
struct LeadInfo {
  uint8_t length;  // 0 = byte cannot start a sequence
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation byte or overlong 2-byte lead
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};  // no overlongs
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // no overlongs
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

}  // namespace

Utf8Prefix utf8_classify_prefix(std::string_view s, size_t pos, size_t* length) {
  *length = 0;
  if (pos >= s.size()) return Utf8Prefix::kIncomplete;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t avail = s.size() - pos;
  const LeadInfo info = lead_info(p[0]);
  if (info.length == 0) return Utf8Prefix::kInvalid;
  for (size_t i = 1; i < info.length; ++i) {
    if (i >= avail) return Utf8Prefix::kIncomplete;
    const uint8_t b = p[i];
    const bool ok = i == 1 ? (b >= info.second_lo && b <= info.second_hi) : is_continuation(b);
    if (!ok) return Utf8Prefix::kInvalid;
  }
  *length = info.length;
  return Utf8Prefix::kComplete;
}

size_t utf8_sequence_length(std::string_view s, size_t pos) {
  size_t length = 0;
  return utf8_classify_prefix(s, pos, &length) == Utf8Prefix::kComplete ? length : 0;
}

uint32_t utf8_decode_at(std::string_view s, size_t pos, size_t length) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  switch (length) {
    case 1:
      return p[0];
    case 2:
      return (uint32_t{p[0] & 0x1Fu} << 6) | (p[1] & 0x3Fu);
    case 3:
      return (uint32_t{p[0] & 0x0Fu} << 12) | (uint32_t{p[1] & 0x3Fu} << 6) | (p[2] & 0x3Fu);
    case 4:
      return (uint32_t{p[0] & 0x07u} << 18) | (uint32_t{p[1] & 0x3Fu} << 12) |
             (uint32_t{p[2] & 0x3Fu} << 6) | (p[3] & 0x3Fu);
    default:
      return kReplacementChar;
  }
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<uint32_t> utf8_decode(std::string_view s, std::vector<size_t>* offsets) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  if (offsets != nullptr) {
    offsets->clear();
    offsets->reserve(s.size() + 1);
  }
  size_t pos = 0;
  while (pos < s.size()) {
    if (offsets != nullptr) offsets->push_back(pos);
    const auto b = static_cast<uint8_t>(s[pos]);
    if (b < 0x80) {  // fast path for ASCII
      cps.push_back(b);
      ++pos;
      continue;
    }
    const size_t len = utf8_sequence_length(s, pos);
    if (len == 0) {
      cps.push_back(kReplacementChar);
      ++pos;
    } else {
      cps.push_back(utf8_decode_at(s, pos, len));
      pos += len;
    }
  }
  if (offsets != nullptr) offsets->push_back(s.size());
  return cps;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = utf8_sequence_length(s, pos);
    if (len == 0) {
      utf8_append(out, kReplacementChar);
      ++pos;
    } else {
      out.append(s.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

bool utf8_is_valid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = utf8_sequence_length(s, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

}  // namespace power::text
