// Tokenizer: special-token matching around the per-model encoders, decoding, streaming.
#include "text/tokenizer.h"

#include "format/gguf.h"
#include "text/utf8.h"
#include "text/vocab.h"

namespace power::text {
namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// A stretch of the input: plain text [begin, end), or one special token.
struct Fragment {
  size_t begin;
  size_t end;
  TokenId token;  // kNoToken for plain text
};

// Splits the special tokens out of the text, longest token text first: each token in turn is
// found in every stretch of plain text that is left (llama.cpp's order, so results agree
// when token texts overlap). Strip attributes also remove ASCII whitespace next to a match.
std::vector<Fragment> split_special(const TokenizerImpl& v, std::string_view text,
                                    bool parse_special) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({0, text.size(), kNoToken});
  std::vector<Fragment> next;
  for (TokenId id : v.partition_order) {
    const TokenData& token = v.tokens[id];
    if (!parse_special && (token.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = token.text;
    bool found = false;
    for (const Fragment& f : fragments) {
      if (f.token == kNoToken &&
          text.substr(f.begin, f.end - f.begin).find(needle) != std::string_view::npos) {
        found = true;
        break;
      }
    }
    if (!found) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      const std::string_view region = text.substr(0, f.end);
      size_t cur = f.begin;
      while (cur < f.end) {
        const size_t hit = region.find(needle, cur);
        if (hit == std::string_view::npos) break;
        size_t left_end = hit;
        if (token.attr & kAttrLstrip) {
          while (left_end > cur && is_ascii_space(text[left_end - 1])) --left_end;
        }
        if (left_end > cur) next.push_back({cur, left_end, kNoToken});
        next.push_back({hit, hit + needle.size(), id});
        cur = hit + needle.size();
        if (token.attr & kAttrRstrip) {
          while (cur < f.end && is_ascii_space(text[cur])) ++cur;
        }
      }
      if (cur < f.end) next.push_back({cur, f.end, kNoToken});
    }
    fragments.swap(next);
  }
  return fragments;
}

bool is_special_attr(uint32_t attr) {
  return (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) != 0;
}

// llama.cpp's clean_up_tokenization_spaces: " ?"/" !"/" ."/" ," lose the space, a lone
// " ' " loses both spaces, and " 's", " 'm", " 're", " 've" lose the space before the
// apostrophe.
std::string clean_up_spaces(std::string_view in) {
  std::string a;
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    const bool punct = x == '?' || x == '!' || x == '.' || x == ',';
    if (i > 0 && punct && in[i - 1] == ' ' && !a.empty() && a.back() == ' ') a.pop_back();
    a.push_back(x);
  }
  std::string b;
  bool prev_dropped = false;  // the character before i was a space removed after an apostrophe
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && !prev_dropped &&
        a[i + 1] == ' ') {
      b.pop_back();
      b.push_back(x);
      ++i;  // skip the space after the apostrophe
      prev_dropped = true;
      continue;
    }
    prev_dropped = false;
    b.push_back(x);
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      const char x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      const bool drop =
          x1 == 's' || x1 == 'm' || (i + 2 < b.size() && x2 == 'e' && (x1 == 'r' || x1 == 'v'));
      if (drop && !c.empty()) c.pop_back();
    }
    c.push_back(x);
  }
  return c;
}

}  // namespace

std::string_view tokenizer_model_name(TokenizerModel model) {
  switch (model) {
    case TokenizerModel::kSpm:
      return "spm";
    case TokenizerModel::kBpe:
      return "bpe";
    case TokenizerModel::kWpm:
      return "wpm";
  }
  return "unknown";
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(const TokenizerSpec& spec) {
  POWER_ASSIGN_OR_RETURN(auto impl, build_vocab(spec));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  POWER_ASSIGN_OR_RETURN(TokenizerSpec spec, tokenizer_spec_from_gguf(file));
  return create(spec);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const TokenizerImpl& v = *impl_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  const std::vector<Fragment> fragments = split_special(v, text, options.parse_special);
  const bool add_bos = options.add_special &&
                       (v.model == TokenizerModel::kWpm ? v.special.bos != kNoToken : v.add_bos);
  if (add_bos) out.push_back(v.special.bos);
  bool after_special = true;  // SPM: the start of the text counts as "after a special token"
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view piece = text.substr(f.begin, f.end - f.begin);
    switch (v.model) {
      case TokenizerModel::kSpm:
        spm_encode(v, piece, v.add_space_prefix && after_special, out);
        break;
      case TokenizerModel::kBpe:
        bpe_encode(v, piece, out);
        break;
      case TokenizerModel::kWpm:
        wpm_encode(v, piece, out);
        break;
    }
    after_special = false;
  }
  if (options.add_special) {
    if (v.model == TokenizerModel::kWpm) {
      if (v.special.sep != kNoToken) out.push_back(v.special.sep);
    } else if (v.add_eos) {
      out.push_back(v.special.eos);
    }
  }
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids,
                                      const DecodeOptions& options) const {
  const TokenizerImpl& v = *impl_;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!v.valid(ids[i])) {
      return make_error(StatusCode::kInvalidArgument, "token id {} is outside the vocabulary",
                        ids[i])
          .with("position", i)
          .with("n_tokens", v.tokens.size());
    }
  }
  const bool spm_prefix = v.model == TokenizerModel::kSpm && v.add_space_prefix;
  const bool wpm = v.model == TokenizerModel::kWpm;
  std::string out;
  bool strip_next = options.strip_space_prefix && (spm_prefix || wpm);
  for (TokenId id : ids) {
    const TokenData& token = v.tokens[id];
    if (is_special_attr(token.attr)) {
      const bool shown = options.render_special || (token.attr & kAttrUserDefined);
      if (shown) {
        if (wpm && !out.empty()) out.push_back(' ');
        out.append(token.text);
      }
      if (spm_prefix) strip_next = options.strip_space_prefix;
      continue;
    }
    std::string_view piece = v.pieces[id];
    if (strip_next && (!wpm || out.empty()) && !piece.empty() && piece.front() == ' ') {
      piece.remove_prefix(1);
    }
    strip_next = false;
    out.append(piece);
  }
  if (options.clean_spaces && v.clean_spaces) return clean_up_spaces(out);
  return out;
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  const TokenizerImpl& v = *impl_;
  if (!v.valid(id)) return {};
  const TokenData& token = v.tokens[id];
  if (render_special && (token.attr & (kAttrControl | kAttrUnknown))) return token.text;
  return v.pieces[id];
}

