// Statement execution and expression evaluation for the Jinja subset, plus Template's
// parse/render entry points (the only place JinjaError turns into a Status).
#include <utility>

#include "chat/jinja.h"
#include "chat/jinja_error.h"
#include "chat/jinja_interpreter.h"

namespace power::chat::jinja {

Interpreter::Interpreter(const JinjaLimits& limits, const RenderOptions& options)
    : limits_(limits), options_(options) {}

void Interpreter::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    throw_error(fmt::format("template exceeded the step limit ({} steps)", limits_.max_steps),
                StatusCode::kResourceExhausted);
  }
}

void Interpreter::charge_string(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    throw_error(fmt::format("template built a string of {} bytes, over the output limit of {}",
                            bytes, limits_.max_output_bytes),
                StatusCode::kResourceExhausted);
  }
  charge(bytes / 256);
}

void Interpreter::emit(std::string_view text) {
  std::string& out = out_.back();
  if (out.size() + text.size() > limits_.max_output_bytes) {
    throw_error(
        fmt::format("template output exceeds the limit of {} bytes", limits_.max_output_bytes),
        StatusCode::kResourceExhausted);
  }
  charge(text.size() / 256);
  out.append(text);
}

std::chrono::system_clock::time_point Interpreter::now() const {
  return options_.now ? *options_.now : std::chrono::system_clock::now();
}

std::string Interpreter::render(const Program& program, const Value& context) {
  auto globals = std::make_shared<Scope>();
  Object builtins;
  add_globals(builtins);
  for (auto& [k, v] : builtins.items) globals->set(k.str_ref(), v);
  scope_ = std::make_shared<Scope>();
  scope_->parent = globals;
  if (context.is_object()) {
    for (const auto& [k, v] : context.obj().items) scope_->set(k.to_str(), v);
  }
  top_ = scope_;
  out_.emplace_back();
  try {
    exec_body(program.body);
  } catch (JinjaError& e) {
    if (e.line == 0) {
      e.line = line_;
      e.column = column_;
    }
    throw;
  }
  return std::move(out_[0]);
}

