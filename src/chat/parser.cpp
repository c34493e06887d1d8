// Tokens -> syntax tree, following jinja2's grammar and operator precedence:
// condexpr < or < and < not < compare (==, in, not in, ...) < + - < ~ < * / // % < ** <
// unary - + < postfix (.x, [x], calls) with filters (|f) and tests (is t) binding tightest.
#include <utility>

#include "chat/jinja_ast.h"
#include "chat/jinja_error.h"

namespace power::chat::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : toks_(std::move(tokens)), max_depth_(max_depth) {}

  std::unique_ptr<Program> run() {
    auto program = std::make_unique<Program>();
    std::string end;
    program->body = parse_body({}, &end);
    return program;
  }

 private:
  class DepthGuard {
   public:
    DepthGuard(Parser* p, const Token& at) : p_(p) {
      if (++p_->depth_ > p_->max_depth_) {
        throw_error_at(at.line, at.column,
                       fmt::format("template nesting deeper than {} levels", p_->max_depth_),
                       StatusCode::kResourceExhausted);
      }
    }
    ~DepthGuard() { --p_->depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser* p_;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }

  [[noreturn]] void fail(const Token& t, std::string message) const {
    throw_error_at(t.line, t.column, std::move(message));
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kText:
        return "template text";
      default:
        return "'" + t.text + "'";
    }
  }

  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(std::string_view name) const {
    return cur().kind == TokenKind::kName && cur().text == name;
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
    advance();
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail(cur(), "expected a name, got " + describe(cur()));
    std::string name = cur().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) {
      fail(cur(), "expected end of statement '%}', got " + describe(cur()));
    }
    advance();
  }

  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr make_stmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // Parses statements until `{% <one of end_tags>`; leaves the position after the tag name.
  Body parse_body(std::initializer_list<std::string_view> end_tags, std::string* which) {
    DepthGuard guard(this, cur());
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kEof:
          for (std::string_view end : end_tags) {
            if (end.substr(0, 3) == "end") {
              fail(t, fmt::format("unexpected end of template; expected '{{% {} %}}'", end));
            }
          }
          return body;
        case TokenKind::kText: {
          auto s = make_stmt(Stmt::Kind::kText, t);
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = make_stmt(Stmt::Kind::kOutput, t);
          advance();
          s->expr = parse_tuple(true, false);
          if (cur().kind != TokenKind::kVarEnd) {
            fail(cur(), "expected end of print statement '}}', got " + describe(cur()));
          }
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek();
          if (name.kind != TokenKind::kName) fail(name, "expected a tag name after '{%'");
          for (std::string_view end : end_tags) {
            if (name.text == end) {
              *which = name.text;
              advance();
              advance();
              return body;
            }
          }
          advance();
          body.push_back(parse_statement(t));
          break;
        }
        default:
          fail(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement(const Token& at) {
    const Token& name_tok = cur();
    std::string tag = name_tok.text;
    advance();
    if (tag == "for") return parse_for(at);
    if (tag == "if") return parse_if(at);
    if (tag == "set") return parse_set(at);
    if (tag == "macro") return parse_macro(at);
    if (tag == "call") return parse_call_block(at);
    if (tag == "filter") return parse_filter_block(at);
    if (tag == "with") return parse_with(at);
    if (tag == "generation") {
      auto s = make_stmt(Stmt::Kind::kScope, at);
      expect_block_end();
      std::string end;
      s->bodies.push_back(parse_body({"endgeneration"}, &end));
      expect_block_end();
      return s;
    }
    if (tag == "do") {
      auto s = make_stmt(Stmt::Kind::kDo, at);
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(name_tok, fmt::format("'{}' outside of a for loop", tag));
      auto s = make_stmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, at);
      expect_block_end();
      return s;
    }
    if (tag == "include" || tag == "import" || tag == "extends" || tag == "from" ||
        tag == "block") {
      throw_error_at(name_tok.line, name_tok.column,
                     fmt::format("'{}' is not supported in chat templates", tag),
                     StatusCode::kUnsupported);
    }
    fail(name_tok, fmt::format("unknown tag '{}'", tag));
  }

  StmtPtr parse_for(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kFor, at);
    s->target = parse_target(false);
    if (!is_name("in")) fail(cur(), "expected 'in' in for loop, got " + describe(cur()));
    advance();
    s->expr = parse_tuple(false, false);
    if (is_name("if")) {
      advance();
      s->filter = parse_expression(true);
    }
    if (is_name("recursive")) {
      throw_error_at(cur().line, cur().column, "recursive for loops are not supported",
                     StatusCode::kUnsupported);
    }
    expect_block_end();
    ++loop_depth_;
    std::string end;
    s->bodies.push_back(parse_body({"endfor", "else"}, &end));
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_if(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kIf, at);
    while (true) {
      s->conditions.push_back(parse_tuple(false, false));
      expect_block_end();
      std::string end;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
      }
      expect_block_end();
      return s;
    }
  }

  // set/for/with targets: name, name.attr (set only), or a tuple of names.
  Target parse_target(bool allow_attribute) {
    Target target;
    bool paren = is_op("(");
    if (paren) advance();
    target.names.push_back(expect_name());
    if (allow_attribute && is_op(".")) {
      advance();
      target.attribute = expect_name();
      return target;
    }
    while (is_op(",")) {
      advance();
      target.is_tuple = true;
      if (cur().kind != TokenKind::kName || cur().text == "in") break;
      target.names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return target;
  }

  StmtPtr parse_set(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kSet, at);
    s->target = parse_target(true);
    if (is_op("=")) {
      advance();
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    s->kind = Stmt::Kind::kSetBlock;
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    std::string end;
    s->bodies.push_back(parse_body({"endset"}, &end));
    expect_block_end();
    return s;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (is_op("=")) {
        advance();
        p.default_value = parse_expression(true);
      }
      params.push_back(std::move(p));
    }
    advance();
    return params;
  }

  StmtPtr parse_macro(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kMacro, at);
    s->text = expect_name();
    s->params = parse_params();
    expect_block_end();
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s->bodies.push_back(parse_body({"endmacro"}, &end));
    loop_depth_ = saved_loop_depth;
    if (cur().kind == TokenKind::kName) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kCallBlock, at);
    if (is_op("(")) s->params = parse_params();
    const Token& call_at = cur();
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::kCall) fail(call_at, "expected a call after '{% call'");
    expect_block_end();
    std::string end;
    s->bodies.push_back(parse_body({"endcall"}, &end));
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kFilterBlock, at);
    s->expr = parse_filter_chain(nullptr, /*first_without_pipe=*/true);
    expect_block_end();
    std::string end;
    s->bodies.push_back(parse_body({"endfilter"}, &end));
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(const Token& at) {
    auto s = make_stmt(Stmt::Kind::kWith, at);
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->with_targets.empty()) expect_op(",");
      s->with_targets.push_back(parse_target(false));
      expect_op("=");
      s->with_values.push_back(parse_expression(true));
    }
    expect_block_end();
    std::string end;
    s->bodies.push_back(parse_body({"endwith"}, &end));
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  bool at_tuple_end() const {
    const Token& t = cur();
    return t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd ||
           t.kind == TokenKind::kEof || (t.kind == TokenKind::kOp && t.text == ")") ||
           (t.kind == TokenKind::kName && (t.text == "if" || t.text == "in"));
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (!items.empty() && at_tuple_end()) break;
      if (items.empty() && explicit_parens && is_op(")")) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(at, "expected an expression, got " + describe(at));
    }
    auto e = make(Expr::Kind::kTuple, at);
    e->children = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this, cur());
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      auto e = make(Expr::Kind::kCondExpr, cur());
      advance();
      e->children.push_back(parse_or());
      e->children.push_back(std::move(expr));
      if (is_name("else")) {
        advance();
        e->children.push_back(parse_expression(true));
      } else {
        e->children.push_back(nullptr);
      }
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(Expr::Kind kind, const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make(kind, at);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      advance();
      left = binary(Expr::Kind::kOr, at, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      advance();
      left = binary(Expr::Kind::kAnd, at, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this, cur());
      auto e = make(Expr::Kind::kUnary, cur());
      e->name = "not";
      advance();
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      const Token& t = cur();
      if (t.kind == TokenKind::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                       t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, at);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      std::string op = at.text;
      advance();
      left = binary(Expr::Kind::kBinary, at, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& at = cur();
      advance();
      left = binary(Expr::Kind::kBinary, at, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      std::string op = at.text;
      advance();
      left = binary(Expr::Kind::kBinary, at, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      advance();
      left = binary(Expr::Kind::kBinary, at, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this, cur());
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(Expr::Kind::kUnary, cur());
      node->name = cur().text;
      advance();
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.kind == TokenKind::kName) {
      auto e = make(Expr::Kind::kLiteral, t);
      if (t.text == "true" || t.text == "True") {
        e->literal = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::none();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.kind == TokenKind::kString) {
      auto e = make(Expr::Kind::kLiteral, t);
      std::string s;
      while (cur().kind == TokenKind::kString) {
        s += cur().text;
        advance();
      }
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) {
      auto e = make(Expr::Kind::kLiteral, t);
      e->literal =
          t.kind == TokenKind::kInt ? Value::integer(t.int_value) : Value::number(t.float_value);
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(Expr::Kind::kList, t);
      advance();
      while (!is_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("]")) break;
        e->children.push_back(parse_expression(true));
      }
      advance();
      return e;
    }
    if (is_op("{")) {
      auto e = make(Expr::Kind::kDict, t);
      advance();
      while (!is_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("}")) break;
        e->children.push_back(parse_expression(true));
        expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      advance();
      return e;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const Token& at = cur();
      if (is_op(".")) {
        advance();
        if (cur().kind == TokenKind::kInt) {
          auto e = make(Expr::Kind::kGetItem, at);
          auto index = make(Expr::Kind::kLiteral, cur());
          index->literal = Value::integer(cur().int_value);
          advance();
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index));
          node = std::move(e);
        } else {
          auto e = make(Expr::Kind::kGetAttr, at);
          e->name = expect_name();
          e->children.push_back(std::move(node));
          node = std::move(e);
        }
      } else if (is_op("[")) {
        advance();
        node = parse_subscript(std::move(node), at);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node, const Token& at) {
    ExprPtr start;
    if (!is_op(":")) start = parse_tuple(true, false);
    if (!is_op(":")) {
      expect_op("]");
      auto e = make(Expr::Kind::kGetItem, at);
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(start));
      return e;
    }
    auto e = make(Expr::Kind::kSlice, at);
    e->children.push_back(std::move(node));
    e->children.push_back(std::move(start));
    advance();  // ':'
    e->children.push_back(is_op(":") || is_op("]") ? nullptr : parse_expression(true));
    if (is_op(":")) {
      advance();
      e->children.push_back(is_op("]") ? nullptr : parse_expression(true));
    } else {
      e->children.push_back(nullptr);
    }
    expect_op("]");
    return e;
  }

  // Parses "( args )" into e (children[0] already set).
  void parse_args(Expr* e) {
    expect_op("(");
    std::vector<ExprPtr> keyword_values;
    while (!is_op(")")) {
      if (e->n_positional + keyword_values.size() > 0) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) {
        throw_error_at(cur().line, cur().column, "*args and **kwargs calls are not supported",
                       StatusCode::kUnsupported);
      }
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOp && peek().text == "=") {
        e->keywords.push_back(cur().text);
        advance();
        advance();
        keyword_values.push_back(parse_expression(true));
      } else {
        if (!keyword_values.empty()) fail(cur(), "positional argument follows keyword argument");
        e->children.push_back(parse_expression(true));
        ++e->n_positional;
      }
    }
    advance();
    for (auto& v : keyword_values) e->children.push_back(std::move(v));
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, cur());
    e->children.push_back(std::move(callee));
    parse_args(e.get());
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      advance();
      name += "." + expect_name();
    }
    return name;
  }

  // One or more filters applied to `operand` (null for {% filter %} / {% set x | f %}).
  ExprPtr parse_filter_chain(ExprPtr operand, bool first_without_pipe = false) {
    bool first = true;
    while (is_op("|") || (first && first_without_pipe)) {
      if (!(first && first_without_pipe)) advance();
      first = false;
      const Token& at = cur();
      auto e = make(Expr::Kind::kFilter, at);
      e->name = parse_dotted_name();
      if (!is_known_filter(e->name)) fail(at, fmt::format("unknown filter '{}'", e->name));
      e->children.push_back(std::move(operand));
      if (is_op("(")) parse_args(e.get());
      operand = std::move(e);
    }
    return operand;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    advance();  // 'is'
    auto e = make(Expr::Kind::kTest, cur());
    if (is_name("not")) {
      e->negated = true;
      advance();
    }
    const Token& at = cur();
    e->name = parse_dotted_name();
    if (!is_known_test(e->name)) fail(at, fmt::format("unknown test '{}'", e->name));
    e->children.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_args(e.get());
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat || is_op("[") ||
                is_op("{")) &&
               !(t.kind == TokenKind::kName &&
                 (t.text == "else" || t.text == "or" || t.text == "and" || t.text == "if" ||
                  t.text == "in" || t.text == "not"))) {
      if (is_name("is")) fail(t, "you cannot chain multiple tests with 'is'");
      e->children.push_back(parse_postfix(parse_primary()));
      e->n_positional = 1;
    }
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse_program(std::vector<Token> tokens, int max_depth) {
  return Parser(std::move(tokens), max_depth).run();
}

}  // namespace power::chat::jinja
