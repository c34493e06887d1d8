#include "cli/structured_flags.h"

#include <nlohmann/json.hpp>

#include "base/file.h"

namespace power::cli {

void add_structured_flags(CLI::App* cmd, StructuredFlags& flags) {
  cmd->add_option("--json-schema", flags.json_schema_path,
                  "Constrain the output to JSON valid against this JSON Schema file");
  cmd->add_flag("--json-object", flags.json_object, "Constrain the output to one JSON object");
  cmd->add_option("--top-logprobs", flags.top_logprobs,
                  "Print each token's logprob and the N most likely alternatives (0-20) to "
                  "stderr as JSON lines");
}

Status apply_structured_flags(const StructuredFlags& flags, GenerateRequest& req) {
  if (!flags.json_schema_path.empty() && flags.json_object) {
    return Status(StatusCode::kInvalidArgument, "give --json-schema or --json-object, not both");
  }
  if (flags.json_object) req.response_format.type = ResponseFormat::Type::kJsonObject;
  if (!flags.json_schema_path.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(flags.json_schema_path));
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded()) {
      return Status(StatusCode::kInvalidArgument, "the --json-schema file is not valid JSON")
          .with("path", flags.json_schema_path);
    }
    // OpenAI's response_format.json_schema wrapper: {"name", "schema", "strict"}.
    if (j.is_object() && j.contains("schema") && j.contains("name")) j = j["schema"];
    req.response_format.type = ResponseFormat::Type::kJsonSchema;
    req.response_format.schema_json = j.dump();
  }
  req.top_logprobs = flags.top_logprobs;
  return Status();
}

void print_logprobs(const Completion& c, std::FILE* out) {
  auto entry = [](const TokenLogprob& t) {
    // Bytes may be part of a UTF-8 character: write them as a byte array, not a string.
    nlohmann::json bytes = nlohmann::json::array();
    for (unsigned char b : t.bytes) bytes.push_back(b);
    return nlohmann::json{{"token", t.token}, {"bytes", bytes}, {"logprob", t.logprob}};
  };
  for (const TokenLogprobs& lp : c.logprobs) {
    nlohmann::json line = entry(lp.chosen);
    line["top"] = nlohmann::json::array();
    for (const TokenLogprob& t : lp.top) line["top"].push_back(entry(t));
    std::fprintf(out, "%s\n", line.dump().c_str());
  }
}

}  // namespace power::cli
