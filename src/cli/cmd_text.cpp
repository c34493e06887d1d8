// `power tokenize -m FILE [--text T | --file F] [--no-bos] [--special] [--json]` and
// `power detokenize -m FILE --ids 1,2,3 [--special]`: the GGUF file's own tokenizer.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "format/gguf.h"
#include "host/text.h"
#include "text/tokenizer.h"

namespace power::cli {
namespace {

using text::TokenId;
using text::Tokenizer;

Result<std::unique_ptr<Tokenizer>> tokenizer_of(const std::string& path) {
  POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
  return power::load_tokenizer(*file);
}

// "1,2,3", "1 2 3" or "[1, 2, 3]".
Result<std::vector<TokenId>> parse_ids(const std::string& list) {
  std::vector<TokenId> ids;
  size_t pos = 0;
  auto is_sep = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']';
  };
  while (pos < list.size()) {
    while (pos < list.size() && is_sep(list[pos])) ++pos;
    if (pos >= list.size()) break;
    size_t end = pos;
    while (end < list.size() && !is_sep(list[end])) ++end;
    const std::string item = list.substr(pos, end - pos);
    char* rest = nullptr;
    errno = 0;
    const long long value = std::strtoll(item.c_str(), &rest, 10);
    if (errno != 0 || rest == item.c_str() || *rest != '\0' || value < INT32_MIN ||
        value > INT32_MAX) {
      return make_error(StatusCode::kInvalidArgument, "--ids: '{}' is not a token id", item);
    }
    ids.push_back(static_cast<TokenId>(value));
    pos = end;
  }
  return ids;
}

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool no_bos = false;
  bool special = false;
  bool json = false;
};

void run_tokenize(const TokenizeArgs& args, bool have_text, bool have_file) {
  if (have_text == have_file) {
    return report_error(Status(StatusCode::kInvalidArgument, "give exactly one of --text, --file"));
  }
  std::string input = args.text;
  if (have_file) {
    auto content = read_file_text(args.file);
    if (!content.ok()) return report_error(content.status());
    input = std::move(content).value();
  }
  auto tok = tokenizer_of(args.model);
  if (!tok.ok()) return report_error(tok.status());
  const std::vector<TokenId> ids =
      (*tok)->encode(input, {.add_special = !args.no_bos, .parse_special = args.special});
  if (args.json) {
    nlohmann::json out;
    out["ids"] = ids;
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::string line;
  for (TokenId id : ids) {
    if (!line.empty()) line.push_back(' ');
    line += std::to_string(id);
  }
  std::printf("%s\n", line.c_str());
}

void run_detokenize(const std::string& model, const std::string& id_list, bool special) {
  auto ids = parse_ids(id_list);
  if (!ids.ok()) return report_error(ids.status());
  auto tok = tokenizer_of(model);
  if (!tok.ok()) return report_error(tok.status());
  auto text = (*tok)->decode(*ids, {.render_special = special});
  if (!text.ok()) return report_error(text.status());
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void add_text_commands(CLI::App& app) {
  auto* tokenize =
      app.add_subcommand("tokenize", "Turn text into token ids with a model's tokenizer");
  add_model_lib_option(tokenize);
  static TokenizeArgs t;
  tokenize->add_option("-m,--model", t.model, "GGUF file")->required();
  auto* text_opt = tokenize->add_option("--text", t.text, "Text to tokenize");
  auto* file_opt = tokenize->add_option("--file", t.file, "File whose bytes to tokenize");
  text_opt->excludes(file_opt);
  tokenize->add_flag("--no-bos", t.no_bos, "Do not add BOS/EOS (or [CLS]/[SEP])");
  tokenize->add_flag("--special", t.special,
                     "Recognise special tokens written in the text (e.g. <|im_start|>)");
  tokenize->add_flag("--json", t.json, "Print {\"ids\":[...]}");
  tokenize->callback(
      [text_opt, file_opt] { run_tokenize(t, text_opt->count() > 0, file_opt->count() > 0); });

  auto* detokenize = app.add_subcommand("detokenize", "Turn token ids back into text");
  add_model_lib_option(detokenize);
  static std::string model;
  static std::string ids;
  static bool special = false;
  detokenize->add_option("-m,--model", model, "GGUF file")->required();
  detokenize->add_option("--ids", ids, "Token ids: 1,2,3")->required();
  detokenize->add_flag("--special", special, "Write special tokens' text (e.g. <s>)");
  detokenize->callback([] { run_detokenize(model, ids, special); });
}

}  // namespace power::cli