Value Interpreter::lookup(std::string_view name) const {
  for (const Scope* s = scope_.get(); s != nullptr; s = s->parent.get()) {
    if (const Value* v = s->find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

std::string Interpreter::capture(const Body& body) {
  out_.emplace_back();
  exec_body(body);
  std::string text = std::move(out_.back());
  out_.pop_back();
  return text;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const StmtPtr& s : body) {
    Flow flow = exec(*s);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  charge(1);
  at(s.line, s.column);
  switch (s.kind) {
    case Stmt::Kind::kText:
      emit(s.text);
      break;
    case Stmt::Kind::kOutput: {
      Value v = eval(*s.expr);
      if (v.is_string()) {
        emit(v.str_ref());
      } else {
        emit(v.to_str());
      }
      break;
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.conditions.size(); ++i) {
        if (eval(*s.conditions[i]).truthy()) return exec_body(s.bodies[i]);
      }
      return exec_body(s.else_body);
    case Stmt::Kind::kFor:
      return exec_for(s);
    case Stmt::Kind::kSet:
      assign(s.target, eval(*s.expr), *scope_);
      break;
    case Stmt::Kind::kSetBlock: {
      Value v = Value::string(capture(s.bodies[0]));
      if (s.expr) v = eval_filter(*s.expr, &v);
      assign(s.target, std::move(v), *scope_);
      break;
    }
    case Stmt::Kind::kMacro:
      scope_->set(s.text, make_macro(s.params, s.bodies[0], s.text));
      break;
    case Stmt::Kind::kCallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.children[0]);
      CallArgs args = eval_args(call, 1);
      args.keyword.emplace_back("caller", make_macro(s.params, s.bodies[0], "caller"));
      at(call.line, call.column);
      emit(this->call(callee, args).to_str());
      break;
    }
    case Stmt::Kind::kFilterBlock: {
      Value text = Value::string(capture(s.bodies[0]));
      emit(eval_filter(*s.expr, &text).to_str());
      break;
    }
    case Stmt::Kind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope_;
      for (size_t i = 0; i < s.with_targets.size(); ++i) {
        assign(s.with_targets[i], eval(*s.with_values[i]), *inner);
      }
      std::shared_ptr<Scope> saved = std::exchange(scope_, inner);
      Flow flow = exec_body(s.bodies[0]);
      scope_ = std::move(saved);
      return flow;
    }
    case Stmt::Kind::kDo:
      eval(*s.expr);
      break;
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kScope:
      return exec_body(s.bodies[0]);
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Target& target, Value value, Scope& scope) {
  if (!target.attribute.empty()) {
    Value ns = lookup(target.names[0]);
    if (!ns.is_namespace()) {
      throw_error(fmt::format("cannot assign attribute '{}' on '{}': not a namespace()",
                              target.attribute, target.names[0]));
    }
    ns.obj().set(target.attribute, std::move(value));
    return;
  }
  if (!target.is_tuple) {
    scope.set(target.names[0], std::move(value));
    return;
  }
  std::vector<Value> items = iterate(value);
  if (items.size() != target.names.size()) {
    throw_error(
        fmt::format("cannot unpack {} values into {} names", items.size(), target.names.size()));
  }
  for (size_t i = 0; i < items.size(); ++i) scope.set(target.names[i], std::move(items[i]));
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
  std::vector<Value> items = iterate(eval(*s.expr));
  std::shared_ptr<Scope> outer = scope_;
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      assign(s.target, item, *scope_);
      if (eval(*s.filter).truthy()) kept.push_back(std::move(item));
    }
    scope_ = outer;
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body);
  const int64_t n = static_cast<int64_t>(items.size());
  // One loop object per loop, updated in place each iteration (jinja2's LoopContext), and one
  // scope whose variables are reset each iteration.
  auto index = std::make_shared<int64_t>(0);
  Value loop = Value::object();
  loop.obj().set("cycle", Value::callable("loop.cycle", [index](Interpreter&, CallArgs& args) {
                   if (args.positional.empty())
                     throw_error("loop.cycle() needs at least one argument");
                   return args.positional[static_cast<size_t>(*index) % args.positional.size()];
                 }));
  loop.obj().set("length", Value::integer(n));
  loop.obj().set("depth", Value::integer(1));
  loop.obj().set("depth0", Value::integer(0));
  static constexpr const char* kPerIteration[] = {"index", "index0", "revindex", "revindex0",
                                                  "first", "last",   "previtem", "nextitem"};
  const size_t base = loop.obj().size();
  for (const char* key : kPerIteration) loop.obj().set(key, Value());
  auto frame = std::make_shared<Scope>();
  frame->parent = outer;
  for (int64_t i = 0; i < n; ++i) {
    *index = i;
    auto& slot = loop.obj().items;
    slot[base + 0].second = Value::integer(i + 1);
    slot[base + 1].second = Value::integer(i);
    slot[base + 2].second = Value::integer(n - i);
    slot[base + 3].second = Value::integer(n - i - 1);
    slot[base + 4].second = Value::boolean(i == 0);
    slot[base + 5].second = Value::boolean(i == n - 1);
    slot[base + 6].second =
        i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
    slot[base + 7].second =
        i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
    frame->vars.clear();
    frame->set("loop", loop);
    assign(s.target, items[static_cast<size_t>(i)], *frame);
    scope_ = frame;
    Flow flow = exec_body(s.bodies[0]);
    scope_ = outer;
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::make_macro(const std::vector<MacroParam>& params, const Body& body,
                              std::string name) {
  // A weak reference: the macro lives in a scope it also refers to.
  std::weak_ptr<Scope> defining = scope_;
  const std::vector<MacroParam>* p = &params;
  const Body* b = &body;
  return Value::callable(name, [this, defining, p, b, name](Interpreter&, CallArgs& args) {
    if (call_depth_ >= limits_.max_depth) {
      throw_error(fmt::format("maximum recursion depth ({}) exceeded calling '{}'",
                              limits_.max_depth, name),
                  StatusCode::kResourceExhausted);
    }
    auto frame = std::make_shared<Scope>();
    std::shared_ptr<Scope> parent = defining.lock();
    frame->parent = parent ? parent : top_;
    std::vector<bool> given(p->size(), false);
    Value varargs = Value::array({}, /*is_tuple=*/true);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < p->size()) {
        frame->set((*p)[i].name, args.positional[i]);
        given[i] = true;
      } else {
        varargs.arr().push_back(args.positional[i]);
      }
    }
    Value kwargs = Value::object();
    for (auto& [k, v] : args.keyword) {
      bool matched = false;
      for (size_t i = 0; i < p->size(); ++i) {
        if ((*p)[i].name == k) {
          frame->set(k, v);
          given[i] = true;
          matched = true;
        }
      }
      if (!matched && k == "caller") {
        frame->set("caller", v);
      } else if (!matched) {
        kwargs.obj().set(k, v);
      }
    }
    frame->set("varargs", varargs);
    frame->set("kwargs", kwargs);
    std::shared_ptr<Scope> saved = std::exchange(scope_, frame);
    ++call_depth_;
    for (size_t i = 0; i < p->size(); ++i) {
      if (given[i]) continue;
      const MacroParam& param = (*p)[i];
      frame->set(param.name, param.default_value ? eval(*param.default_value)
                                                 : Value::undefined(fmt::format(
                                                       "parameter '{}' of '{}' was not provided",
                                                       param.name, name)));
    }
    std::string text = capture(*b);
    --call_depth_;
    scope_ = std::move(saved);
    return Value::string(std::move(text));
  });
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first_arg) {
  CallArgs args;
  for (size_t i = 0; i < e.n_positional; ++i) {
    args.positional.push_back(eval(*e.children[first_arg + i]));
  }
  for (size_t i = 0; i < e.keywords.size(); ++i) {
    args.keyword.emplace_back(e.keywords[i], eval(*e.children[first_arg + e.n_positional + i]));
  }
  return args;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (!callee.is_callable()) {
    if (callee.is_undefined()) {
      throw_error(callee.str_ref().empty() ? "call of an undefined value" : callee.str_ref());
    }
    throw_error(fmt::format("'{}' object is not callable", callee.type_name()));
  }
  return callee.fn().fn(*this, args);
}

