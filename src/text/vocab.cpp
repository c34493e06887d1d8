// Building a vocabulary from tokenizer.ggml.* metadata: defaults per model, special tokens,
// attributes, byte tokens, BPE merge tables and the token_to_piece cache.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>

#include "base/log.h"
#include "format/gguf.h"
#include "text/unicode.h"
#include "text/utf8.h"
#include "text/vocab.h"

namespace power::text {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SPM's visible space

uint32_t attr_from_type(int32_t type) {
  switch (static_cast<GgufTokenType>(type)) {
    case GgufTokenType::kNormal:
      return kAttrNormal;
    case GgufTokenType::kUnknown:
      return kAttrUnknown;
    case GgufTokenType::kControl:
      return kAttrControl;
    case GgufTokenType::kUserDefined:
      return kAttrUserDefined;
    case GgufTokenType::kUnused:
      return kAttrUnused;
    case GgufTokenType::kByte:
      return kAttrByte;
    case GgufTokenType::kUndefined:
    default:
      return kAttrUndefined;
  }
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

// "<0xAB>" -> 0xAB; -1 when text is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]);
  const int lo = hex(text[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// A BPE token's text is GPT-2 byte-encoded: map each code point back to its byte. Code points
// outside the map (tokens added by hand) are kept as their UTF-8.
std::string byte_decode(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = utf8_sequence_length(text, pos);
    if (len == 0) {
      out.push_back(text[pos++]);
      continue;
    }
    const uint32_t cp = utf8_decode_at(text, pos, len);
    const int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

std::string make_piece(const TokenizerImpl& v, TokenId id) {
  const TokenData& t = v.tokens[id];
  if (t.attr & (kAttrControl | kAttrUnknown)) return {};
  if (t.attr & kAttrUserDefined) return t.text;
  if (t.attr & kAttrByte) {
    const int b = parse_byte_token(t.text);
    if (b >= 0) return std::string(1, static_cast<char>(b));
    return v.model == TokenizerModel::kBpe ? byte_decode(t.text) : t.text;
  }
  if (!(t.attr & kAttrNormal)) return {};  // unused / undefined: suppressed like control
  switch (v.model) {
    case TokenizerModel::kSpm:
      return replace_all(t.text, kSpaceMark, " ");
    case TokenizerModel::kBpe:
      return byte_decode(t.text);
    case TokenizerModel::kWpm:
      if (v.wpm_hash_continuations) {
        if (t.text.starts_with("##")) return t.text.substr(2);
        return " " + t.text;
      }
      return replace_all(t.text, kSpaceMark, " ");
  }
  return {};
}

void build_bpe_merges(TokenizerImpl& v, const std::vector<std::string>& merges) {
  BpeMerges& m = v.merges;
  const auto n_tokens = static_cast<int32_t>(v.tokens.size());
  auto intern = [&](const std::string& s) -> int32_t {
    if (TokenId id = v.find(s); id != kNoToken) return id;
    auto it = m.extra_symbols.find(s);
    if (it != m.extra_symbols.end()) return it->second;
    const auto id = static_cast<int32_t>(n_tokens + m.extra_symbols.size());
    m.extra_symbols.emplace(s, id);
    return id;
  };
  m.by_pair.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    const size_t split = line.find(' ', 1);
    if (split == std::string::npos) continue;
    const std::string left = line.substr(0, split);
    const std::string right = line.substr(split + 1);
    const int32_t l = intern(left);
    const int32_t r = intern(right);
    const int32_t result = intern(left + right);
    // The first occurrence of a pair keeps its (better) rank.
    m.by_pair.emplace(BpeMerges::key(l, r), BpeMerges::Merge{static_cast<int32_t>(rank), result});
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_unicode(static_cast<uint8_t>(b)));
    int32_t sym = v.find(s);
    if (sym == kNoToken) {
      auto it = m.extra_symbols.find(s);
      sym = it == m.extra_symbols.end() ? -1 : it->second;
    }
    m.byte_symbol[b] = sym;
  }
}

// llama.cpp finds these tokens by their text when the file does not name them, and treats
// them as control tokens even if the file says otherwise.
struct TextRule {
  TokenId SpecialTokens::*field;
  std::vector<std::string_view> texts;
};

void detect_special_by_text(TokenizerImpl& v) {
  const std::vector<TextRule> rules = {
      {&SpecialTokens::eot,
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
        "<\xEF\xBD\x9C"
        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"}},
      {&SpecialTokens::eom, {"<|eom_id|>"}},
      {&SpecialTokens::fim_pre,
       {"<|fim_prefix|>", "<fim-prefix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "begin\xEF\xBD\x9C>",
        "<PRE>"}},
      {&SpecialTokens::fim_suf,
       {"<|fim_suffix|>", "<fim-suffix>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
        "<SUF>"}},
      {&SpecialTokens::fim_mid,
       {"<|fim_middle|>", "<fim-middle>",
        "<\xEF\xBD\x9C"
        "fim\xE2\x96\x81"
        "end\xEF\xBD\x9C>",
        "<MID>"}},
      {&SpecialTokens::fim_pad, {"<|fim_pad|>", "<fim-pad>", "<PAD>"}},
      {&SpecialTokens::fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}},
      {&SpecialTokens::fim_sep, {"<|file_sep|>"}},
  };
  for (const TextRule& rule : rules) {
    if (v.special.*rule.field != kNoToken) continue;
    for (std::string_view text : rule.texts) {
      const TokenId id = v.find(text);
      if (id == kNoToken) continue;
      v.special.*rule.field = id;
      v.tokens[id].attr |= kAttrControl;
      break;
    }
  }

  v.eog.assign(v.tokens.size(), 0);
  for (TokenId id : {v.special.fim_pad, v.special.fim_rep, v.special.fim_sep, v.special.eos,
                     v.special.eot, v.special.eom}) {
    if (v.valid(id)) v.eog[id] = 1;
  }
  for (std::string_view text : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                "<|endoftext|>", "<|eom_id|>", "<EOT>"}) {
    const TokenId id = v.find(text);
    if (id == kNoToken) continue;
    v.eog[id] = 1;
    v.tokens[id].attr |= kAttrControl;
  }
}

void apply_name_rules(TokenizerImpl& v, const std::string& model_name) {
  std::string name = model_name;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto set = [&](std::string_view text, uint32_t attr, bool on) {
    const TokenId id = v.find(text);
    if (id == kNoToken) return;
    v.tokens[id].attr = on ? (v.tokens[id].attr | attr) : (v.tokens[id].attr & ~attr);
  };
  if (v.pre_name.find("jina-v2-de") != std::string::npos ||
      v.pre_name.find("jina-v2-es") != std::string::npos ||
      v.pre_name.find("jina-v2-code") != std::string::npos) {
    set("<mask>", kAttrLstrip, true);
  } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    // Phi-3's special tokens swallow the whitespace that follows them.
    for (TokenId id : v.partition_order) v.tokens[id].attr |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set(text, kAttrRstrip, false);
  }
}

void set_id(TokenId& field, const std::optional<int64_t>& value, size_t n_tokens,
            std::string_view what) {
  if (!value) return;
  if (*value >= 0 && static_cast<uint64_t>(*value) < n_tokens) {
    field = static_cast<TokenId>(*value);
  } else {
    POWER_LOG_WARN("tokenizer: {} token id {} is outside the vocabulary ({} tokens); ignored", what,
                   *value, n_tokens);
  }
}

}  // namespace

