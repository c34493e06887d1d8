// Python operators on Values: arithmetic, `in`, slicing, str.strip and ASCII case mapping.
#include <algorithm>
#include <cmath>
#include <optional>

#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"

namespace power::chat::jinja {
namespace {

[[noreturn]] void fail_undefined(const Value& v) {
  throw_error(v.str_ref().empty() ? "operation on an undefined value" : v.str_ref());
}

[[noreturn]] void fail_operands(std::string_view op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string()) {
    throw_error(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
  }
  throw_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                          b.type_name()));
}

template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) throw_error("integer overflow", StatusCode::kOutOfRange);
  return r;
}
bool add_overflow(int64_t a, int64_t b, int64_t* r) {
  return __builtin_add_overflow(a, b, r);
}
bool sub_overflow(int64_t a, int64_t b, int64_t* r) {
  return __builtin_sub_overflow(a, b, r);
}
bool mul_overflow(int64_t a, int64_t b, int64_t* r) {
  return __builtin_mul_overflow(a, b, r);
}

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    uint64_t total = static_cast<uint64_t>(seq.str_ref().size()) * static_cast<uint64_t>(times);
    if (times != 0 && total / static_cast<uint64_t>(times) != seq.str_ref().size()) {
      throw_error("string repetition too large", StatusCode::kResourceExhausted);
    }
    in.charge_string(total);
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < times; ++i) out += seq.str_ref();
    return Value::string(std::move(out));
  }
  uint64_t total = static_cast<uint64_t>(seq.arr().size()) * static_cast<uint64_t>(times);
  in.charge(total);
  Array out;
  out.reserve(total);
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.arr().begin(), seq.arr().end());
  return Value::array(std::move(out), seq.is_tuple());
}

double to_double(const Value& v) {
  return v.as_float();
}

int64_t python_floordiv(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) throw_error("integer overflow", StatusCode::kOutOfRange);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t python_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value::integer(checked(add_overflow, a.as_int(), b.as_int()));
    if (numbers) return Value::number(to_double(a) + to_double(b));
    if (a.is_string() && b.is_string()) {
      in.charge_string(a.str_ref().size() + b.str_ref().size());
      if (a.is_markup() || b.is_markup()) {  // Markup + str escapes the str
        return Value::markup((a.is_markup() ? a.str_ref() : html_escape(a.str_ref())) +
                             (b.is_markup() ? b.str_ref() : html_escape(b.str_ref())));
      }
      return Value::string(a.str_ref() + b.str_ref());
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      in.charge(a.arr().size() + b.arr().size());
      Array out = a.arr();
      out.insert(out.end(), b.arr().begin(), b.arr().end());
      return Value::array(std::move(out), a.is_tuple());
    }
  } else if (op == "-") {
    if (ints) return Value::integer(checked(sub_overflow, a.as_int(), b.as_int()));
    if (numbers) return Value::number(to_double(a) - to_double(b));
  } else if (op == "*") {
    if (ints) return Value::integer(checked(mul_overflow, a.as_int(), b.as_int()));
    if (numbers) return Value::number(to_double(a) * to_double(b));
    bool b_int = b.is_int() || b.is_bool();
    bool a_int = a.is_int() || a.is_bool();
    if ((a.is_string() || a.is_array()) && b_int) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_array()) && a_int) return repeat(in, b, a.as_int());
  } else if (op == "/") {
    if (numbers) {
      if (to_double(b) == 0) throw_error("division by zero");
      return Value::number(to_double(a) / to_double(b));
    }
  } else if (op == "//") {
    if (numbers) {
      if (to_double(b) == 0) throw_error("integer division or modulo by zero");
      if (ints) return Value::integer(python_floordiv(a.as_int(), b.as_int()));
      return Value::number(std::floor(to_double(a) / to_double(b)));
    }
  } else if (op == "%") {
    if (numbers) {
      if (to_double(b) == 0) throw_error("integer division or modulo by zero");
      if (ints) return Value::integer(python_mod(a.as_int(), b.as_int()));
      double m = std::fmod(to_double(a), to_double(b));
      if (m != 0 && ((m < 0) != (to_double(b) < 0))) m += to_double(b);
      return Value::number(m);
    }
    if (a.is_string()) {
      throw_error("printf-style '%' string formatting is not supported; use format()",
                  StatusCode::kUnsupported);
    }
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int();
      int64_t e = b.as_int();
      if (base == 0 || base == 1) return Value::integer(e == 0 ? 1 : base);
      if (base == -1) return Value::integer(e % 2 == 0 ? 1 : -1);
      int64_t result = 1;
      for (; e > 0; --e) result = checked(mul_overflow, result, base);
      return Value::integer(result);  // |base| >= 2 overflows within 63 rounds
    }
    if (numbers) return Value::number(std::pow(to_double(a), to_double(b)));
  }
  fail_operands(op, a, b);
}

