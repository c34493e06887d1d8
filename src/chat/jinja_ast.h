// Tokens and syntax tree of the Jinja subset.
//
// The lexer turns template source into Tokens, applying Jinja's whitespace control exactly as
// Hugging Face configures jinja2 (trim_blocks, lstrip_blocks, `-`/`+` markers, one trailing
// newline dropped). The parser builds an immutable tree of Expr and Stmt nodes; the tree is
// shared by every render of a template and never modified after parsing, so concurrent renders
// are safe. Every node records its 1-based line and column for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace power::chat::jinja {

enum class TokenKind : uint8_t {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;  // text, name, decoded string literal or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
  int column = 0;
};

// Throws JinjaError with the position of the offending character.
std::vector<Token> tokenize(std::string_view source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,  // literal
    kName,     // name
    kList,     // children
    kTuple,    // children
    kDict,     // children: key, value, key, value, ...
    kGetAttr,  // children[0] . name
    kGetItem,  // children[0] [ children[1] ]
    kSlice,    // children[0] [ children[1] : children[2] : children[3] ] (null = omitted)
    kCall,     // children[0] ( args )
    kFilter,   // children[0] | name ( args ); children[0] null inside {% filter %}
    kTest,     // children[0] is [not] name ( args )
    kUnary,    // op children[0]: "-", "+", "not"
    kBinary,   // children[0] op children[1]: + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
    kCondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;  // name, attribute, filter/test name, or operator
  std::vector<ExprPtr> children;
  // Calls, filters and tests: children[1 .. 1+n_positional) are positional arguments, then one
  // child per keyword name.
  size_t n_positional = 0;
  std::vector<std::string> keywords;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest: "is not"
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Left-hand side of set/for: one name, a tuple of names, or `namespace.attribute`.
struct Target {
  std::vector<std::string> names;
  std::string attribute;  // non-empty: names[0].attribute
  bool is_tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conditions[i] -> bodies[i]; else_body
    kFor,          // for target in expr [if filter]: bodies[0]; else_body
    kSet,          // set target = expr
    kSetBlock,     // set target [| filter] %} bodies[0] {% endset
    kMacro,        // macro name(params) bodies[0]
    kCallBlock,    // call(params) expr: bodies[0] is the caller
    kFilterBlock,  // filter expr (a kFilter chain with null operand): bodies[0]
    kWith,         // with target = values ...: bodies[0]
    kDo,           // do expr
    kBreak,
    kContinue,
    kScope,  // generation blocks: bodies[0] rendered in place
  };
  Kind kind = Kind::kText;
  int line = 0;
  int column = 0;
  std::string text;  // kText; macro name
  ExprPtr expr;      // output, iterable, value, call, filter chain
  ExprPtr filter;    // for-loop `if` condition
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body else_body;
  Target target;
  std::vector<Target> with_targets;
  std::vector<ExprPtr> with_values;
  std::vector<MacroParam> params;
};

// A parsed template: the statement list plus the source size for diagnostics.
struct Program {
  Body body;
};

// Throws JinjaError. `max_depth` bounds nesting of blocks and expressions.
std::unique_ptr<Program> parse_program(std::vector<Token> tokens, int max_depth);

// Filter and test names the interpreter implements (checked at parse time, like jinja2).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace power::chat::jinja
