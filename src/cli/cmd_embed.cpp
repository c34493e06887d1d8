// `power embed -m FILE [--text T]... [--file F] [--normalize] [--json] [--pooling P]
// [--truncate] [--ctx N] [--threads N]`: text embeddings with a BERT-family GGUF model
// (include/power/embed.h). --file holds one text per line. Output: one line of
// space-separated floats per input, or with --json {"embeddings":[[...],...],
// "prompt_tokens":N}.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "power/embed.h"

namespace power::cli {
namespace {

struct EmbedArgs {
  std::string model;
  std::string model_key_file;
  std::vector<std::string> texts;
  std::string file;
  bool normalize = false;
  bool json = false;
  bool truncate = false;
  std::string pooling;
  int64_t n_ctx = 0;
  int threads = 0;
};

// One text per line ("\n" or "\r\n"); the newline after the last line does not start another.
std::vector<std::string> split_lines(const std::string& content) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string::npos) end = content.size();
    std::string line = content.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    pos = end + 1;
  }
  return lines;
}

void run_embed(const EmbedArgs& args) {
  EmbedRequest req;
  req.texts = args.texts;
  if (!args.file.empty()) {
    auto content = read_file_text(args.file);
    if (!content.ok()) return report_error(content.status());
    for (auto& line : split_lines(*content)) req.texts.push_back(std::move(line));
  }
  if (req.texts.empty()) {
    return report_error(
        Status(StatusCode::kInvalidArgument, "nothing to embed: give --text or --file"));
  }
  req.normalize = args.normalize;
  req.truncate = args.truncate;
  auto path = resolve_model_path(args.model);
  if (!path.ok()) return report_error(path.status());
  EmbedOptions o;
  o.threads = args.threads;
  o.n_ctx = args.n_ctx;
  o.pooling = args.pooling;
  o.batch_window_us = 0;  // one caller: nothing to wait for
  o.model_key_file = args.model_key_file;
  auto model = EmbeddingModel::open(*path, o);
  if (!model.ok()) return report_error(model.status());
  auto res = (*model)->embed(req);
  if (!res.ok()) return report_error(res.status());
  if (args.json) {
    nlohmann::json out;
    out["embeddings"] = res->embeddings;
    out["prompt_tokens"] = res->prompt_tokens;
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::string line;
  char buf[32];
  for (const auto& v : res->embeddings) {
    line.clear();
    for (float x : v) {
      if (!line.empty()) line.push_back(' ');
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

void add_embed_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("embed", "Text embeddings with a BERT-family GGUF model");
  add_model_lib_option(cmd);
  static EmbedArgs a;
  cmd->add_option("-m,--model", a.model, "GGUF file (or a store model name)")->required();
  cmd->add_option("--text", a.texts, "Text to embed (repeatable)");
  cmd->add_option("--model-key-file", a.model_key_file,
                  "Key of an encrypted model container (power encrypt; also POWER_MODEL_KEY)");
  cmd->add_option("--file", a.file, "File with one text per line");
  cmd->add_flag("--normalize", a.normalize, "L2-normalize each vector");
  cmd->add_flag("--json", a.json, "Print {\"embeddings\":[[...],...],\"prompt_tokens\":N}");
  cmd->add_flag("--truncate", a.truncate, "Cut inputs longer than the context");
  cmd->add_option("--pooling", a.pooling, "none, mean, cls or last (default: the file's)");
  cmd->add_option("--ctx", a.n_ctx, "Tokens per input (default: the model's context)");
  cmd->add_option("-t,--threads", a.threads, "Compute threads (0: all cores)");
  cmd->callback([] { run_embed(a); });
}

}  // namespace power::cli