bool value_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw_error(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.str_ref().find(item.str_ref()) != std::string::npos;
    case Value::Kind::kArray:
      for (const Value& v : container.arr()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kObject:
      if (container.is_namespace()) break;
      return container.obj().find(item) != nullptr;
    default:
      break;
  }
  throw_error(fmt::format("argument of type '{}' is not iterable", container.type_name()));
}

Value slice_value(Interpreter& in, const Value& v, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_array() && !v.is_string()) {
    return Value::undefined(fmt::format("'{}' object is not subscriptable", v.type_name()));
  }
  auto index_of = [](const Value& x, const char* what) -> std::optional<int64_t> {
    if (x.is_undefined() || x.is_none()) return std::nullopt;
    if (!x.is_int() && !x.is_bool()) {
      throw_error(fmt::format("slice {} must be an integer or None", what));
    }
    return x.as_int();
  };
  int64_t step = index_of(step_v, "step").value_or(1);
  if (step == 0) throw_error("slice step cannot be zero");
  std::vector<uint32_t> cps;
  if (v.is_string()) cps = utf8_decode(v.str_ref());
  const int64_t n =
      v.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(v.arr().size());
  auto adjust = [&](std::optional<int64_t> x, bool is_start) {
    if (!x) return is_start ? (step < 0 ? n - 1 : 0) : (step < 0 ? -1 : n);
    int64_t i = *x;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(index_of(start_v, "start"), true);
  int64_t stop = adjust(index_of(stop_v, "stop"), false);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    picks.push_back(static_cast<size_t>(i));
  }
  in.charge(picks.size());
  if (v.is_string()) {
    std::string out;
    for (size_t i : picks) utf8_append(out, cps[i]);
    return Value::string(std::move(out));
  }
  Array out;
  out.reserve(picks.size());
  for (size_t i : picks) out.push_back(v.arr()[i]);
  return Value::array(std::move(out), v.is_tuple());
}

namespace {

// The code point starting at s[i] and its length in bytes (invalid bytes decode one at a time).
std::pair<uint32_t, size_t> decode_at(const std::string& s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1};
  size_t len = (c >> 5) == 0x6 ? 2 : ((c >> 4) == 0xE ? 3 : ((c >> 3) == 0x1E ? 4 : 1));
  std::vector<uint32_t> cps = utf8_decode(std::string_view(s).substr(i, len));
  if (cps.size() != 1) return {0xFFFD, 1};
  return {cps[0], len};
}

}  // namespace

std::string strip_string(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) throw_error("strip arg must be None or str");
    set = utf8_decode(chars.str_ref());
  }
  auto strip = [&](uint32_t cp) {
    if (whitespace) return is_python_space(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  // Only the ends are decoded: the middle of a long message is never touched.
  size_t b = 0;
  size_t e = s.size();
  while (left && b < e) {
    auto [cp, len] = decode_at(s, b);
    if (!strip(cp)) break;
    b += len;
  }
  while (right && e > b) {
    size_t start = e - 1;
    while (start > b && e - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    auto [cp, len] = decode_at(s, start);
    if (start + len != e) {  // a stray continuation byte: a code point of its own
      start = e - 1;
      cp = 0xFFFD;
    }
    if (!strip(cp)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

}  // namespace power::chat::jinja
