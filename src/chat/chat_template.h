// Chat templates: chat messages -> the prompt text the model was trained on.
//
// A ChatTemplate holds a model's Jinja chat template (GGUF key `tokenizer.chat_template`) and
// renders OpenAI-style messages with it the way Hugging Face's apply_chat_template does: the
// same jinja2 settings (see chat/jinja.h) and the same variables — `messages`, `tools` (none
// when absent), `documents` (none), `add_generation_prompt`, `bos_token`, `eos_token` — plus
// caller extras such as `enable_thinking`, which may override any of them.
//
// Messages: a JSON array of {role: system|user|assistant|tool, content: string | array of
// parts | null, tool_calls?: [{id, type, function: {name, arguments}}], tool_call_id?, name?}.
// Before rendering (the one place Power reshapes messages):
//  - Content parts. At creation the template is probed once with a plain-string and a
//    typed-parts user message. If it renders plain strings, text parts ({"type":"text",
//    "text":...}) are joined with "\n" (other part types are an error: this is a text prompt);
//    if it only renders typed parts, plain strings become one text part.
//  - Tool-call arguments. The template is also probed with an assistant tool call whose
//    function.arguments is a JSON object and, separately, a JSON string. Arguments given in the
//    form the template cannot print are converted: a string holding a JSON object is parsed
//    (Llama 3.1, Qwen 2.5 and Mistral apply `tojson` to a dict); an object is serialised as
//    compact JSON (DeepSeek concatenates a string). Otherwise they pass through unchanged.
// With no template in the file, ChatML is used and a warning is logged saying so. A file may
// also carry a tool-use variant (`tokenizer.chat_template.tool_use`, e.g. Command-R, Hermes):
// as in Hugging Face, it renders requests that pass tools.
//
// Errors are Status values: bad messages JSON (kInvalidArgument naming the message index),
// template syntax errors (context line/column), `raise_exception()` in the template (its
// message, with line/column), and exceeded JinjaLimits (kResourceExhausted).
// Thread-safety: immutable after creation; render() may be called from several threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/jinja.h"

namespace power {
class GgufFile;
struct GgufValue;
}  // namespace power

namespace power::chat {

// The ChatML template, as Hermes/OpenHermes and Qwen-style models ship it.
inline constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct ChatRenderOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;          // null, or an array of tool definitions
  nlohmann::ordered_json extra_context;  // null, or an object of extra template variables
  // The clock behind strftime_now() (Llama 3.2/3.3 print today's date); unset: system clock.
  std::optional<std::chrono::system_clock::time_point> now;
};

class ChatTemplate {
 public:
  // A template from its source text. bos/eos are the special-token strings it may print.
  static Result<ChatTemplate> from_string(std::string_view source, std::string bos_token = {},
                                          std::string eos_token = {},
                                          const JinjaLimits& limits = {});

  // Reads tokenizer.chat_template (and .tool_use) and the bos/eos strings (tokenizer.ggml.tokens
  // at tokenizer.ggml.bos_token_id / eos_token_id). No template: ChatML, with a warning.
  static Result<ChatTemplate> from_gguf(const GgufFile& file, const JinjaLimits& limits = {});

  // from_gguf over any metadata lookup (returns null for an absent key).
  using MetadataLookup = std::function<const GgufValue*(std::string_view key)>;
  static Result<ChatTemplate> from_metadata(const MetadataLookup& find,
                                            const JinjaLimits& limits = {});

  // `messages` must be a JSON array (see the contract above).
  Result<std::string> render(const nlohmann::ordered_json& messages,
                             const ChatRenderOptions& options = {}) const;
  // The same, from JSON text: either an array of messages or {"messages": [...]}.
  Result<std::string> render_json(std::string_view messages_json,
                                  const ChatRenderOptions& options = {}) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  bool is_chatml_fallback() const { return chatml_fallback_; }
  // The variant used when tools are passed, if the model has one.
  const ChatTemplate* tool_use_variant() const { return tool_use_.get(); }
  // Probe results (see the contract): how this template wants message content.
  bool renders_string_content() const { return string_content_; }
  bool renders_typed_content() const { return typed_content_; }
  bool renders_object_arguments() const { return object_arguments_; }
  bool renders_string_arguments() const { return string_arguments_; }

 private:
  ChatTemplate(jinja::Template tmpl, std::string source, std::string bos, std::string eos)
      : template_(std::make_shared<jinja::Template>(std::move(tmpl))),
        source_(std::move(source)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)) {}

  void probe_content_format();
  void probe_argument_format();
  // The template's output for `messages` with add_generation_prompt, or "" if it fails.
  std::string probe_render(const nlohmann::ordered_json& messages) const;
  Result<nlohmann::ordered_json> normalize_messages(const nlohmann::ordered_json& messages) const;

  std::shared_ptr<const jinja::Template> template_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  bool chatml_fallback_ = false;
  bool string_content_ = true;
  bool typed_content_ = false;
  bool object_arguments_ = false;
  bool string_arguments_ = false;
  std::shared_ptr<const ChatTemplate> tool_use_;
};

}  // namespace power::chat
