#include "text/unicode.h"

#include <array>
#include <vector>

#include <utf8proc.h>

namespace power::text {
namespace {

uint16_t flags_from_category(utf8proc_category_t cat) {
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return kCpLetter;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return kCpMark;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return kCpNumber;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return kCpPunct;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      return kCpSymbol;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return kCpSeparator;
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
      return kCpControl;
    case UTF8PROC_CATEGORY_CN:
    default:
      return kCpUndefined;
  }
}

bool is_white_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint16_t compute_flags(uint32_t cp) {
  uint16_t f = flags_from_category(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
  if (is_white_space(cp)) f |= kCpWhitespace;
  return f;
}

// The Basic Multilingual Plane covers nearly all text; keep its flags in a flat table.
constexpr uint32_t kTableSize = 0x10000;

const std::vector<uint16_t>& bmp_flags() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(kTableSize);
    for (uint32_t cp = 0; cp < kTableSize; ++cp) t[cp] = compute_flags(cp);
    return t;
  }();
  return table;
}

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every mapped code point is below U+0200
};

const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    m.from_cp.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      m.to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next_extra++;
      m.from_cp[m.to_cp[b]] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

}  // namespace

uint16_t cp_flags(uint32_t cp) {
  if (cp < kTableSize) return bmp_flags()[cp];
  if (cp > 0x10FFFF) return kCpUndefined;
  return compute_flags(cp);
}

uint32_t cp_to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp > 0x10FFFF) return cp;
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

uint32_t cp_nfd_first(uint32_t cp) {
  if (cp < 0xC0 || cp > 0x10FFFF) return cp;  // nothing below U+00C0 decomposes canonically
  utf8proc_int32_t buf[16];
  int last_boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 16,
                                                     UTF8PROC_DECOMPOSE, &last_boundclass);
  if (n < 1 || n > 16) return cp;
  return static_cast<uint32_t>(buf[0]);
}

bool cp_is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

uint32_t byte_to_unicode(uint8_t b) {
  return byte_map().to_cp[b];
}

int unicode_to_byte(uint32_t cp) {
  return cp < 512 ? byte_map().from_cp[cp] : -1;
}

}  // namespace power::text
