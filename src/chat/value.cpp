// Value construction, Python str()/repr(), equality, ordering and json.dumps.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "chat/jinja_error.h"
#include "chat/jinja_value.h"

namespace power::chat::jinja {
namespace {

void check_depth(int depth) {
  if (depth > kMaxValueDepth) {
    throw_error(fmt::format("value nesting deeper than {} levels", kMaxValueDepth),
                StatusCode::kResourceExhausted);
  }
}

void json_quote(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  if (!ensure_ascii) {
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
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
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            out += fmt::format("\\u{:04x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
    }
  } else {
    for (uint32_t cp : utf8_decode(s)) {
      if (cp < 0x80) {
        std::string one(1, static_cast<char>(cp));
        std::string quoted;
        json_quote(one, false, quoted);
        out.append(quoted, 1, quoted.size() - 2);
      } else if (cp < 0x10000) {
        out += fmt::format("\\u{:04x}", cp);
      } else {
        uint32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      }
    }
  }
  out += '"';
}

// json.dumps turns int/float/bool/None keys into strings and rejects the rest.
std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.str_ref();
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kFloat: {
      double f = key.as_float();
      if (std::isnan(f)) return "NaN";
      if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
      return python_float_repr(f);
    }
    default:
      throw_error(
          fmt::format("keys must be str, int, float, bool or None, not {}", key.type_name()));
  }
}

void json_newline(const JsonDumpOptions& o, int level, std::string& out) {
  out += '\n';
  for (int i = 0; i < level; ++i) {
    if (!o.indent_string.empty()) {
      out += o.indent_string;
    } else {
      out.append(static_cast<size_t>(o.indent), ' ');
    }
  }
}

void json_dump(const Value& v, const JsonDumpOptions& o, int level, std::string& out, int depth) {
  check_depth(depth);
  bool indented = o.indent >= 0 || !o.indent_string.empty();
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      double f = v.as_float();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(f);
      }
      return;
    }
    case Value::Kind::kString:
      json_quote(v.str_ref(), o.ensure_ascii, out);
      return;
    case Value::Kind::kArray: {
      if (v.arr().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& item : v.arr()) {
        if (!first) out += o.item_separator;
        first = false;
        if (indented) json_newline(o, level + 1, out);
        json_dump(item, o, level + 1, out, depth + 1);
      }
      if (indented) json_newline(o, level, out);
      out += ']';
      return;
    }
    case Value::Kind::kObject: {
      if (v.is_namespace()) break;
      const Object& obj = v.obj();
      if (obj.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<size_t> order(obj.items.size());
      std::iota(order.begin(), order.end(), 0);
      if (o.sort_keys) {
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return values_compare(obj.items[a].first, obj.items[b].first, depth + 1) < 0;
        });
      }
      out += '{';
      bool first = true;
      for (size_t i : order) {
        if (!first) out += o.item_separator;
        first = false;
        if (indented) json_newline(o, level + 1, out);
        json_quote(json_key(obj.items[i].first), o.ensure_ascii, out);
        out += o.key_separator;
        json_dump(obj.items[i].second, o, level + 1, out, depth + 1);
      }
      if (indented) json_newline(o, level, out);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw_error(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
}

thread_local bool g_draining = false;
thread_local std::vector<std::shared_ptr<void>>* g_pending = nullptr;

// Runs `release_all` (which queues child containers) and, if this is the outermost container
// being destroyed, destroys the queue one element at a time; nested destructors only queue.
template <typename F>
void release_iteratively(F&& release_all) {
  if (g_draining) {
    release_all();
    return;
  }
  g_draining = true;
  std::vector<std::shared_ptr<void>> pending;
  g_pending = &pending;
  release_all();
  while (!pending.empty()) {
    std::shared_ptr<void> p = std::move(pending.back());
    pending.pop_back();
    p.reset();
  }
  g_pending = nullptr;
  g_draining = false;
}

}  // namespace

void Value::release_children() {
  if (!g_draining) return;  // top-level destruction: the caller drains afterwards
  if (kind_ == Kind::kArray || kind_ == Kind::kObject) {
    g_pending->push_back(std::move(ptr_));
  }
}

ArrayBox::~ArrayBox() {
  release_iteratively([this] {
    for (Value& v : items) v.release_children();
  });
}

Object::~Object() {
  release_iteratively([this] {
    for (auto& kv : items) kv.second.release_children();
  });
}

thread_local ContainerTracker* g_tracker = nullptr;

ContainerTracker::ContainerTracker() : previous_(g_tracker) {
  g_tracker = this;
}