Result<std::unique_ptr<TokenizerImpl>> build_vocab(const TokenizerSpec& spec) {
  auto v = std::make_unique<TokenizerImpl>();
  const size_t n = spec.tokens.size();
  if (n == 0) return make_error(StatusCode::kInvalidArgument, "tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return make_error(StatusCode::kResourceExhausted, "tokenizer: {} tokens is too many", n);
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} scores for {} tokens",
                      spec.scores.size(), n)
        .with("key", "tokenizer.ggml.scores");
  }
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} token types for {} tokens",
                      spec.token_types.size(), n)
        .with("key", "tokenizer.ggml.token_type");
  }

  SpecialTokens& sp = v->special;
  if (spec.model == "llama") {
    v->model = TokenizerModel::kSpm;
    sp.bos = 1;
    sp.eos = 2;
    sp.unk = 0;
    v->add_space_prefix = true;
    v->add_bos = true;
  } else if (spec.model == "gpt2") {
    v->model = TokenizerModel::kBpe;
    v->pre_name = spec.pre.empty() ? "default" : spec.pre;
    if (spec.pre.empty()) {
      POWER_LOG_WARN(
          "tokenizer: no tokenizer.ggml.pre in the file; using the 'default' "
          "pre-tokenizer, which may not match how the model was trained");
    }
    auto info = pre_tokenizer_from_name(v->pre_name);
    if (!info) {
      return make_error(StatusCode::kUnsupported, "tokenizer: unknown pre-tokenizer '{}'",
                        v->pre_name)
          .with("key", "tokenizer.ggml.pre");
    }
    v->pre_kind = info->kind;
    v->ignore_merges = info->ignore_merges;
    v->add_bos = info->add_bos;
    v->clean_spaces = info->clean_spaces;
    if (spec.merges.empty()) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer: BPE vocabulary without merges")
          .with("key", "tokenizer.ggml.merges");
    }
  } else if (spec.model == "bert") {
    v->model = TokenizerModel::kWpm;
    sp.bos = 101;
    sp.unk = 100;
    sp.sep = 102;
    sp.pad = 0;
    sp.mask = 103;
    v->clean_spaces = true;
    v->add_bos = true;
  } else {
    return make_error(StatusCode::kUnsupported, "tokenizer: unsupported tokenizer model '{}'",
                      spec.model)
        .with("key", "tokenizer.ggml.model");
  }
  // Defaults that point past a small vocabulary mean "none".
  for (TokenId* id : {&sp.bos, &sp.eos, &sp.unk, &sp.sep, &sp.pad, &sp.mask}) {
    if (*id != kNoToken && static_cast<size_t>(*id) >= n) *id = kNoToken;
  }
  if (spec.add_space_prefix && v->model != TokenizerModel::kBpe) {
    v->add_space_prefix = *spec.add_space_prefix;
  }

  v->tokens.resize(n);
  v->index.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = v->tokens[i];
    t.text = spec.tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : spec.tokens[i];
    t.score = spec.scores.empty() ? 0.0f : spec.scores[i];
    t.attr = spec.token_types.empty() ? kAttrNormal : attr_from_type(spec.token_types[i]);
    v->index.insert_or_assign(t.text, static_cast<TokenId>(i));
    v->max_token_bytes = std::max(v->max_token_bytes, t.text.size());
  }

  set_id(sp.bos, spec.bos, n, "BOS");
  if (v->model == TokenizerModel::kWpm && !spec.bos) {
    set_id(sp.bos, spec.cls, n, "CLS");
  }
  set_id(sp.eos, spec.eos, n, "EOS");
  set_id(sp.eot, spec.eot, n, "EOT");
  set_id(sp.eom, spec.eom, n, "EOM");
  set_id(sp.unk, spec.unk, n, "UNK");
  set_id(sp.sep, spec.sep, n, "SEP");
  set_id(sp.pad, spec.pad, n, "PAD");
  set_id(sp.cls, spec.cls, n, "CLS");
  set_id(sp.mask, spec.mask, n, "MASK");
  set_id(sp.fim_pre, spec.fim_pre, n, "FIM prefix");
  set_id(sp.fim_suf, spec.fim_suf, n, "FIM suffix");
  set_id(sp.fim_mid, spec.fim_mid, n, "FIM middle");
  set_id(sp.fim_pad, spec.fim_pad, n, "FIM pad");
  set_id(sp.fim_rep, spec.fim_rep, n, "FIM repo");
  set_id(sp.fim_sep, spec.fim_sep, n, "FIM separator");
  if (v->model == TokenizerModel::kWpm && sp.cls == kNoToken) sp.cls = sp.bos;
  if (spec.add_bos) v->add_bos = *spec.add_bos;
  if (spec.add_eos) v->add_eos = *spec.add_eos;
  if (v->add_bos && sp.bos == kNoToken) {
    POWER_LOG_WARN("tokenizer: the vocabulary asks for BOS but has none; not adding it");
    v->add_bos = false;
  }
  if (v->add_eos && sp.eos == kNoToken) {
    POWER_LOG_WARN("tokenizer: the vocabulary asks for EOS but has none; not adding it");
    v->add_eos = false;
  }

  detect_special_by_text(*v);

  for (size_t i = 0; i < n; ++i) {
    if (v->tokens[i].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v->partition_order.push_back(static_cast<TokenId>(i));
    }
  }
  std::stable_sort(v->partition_order.begin(), v->partition_order.end(), [&](TokenId a, TokenId b) {
    return v->tokens[a].text.size() > v->tokens[b].text.size();
  });
  apply_name_rules(*v, spec.model_name);

  v->byte_tokens.fill(kNoToken);
  for (int b = 0; b < 256; ++b) {
    if (v->model == TokenizerModel::kSpm) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      TokenId id = v->find(name);
      if (id == kNoToken) id = v->find(std::string(1, static_cast<char>(b)));
      v->byte_tokens[b] = id;
    } else if (v->model == TokenizerModel::kBpe) {
      std::string s;
      utf8_append(s, byte_to_unicode(static_cast<uint8_t>(b)));
      v->byte_tokens[b] = v->find(s);
    }
  }

  if (v->model == TokenizerModel::kSpm) {
    v->spm_words_split_at_space = true;
    for (const TokenData& t : v->tokens) {
      std::string_view rest = t.text;
      while (rest.starts_with(kSpaceMark)) rest.remove_prefix(kSpaceMark.size());
      if (rest.find(kSpaceMark) != std::string_view::npos) {
        v->spm_words_split_at_space = false;
        break;
      }
    }
  }
  if (v->model == TokenizerModel::kWpm) {
    bool has_space_mark = false;
    bool has_hash = false;
    for (const TokenData& t : v->tokens) {
      has_space_mark = has_space_mark || std::string_view(t.text).starts_with(kSpaceMark);
      has_hash = has_hash || (t.text.size() > 2 && t.text.starts_with("##"));
    }
    v->wpm_hash_continuations = has_hash && !has_space_mark;
  }
  if (v->model == TokenizerModel::kBpe) build_bpe_merges(*v, spec.merges);

  v->pieces.resize(n);
  for (size_t i = 0; i < n; ++i) v->pieces[i] = make_piece(*v, static_cast<TokenId>(i));
  return v;
}

