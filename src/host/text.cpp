#include "host/text.h"

#include "host/model_file.h"
#include "host/registry.h"

namespace power {
namespace {

std::shared_ptr<const ArchitectureEntry> entry_of(const GgufFile& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch.ok()) return nullptr;
  return ArchitectureRegistry::global().find(*arch);
}

text::TokenizerSpec to_text_spec(sdk::TokenizerSpec s) {
  text::TokenizerSpec t;
  t.model = std::move(s.model);
  t.pre = std::move(s.pre);
  t.model_name = std::move(s.model_name);
  t.tokens = std::move(s.tokens);
  t.scores = std::move(s.scores);
  t.token_types = std::move(s.token_types);
  t.merges = std::move(s.merges);
  t.bos = s.bos;
  t.eos = s.eos;
  t.eot = s.eot;
  t.eom = s.eom;
  t.unk = s.unk;
  t.sep = s.sep;
  t.pad = s.pad;
  t.cls = s.cls;
  t.mask = s.mask;
  t.add_bos = s.add_bos;
  t.add_eos = s.add_eos;
  t.add_space_prefix = s.add_space_prefix;
  return t;
}

}  // namespace

Result<std::unique_ptr<text::Tokenizer>> load_tokenizer(const GgufFile& file) {
  auto entry = entry_of(file);
  if (entry == nullptr || !entry->arch.tokenizer) return text::Tokenizer::from_gguf(file);
  // A GgufModelFile that borrows the caller's file for the call.
  std::shared_ptr<const GgufFile> borrowed(&file, [](const GgufFile*) {});
  GgufModelFile mf(borrowed, "");
  POWER_ASSIGN_OR_RETURN(sdk::TokenizerSpec spec, entry->arch.tokenizer(mf));
  Result<std::unique_ptr<text::Tokenizer>> tok = text::Tokenizer::create(to_text_spec(spec));
  if (!tok.ok()) return std::move(tok).take_status().with("tokenizer_from", entry->origin);
  return tok;
}

Result<chat::ChatTemplate> load_chat_template(const GgufFile& file) {
  auto entry = entry_of(file);
  if (entry == nullptr || !entry->arch.chat_template) return chat::ChatTemplate::from_gguf(file);
  std::shared_ptr<const GgufFile> borrowed(&file, [](const GgufFile*) {});
  GgufModelFile mf(borrowed, "");
  POWER_ASSIGN_OR_RETURN(std::string source, entry->arch.chat_template(mf));
  POWER_ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tok, load_tokenizer(file));
  const text::SpecialTokens& sp = tok->special();
  const std::string bos = tok->is_valid(sp.bos) ? tok->token_text(sp.bos) : std::string();
  const std::string eos = tok->is_valid(sp.eos) ? tok->token_text(sp.eos) : std::string();
  return chat::ChatTemplate::from_string(source, bos, eos);
}

}  // namespace power