ContainerTracker::~ContainerTracker() {
  g_tracker = previous_;
  for (auto& [weak, kind] : tracked_) {
    std::shared_ptr<void> alive = weak.lock();
    if (!alive) continue;
    if (kind == Value::Kind::kArray) {
      Array items = std::move(static_cast<ArrayBox*>(alive.get())->items);
    } else {
      auto* obj = static_cast<Object*>(alive.get());
      std::vector<std::pair<Value, Value>> items = std::move(obj->items);
      obj->index.clear();
      obj->other_index.clear();
    }
  }
}

void ContainerTracker::track(const std::shared_ptr<void>& container, Value::Kind kind) {
  if (g_tracker != nullptr) g_tracker->tracked_.emplace_back(container, kind);
}

Array& Value::arr() const {
  return static_cast<ArrayBox*>(ptr_.get())->items;
}

const std::string& Value::str_ref() const {
  static const std::string kEmpty;
  return ptr_ && (kind_ == Kind::kString || kind_ == Kind::kUndefined)
             ? *static_cast<const std::string*>(ptr_.get())
             : kEmpty;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.tuple_ = true;
  return v;
}

Value Value::array(Array items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kArray;
  v.tuple_ = is_tuple;
  v.ptr_ = std::make_shared<ArrayBox>(std::move(items));
  ContainerTracker::track(v.ptr_, Kind::kArray);
  return v;
}
Value Value::object() {
  Value v;
  v.kind_ = Kind::kObject;
  v.ptr_ = std::make_shared<Object>();
  ContainerTracker::track(v.ptr_, Kind::kObject);
  return v;
}
Value Value::namespace_object() {
  Value v = object();
  v.obj().is_namespace = true;
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.ptr_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, int max_depth) {
  if (max_depth < 0) {
    throw_error("JSON nesting too deep", StatusCode::kResourceExhausted);
  }
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return none();
    case T::boolean:
      return boolean(j.get<bool>());
    case T::number_integer:
      return integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(u));
      return number(static_cast<double>(u));
    }
    case T::number_float:
      return number(j.get<double>());
    case T::string:
      return string(j.get<std::string>());
    case T::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, max_depth - 1));
      return array(std::move(items));
    }
    case T::object: {
      Value v = object();
      for (const auto& [k, e] : j.items()) v.obj().set(k, from_json(e, max_depth - 1));
      return v;
    }
    default:
      throw_error("unsupported JSON value (binary or discarded)");
  }
}

bool Value::is_namespace() const {
  return kind_ == Kind::kObject && obj().is_namespace;
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::kArray:
    case Kind::kObject:
    case Kind::kCallable:
      return ptr_.get();
    default:
      return nullptr;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !str_ref().empty();
    case Kind::kArray:
      return !arr().empty();
    case Kind::kObject:
      return obj().is_namespace || !obj().items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return tuple_ ? "tuple" : "list";
    case Kind::kObject:
      return obj().is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string Value::to_str(int depth) const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str_ref();
    default:
      return repr(depth);
  }
}

std::string Value::repr(int depth) const {
  check_depth(depth);
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return python_float_repr(f_);
    case Kind::kString:
      return python_string_repr(str_ref());
    case Kind::kArray: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < arr().size(); ++i) {
        if (i > 0) out += ", ";
        out += arr()[i].repr(depth + 1);
      }
      if (tuple_ && arr().size() == 1) out += ',';
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kObject: {
      std::string out = obj().is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : obj().items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr(depth + 1) + ": " + v.repr(depth + 1);
      }
      out += obj().is_namespace ? "}>" : "}";
      return out;
    }
    case Kind::kCallable:
      return "<function " + fn().name + ">";
  }
  return "";
}

