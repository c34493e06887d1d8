// Template source -> tokens, with jinja2's whitespace control under trim_blocks and
// lstrip_blocks (the settings Hugging Face renders chat templates with).
#include <algorithm>
#include <cstring>

#include "chat/jinja_ast.h"
#include "chat/jinja_error.h"

namespace power::chat::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // jinja2: \r\n and \r become \n, and one trailing newline is dropped.
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_ += '\n';
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_ += raw[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    check_utf8();
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t p = find_tag(pos);
      if (p == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      char type = src_[p + 1];  // '{', '%' or '#'
      char sign = p + 2 < src_.size() ? src_[p + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string text = src_.substr(pos, p - pos);
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: drop spaces/tabs between the start of the line and a block or comment.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(l_pos), text.end(), is_space)) {
          text.resize(l_pos);
        }
      }
      emit_text(text, pos);
      size_t body = p + 2 + (sign != '\0' ? 1 : 0);
      if (type == '#') {
        pos = lex_comment(p, body, &line_starting);
      } else if (type == '%' && is_raw_begin(body)) {
        pos = lex_raw(p, body, &line_starting);
      } else {
        pos = lex_tag(p, body, type == '%', &line_starting);
      }
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    position(src_.size(), &eof.line, &eof.column);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  void position(size_t offset, int* line, int* column) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<int>(idx + 1);
    *column = static_cast<int>(offset - line_starts_[idx] + 1);
  }

  [[noreturn]] void fail(size_t offset, std::string message) const {
    int line = 0;
    int column = 0;
    position(offset, &line, &column);
    throw_error_at(line, column, std::move(message));
  }

  void check_utf8() const {
    std::vector<uint32_t> cps = utf8_decode(src_);
    size_t offset = 0;
    for (uint32_t cp : cps) {
      if (cp == 0xFFFD && !(src_.compare(offset, 3, "\xEF\xBF\xBD") == 0)) {
        fail(offset, "template is not valid UTF-8");
      }
      offset += cp < 0x80 ? 1 : (cp < 0x800 ? 2 : (cp < 0x10000 ? 3 : 4));
    }
  }

  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    position(offset, &t.line, &t.column);
    tokens_.push_back(std::move(t));
  }

  // After a block/comment end: `-` strips all following whitespace, `+` keeps it, otherwise
  // trim_blocks removes one newline. Returns the new position.
  size_t after_end(size_t pos, char sign, bool trim, bool* line_starting) {
    size_t start = pos;
    if (sign == '-') {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (trim && sign != '+' && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    // jinja2 tracks whether the end token's match ended with a newline.
    *line_starting = pos > start ? src_[pos - 1] == '\n' : false;
    return pos;
  }

  size_t lex_comment(size_t tag, size_t body, bool* line_starting) {
    size_t q = src_.find("#}", body);
    if (q == std::string::npos) fail(tag, "unclosed comment: missing '#}'");
    char sign = q > body && (src_[q - 1] == '-' || src_[q - 1] == '+') ? src_[q - 1] : '\0';
    return after_end(q + 2, sign, true, line_starting);
  }

  bool is_raw_begin(size_t body) const {
    size_t p = body;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  size_t lex_raw(size_t tag, size_t body, bool* line_starting) {
    size_t p = src_.find("raw", body) + 3;
    while (is_space(src_[p])) ++p;
    char open_sign = src_[p] == '-' ? '-' : '\0';
    p = after_end(p + (open_sign ? 3 : 2), open_sign, false, line_starting);
    size_t search = p;
    while (true) {
      size_t q = src_.find("{%", search);
      if (q == std::string::npos) fail(tag, "missing {% endraw %}");
      size_t r = q + 2;
      char sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : '\0';
      if (sign) ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) {
        search = q + 2;
        continue;
      }
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      char end_sign = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) fail(q, "malformed {% endraw %}");
      std::string text = src_.substr(p, q - p);
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      emit_text(text, p);
      return after_end(r + 2, end_sign, true, line_starting);
    }
  }

  size_t lex_tag(size_t tag, size_t pos, bool block, bool* line_starting) {
    Token begin;
    begin.kind = block ? TokenKind::kBlockBegin : TokenKind::kVarBegin;
    position(tag, &begin.line, &begin.column);
    tokens_.push_back(begin);
    std::vector<char> balance;
    while (true) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) {
        fail(tag, block ? "unexpected end of template: missing '%}'"
                        : "unexpected end of template: missing '}}'");
      }
      if (balance.empty()) {
        char sign = src_[pos] == '-' || src_[pos] == '+' ? src_[pos] : '\0';
        size_t at = pos + (sign ? 1 : 0);
        const char* end = block ? "%}" : "}}";
        if (src_.compare(at, 2, end) == 0 && !(sign == '+' && !block)) {
          Token t;
          t.kind = block ? TokenKind::kBlockEnd : TokenKind::kVarEnd;
          position(pos, &t.line, &t.column);
          tokens_.push_back(t);
          return after_end(at + 2, sign, block, line_starting);
        }
      }
      pos = lex_expression_token(pos, &balance);
    }
  }

  size_t lex_expression_token(size_t pos, std::vector<char>* balance) {
    Token t;
    position(pos, &t.line, &t.column);
    char c = src_[pos];
    if (is_name_start(c)) {
      size_t end = pos;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      t.kind = TokenKind::kName;
      t.text = src_.substr(pos, end - pos);
      tokens_.push_back(std::move(t));
      return end;
    }
    if (is_digit(c)) return lex_number(pos, std::move(t));
    if (c == '\'' || c == '"') return lex_string(pos, std::move(t));
    static const char* kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(pos, 2, op) == 0) {
        t.kind = TokenKind::kOp;
        t.text = op;
        tokens_.push_back(std::move(t));
        return pos + 2;
      }
    }
    if (std::strchr("+-/*%~[](){}=.:|,;<>", c) == nullptr) {
      fail(pos, fmt::format("unexpected character '{}'", c));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) fail(pos, fmt::format("unexpected '{}'", c));
      if (balance->back() != c) {
        fail(pos, fmt::format("unexpected '{}', expected '{}'", c, balance->back()));
      }
      balance->pop_back();
    }
    t.kind = TokenKind::kOp;
    t.text = std::string(1, c);
    tokens_.push_back(std::move(t));
    return pos + 1;
  }

  size_t lex_number(size_t pos, Token t) {
    size_t end = pos;
    auto digits = [&] {
      while (end < src_.size() && (is_digit(src_[end]) || src_[end] == '_')) ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(pos, "integer literal out of range");
      t.int_value = v;
    }
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
    return end;
  }

  // Python string literal escapes (jinja2 decodes literals with "unicode-escape").
  size_t lex_string(size_t pos, Token t) {
    char quote = src_[pos];
    std::string out;
    size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) fail(pos, "unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        out += c;
        ++i;
        continue;
      }
      char n = src_[i + 1];
      i += 2;
      switch (n) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t len = n == 'x' ? 2 : (n == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0) fail(i - 2, "truncated \\x/\\u escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10FFFF) fail(i - 2, "invalid unicode escape in string literal");
          utf8_append(out, cp);
          i += len;
          break;
        }
        default:
          if (n >= '0' && n <= '7') {
            uint32_t cp = static_cast<uint32_t>(n - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[i++] - '0');
            }
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += n;
          }
      }
    }
    t.kind = TokenKind::kString;
    t.text = std::move(out);
    tokens_.push_back(std::move(t));
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace power::chat::jinja