// ---- GGUF ----

namespace {

Result<std::optional<int64_t>> optional_id(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return std::optional<int64_t>();
  auto id = value->as_i64();
  if (!id) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} is not an integer", key)
        .with("key", key);
  }
  // -1, also when stored as u32 0xFFFFFFFF, is how converters write "no such token".
  if (*id < 0 || *id == int64_t{0xFFFFFFFF}) return std::optional<int64_t>();
  return std::optional<int64_t>(*id);
}

Result<std::optional<bool>> optional_bool(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return std::optional<bool>();
  auto b = value->as_bool();
  if (!b) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} is not a bool", key)
        .with("key", key);
  }
  return std::optional<bool>(*b);
}

Result<std::string> optional_string(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return std::string();
  const std::string* s = value->as_string();
  if (s == nullptr) {
    return make_error(StatusCode::kInvalidArgument, "tokenizer: {} is not a string", key)
        .with("key", key);
  }
  return *s;
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file) {
  TokenizerSpec spec;
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model.ok()) return std::move(model).take_status();
  spec.model = std::move(model).value();
  POWER_ASSIGN_OR_RETURN(spec.pre, optional_string(file, "tokenizer.ggml.pre"));
  POWER_ASSIGN_OR_RETURN(spec.model_name, optional_string(file, "general.name"));
  POWER_ASSIGN_OR_RETURN(spec.tokens, file.get_string_array("tokenizer.ggml.tokens"));

  if (const GgufValue* scores = file.find("tokenizer.ggml.scores")) {
    const auto* items = scores->as_array();
    if (items == nullptr) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer: scores are not an array")
          .with("key", "tokenizer.ggml.scores");
    }
    spec.scores.reserve(items->size());
    for (const GgufValue& item : *items) {
      auto f = item.as_f64();
      if (!f) {
        return make_error(StatusCode::kInvalidArgument, "tokenizer: a score is not a number")
            .with("key", "tokenizer.ggml.scores");
      }
      spec.scores.push_back(static_cast<float>(*f));
    }
  }
  if (const GgufValue* types = file.find("tokenizer.ggml.token_type")) {
    const auto* items = types->as_array();
    if (items == nullptr) {
      return make_error(StatusCode::kInvalidArgument, "tokenizer: token types are not an array")
          .with("key", "tokenizer.ggml.token_type");
    }
    spec.token_types.reserve(items->size());
    for (const GgufValue& item : *items) {
      auto t = item.as_i64();
      if (!t || *t < std::numeric_limits<int32_t>::min() ||
          *t > std::numeric_limits<int32_t>::max()) {
        return make_error(StatusCode::kInvalidArgument,
                          "tokenizer: a token type is not a 32-bit integer")
            .with("key", "tokenizer.ggml.token_type");
      }
      spec.token_types.push_back(static_cast<int32_t>(*t));
    }
  }
  if (file.find("tokenizer.ggml.merges") != nullptr) {
    POWER_ASSIGN_OR_RETURN(spec.merges, file.get_string_array("tokenizer.ggml.merges"));
  }

  struct IdKey {
    std::optional<int64_t> TokenizerSpec::*field;
    std::string_view key;
  };
  const IdKey id_keys[] = {
      {&TokenizerSpec::bos, "tokenizer.ggml.bos_token_id"},
      {&TokenizerSpec::eos, "tokenizer.ggml.eos_token_id"},
      {&TokenizerSpec::eot, "tokenizer.ggml.eot_token_id"},
      {&TokenizerSpec::eom, "tokenizer.ggml.eom_token_id"},
      {&TokenizerSpec::unk, "tokenizer.ggml.unknown_token_id"},
      {&TokenizerSpec::sep, "tokenizer.ggml.seperator_token_id"},  // sic, as in GGUF files
      {&TokenizerSpec::pad, "tokenizer.ggml.padding_token_id"},
      {&TokenizerSpec::cls, "tokenizer.ggml.cls_token_id"},
      {&TokenizerSpec::mask, "tokenizer.ggml.mask_token_id"},
      {&TokenizerSpec::fim_pre, "tokenizer.ggml.fim_pre_token_id"},
      {&TokenizerSpec::fim_suf, "tokenizer.ggml.fim_suf_token_id"},
      {&TokenizerSpec::fim_mid, "tokenizer.ggml.fim_mid_token_id"},
      {&TokenizerSpec::fim_pad, "tokenizer.ggml.fim_pad_token_id"},
      {&TokenizerSpec::fim_rep, "tokenizer.ggml.fim_rep_token_id"},
      {&TokenizerSpec::fim_sep, "tokenizer.ggml.fim_sep_token_id"},
      // Older names; like llama.cpp, they win when both are present.
      {&TokenizerSpec::fim_pre, "tokenizer.ggml.prefix_token_id"},
      {&TokenizerSpec::fim_suf, "tokenizer.ggml.suffix_token_id"},
      {&TokenizerSpec::fim_mid, "tokenizer.ggml.middle_token_id"},
  };
  for (const IdKey& k : id_keys) {
    POWER_ASSIGN_OR_RETURN(auto id, optional_id(file, k.key));
    if (id) spec.*k.field = id;
  }
  POWER_ASSIGN_OR_RETURN(spec.add_bos, optional_bool(file, "tokenizer.ggml.add_bos_token"));
  POWER_ASSIGN_OR_RETURN(spec.add_eos, optional_bool(file, "tokenizer.ggml.add_eos_token"));
  POWER_ASSIGN_OR_RETURN(spec.add_space_prefix,
                         optional_bool(file, "tokenizer.ggml.add_space_prefix"));
  return spec;
}

}  // namespace power::text
