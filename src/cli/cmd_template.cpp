// `power template -m FILE --messages messages.json [--add-generation-prompt]`: prints the prompt
// a model's chat template makes of the messages, byte for byte (no newline is added).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "chat/chat_template.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "format/gguf.h"
#include "host/text.h"

namespace power::cli {
namespace {

using json = nlohmann::ordered_json;

struct TemplateArgs {
  std::string model_path;
  std::string template_path;
  std::string messages_path;
  std::string tools_path;
  std::string context_json;
  bool add_generation_prompt = false;
};

void fail(const Status& status) {
  std::fprintf(stderr, "power: error: %s\n", status.to_string().c_str());
  set_exit_code(1);
}

// A file's text, or stdin for "-".
Result<std::string> read_input(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  return read_file_text(path);
}

Result<json> parse_json(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    return Status(StatusCode::kInvalidArgument, what + " is not valid JSON");
  }
  return j;
}

Result<chat::ChatTemplate> load_template(const TemplateArgs& args) {
  if (!args.template_path.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string source, read_file_text(args.template_path));
    std::string bos;
    std::string eos;
    if (!args.model_path.empty()) {  // the model still supplies bos/eos strings
      POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(args.model_path));
      POWER_ASSIGN_OR_RETURN(chat::ChatTemplate from_model, load_chat_template(*file));
      bos = from_model.bos_token();
      eos = from_model.eos_token();
    }
    return chat::ChatTemplate::from_string(source, bos, eos);
  }
  if (args.model_path.empty()) {
    return Status(StatusCode::kInvalidArgument, "give a model (-m FILE) or --template-file");
  }
  POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(args.model_path));
  return load_chat_template(*file);
}

Status run_template(const TemplateArgs& args) {
  POWER_ASSIGN_OR_RETURN(chat::ChatTemplate tmpl, load_template(args));
  POWER_ASSIGN_OR_RETURN(std::string messages_text, read_input(args.messages_path));
  POWER_ASSIGN_OR_RETURN(json input, parse_json(messages_text, "--messages"));
  chat::ChatRenderOptions options;
  options.add_generation_prompt = args.add_generation_prompt;
  json messages = input;
  if (input.is_object()) {  // {"messages": [...], "tools": [...], ...} as an OpenAI request
    messages = input.value("messages", json());
    if (input.contains("tools")) options.tools = input["tools"];
  }
  if (!args.tools_path.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string tools_text, read_input(args.tools_path));
    POWER_ASSIGN_OR_RETURN(options.tools, parse_json(tools_text, "--tools"));
  }
  if (!args.context_json.empty()) {
    POWER_ASSIGN_OR_RETURN(options.extra_context, parse_json(args.context_json, "--context"));
  }
  POWER_ASSIGN_OR_RETURN(std::string prompt, tmpl.render(messages, options));
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return Status();
}

}  // namespace

void add_template_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "Render chat messages with a model's chat template");
  add_model_lib_option(cmd);
  static TemplateArgs args;
  cmd->add_option("-m,--model", args.model_path,
                  "GGUF file (tokenizer.chat_template, bos/eos tokens); ChatML if it has none");
  cmd->add_option("--messages", args.messages_path,
                  "JSON file ('-' for stdin): an array of messages, or {\"messages\": [...], "
                  "\"tools\": [...]}")
      ->required();
  cmd->add_flag("--add-generation-prompt", args.add_generation_prompt,
                "End with the assistant turn's opening");
  cmd->add_option("--tools", args.tools_path, "JSON file with an array of tool definitions");
  cmd->add_option("--context", args.context_json,
                  "Extra template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--template-file", args.template_path,
                  "Use this Jinja template instead of the model's");
  cmd->callback([] {
    Status st = run_template(args);
    if (!st.ok()) fail(st);
  });
}

}  // namespace power::cli