TokenizerModel Tokenizer::model() const {
  return impl_->model;
}
std::string_view Tokenizer::pre_tokenizer() const {
  return impl_->pre_name;
}
size_t Tokenizer::n_tokens() const {
  return impl_->tokens.size();
}
const std::string& Tokenizer::token_text(TokenId id) const {
  return impl_->tokens.at(id).text;
}
float Tokenizer::token_score(TokenId id) const {
  return impl_->tokens.at(id).score;
}
uint32_t Tokenizer::token_attr(TokenId id) const {
  return impl_->tokens.at(id).attr;
}
std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  const TokenId id = impl_->find(text);
  return id == kNoToken ? std::nullopt : std::optional<TokenId>(id);
}
bool Tokenizer::is_control(TokenId id) const {
  return is_valid(id) && (impl_->tokens[id].attr & kAttrControl) != 0;
}
bool Tokenizer::is_eog(TokenId id) const {
  return is_valid(id) && impl_->eog[id] != 0;
}
const SpecialTokens& Tokenizer::special() const {
  return impl_->special;
}
bool Tokenizer::add_bos() const {
  return impl_->add_bos;
}
bool Tokenizer::add_eos() const {
  return impl_->add_eos;
}
bool Tokenizer::add_space_prefix() const {
  return impl_->add_space_prefix;
}
bool Tokenizer::clean_spaces() const {
  return impl_->clean_spaces;
}

// ---- streaming ----

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, StreamOptions options)
    : tokenizer_(tokenizer), options_(options) {
  reset();
}

void StreamingDetokenizer::reset() {
  const TokenizerImpl& v = *tokenizer_.impl_;
  pending_.clear();
  const bool strips =
      (v.model == TokenizerModel::kSpm && v.add_space_prefix) || v.model == TokenizerModel::kWpm;
  strip_next_ = options_.at_sequence_start && strips;
}

Status StreamingDetokenizer::push(TokenId id, std::string& out) {
  const TokenizerImpl& v = *tokenizer_.impl_;
  if (!v.valid(id)) {
    return make_error(StatusCode::kInvalidArgument, "token id {} is outside the vocabulary", id)
        .with("n_tokens", v.tokens.size());
  }
  const TokenData& token = v.tokens[id];
  if (is_special_attr(token.attr)) {
    if (options_.render_special || (token.attr & kAttrUserDefined)) pending_.append(token.text);
    if (v.model == TokenizerModel::kSpm && v.add_space_prefix) strip_next_ = true;
  } else {
    std::string_view piece = v.pieces[id];
    if (strip_next_ && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    strip_next_ = false;
    pending_.append(piece);
  }
  emit_complete(out);
  return {};
}

void StreamingDetokenizer::emit_complete(std::string& out) {
  size_t pos = 0;
  while (pos < pending_.size()) {
    size_t len = 0;
    const Utf8Prefix kind = utf8_classify_prefix(pending_, pos, &len);
    if (kind == Utf8Prefix::kIncomplete) break;  // wait for the rest of the character
    if (kind == Utf8Prefix::kInvalid) {
      utf8_append(out, kReplacementChar);
      ++pos;
      continue;
    }
    out.append(pending_, pos, len);
    pos += len;
  }
  pending_.erase(0, pos);
}

void StreamingDetokenizer::finish(std::string& out) {
  for (size_t i = 0; i < pending_.size(); ++i) utf8_append(out, kReplacementChar);
  pending_.clear();
}

}  // namespace power::text
