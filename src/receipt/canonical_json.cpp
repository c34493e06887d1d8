// RFC 8785 canonicalization over nlohmann::json values, and a strict parser.
#include "receipt/canonical_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace power::receipt {
namespace {

constexpr int64_t kMaxSafeInteger = 9007199254740992;  // 2^53
constexpr int kMaxDepth = 64;

// Decodes UTF-8 into UTF-16 code units (for member-name ordering); false when malformed.
bool to_utf16(std::string_view s, std::u16string& out) {
  out.clear();
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    size_t len = 0;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      len = 2;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      len = 3;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07;
      len = 4;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
    i += len;
  }
  return true;
}

Status write_string(std::string_view s, std::string& out) {
  std::u16string scratch;
  if (!to_utf16(s, scratch)) {
    return Status(StatusCode::kInvalidArgument, "string is not valid UTF-8");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return Status();
}

Status write_value(const nlohmann::json& v, std::string& out, int depth) {
  if (depth > kMaxDepth) return Status(StatusCode::kInvalidArgument, "JSON nested too deeply");
  using T = nlohmann::json::value_t;
  switch (v.type()) {
    case T::null:
      out += "null";
      return Status();
    case T::boolean:
      out += v.get<bool>() ? "true" : "false";
      return Status();
    case T::number_integer: {
      const int64_t x = v.get<int64_t>();
      if (x > kMaxSafeInteger || x < -kMaxSafeInteger) {
        return Status(StatusCode::kInvalidArgument, "integer beyond 2^53 (write it as a string)")
            .with("value", x);
      }
      out += std::to_string(x);
      return Status();
    }
    case T::number_unsigned: {
      const uint64_t x = v.get<uint64_t>();
      if (x > static_cast<uint64_t>(kMaxSafeInteger)) {
        return Status(StatusCode::kInvalidArgument, "integer beyond 2^53 (write it as a string)")
            .with("value", x);
      }
      out += std::to_string(x);
      return Status();
    }
    case T::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d)) {
        return Status(StatusCode::kInvalidArgument, "NaN and infinities have no JSON form");
      }
      out += ecmascript_number(d);
      return Status();
    }
    case T::string:
      return write_string(v.get_ref<const std::string&>(), out);
    case T::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& item : v) {
        if (!first) out.push_back(',');
        first = false;
        POWER_RETURN_IF_ERROR(write_value(item, out, depth + 1));
      }
      out.push_back(']');
      return Status();
    }
    case T::object: {
      std::vector<std::pair<std::u16string, const std::string*>> keys;
      keys.reserve(v.size());
      for (auto it = v.begin(); it != v.end(); ++it) {
        std::u16string k16;
        if (!to_utf16(it.key(), k16)) {
          return Status(StatusCode::kInvalidArgument, "member name is not valid UTF-8");
        }
        keys.emplace_back(std::move(k16), &it.key());
      }
      std::sort(keys.begin(), keys.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      bool first = true;
      for (const auto& [k16, key] : keys) {
        if (!first) out.push_back(',');
        first = false;
        POWER_RETURN_IF_ERROR(write_string(*key, out));
        out.push_back(':');
        POWER_RETURN_IF_ERROR(write_value(v.at(*key), out, depth + 1));
      }
      out.push_back('}');
      return Status();
    }
    case T::binary:
    case T::discarded:
      break;
  }
  return Status(StatusCode::kInvalidArgument, "value has no JSON form");
}

}  // namespace

std::string ecmascript_number(double value) {
  if (value == 0) return "0";  // both zeros
  // Shortest round-trip digits and the decimal exponent, from the scientific form d.ddde±x.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int exp10 = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exp10);
  // ECMA-262 Number::toString: value = 0.d1d2...dk x 10^n.
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n));
    out.push_back('.');
    out += digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-n), '0');
    out += digits;
  } else {
    out.push_back(digits[0]);
    if (k > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    out.push_back('e');
    out.push_back(n - 1 >= 0 ? '+' : '-');
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

Result<std::string> canonical_json(const nlohmann::json& value) {
  std::string out;
  POWER_RETURN_IF_ERROR(write_value(value, out, 0));
  return out;
}

Result<nlohmann::json> parse_json_strict(std::string_view text) {
  std::string duplicate;
  int depth_exceeded = 0;
  // The callback sees each member name as it is parsed; duplicates are caught per object.
  std::vector<std::vector<std::string>> seen;
  auto cb = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxDepth) depth_exceeded = depth;
    if (event == E::object_start) {
      seen.emplace_back();
    } else if (event == E::object_end) {
      if (!seen.empty()) seen.pop_back();
    } else if (event == E::key && !seen.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      auto& names = seen.back();
      if (std::find(names.begin(), names.end(), k) != names.end()) {
        if (duplicate.empty()) duplicate = k;
      } else {
        names.push_back(k);
      }
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kCorrupt, "not valid JSON").with("error", e.what());
  }
  if (depth_exceeded > 0) {
    return Status(StatusCode::kCorrupt, "JSON nested too deeply").with("max_depth", kMaxDepth);
  }
  if (!duplicate.empty()) {
    return Status(StatusCode::kCorrupt, "duplicate member name").with("name", duplicate);
  }
  return j;
}

}  // namespace power::receipt
