// Python methods on strings, lists and dicts that chat templates call (`content.strip()`,
// `text.split('</think>')`, `message.get('x')`, `ns.items.append(x)`, `'{}'.format(x)`).
#include <algorithm>
#include <charconv>
#include <cmath>

#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"

namespace power::chat::jinja {
namespace {

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) {
    throw_error(fmt::format("{} must be a string, not '{}'", what, v.type_name()));
  }
  return v.str_ref();
}

size_t byte_to_cp_index(const std::string& s, size_t byte) {
  return utf8_length(std::string_view(s).substr(0, byte));
}

size_t cp_to_byte_index(const std::string& s, int64_t cp) {
  size_t byte = 0;
  for (int64_t i = 0; i < cp && byte < s.size(); ++i) {
    ++byte;
    while (byte < s.size() && (static_cast<unsigned char>(s[byte]) & 0xC0) == 0x80) ++byte;
  }
  return byte;
}

std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_python_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    size_t b = i;
    while (i < cps.size() && !is_python_space(cps[i])) ++i;
    words.emplace_back(b, i);
  }
  std::vector<std::string> out;
  if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
    for (auto [b, e] : words) out.push_back(utf8_encode(cps, b, e));
    return out;
  }
  auto keep = static_cast<size_t>(maxsplit);
  if (!from_right) {
    for (size_t w = 0; w < keep; ++w)
      out.push_back(utf8_encode(cps, words[w].first, words[w].second));
    size_t e = cps.size();
    while (e > words[keep].first && is_python_space(cps[e - 1])) --e;
    out.push_back(utf8_encode(cps, words[keep].first, e));
  } else {
    size_t first = words.size() - keep;
    size_t b = 0;
    while (b < words[first - 1].second && is_python_space(cps[b])) ++b;
    out.push_back(utf8_encode(cps, b, words[first - 1].second));
    for (size_t w = first; w < words.size(); ++w) {
      out.push_back(utf8_encode(cps, words[w].first, words[w].second));
    }
  }
  return out;
}

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit,
                                   bool from_right) {
  if (sep.empty()) throw_error("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(sep, pos);
      if (hit == std::string::npos) break;
      out.push_back(s.substr(pos, hit - pos));
      pos = hit + sep.size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string::npos) break;
    out.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

Value string_list(Interpreter& in, const std::vector<std::string>& parts) {
  in.charge(parts.size());
  Array out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::array(std::move(out));
}

std::string python_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    bool lower = c >= 'a' && c <= 'z';
    bool upper = c >= 'A' && c <= 'Z';
    if (lower || upper) {
      if (prev_cased && upper) c = static_cast<char>(c - 'A' + 'a');
      if (!prev_cased && lower) c = static_cast<char>(c - 'a' + 'A');
      prev_cased = true;
    } else {
      prev_cased = (static_cast<unsigned char>(c) & 0x80) != 0 && prev_cased;
    }
  }
  return out;
}

