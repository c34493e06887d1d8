// jinja2's filters as chat templates use them, with Hugging Face's tojson.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"

namespace power::chat::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

std::string text_of(const Value& v) {
  return v.to_str();
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.str_ref()));
    case Value::Kind::kArray:
      return static_cast<int64_t>(v.arr().size());
    case Value::Kind::kObject:
      if (!v.is_namespace()) return static_cast<int64_t>(v.obj().size());
      break;
    default:
      break;
  }
  throw_error(fmt::format("object of type '{}' has no len()", v.type_name()));
}

// jinja2 make_attrgetter: "a.b.0" looks up each part with getitem (item, then attribute).
Value get_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_int()) return in.get_item(item, attribute);
  Value cur = item;
  std::string path = attribute.to_str();
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    int64_t index = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    bool numeric = !part.empty() && ec == std::errc() && end == part.data() + part.size();
    cur = in.get_item(cur, numeric ? Value::integer(index) : Value::string(part));
    if (dot == std::string::npos) return cur;
    if (cur.is_undefined()) return cur;
    pos = dot + 1;
  }
}

Value lowered(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_lower(v.str_ref()));
  return v;
}

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("abs", {}, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw_error("integer overflow", StatusCode::kOutOfRange);
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  throw_error(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

// jinja2's attr() is Python getattr only: dict keys are not attributes.
Value f_attr(Interpreter&, const Value& v, CallArgs& args) {
  auto a = args.bind("attr", {"name"}, {});
  if (v.is_undefined())
    throw_error(v.str_ref().empty() ? "attr() of an undefined value" : v.str_ref());
  Value method = get_method(v, a[0].to_str());
  if (!method.is_undefined()) return method;
  return Value::undefined(
      fmt::format("'{}' object has no attribute '{}'", v.type_name(), a[0].to_str()));
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("batch", {"linecount", "fill_with"}, {Value(), Value::none()});
  int64_t n = a[0].as_int();
  if (n <= 0) throw_error("batch() size must be positive");
  Array out;
  Array cur;
  for (Value& item : in.iterate(v)) {
    cur.push_back(std::move(item));
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::array(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (!a[1].is_none()) {
      in.charge(static_cast<uint64_t>(n) - cur.size());
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(a[1]);
    }
    out.push_back(Value::array(std::move(cur)));
  }
  return Value::array(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("capitalize", {}, {});
  std::string s = ascii_lower(text_of(v));
  if (!s.empty()) s[0] = ascii_upper(s.substr(0, 1))[0];
  return Value::string(s);
}

Value f_center(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("center", {"width"}, {Value::integer(80)});
  std::string s = text_of(v);
  int64_t width = a[0].as_int();
  auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  in.charge_string(static_cast<size_t>(width));
  int64_t pad = width - len;
  int64_t left = pad / 2 + (pad & width & 1);  // CPython's str.center rounding
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("length", {}, {});
  return Value::integer(length_of(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  auto a = args.bind("default", {"default_value", "boolean"},
                     {Value::string(""), Value::boolean(false)});
  if (v.is_undefined() || (a[1].truthy() && !v.truthy())) return a[0];
  return v;
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("dictsort", {"case_sensitive", "by", "reverse"},
                     {Value::boolean(false), Value::string("key"), Value::boolean(false)});
  if (!v.is_mapping()) throw_error("dictsort() needs a mapping");
  bool by_value = a[1].to_str() == "value";
  if (!by_value && a[1].to_str() != "key") throw_error("dictsort(): 'by' must be 'key' or 'value'");
  in.charge(v.obj().size());
  Array pairs;
  for (const auto& [k, val] : v.obj().items) {
    pairs.push_back(Value::array({k, val}, true));
  }
  bool cs = a[0].truthy();
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    size_t i = by_value ? 1 : 0;
    return values_compare(lowered(x.arr()[i], cs), lowered(y.arr()[i], cs)) < 0;
  });
  if (a[2].truthy()) std::reverse(pairs.begin(), pairs.end());
  return Value::array(std::move(pairs));
}

Value f_escape(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("escape", {}, {});
  if (v.is_markup()) return v;  // already safe: never escaped twice
  std::string out = html_escape(text_of(v));
  in.charge_string(out.size());
  return Value::markup(std::move(out));
}

Value f_forceescape(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("forceescape", {}, {});
  std::string out = html_escape(text_of(v));
  in.charge_string(out.size());
  return Value::markup(std::move(out));
}

Value f_first(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("first", {}, {});
  if (v.is_array()) return v.arr().empty() ? Value::undefined("no first item") : v.arr().front();
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
}

Value f_last(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("last", {}, {});
  if (v.is_array()) return v.arr().empty() ? Value::undefined("no last item") : v.arr().back();
  std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  auto a = args.bind("float", {"default"}, {Value::number(0.0)});
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    std::string s = strip_string(v.str_ref(), Value(), true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::number(d);
  }
  return a[0];
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  auto a = args.bind("int", {"default", "base"}, {Value::integer(0), Value::integer(10)});
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
    return a[0];
  }
  if (v.is_string()) {
    std::string s = strip_string(v.str_ref(), Value(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    errno = 0;
    char* end = nullptr;
    long long i = std::strtoll(s.c_str(), &end, static_cast<int>(a[1].as_int()));
    if (!s.empty() && errno == 0 && end == s.c_str() + s.size()) return Value::integer(i);
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::integer(static_cast<int64_t>(d));
    }
  }
  return a[0];
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("indent", {"width", "first", "blank"},
                     {Value::integer(4), Value::boolean(false), Value::boolean(false)});
  int64_t width = a[0].is_string() ? 0 : std::max<int64_t>(0, a[0].as_int());
  in.charge_string(static_cast<size_t>(width));  // rejects a width over the output limit
  std::string pad =
      a[0].is_string() ? a[0].str_ref() : std::string(static_cast<size_t>(width), ' ');
  // jinja2: (s + "\n").splitlines(), i.e. s split on "\n"; blank lines stay unindented
  // unless blank=True; the first line only with first=True.
  std::string s = text_of(v);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (true) {
    size_t nl = s.find('\n', pos);
    lines.push_back(s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  std::string out = lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += '\n';
    if (a[2].truthy() || !lines[i].empty()) out += pad;
    out += lines[i];
    in.charge_string(out.size());
  }
  if (a[1].truthy()) out = pad + out;
  in.charge_string(out.size());
  return Value::string(out);
}

Value f_items(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("items", {}, {});
  if (v.is_undefined()) return Value::array();
  if (!v.is_mapping()) throw_error("can only get item pairs from a mapping");
  in.charge(v.obj().size());
  Array out;
  for (const auto& [k, val] : v.obj().items) out.push_back(Value::array({k, val}, true));
  return Value::array(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("join", {"d", "attribute"}, {Value::string(""), Value::none()});
  std::string sep = a[0].to_str();
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (a[1].is_none() ? item : get_path(in, item, a[1])).to_str();
    in.charge_string(out.size());
  }
  return Value::string(out);
}

Value f_list(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("list", {}, {});
  return Value::array(in.iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("lower", {}, {});
  return Value::string(ascii_lower(text_of(v)));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("upper", {}, {});
  return Value::string(ascii_upper(text_of(v)));
}

// map(attribute='x', default=...) or map('filter', args...).
Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  Array out;
  if (!v.truthy()) return Value::array();  // jinja2: `if value:` guards the loop
  auto attr = std::find_if(args.keyword.begin(), args.keyword.end(),
                           [](const auto& kv) { return kv.first == "attribute"; });
  if (attr != args.keyword.end()) {
    Value dflt;
    for (const auto& [k, val] : args.keyword) {
      if (k == "default")
        dflt = val;
      else if (k != "attribute")
        throw_error(fmt::format("map() got an unexpected keyword '{}'", k));
    }
    for (const Value& item : in.iterate(v)) {
      Value r = get_path(in, item, attr->second);
      out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
    }
    return Value::array(std::move(out));
  }
  if (args.positional.empty()) throw_error("map() needs a filter name or attribute=");
  std::string name = args.positional[0].to_str();
  if (!is_known_filter(name)) throw_error(fmt::format("unknown filter '{}'", name));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : in.iterate(v)) {
    CallArgs call = rest;
    out.push_back(in.run_filter(name, item, call));
  }
  return Value::array(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  auto a = args.bind(want_max ? "max" : "min", {"case_sensitive", "attribute"},
                     {Value::boolean(false), Value::none()});
  std::vector<Value> items = in.iterate(v);
  if (items.empty()) return Value::undefined("no items in the sequence");
  auto key = [&](const Value& x) {
    return lowered(a[1].is_none() ? x : get_path(in, x, a[1]), a[0].truthy());
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = values_compare(key(items[i]), key(items[best]));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_max(Interpreter& in, const Value& v, CallArgs& args) {
  return min_max(in, v, args, true);
}
Value f_min(Interpreter& in, const Value& v, CallArgs& args) {
  return min_max(in, v, args, false);
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Value select_impl(Interpreter& in, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  if (!args.keyword.empty()) throw_error("select filters take no keyword arguments");
  if (!v.truthy()) return Value::array();  // jinja2: `if value:` guards the loop
  size_t i = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) throw_error("selectattr() needs an attribute name");
    attribute = args.positional[i++];
  }
  std::string test;
  if (i < args.positional.size()) test = args.positional[i++].to_str();
  if (!test.empty() && !is_known_test(test)) throw_error(fmt::format("unknown test '{}'", test));
  std::vector<Value> test_args(args.positional.begin() + static_cast<std::ptrdiff_t>(i),
                               args.positional.end());
  Array out;
  for (Value& item : in.iterate(v)) {
    Value subject = by_attr ? get_path(in, item, attribute) : item;
    bool ok = test.empty() ? subject.truthy() : in.run_test(test, subject, test_args);
    if (ok == keep) out.push_back(std::move(item));
  }
  return Value::array(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("replace", {"old", "new", "count"}, {Value(), Value(), Value::none()});
  CallArgs call;
  call.positional = {Value::string(a[0].to_str()), Value::string(a[1].to_str()),
                     a[2].is_none() ? Value::integer(-1) : a[2]};
  return in.call(get_method(Value::string(text_of(v)), "replace"), call);
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs& args) {
  args.bind("reverse", {}, {});
  if (v.is_string()) {
    std::vector<uint32_t> cps = utf8_decode(v.str_ref());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps, 0, cps.size()));
  }
  std::vector<Value> items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::array(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  auto a =
      args.bind("round", {"precision", "method"}, {Value::integer(0), Value::string("common")});
  if (!v.is_number()) throw_error("round() needs a number");
  int64_t digits = a[0].as_int();
  std::string method = a[1].to_str();
  if (method == "common" && digits >= 0 && digits <= 30 && std::isfinite(v.as_float())) {
    // Python rounds the exact binary value half-to-even; so does printf.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), v.as_float());
    return Value::number(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(digits));
  double x = v.as_float() * scale;
  if (method == "common") {
    x = std::nearbyint(x);
  } else if (method == "ceil") {
    x = std::ceil(x);
  } else if (method == "floor") {
    x = std::floor(x);
  } else {
    throw_error("round(): method must be 'common', 'ceil' or 'floor'");
  }
  return Value::number(x / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("safe", {}, {});
  return v.is_markup() ? v : Value::markup(text_of(v));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("sort", {"reverse", "case_sensitive", "attribute"},
                     {Value::boolean(false), Value::boolean(false), Value::none()});
  std::vector<Value> items = in.iterate(v);
  auto key = [&](const Value& x) {
    return lowered(a[2].is_none() ? x : get_path(in, x, a[2]), a[1].truthy());
  };
  bool rev = a[0].truthy();
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int c = values_compare(key(x), key(y));
    return rev ? c > 0 : c < 0;
  });
  return Value::array(std::move(items));
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("string", {}, {});
  return Value::string(text_of(v));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("sum", {"attribute", "start"}, {Value::none(), Value::integer(0)});
  Value total = a[1];
  for (const Value& item : in.iterate(v)) {
    total = binary_op(in, "+", total, a[0].is_none() ? item : get_path(in, item, a[0]));
  }
  return total;
}

// jinja2's title filter: words start after whitespace, '-', '(', '{', '[' or '<'.
Value f_title(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("title", {}, {});
  std::string s = text_of(v);
  bool word_start = true;
  for (char& c : s) {
    bool sep = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
               c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      word_start = true;
      continue;
    }
    if (word_start) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    } else if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    word_start = false;
  }
  return Value::string(s);
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=...,
// sort_keys=...). A lone positional argument is the indent, as in jinja2's own filter.
Value f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  auto a = args.bind("tojson", {"indent", "sort_keys", "separators", "ensure_ascii"},
                     {Value::none(), Value::boolean(false), Value::none(), Value::boolean(false)});
  JsonDumpOptions o;
  if (a[0].is_string()) {
    o.indent_string = a[0].str_ref();
    o.indent = o.indent_string.empty() ? 0 : -1;
  } else if (!a[0].is_none()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(a[0].as_int(), 0, 64));
  }
  bool indented = !a[0].is_none();
  o.item_separator = indented ? "," : ", ";
  if (a[2].is_array() && a[2].arr().size() == 2) {
    o.item_separator = a[2].arr()[0].to_str();
    o.key_separator = a[2].arr()[1].to_str();
  }
  o.sort_keys = a[1].truthy();
  o.ensure_ascii = a[3].truthy();
  std::string out = json_dumps(v, o);
  in.charge_string(out.size());
  return Value::string(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  auto a = args.bind("trim", {"chars"}, {Value::none()});
  return Value::string(strip_string(text_of(v), a[0], true, true));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  auto a =
      args.bind("unique", {"case_sensitive", "attribute"}, {Value::boolean(false), Value::none()});
  Array out;
  std::vector<Value> seen;
  for (Value& item : in.iterate(v)) {
    Value key = lowered(a[1].is_none() ? item : get_path(in, item, a[1]), a[0].truthy());
    bool dup =
        std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); });
    in.charge(seen.size());
    if (dup) continue;
    seen.push_back(key);
    out.push_back(std::move(item));
  }
  return Value::array(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("wordcount", {}, {});
  int64_t count = 0;
  bool in_word = false;
  for (unsigned char c : text_of(v)) {
    bool word = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word && !in_word) ++count;
    in_word = word;
  }
  return Value::integer(count);
}

Value f_pprint(Interpreter&, const Value& v, CallArgs& args) {
  args.bind("pprint", {}, {});
  return Value::string(v.repr());
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

template <typename Table>
auto find_entry(const Table& table, std::string_view name) -> decltype(&table[0]) {
  for (const auto& e : table) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return find_entry(kFilters, name) != nullptr;
}
Value apply_filter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  const FilterEntry* f = find_entry(kFilters, name);
  if (f == nullptr) throw_error(fmt::format("unknown filter '{}'", name));
  return f->fn(in, v, args);
}

}  // namespace power::chat::jinja