Value Interpreter::eval_filter(const Expr& e, const Value* base) {
  Value v;
  const Expr* inner = e.children[0].get();
  if (inner == nullptr) {
    v = *base;
  } else if (inner->kind == Expr::Kind::kFilter && base != nullptr) {
    v = eval_filter(*inner, base);
  } else {
    v = eval(*inner);
  }
  CallArgs args = eval_args(e, 1);
  at(e.line, e.column);
  return run_filter(e.name, v, args);
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.children[0]);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.children[i + 1]);
    at(e.line, e.column);
    const std::string& op = e.ops[i];
    bool r = false;
    if (op == "==") {
      r = values_equal(left, right);
    } else if (op == "!=") {
      r = !values_equal(left, right);
    } else if (op == "in" || op == "not in") {
      r = value_contains(right, left) == (op == "in");
    } else {
      if (left.is_undefined() || right.is_undefined()) {
        const Value& u = left.is_undefined() ? left : right;
        throw_error(u.str_ref().empty() ? "comparison with an undefined value" : u.str_ref());
      }
      int c = values_compare(left, right);
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval(const Expr& e) {
  charge(1);
  at(e.line, e.column);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Array items;
      items.reserve(e.children.size());
      for (const ExprPtr& c : e.children) items.push_back(eval(*c));
      return Value::array(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Value d = Value::object();
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value k = eval(*e.children[i]);
        d.obj().set(k, eval(*e.children[i + 1]));
      }
      return d;
    }
    case Expr::Kind::kGetAttr: {
      Value obj = eval(*e.children[0]);
      at(e.line, e.column);
      return get_attr(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      Value obj = eval(*e.children[0]);
      Value key = eval(*e.children[1]);
      at(e.line, e.column);
      return get_item(obj, key);
    }
    case Expr::Kind::kSlice: {
      Value obj = eval(*e.children[0]);
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (e.children[static_cast<size_t>(i) + 1]) {
          parts[i] = eval(*e.children[static_cast<size_t>(i) + 1]);
        }
      }
      at(e.line, e.column);
      return slice_value(*this, obj, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall: {
      Value callee = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      at(e.line, e.column);
      return call(callee, args);
    }
    case Expr::Kind::kFilter:
      return eval_filter(e, nullptr);
    case Expr::Kind::kTest: {
      Value v = eval(*e.children[0]);
      CallArgs args = eval_args(e, 1);
      if (!args.keyword.empty()) throw_error("tests take no keyword arguments");
      at(e.line, e.column);
      return Value::boolean(run_test(e.name, v, args.positional) != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.children[0]);
      at(e.line, e.column);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_float()) return Value::number(e.name == "-" ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        if (e.name == "+") return Value::integer(v.as_int());
        if (v.as_int() == INT64_MIN) throw_error("integer overflow");
        return Value::integer(-v.as_int());
      }
      throw_error(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
    }
    case Expr::Kind::kBinary: {
      Value a = eval(*e.children[0]);
      Value b = eval(*e.children[1]);
      at(e.line, e.column);
      if (e.name == "~") {
        std::string s = a.to_str();
        s += b.to_str();
        charge_string(s.size());
        return Value::string(std::move(s));
      }
      return binary_op(*this, e.name, a, b);
    }
    case Expr::Kind::kAnd: {
      Value a = eval(*e.children[0]);
      return a.truthy() ? eval(*e.children[1]) : a;
    }
    case Expr::Kind::kOr: {
      Value a = eval(*e.children[0]);
      return a.truthy() ? a : eval(*e.children[1]);
    }
    case Expr::Kind::kCompare:
      return eval_compare(e);
    case Expr::Kind::kCondExpr:
      if (eval(*e.children[0]).truthy()) return eval(*e.children[1]);
      if (e.children[2]) return eval(*e.children[2]);
      return Value::undefined("the inline if-expression was false and has no else branch");
  }
  return Value::undefined();
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    throw_error(obj.str_ref().empty() ? fmt::format("undefined value has no attribute '{}'", name)
                                      : obj.str_ref());
  }
  Value method = get_method(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_object()) {
    if (const Value* v = obj.obj().find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", obj.type_name(), name));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    throw_error(obj.str_ref().empty() ? "undefined value is not subscriptable" : obj.str_ref());
  }
  if (obj.is_object() && !obj.is_namespace()) {
    const Value* v = nullptr;
    if (key.is_string()) {
      v = obj.obj().find(key.str_ref());
    } else if (!key.is_array() || key.is_tuple()) {
      try {
        v = obj.obj().find(key);
      } catch (const JinjaError&) {  // unhashable: jinja2 falls back to an attribute
      }
    }
    if (v != nullptr) return *v;
  } else if (obj.is_namespace() && key.is_string()) {
    if (const Value* v = obj.obj().find(key.str_ref())) return *v;
  }
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_array()) {
      auto n = static_cast<int64_t>(obj.arr().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.arr()[static_cast<size_t>(i)];
    } else {
      std::vector<uint32_t> cps = utf8_decode(obj.str_ref());
      auto n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        return Value::string(utf8_encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
      }
    }
    return Value::undefined(
        fmt::format("'{}' object has no element {}", obj.type_name(), key.as_int()));
  }
  if (key.is_string()) {
    Value method = get_method(obj, key.str_ref());
    if (!method.is_undefined()) return method;
  }
  return Value::undefined(
      fmt::format("'{}' object has no attribute {}", obj.type_name(), key.repr()));
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  std::vector<Value> items;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return items;
    case Value::Kind::kArray:
      items = v.arr();
      break;
    case Value::Kind::kObject:
      if (v.is_namespace()) throw_error("'Namespace' object is not iterable");
      for (const auto& kv : v.obj().items) items.push_back(kv.first);
      break;
    case Value::Kind::kString:
      for (uint32_t cp : utf8_decode(v.str_ref())) {
        std::string s;
        utf8_append(s, cp);
        items.push_back(Value::string(std::move(s)));
      }
      break;
    default:
      throw_error(fmt::format("'{}' object is not iterable", v.type_name()));
  }
  charge(items.size());
  return items;
}

