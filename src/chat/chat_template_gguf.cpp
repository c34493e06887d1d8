// ChatTemplate from GGUF metadata: tokenizer.chat_template and the bos/eos token strings.
#include "base/log.h"
#include "chat/chat_template.h"
#include "format/gguf.h"

namespace power::chat {
namespace {

// The token string at the id stored under `id_key`, or "" when either is missing.
std::string token_string(const ChatTemplate::MetadataLookup& find, std::string_view id_key) {
  const GgufValue* id = find(id_key);
  const GgufValue* tokens = find("tokenizer.ggml.tokens");
  if (id == nullptr || tokens == nullptr) return {};
  std::optional<uint64_t> index = id->as_u64();
  const std::vector<GgufValue>* list = tokens->as_array();
  if (!index || list == nullptr || *index >= list->size()) {
    POWER_LOG_WARN("GGUF {} does not name a token in tokenizer.ggml.tokens; using \"\"", id_key);
    return {};
  }
  const std::string* s = (*list)[*index].as_string();
  return s != nullptr ? *s : std::string();
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_metadata(const MetadataLookup& find,
                                                 const JinjaLimits& limits) {
  std::string bos = token_string(find, "tokenizer.ggml.bos_token_id");
  std::string eos = token_string(find, "tokenizer.ggml.eos_token_id");
  const GgufValue* tmpl = find("tokenizer.chat_template");
  if (tmpl == nullptr) {
    POWER_LOG_WARN("the model file has no tokenizer.chat_template; using ChatML");
    POWER_ASSIGN_OR_RETURN(ChatTemplate t, from_string(kChatMlTemplate, bos, eos, limits));
    t.chatml_fallback_ = true;
    return t;
  }
  const std::string* source = tmpl->as_string();
  if (source == nullptr) {
    return Status(StatusCode::kInvalidArgument, "tokenizer.chat_template is not a string");
  }
  POWER_ASSIGN_OR_RETURN(ChatTemplate t, from_string(*source, bos, eos, limits));
  if (const GgufValue* tool_use = find("tokenizer.chat_template.tool_use")) {
    const std::string* tool_source = tool_use->as_string();
    if (tool_source == nullptr) {
      return Status(StatusCode::kInvalidArgument,
                    "tokenizer.chat_template.tool_use is not a string");
    }
    POWER_ASSIGN_OR_RETURN(ChatTemplate variant, from_string(*tool_source, bos, eos, limits));
    t.tool_use_ = std::make_shared<const ChatTemplate>(std::move(variant));
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::from_gguf(const GgufFile& file, const JinjaLimits& limits) {
  return from_metadata([&file](std::string_view key) { return file.find(key); }, limits);
}

}  // namespace power::chat
