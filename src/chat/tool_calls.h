// Tool calls in model output: which wire format a chat template's family uses, and parsing
// the calls out of generated text (decoded with special tokens rendered, since several
// families mark calls with control tokens).
//
// Formats (each as its family documents it; see docs/STRUCTURED_OUTPUT.md):
//   kHermes    <tool_call>\n{"name": N, "arguments": {..}}\n</tool_call>  (repeated) —
//              Hermes 2 Pro / 3, Qwen 2.5 / QwQ / Qwen3, Granite 3.x
//   kLlama3    {"name": N, "parameters": {..}} as the whole reply, optionally after
//              <|python_tag|>; several separated by ";" — Llama 3.1 / 3.2 / 3.3
//   kMistral   [TOOL_CALLS][{"name": N, "arguments": {..}, "id": ..}, ..] — Mistral Nemo,
//              Large 2411; and [TOOL_CALLS]N[ARGS]{..} (repeated) — Mistral Small 3.2, Devstral
//   kDeepSeek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{..}<｜tool▁call▁end｜>..
//              (V3.1), also with "function<｜tool▁sep｜>N\n```json\n{..}\n```" (R1 / V3)
//   kFireFunction  functools[{"name": N, "arguments": {..}}, ..] — FireFunction v2
//   kFunctionary   <function=N>{..}</function> (v3.1) and >>>N\n{..} (v3.2)
//   kKimi      <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0
//              <|tool_call_argument_begin|>{..}<|tool_call_end|>..<|tool_calls_section_end|>
// kAuto tries every format. Text that is not a well-formed call stays content: a reply whose
// call JSON does not parse yields no calls, never an error.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace power::chat {

enum class ToolCallFormat {
  kAuto,
  kHermes,
  kLlama3,
  kMistral,
  kDeepSeek,
  kFireFunction,
  kFunctionary,
  kKimi
};
std::string_view tool_call_format_name(ToolCallFormat f);

// The format a chat template's source text asks the model to use (kAuto when unknown).
ToolCallFormat tool_call_format_for_template(std::string_view template_source);

struct ParsedToolCall {
  std::string id;  // as written by the model (Mistral, Kimi), else ""
  std::string name;
  std::string arguments_json;  // compact JSON text of the arguments object
};

struct ToolCallParse {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ParsedToolCall> calls;
};

ToolCallParse parse_tool_calls(std::string_view output, ToolCallFormat format);

}  // namespace power::chat