std::string python_replace(Interpreter& in, const std::string& s, const std::string& old_s,
                           const std::string& new_s, int64_t count) {
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` before every character and at the end.
    std::vector<uint32_t> cps = utf8_decode(s);
    int64_t n = 0;
    for (uint32_t cp : cps) {
      if (count < 0 || n < count) {
        out += new_s;
        ++n;
      }
      utf8_append(out, cp);
      in.charge_string(out.size());
    }
    if (count < 0 || n < count) out += new_s;
    in.charge_string(out.size());
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t hit = s.find(old_s, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += new_s;
    pos = hit + old_s.size();
    ++n;
    if (out.size() > in.limits().max_output_bytes) in.charge_string(out.size());
  }
  out.append(s, pos, std::string::npos);
  in.charge_string(out.size());
  return out;
}

// Python format-spec subset: [[fill]align][sign][0][width][.precision][type], type in s d f.
std::string apply_format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  size_t i = 0;
  char fill = ' ';
  char align = '\0';
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec[0];
    align = spec[1];
    i = 2;
  } else if (is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = '\0';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (align == '\0') {
      fill = '0';
      align = '=';
    }
    ++i;
  }
  size_t width = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9')
    width = width * 10 + (spec[i++] - '0');
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    ++i;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9')
      precision = precision * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : '\0';
  if (i != spec.size() || width > 4096) {
    throw_error(fmt::format("unsupported format spec '{}'", spec), StatusCode::kUnsupported);
  }
  std::string body;
  if (type == 'f' || type == 'F' || (type == '\0' && v.is_float() && precision >= 0)) {
    if (!v.is_number()) throw_error("format spec 'f' needs a number");
    body = fmt::format("{:.{}f}", v.as_float(), precision < 0 ? 6 : precision);
  } else if (type == 'd') {
    if (!v.is_int() && !v.is_bool()) throw_error("format spec 'd' needs an integer");
    body = std::to_string(v.as_int());
  } else if (type == 's' || type == '\0') {
    body = v.to_str();
    if (precision >= 0 && v.is_string()) {
      body = body.substr(0, cp_to_byte_index(body, precision));
    }
  } else {
    throw_error(fmt::format("unsupported format type '{}'", type), StatusCode::kUnsupported);
  }
  if (v.is_number() && sign == '+' && body[0] != '-') body = "+" + body;
  if (v.is_number() && sign == ' ' && body[0] != '-') body = " " + body;
  size_t len = utf8_length(body);
  if (len >= width) return body;
  size_t pad = width - len;
  if (align == '\0') align = v.is_number() ? '>' : '<';
  if (align == '<') return body + std::string(pad, fill);
  if (align == '>') return std::string(pad, fill) + body;
  if (align == '^') return std::string(pad / 2, fill) + body + std::string(pad - pad / 2, fill);
  size_t sign_len = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
  return body.substr(0, sign_len) + std::string(pad, fill) + body.substr(sign_len);
}

std::string python_format(Interpreter& in, const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}')
        ++i;
      else
        throw_error("single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) throw_error("single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    char conversion = '\0';
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) throw_error("bad conversion in format string");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    Value v;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t idx = auto_index;
      if (field.empty()) {
        ++auto_index;
      } else if (std::from_chars(field.data(), field.data() + field.size(), idx).ec !=
                 std::errc()) {
        throw_error("format(): bad field index");
      }
      if (idx >= args.positional.size()) throw_error("format(): positional index out of range");
      v = args.positional[idx];
    } else {
      auto it = std::find_if(args.keyword.begin(), args.keyword.end(),
                             [&](const auto& kv) { return kv.first == field; });
      if (it == args.keyword.end()) throw_error(fmt::format("format(): missing key '{}'", field));
      v = it->second;
    }
    if (conversion == 'r')
      v = Value::string(v.repr());
    else if (conversion == 's')
      v = Value::string(v.to_str());
    else if (conversion != '\0')
      throw_error("bad conversion in format string");
    out += apply_format_spec(v, spec);
    in.charge_string(out.size());
  }
  return out;
}

bool matches_affix(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = need_string(a, prefix ? "startswith() argument" : "endswith() argument");
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_array()) {
    return std::any_of(affix.arr().begin(), affix.arr().end(), one);
  }
  return one(affix);
}

Value string_method(Interpreter& in, const std::string& s, const std::string& name,
                    CallArgs& args) {
  auto arg = [&](std::initializer_list<std::string_view> names, std::vector<Value> defaults) {
    return args.bind(name, names, std::move(defaults));
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = arg({"chars"}, {Value::none()});
    return Value::string(strip_string(s, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    auto a = arg({"prefix"}, {});
    return Value::boolean(matches_affix(s, a[0], name == "startswith"));
  }
  if (name == "split" || name == "rsplit") {
    auto a = arg({"sep", "maxsplit"}, {Value::none(), Value::integer(-1)});
    int64_t maxsplit = a[1].as_int();
    if (a[0].is_none()) return string_list(in, split_whitespace(s, maxsplit, name == "rsplit"));
    return string_list(in,
                       split_sep(s, need_string(a[0], "separator"), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    auto a = arg({"keepends"}, {Value::boolean(false)});
    std::vector<std::string> lines;
    std::string cur;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
        std::string end(1, c);
        if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') end += s[++i];
        lines.push_back(a[0].truthy() ? cur + end : cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) lines.push_back(cur);
    return string_list(in, lines);
  }
  if (name == "upper") return Value::string(ascii_upper(s));
  if (name == "lower") return Value::string(ascii_lower(s));
  if (name == "title") return Value::string(python_title(s));
  if (name == "capitalize") {
    std::string out = ascii_lower(s);
    if (!out.empty()) out[0] = ascii_upper(out.substr(0, 1))[0];
    return Value::string(out);
  }
  if (name == "replace") {
    auto a = arg({"old", "new", "count"}, {Value(), Value(), Value::integer(-1)});
    return Value::string(python_replace(in, s, need_string(a[0], "replace() old"),
                                        need_string(a[1], "replace() new"), a[2].as_int()));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto a = arg({"sub", "start", "end"}, {Value(), Value::none(), Value::none()});
    const std::string& sub = need_string(a[0], "substring");
    int64_t n = static_cast<int64_t>(utf8_length(s));
    auto clamp = [n](const Value& v, int64_t dflt) {
      if (v.is_none()) return dflt;
      int64_t i = v.as_int();
      if (i < 0) i = std::max<int64_t>(0, i + n);
      return std::min(i, n);
    };
    size_t b = cp_to_byte_index(s, clamp(a[1], 0));
    size_t e = cp_to_byte_index(s, clamp(a[2], n));
    std::string window = b <= e ? s.substr(b, e - b) : std::string();
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(window)) + 1);
      int64_t count = 0;
      for (size_t p = window.find(sub); p != std::string::npos;
           p = window.find(sub, p + sub.size())) {
        ++count;
      }
      return Value::integer(count);
    }
    size_t hit = (name[0] == 'r') ? window.rfind(sub) : window.find(sub);
    if (hit == std::string::npos || b > e) {
      if (name == "index" || name == "rindex") throw_error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(byte_to_cp_index(s, b + hit)));
  }
  if (name == "join") {
    auto a = arg({"iterable"}, {});
    std::string out;
    bool first = true;
    for (const Value& item : in.iterate(a[0])) {
      if (!first) out += s;
      first = false;
      out += need_string(item, "join() item");
      in.charge_string(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return Value::string(python_format(in, s, args));
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = arg({"affix"}, {});
    const std::string& x = need_string(a[0], name + "() argument");
    bool pre = name == "removeprefix";
    if (matches_affix(s, a[0], pre)) {
      return Value::string(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  auto all = [&](auto pred) {
    return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), pred));
  };
  if (name == "isdigit") return all([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha")
    return all([](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
  if (name == "isalnum")
    return all([](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  if (name == "isspace")
    return all([](char c) { return std::isspace(static_cast<unsigned char>(c)); });
  if (name == "islower") return Value::boolean(ascii_lower(s) == s && ascii_upper(s) != s);
  if (name == "isupper") return Value::boolean(ascii_upper(s) == s && ascii_lower(s) != s);
  throw_error(fmt::format("str has no method '{}'", name));
}

Value list_method(Interpreter& in, const Value& list, const std::string& name, CallArgs& args) {
  Array& items = list.arr();
  if (name == "append") {
    auto a = args.bind(name, {"item"}, {});
    in.charge(1);
    items.push_back(a[0]);
    return Value::none();
  }
  if (name == "extend") {
    auto a = args.bind(name, {"iterable"}, {});
    for (Value& v : in.iterate(a[0])) items.push_back(std::move(v));
    return Value::none();
  }
  if (name == "insert") {
    auto a = args.bind(name, {"index", "item"}, {});
    int64_t n = static_cast<int64_t>(items.size());
    int64_t i = a[0].as_int();
    if (i < 0) i = std::max<int64_t>(0, i + n);
    i = std::min(i, n);
    items.insert(items.begin() + i, a[1]);
    return Value::none();
  }
  if (name == "pop") {
    auto a = args.bind(name, {"index"}, {Value::integer(-1)});
    if (items.empty()) throw_error("pop from empty list");
    int64_t n = static_cast<int64_t>(items.size());
    int64_t i = a[0].as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw_error("pop index out of range");
    Value v = items[static_cast<size_t>(i)];
    items.erase(items.begin() + i);
    return v;
  }
  if (name == "index" || name == "count") {
    auto a = args.bind(name, {"value"}, {});
    int64_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (values_equal(items[i], a[0])) {
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++count;
      }
    }
    if (name == "index") throw_error(fmt::format("{} is not in list", a[0].repr()));
    return Value::integer(count);
  }
  if (name == "copy") return Value::array(items, list.is_tuple());
  throw_error(fmt::format("list has no method '{}'", name));
}

Value dict_method(Interpreter& in, const Value& dict, const std::string& name, CallArgs& args) {
  const Object& obj = dict.obj();
  if (name == "get") {
    auto a = args.bind(name, {"key", "default"}, {Value(), Value::none()});
    if (const Value* v = obj.find(a[0])) return *v;
    return a[1];
  }
  args.bind(name, {}, {});
  in.charge(obj.size());
  Array out;
  for (const auto& [k, v] : obj.items) {
    if (name == "items") out.push_back(Value::array({k, v}, true));
    if (name == "keys") out.push_back(k);
    if (name == "values") out.push_back(v);
  }
  if (name == "copy") {
    Value copy = Value::object();
    for (const auto& [k, v] : obj.items) copy.obj().set(k, v);
    return copy;
  }
  return Value::array(std::move(out));
}

bool is_one_of(const std::string& name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

Value get_method(const Value& obj, std::string_view name_view) {
  std::string name(name_view);
  if (obj.is_string() &&
      is_one_of(name,
                {"strip",   "lstrip",     "rstrip",       "startswith",   "endswith", "split",
                 "rsplit",  "splitlines", "upper",        "lower",        "title",    "capitalize",
                 "replace", "find",       "rfind",        "index",        "rindex",   "count",
                 "join",    "format",     "removeprefix", "removesuffix", "isdigit",  "isalpha",
                 "isalnum", "isspace",    "islower",      "isupper"})) {
    std::string s = obj.str_ref();
    return Value::callable("str." + name, [s, name](Interpreter& in, CallArgs& args) {
      return string_method(in, s, name, args);
    });
  }
  if (obj.is_array() && !obj.is_tuple() &&
      is_one_of(name, {"append", "extend", "insert", "pop", "index", "count", "copy"})) {
    return Value::callable("list." + name, [obj, name](Interpreter& in, CallArgs& args) {
      return list_method(in, obj, name, args);
    });
  }
  if (obj.is_tuple() && is_one_of(name, {"index", "count"})) {
    return Value::callable("tuple." + name, [obj, name](Interpreter& in, CallArgs& args) {
      return list_method(in, obj, name, args);
    });
  }
  if (obj.is_mapping() && is_one_of(name, {"items", "keys", "values", "get", "copy"})) {
    return Value::callable("dict." + name, [obj, name](Interpreter& in, CallArgs& args) {
      return dict_method(in, obj, name, args);
    });
  }
  return Value::undefined();
}

}  // namespace power::chat::jinja
