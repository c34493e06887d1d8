// The tree-walking interpreter behind jinja::Template::render, and the hooks builtins use.
//
// One Interpreter renders one template once: it owns the scopes, the output buffers and the
// budget counters (steps, macro depth, bytes), so renders never share mutable state. Every
// expression evaluated and statement executed costs one step; creating list elements costs one
// step each and creating strings one step per 256 bytes, so a render's work and the memory it
// can build are bounded by max_steps (and any one string by max_output_bytes). Real templates
// need about 100 steps per message. Exceeding a limit throws a JinjaError with
// code kResourceExhausted. Variable lookup follows jinja2: each for-loop iteration and macro
// call opens a scope, `set` binds in the innermost scope, namespaces are shared objects.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace power::chat::jinja {

// Variables of one scope. Scopes hold a handful of names, so a flat vector beats a map.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const auto& kv : vars) {
      if (kv.first == name) return &kv.second;
    }
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    for (auto& kv : vars) {
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(v));
  }
};

class Interpreter {
 public:
  Interpreter(const JinjaLimits& limits, const RenderOptions& options);

  // Renders the program with `context` (an object) as the template's variables.
  std::string render(const Program& program, const Value& context);

  // ---- hooks for builtins ----
  void charge(uint64_t steps);
  // Charges for a new string of `bytes` and rejects one larger than max_output_bytes.
  void charge_string(size_t bytes);
  Value call(const Value& callee, CallArgs& args);
  // jinja2 environment.getattr (attribute, then item) and getitem (item, then attribute).
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  // Items a for loop would visit: list items, dict keys, string characters; undefined -> none.
  std::vector<Value> iterate(const Value& v);
  bool run_test(std::string_view name, const Value& v, const std::vector<Value>& args);
  Value run_filter(std::string_view name, const Value& v, CallArgs& args);
  std::chrono::system_clock::time_point now() const;
  const JinjaLimits& limits() const { return limits_; }

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void exec_set(const Stmt& s, Value value);
  void assign(const Target& target, Value value, Scope& scope);
  Value make_macro(const std::vector<MacroParam>& params, const Body& body, std::string name);
  Value eval(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e, const Value* operand);
  Value eval_compare(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first_arg);
  Value lookup(std::string_view name) const;
  std::string capture(const Body& body);
  void emit(std::string_view text);
  void at(int line, int column) {
    line_ = line;
    column_ = column;
  }

  JinjaLimits limits_;
  RenderOptions options_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  int column_ = 0;
  std::shared_ptr<Scope> scope_;
  std::shared_ptr<Scope> top_;    // the template's own variables
  std::vector<std::string> out_;  // output buffers: [0] is the template's, others captures
};

// Builtins (filters.cpp, globals.cpp, methods.cpp, ops.cpp).
Value apply_filter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& v,
                const std::vector<Value>& args);
void add_globals(Object& globals);
// A bound method (`"a,b".split`, `d.items`, `l.append`), or undefined when `obj` has none.
Value get_method(const Value& obj, std::string_view name);
Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);
bool value_contains(const Value& container, const Value& item);
Value slice_value(Interpreter& in, const Value& v, const Value& start, const Value& stop,
                  const Value& step);
// Python str.strip/lstrip/rstrip; `chars` undefined/none strips whitespace.
std::string strip_string(const std::string& s, const Value& chars, bool left, bool right);
std::string ascii_lower(std::string s);
// markupsafe.escape: & < > " ' become entities.
std::string html_escape(std::string_view s);
std::string ascii_upper(std::string s);

}  // namespace power::chat::jinja
