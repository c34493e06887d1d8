// `power run` flags for structured output and logprobs (docs/STRUCTURED_OUTPUT.md):
//   --json-schema FILE   constrain the output to one JSON value valid against the schema in
//                        FILE (a JSON Schema, or OpenAI's {"name", "schema", "strict"} wrapper)
//   --json-object        constrain the output to one JSON object
//   --top-logprobs N     after the text, print one JSON line per generated token to stderr:
//                        {"token", "bytes", "logprob", "top": [{"token", "bytes", "logprob"}..]}
#pragma once

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "power/request.h"

namespace power::cli {

struct StructuredFlags {
  std::string json_schema_path;
  bool json_object = false;
  int top_logprobs = -1;
};

void add_structured_flags(CLI::App* cmd, StructuredFlags& flags);
// Sets response_format / top_logprobs on the request; kInvalidArgument for an unreadable or
// non-JSON schema file, or both flags at once.
Status apply_structured_flags(const StructuredFlags& flags, GenerateRequest& req);
void print_logprobs(const Completion& c, std::FILE* out);

}  // namespace power::cli
