// ChatTemplate: message normalisation, the Hugging Face variable set, content-format probing.
#include "chat/chat_template.h"

#include <utility>

namespace power::chat {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kProbeText = "<<power-chat-template-probe>>";

bool is_text_part(const json& part) {
  return part.is_object() && part.contains("type") && part["type"] == "text";
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_string(std::string_view source, std::string bos_token,
                                               std::string eos_token, const JinjaLimits& limits) {
  Result<jinja::Template> parsed = jinja::Template::parse(source, limits);
  if (!parsed.ok()) return std::move(parsed).take_status();
  ChatTemplate t(std::move(parsed).value(), std::string(source), std::move(bos_token),
                 std::move(eos_token));
  t.probe_content_format();
  t.probe_argument_format();
  return t;
}

std::string ChatTemplate::probe_render(const json& messages) const {
  json context = {{"messages", messages},    {"tools", nullptr},
                  {"documents", nullptr},    {"add_generation_prompt", true},
                  {"bos_token", bos_token_}, {"eos_token", eos_token_}};
  Result<std::string> out = template_->render(context);
  return out.ok() ? std::move(out).value() : std::string();
}

void ChatTemplate::probe_content_format() {
  // Render one user message both ways and see which form reaches the output as plain text.
  // A template that prints Python's repr or JSON of a parts list shows the "type" key too.
  auto renders = [&](const json& content) {
    std::string out = probe_render(json::array({json{{"role", "user"}, {"content", content}}}));
    return out.find(kProbeText) != std::string::npos && out.find("'type'") == std::string::npos &&
           out.find("\"type\"") == std::string::npos;
  };
  bool strings = renders(json(kProbeText));
  bool typed = renders(json::array({json{{"type", "text"}, {"text", kProbeText}}}));
  string_content_ = strings || !typed;  // unknown (both failed): pass strings through
  typed_content_ = typed;
}

void ChatTemplate::probe_argument_format() {
  // One tool call whose arguments print as {"probe_arg": "<probe>"} when the template handles
  // the given form. Assistant content is tried as null (DeepSeek) and "" (Qwen3).
  const std::string needle_spaced = "\"probe_arg\": \"" + std::string(kProbeText) + "\"";
  const std::string needle_compact = "\"probe_arg\":\"" + std::string(kProbeText) + "\"";
  json args = {{"probe_arg", kProbeText}};
  auto renders = [&](const json& arguments) {
    for (const json& content : {json(nullptr), json("")}) {
      json call = {{"id", "call00001"},
                   {"type", "function"},
                   {"function", {{"name", "probe_fn"}, {"arguments", arguments}}}};
      json messages = json::array(
          {json{{"role", "user"}, {"content", "hi"}},
           json{{"role", "assistant"}, {"content", content}, {"tool_calls", json::array({call})}},
           json{{"role", "tool"},
                {"tool_call_id", "call00001"},
                {"name", "probe_fn"},
                {"content", "done"}}});
      std::string out = probe_render(messages);
      if (out.find(needle_spaced) != std::string::npos ||
          out.find(needle_compact) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  object_arguments_ = renders(args);
  string_arguments_ = renders(json(args.dump()));
}

Result<json> ChatTemplate::normalize_messages(const json& messages) const {
  if (!messages.is_array()) {
    return Status(StatusCode::kInvalidArgument, "chat messages must be a JSON array");
  }
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) {
      return make_error(StatusCode::kInvalidArgument, "chat message {} is not a JSON object", i);
    }
    if (!m.contains("role") || !m["role"].is_string()) {
      return make_error(StatusCode::kInvalidArgument, "chat message {} has no string 'role'", i);
    }
    json msg = m;
    if (msg.contains("content")) {
      json& content = msg["content"];
      if (content.is_array() && !typed_content_) {
        std::string text;
        for (size_t p = 0; p < content.size(); ++p) {
          const json& part = content[p];
          if (!is_text_part(part) || !part.contains("text") || !part["text"].is_string()) {
            std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                                   ? part["type"].get<std::string>()
                                   : "?";
            return make_error(StatusCode::kInvalidArgument,
                              "chat message {}: content part {} (type '{}') is not a text part, "
                              "and this template renders text only",
                              i, p, type);
          }
          if (p > 0) text += '\n';
          text += part["text"].get<std::string>();
        }
        content = text;
      } else if (content.is_string() && !string_content_ && typed_content_) {
        content = json::array({json{{"type", "text"}, {"text", content}}});
      } else if (!content.is_string() && !content.is_array() && !content.is_null()) {
        return make_error(StatusCode::kInvalidArgument,
                          "chat message {}: 'content' must be a string, an array of parts or null",
                          i);
      }
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (json& call : msg["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
          continue;
        }
        json& fn = call["function"];
        if (!fn.contains("arguments")) continue;
        json& arguments = fn["arguments"];
        if (arguments.is_string() && object_arguments_ && !string_arguments_) {
          json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
          if (!parsed.is_discarded() && parsed.is_object()) arguments = std::move(parsed);
        } else if (arguments.is_object() && string_arguments_ && !object_arguments_) {
          arguments = arguments.dump();
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Result<std::string> ChatTemplate::render(const json& messages,
                                         const ChatRenderOptions& options) const {
  if (tool_use_ && options.tools.is_array()) return tool_use_->render(messages, options);
  POWER_ASSIGN_OR_RETURN(json normalized, normalize_messages(messages));
  if (!options.tools.is_null() && !options.tools.is_array()) {
    return Status(StatusCode::kInvalidArgument, "chat tools must be a JSON array");
  }
  if (!options.extra_context.is_null() && !options.extra_context.is_object()) {
    return Status(StatusCode::kInvalidArgument, "chat template extra context must be an object");
  }
  json context = json::object();
  context["messages"] = std::move(normalized);
  context["tools"] = options.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  if (options.extra_context.is_object()) {
    for (const auto& [k, v] : options.extra_context.items()) context[k] = v;
  }
  jinja::RenderOptions render_options;
  render_options.now = options.now;
  return template_->render(context, render_options);
}

Result<std::string> ChatTemplate::render_json(std::string_view messages_json,
                                              const ChatRenderOptions& options) const {
  json parsed = json::parse(messages_json.begin(), messages_json.end(), nullptr, false);
  if (parsed.is_discarded()) {
    return Status(StatusCode::kInvalidArgument, "chat messages: not valid JSON");
  }
  if (parsed.is_object() && parsed.contains("messages")) return render(parsed["messages"], options);
  return render(parsed, options);
}

}  // namespace power::chat