const Value* Object::find(std::string_view key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* Object::find(const Value& key) const {
  if (key.is_string()) return find(key.str_ref());
  auto it = other_index.find(dict_key_id(key));
  return it == other_index.end() ? nullptr : &items[it->second].second;
}

void Object::set(const std::string& key, Value v) {
  auto it = index.find(key);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(Value::string(key), std::move(v));
}

void Object::set(const Value& key, Value v) {
  if (key.is_string()) return set(key.str_ref(), std::move(v));
  std::string id = dict_key_id(key);
  auto it = other_index.find(id);
  if (it != other_index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  other_index.emplace(std::move(id), items.size());
  items.emplace_back(key, std::move(v));
}

std::string dict_key_id(const Value& key, int depth) {
  check_depth(depth);
  switch (key.kind()) {
    case Value::Kind::kString:
      return "s" + std::to_string(key.str_ref().size()) + ":" + key.str_ref();
    case Value::Kind::kNone:
      return "n";
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return "i" + std::to_string(key.as_int());
    case Value::Kind::kFloat: {
      double f = key.as_float();
      if (std::floor(f) == f && std::fabs(f) < 9.2e18) {
        return "i" + std::to_string(static_cast<int64_t>(f));
      }
      return "f" + python_float_repr(f);
    }
    case Value::Kind::kArray:
      if (key.is_tuple()) {
        std::string id = "t(";
        for (const Value& v : key.arr()) id += dict_key_id(v, depth + 1) + ",";
        return id + ")";
      }
      break;
    default:
      break;
  }
  throw_error(fmt::format("unhashable type: '{}'", key.type_name()));
}

std::vector<Value> CallArgs::bind(std::string_view fn,
                                  std::initializer_list<std::string_view> names,
                                  std::vector<Value> defaults) const {
  std::vector<Value> out = std::move(defaults);
  out.resize(names.size());
  std::vector<bool> given(names.size(), false);
  if (positional.size() > names.size()) {
    throw_error(fmt::format("{}() takes at most {} arguments ({} given)", fn, names.size(),
                            positional.size()));
  }
  for (size_t i = 0; i < positional.size(); ++i) {
    out[i] = positional[i];
    given[i] = true;
  }
  for (const auto& [name, value] : keyword) {
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      throw_error(fmt::format("{}() got an unexpected keyword argument '{}'", fn, name));
    }
    size_t idx = static_cast<size_t>(it - names.begin());
    if (given[idx]) {
      throw_error(fmt::format("{}() got multiple values for argument '{}'", fn, name));
    }
    out[idx] = value;
    given[idx] = true;
  }
  return out;
}

bool values_equal(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str_ref() == b.str_ref();
    case Value::Kind::kArray: {
      if (a.is_tuple() != b.is_tuple() || a.arr().size() != b.arr().size()) return false;
      for (size_t i = 0; i < a.arr().size(); ++i) {
        if (!values_equal(a.arr()[i], b.arr()[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kObject: {
      if (a.identity() == b.identity()) return true;
      if (a.is_namespace() || b.is_namespace() || a.obj().size() != b.obj().size()) return false;
      for (const auto& [k, v] : a.obj().items) {
        const Value* other = b.obj().find(k);  // keys of a dict are hashable
        if (other == nullptr || !values_equal(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int values_compare(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) {
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    double x = a.as_float();
    double y = b.as_float();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str_ref().compare(b.str_ref());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    size_t n = std::min(a.arr().size(), b.arr().size());
    for (size_t i = 0; i < n; ++i) {
      if (!values_equal(a.arr()[i], b.arr()[i], depth + 1)) {
        return values_compare(a.arr()[i], b.arr()[i], depth + 1);
      }
    }
    return a.arr().size() < b.arr().size() ? -1 : (a.arr().size() > b.arr().size() ? 1 : 0);
  }
  throw_error(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(),
                          b.type_name()));
}

std::string python_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string s(buf, res.ptr);  // shortest round-trip digits, e.g. "-1.2345e+02"
  bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  size_t e = s.find('e');
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exp < 0 ? "e-" : "e+";
    int mag = exp < 0 ? -exp : exp;
    if (mag < 10) out += '0';
    out += std::to_string(mag);
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (digits.size() <= static_cast<size_t>(exp) + 1) {
    out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
          digits.substr(static_cast<size_t>(exp) + 1);
  }
  return negative ? "-" + out : out;
}

std::string python_string_repr(std::string_view s) {
  char quote = '\'';
  if (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) {
    quote = '"';
  }
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  json_dump(v, options, 0, out, 0);
  return out;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0xFFFD;
    size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c >> 5) == 0x6 || (c >> 4) == 0xE || (c >> 3) == 0x1E) {
      size_t need = (c >> 5) == 0x6 ? 2 : ((c >> 4) == 0xE ? 3 : 4);
      uint32_t v = need == 2 ? (c & 0x1F) : (need == 3 ? (c & 0x0F) : (c & 0x07));
      bool ok = i + need <= s.size();
      for (size_t k = 1; ok && k < need; ++k) {
        auto cc = static_cast<unsigned char>(s[i + k]);
        if ((cc >> 6) != 0x2) {
          ok = false;
        } else {
          v = (v << 6) | (cc & 0x3F);
        }
      }
      static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
      if (ok && v >= kMin[need] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF)) {
        cp = v;
        len = need;
      }
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) utf8_append(out, cps[i]);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace power::chat::jinja
