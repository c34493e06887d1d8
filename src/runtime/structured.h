// Structured output, logprobs and tools for one request (docs/STRUCTURED_OUTPUT.md): the
// request fields turned into chat-template input, sampler constraints and, at the end, parsed
// tool calls. Kept out of runtime.cpp, which calls these at four points (messages, submit,
// each token, completion).
// Thread-safety: the TokenTrie cache is guarded internally; the rest is per request.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "engine/sampler.h"
#include "power/request.h"
#include "text/tokenizer.h"

namespace power::runtime {

// What the end of the request needs.
struct StructuredState {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  chat::ToolCallFormat tool_format = chat::ToolCallFormat::kAuto;
  bool parse_tool_calls = false;  // tools given and tool_choice is not "none"
  bool forced_tool_call = false;  // tool_choice "required" or a named function
  bool single_tool_call = false;  // parallel_tool_calls false: the first call only
  bool active = false;            // a grammar or logprobs: no speculative decoding
};

// The chat messages as the template's JSON (tool_calls, tool_call_id and name included);
// kInvalidArgument naming the message when tool_calls_json does not parse as an array.
Result<nlohmann::ordered_json> chat_messages_json(const GenerateRequest& req);
// tools_json into the render options (kInvalidArgument unless a JSON array of tools).
Status add_tools(const GenerateRequest& req, chat::ChatRenderOptions& options);

// Validates response_format, top_logprobs, tools and tool_choice, compiles the grammar and
// sets it and logprobs on the sampler. `chat` is the model's template (null for text
// prompts). kInvalidArgument names the offending field (and the schema keyword).
Result<StructuredState> setup_structured(const GenerateRequest& req,
                                         const std::shared_ptr<const text::Tokenizer>& tokenizer,
                                         const chat::ChatTemplate* chat, Sampler& sampler);

// After each committed token: moves the sampler's logprob records into the completion
// (skipping end-of-generation tokens).
void collect_logprobs(const text::Tokenizer& tokenizer, Sampler& sampler, int32_t token,
                      Completion& c);

// At the end: parses tool calls out of the output (decoded with special tokens rendered).
void finish_structured(const StructuredState& st, Completion& c);

}  // namespace power::runtime
