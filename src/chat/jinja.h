// A bounded interpreter for the Jinja subset that chat templates use.
//
// Template::parse compiles template text once (syntax errors carry line and column);
// Template::render evaluates it against a JSON context (its top-level keys become template
// variables) and returns the text. Semantics follow Python's jinja2 as Hugging Face configures
// it for chat templates: trim_blocks and lstrip_blocks on, autoescape off, loop controls
// (break/continue), `raise_exception(msg)`, `strftime_now(fmt)`, and a `tojson` filter that
// matches json.dumps (ensure_ascii off, ", " and ": " separators, `indent`, `sort_keys`).
// Every render is bounded by JinjaLimits; exceeding one is a kResourceExhausted Status, never a
// crash or a hang. Errors are Status values with "line" and "column" context.
//
// Supported: {{ }}, {% %}, {# #} with -/+ whitespace control; raw; if/elif/else; for (tuple
// targets, `if` filter, else, loop.index/index0/revindex/revindex0/first/last/length/previtem/
// nextitem/cycle/depth, break/continue); set (incl. tuples, ns.attr, block set with filters);
// macro (defaults, keywords, varargs/kwargs, caller); call blocks; filter blocks; with; do;
// generation blocks. Expressions: literals (str, int, float, list, tuple, dict with any hashable
// keys, true/True/none/None), arithmetic (+ - * / // % **), ~, comparisons (chained), in/not in,
// and/or/not, is [not] <test>, inline if/else, attribute/item access, slices [a:b:c], calls.
// Values behave like Python's (str/repr/json.dumps formatting, Markup from |safe/|escape).
// The filter and test tables live in filters.cpp and globals.cpp; unknown names are parse
// errors naming them. Not supported: include/import/extends/block, recursive loops, *args
// call syntax, printf-style `%` on strings.
// Thread-safety: a parsed Template is immutable; render() may run concurrently from threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace power::chat {

struct JinjaLimits {
  uint64_t max_steps = 2'000'000;           // evaluations + statements + items + bytes/256
  int max_depth = 128;                      // nesting at parse time; macro recursion at runtime
  uint64_t max_output_bytes = 16ull << 20;  // the output, and any single string built on the way
};

namespace jinja {

struct Program;

struct RenderOptions {
  // The clock behind strftime_now(); unset means the system clock (local time).
  std::optional<std::chrono::system_clock::time_point> now;
};

class Template {
 public:
  static Result<Template> parse(std::string_view source, const JinjaLimits& limits = {});

  // `context` must be a JSON object (or null for no variables).
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderOptions& options = {}) const;

  const JinjaLimits& limits() const { return limits_; }

 private:
  Template(std::shared_ptr<const Program> program, JinjaLimits limits)
      : program_(std::move(program)), limits_(limits) {}

  std::shared_ptr<const Program> program_;
  JinjaLimits limits_;
};

}  // namespace jinja
}  // namespace power::chat
