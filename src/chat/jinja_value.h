// Values of the Jinja-subset interpreter, with Python semantics where chat templates rely on them.
//
// A Value is undefined, none, bool, int (int64), float (double), string (UTF-8), array (list or
// tuple), object (insertion-ordered dict, or a namespace) or callable. Arrays, objects and
// callables are shared by reference like Python objects: copying a Value copies the reference,
// so `list.append` and `ns.x = ...` are seen through every alias.
// str()/repr()/tojson follow CPython (float repr, dict repr, json.dumps separators) because the
// prompt text must match what Hugging Face's jinja2 renders byte for byte.
// Errors: operations that Python would reject throw JinjaError (see jinja_error.h); they are
// caught at the Template boundary and become a Status. Thread-safety: a Value graph is owned by
// one render; values built from JSON are not shared between renders.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace power::chat::jinja {

class Value;
class Interpreter;
struct Object;
struct ArrayBox;
struct CallArgs;

using Array = std::vector<Value>;
using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kCallable
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  // A string marked safe (Python's markupsafe.Markup, from `|safe` or `|escape`): adding a
  // plain string to it HTML-escapes that string, as in jinja2.
  static Value markup(std::string s);
  static Value array(Array items = {}, bool is_tuple = false);
  static Value object();
  static Value namespace_object();
  static Value callable(std::string name, NativeFn fn);
  // Converts JSON (object key order kept). Nesting deeper than max_depth throws.
  static Value from_json(const nlohmann::ordered_json& j, int max_depth);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && tuple_; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_tuple() const { return kind_ == Kind::kArray && tuple_; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_namespace() const;
  bool is_mapping() const { return is_object() && !is_namespace(); }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double as_float() const;             // any number
  const std::string& str_ref() const;  // string value, or undefined hint
  Array& arr() const;
  Object& obj() const { return *static_cast<Object*>(ptr_.get()); }
  const Callable& fn() const { return *static_cast<const Callable*>(ptr_.get()); }
  const void* identity() const;  // container/callable pointer, nullptr for scalars

  bool truthy() const;
  std::string type_name() const;  // Python's: 'int', 'str', 'dict', 'NoneType', ...
  // Python str(): strings as-is, None -> "None", floats via repr, containers via repr.
  std::string to_str(int depth = 0) const;
  std::string repr(int depth = 0) const;

 private:
  // 32 bytes: lists of millions of values stay affordable. Strings are immutable and shared.
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;  // arrays: a tuple; strings: Markup
  union {
    int64_t i_ = 0;
    double f_;
  };
  // std::string (string, undefined hint), ArrayBox, Object or Callable, by kind_.
  std::shared_ptr<void> ptr_;

  friend struct ArrayBox;
  friend struct Object;
  // Hands this value's container references to the deferred-destruction queue (see ArrayBox).
  void release_children();
};

// Containers release their children iteratively, never recursively, so destroying a value
// nested a million levels deep (a template can build one with a loop) cannot overflow the stack.
struct ArrayBox {
  Array items;
  ArrayBox() = default;
  explicit ArrayBox(Array a) : items(std::move(a)) {}
  ArrayBox(const ArrayBox&) = delete;
  ArrayBox& operator=(const ArrayBox&) = delete;
  ~ArrayBox();
};

// Insertion-ordered dict. Keys are Values with Python's hashing rules (1, 1.0 and True are one
// key; lists and dicts cannot be keys); nearly all keys are strings, which have a fast path.
struct Object {
  std::vector<std::pair<Value, Value>> items;        // key, value
  std::map<std::string, size_t, std::less<>> index;  // string keys
  std::map<std::string, size_t> other_index;         // other keys, by dict_key_id()
  bool is_namespace = false;

  Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  ~Object();

  const Value* find(std::string_view key) const;
  const Value* find(const Value& key) const;  // throws for an unhashable key
  void set(const std::string& key, Value v);
  void set(const Value& key, Value v);
  size_t size() const { return items.size(); }
};

// Identity of a non-string dict key: equal for Python-equal keys; throws if unhashable.
std::string dict_key_id(const Value& key, int depth = 0);

// Records the containers created on this thread while it lives; on destruction it empties the
// ones still alive. Template::render holds one around each render: when the render's values are
// gone, only reference cycles (`{% set ns.me = ns %}`, a list appended to itself) keep a
// container alive, and emptying it frees the cycle, so templates cannot leak memory.
class ContainerTracker {
 public:
  ContainerTracker();
  ~ContainerTracker();
  ContainerTracker(const ContainerTracker&) = delete;
  ContainerTracker& operator=(const ContainerTracker&) = delete;

  static void track(const std::shared_ptr<void>& container, Value::Kind kind);

 private:
  std::vector<std::pair<std::weak_ptr<void>, Value::Kind>> tracked_;
  ContainerTracker* previous_;
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Binds to parameter names (Python rules: positional first, then by keyword, else default);
  // throws on an unknown keyword, a duplicate or too many positionals. `fn` names the callee.
  std::vector<Value> bind(std::string_view fn, std::initializer_list<std::string_view> names,
                          std::vector<Value> defaults) const;
};

// Python semantics shared by the interpreter and the builtins.
bool values_equal(const Value& a, const Value& b, int depth = 0);
// <0, 0, >0; throws for types Python cannot order.
int values_compare(const Value& a, const Value& b, int depth = 0);
std::string python_float_repr(double f);
std::string python_string_repr(std::string_view s);

struct JsonDumpOptions {
  int indent = -1;            // <0: none
  std::string indent_string;  // used when non-empty instead of `indent` spaces
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps; throws for undefined and callables.
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// UTF-8 helpers: strings are indexed by code point like Python's str.
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t utf8_length(std::string_view s);
bool is_python_space(uint32_t cp);

inline constexpr int kMaxValueDepth = 256;

}  // namespace power::chat::jinja