bool Interpreter::run_test(std::string_view name, const Value& v, const std::vector<Value>& args) {
  return apply_test(*this, name, v, args);
}

Value Interpreter::run_filter(std::string_view name, const Value& v, CallArgs& args) {
  return apply_filter(*this, name, v, args);
}

// ---- Template ----

namespace {

Status to_status(const JinjaError& e) {
  Status st(e.code, e.message);
  if (e.line > 0) st.with("line", e.line).with("column", e.column);
  return st;
}

}  // namespace

Result<Template> Template::parse(std::string_view source, const JinjaLimits& limits) {
  try {
    std::shared_ptr<const Program> program = parse_program(tokenize(source), limits.max_depth);
    return Template(std::move(program), limits);
  } catch (const JinjaError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory while parsing the template");
  } catch (const std::exception& e) {  // a bug in Power, but never a crash of the caller
    return Status(StatusCode::kInternal, std::string("template parser failed: ") + e.what());
  }
}

Result<std::string> Template::render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options) const {
  if (!context.is_object() && !context.is_null()) {
    return Status(StatusCode::kInvalidArgument, "template context must be a JSON object");
  }
  ContainerTracker tracker;  // outlives every value of this render; frees reference cycles
  try {
    Value ctx = context.is_null() ? Value::object() : Value::from_json(context, kMaxValueDepth);
    Interpreter interpreter(limits_, options);
    return interpreter.render(*program_, ctx);
  } catch (const JinjaError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kResourceExhausted, "out of memory while rendering the template");
  } catch (const std::exception& e) {  // a bug in Power, but never a crash of the caller
    return Status(StatusCode::kInternal, std::string("template renderer failed: ") + e.what());
  }
}

}  // namespace power::chat::jinja
