// jinja2's tests (`is defined`, `is string`, ...) and the global functions chat templates
// call: range, dict, namespace, raise_exception, strftime_now.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"

namespace power::chat::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, const std::vector<Value>&);

bool t_defined(Interpreter&, const Value& v, const std::vector<Value>&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_float();
}
bool t_number(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_mapping();
}
bool t_callable(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_callable();
}
bool t_iterable(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_mapping();
}
bool t_sequence(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() || v.is_array() || v.is_mapping();
}
bool t_escaped(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_markup();
}

const Value& test_arg(const std::vector<Value>& args, std::string_view test) {
  if (args.size() != 1) throw_error(fmt::format("test '{}' takes one argument", test));
  return args[0];
}
bool t_eq(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return values_equal(v, test_arg(a, "eq"));
}
bool t_ne(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return !values_equal(v, test_arg(a, "ne"));
}
bool t_lt(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return values_compare(v, test_arg(a, "lt")) < 0;
}
bool t_le(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return values_compare(v, test_arg(a, "le")) <= 0;
}
bool t_gt(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return values_compare(v, test_arg(a, "gt")) > 0;
}
bool t_ge(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return values_compare(v, test_arg(a, "ge")) >= 0;
}
bool t_in(Interpreter&, const Value& v, const std::vector<Value>& a) {
  return value_contains(test_arg(a, "in"), v);
}
bool t_sameas(Interpreter&, const Value& v, const std::vector<Value>& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.identity() != nullptr || o.identity() != nullptr) return v.identity() == o.identity();
  return v.kind() == o.kind() && values_equal(v, o);
}
bool t_even(Interpreter&, const Value& v, const std::vector<Value>&) {
  if (!v.is_int()) throw_error("test 'even' needs an integer");
  return v.as_int() % 2 == 0;
}
bool t_odd(Interpreter&, const Value& v, const std::vector<Value>&) {
  if (!v.is_int()) throw_error("test 'odd' needs an integer");
  return v.as_int() % 2 != 0;
}
bool t_divisibleby(Interpreter&, const Value& v, const std::vector<Value>& a) {
  const Value& d = test_arg(a, "divisibleby");
  if (!v.is_int() || !d.is_int() || d.as_int() == 0)
    throw_error("divisibleby needs non-zero integers");
  return v.as_int() % d.as_int() == 0;
}
bool t_lower(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && ascii_lower(v.str_ref()) == v.str_ref() &&
         ascii_upper(v.str_ref()) != v.str_ref();
}
bool t_upper(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && ascii_upper(v.str_ref()) == v.str_ref() &&
         ascii_lower(v.str_ref()) != v.str_ref();
}
bool t_filter(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && is_known_filter(v.str_ref());
}
bool t_test(Interpreter&, const Value& v, const std::vector<Value>&) {
  return v.is_string() && is_known_test(v.str_ref());
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

template <typename Table>
auto find_entry(const Table& table, std::string_view name) -> decltype(&table[0]) {
  for (const auto& e : table) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Value g_range(Interpreter& in, CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    throw_error("range() takes 1 to 3 integer arguments");
  }
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) throw_error("range() arguments must be integers");
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  if (step == 0) throw_error("range() arg 3 must not be zero");
  long double count_ld = (static_cast<long double>(stop) - start) / step;
  uint64_t count = count_ld <= 0 ? 0 : static_cast<uint64_t>(std::ceil(count_ld));
  in.charge(count);  // throws before allocating anything huge
  Array out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i)
    out.push_back(Value::integer(start + static_cast<int64_t>(i) * step));
  return Value::array(std::move(out));
}

Value g_dict(Interpreter&, CallArgs& args) {
  Value d = Value::object();
  for (const Value& p : args.positional) {
    if (!p.is_mapping()) throw_error("dict() positional argument must be a mapping");
    for (const auto& [k, v] : p.obj().items) d.obj().set(k, v);
  }
  for (const auto& [k, v] : args.keyword) d.obj().set(k, v);
  return d;
}

Value g_namespace(Interpreter& in, CallArgs& args) {
  Value ns = Value::namespace_object();
  Value init = g_dict(in, args);
  for (const auto& [k, v] : init.obj().items) ns.obj().set(k, v);
  return ns;
}

Value g_raise_exception(Interpreter&, CallArgs& args) {
  std::string message = args.positional.empty() ? std::string() : args.positional[0].to_str();
  throw_error("template raised an exception: " + message);
}

Value g_strftime_now(Interpreter& in, CallArgs& args) {
  auto a = args.bind("strftime_now", {"format"}, {});
  std::string format = a[0].to_str();
  if (format.size() > 256) throw_error("strftime_now(): format too long");
  std::time_t t = std::chrono::system_clock::to_time_t(in.now());
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[1024];
  size_t n = format.empty() ? 0 : std::strftime(buf, sizeof(buf), format.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

bool is_known_test(std::string_view name) {
  return find_entry(kTests, name) != nullptr;
}

bool apply_test(Interpreter& in, std::string_view name, const Value& v,
                const std::vector<Value>& args) {
  const TestEntry* t = find_entry(kTests, name);
  if (t == nullptr) throw_error(fmt::format("unknown test '{}'", name));
  return t->fn(in, v, args);
}

void add_globals(Object& globals) {
  globals.set("range", Value::callable("range", g_range));
  globals.set("dict", Value::callable("dict", g_dict));
  globals.set("namespace", Value::callable("namespace", g_namespace));
  globals.set("raise_exception", Value::callable("raise_exception", g_raise_exception));
  globals.set("strftime_now", Value::callable("strftime_now", g_strftime_now));
}

}  // namespace power::chat::jinja
