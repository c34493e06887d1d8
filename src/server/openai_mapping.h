// OpenAI JSON <-> runtime requests: the one place where the service translates.
//
// map_chat_request / map_completion_request read a parsed request body field by field: every
// field is either honoured (mapped onto GenerateRequest) or rejected with a 400 that names it;
// nothing is silently ignored. The field handlers live in one table per endpoint in
// openai_mapping.cpp, grouped by feature, so a new field group is one new block there.
// The response builders produce OpenAI's shapes (chat.completion, chat.completion.chunk,
// text_completion) and its error body {"error":{"message","type","param","code"}}.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "power/request.h"
#include "power/runtime.h"
#include "power/status.h"

namespace power::server {

// An answer other than 200, in OpenAI's error shape.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};
nlohmann::json error_body(const ApiError& e);
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
// The HTTP answer for a runtime Status (kQueueFull 429, kDeadlineExceeded 503, ...).
ApiError error_from_status(const Status& status);
// A Status as a sentence for a client: its message and context, without the internal code
// name ("the prompt does not fit the context (prompt_tokens=9, n_ctx=8)").
std::string status_sentence(const Status& status);
// A number from a Status's context ("key=value, ..."); -1 when absent.
int64_t status_context_number(const Status& status, std::string_view key);

enum class Endpoint { kChatCompletions, kCompletions };

// One prompt of /v1/completions (text or token ids).
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
};

// What a request asks for beyond the runtime request itself.
struct MappedRequest {
  std::string model;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  bool include_obfuscation = false;  // stream_options.include_obfuscation
  std::string user;
  // Choices per prompt (n), and /v1/completions' prompts (one or more; empty for chat). The
  // reply has prompts.size() * n choices, choice index = prompt * n + j.
  int n = 1;
  // completions' best_of when above n: that many candidates per prompt, the n with the
  // highest mean token log-probability returned (0: no ranking).
  int best_of = 0;
  std::vector<PromptInput> prompts;
  bool max_tokens_given = false;
  std::string suffix;             // completions: text after the insertion point (FIM)
  bool echo = false;              // completions: the prompt text before each choice's text
  std::string service_tier;       // as asked ("" when not): the reply names the tier used
  bool prediction = false;        // a prediction was given: usage reports its accepted tokens
  bool legacy_functions = false;  // `functions` / `function_call` (mapped onto tools)
  // reasoning_effort / verbosity as asked: applied through the chat template, which must
  // read them (the server checks the template; docs/SERVER.md).
  std::string reasoning_effort, verbosity;
  // Chat with tools and tool_choice other than "none": a stream holds back text that may be
  // a call (server/tool_stream.h); forced: tool_choice "required" or a named function.
  bool tools_active = false;
  bool tool_call_forced = false;
  GenerateRequest request;  // callbacks left empty
};

struct MapResult {
  std::optional<ApiError> error;
  MappedRequest mapped;
};

// `model_info` is the model the request names (for token-id checks); the caller looks the
// model up first with request_model_name().
MapResult map_request(Endpoint endpoint, const nlohmann::json& body, const ModelInfo& model_info);
// The body's "model" (400 when the body is not an object or the field is missing / not a
// string).
std::optional<ApiError> request_model_name(const nlohmann::json& body, std::string* model);

// Response identity shared by a request's answer and all its chunks.
struct ResponseMeta {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
  std::string service_tier;  // "" when the request did not name one (then not in the reply)
  bool prediction = false;   // usage.completion_tokens_details.*_prediction_tokens
  // The request used the deprecated `functions`: a call comes back as message.function_call
  // (delta.function_call when streamed) with finish_reason "function_call".
  bool legacy_functions = false;
};

// "stop", "length", "tool_calls" (or "function_call" for the deprecated functions).
std::string finish_reason(const Completion& c, bool legacy_functions = false);
// `spec` (when given, with meta.prediction) fills completion_tokens_details'
// accepted_prediction_tokens / rejected_prediction_tokens.
nlohmann::json usage_json(const Usage& u, const SpeculativeUsage* spec = nullptr);
// choices[].logprobs as OpenAI shapes it: {"content": [{token, logprob, bytes, top_logprobs}]}.
nlohmann::json logprobs_json(const std::vector<TokenLogprobs>& logprobs);
// Several choices (index i = choices[i]); usage sums the completions and counts each
// distinct prompt once (the caller's `usage`, from combined_usage below).
nlohmann::json chat_response(const ResponseMeta& meta, const std::vector<Completion>& choices,
                             const Usage& usage);
nlohmann::json completion_response(const ResponseMeta& meta, const std::vector<Completion>& choices,
                                   const Usage& usage,
                                   const std::vector<std::string>& echo_prefixes = {});
// The usage of a multi-choice reply: the prompts' tokens once per prompt (n choices of one
// prompt share it), the completions' tokens summed.
Usage combined_usage(const std::vector<Completion>& choices, int n);
// One streamed chunk. `delta_text` / `role` / `finish` absent when empty; `with_usage_null`
// adds "usage": null as OpenAI does on every chunk when include_usage is set.
// `logprobs`, when given, is the chunk's choices[0].logprobs (chat: logprobs_json of the
// chunk's tokens; completions: completion_logprobs_json).
nlohmann::json chat_chunk(const ResponseMeta& meta, int index, const std::string* role,
                          const std::string* delta_text, const std::string* finish,
                          bool with_usage_null, const nlohmann::json* logprobs = nullptr);
nlohmann::json completion_chunk(const ResponseMeta& meta, int index, const std::string& text,
                                const std::string* finish, bool with_usage_null,
                                const nlohmann::json* logprobs = nullptr);
// The legacy completions logprobs: {tokens, token_logprobs, top_logprobs (objects token ->
// logprob: the N most likely and the sampled token), text_offset}. Offsets are byte offsets
// into the completion text, continuing from *text_offset (advanced past these tokens), so a
// stream's chunks number on from each other.
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprobs>& logprobs,
                                        size_t* text_offset);
// A finished reply's tool calls as OpenAI streams them: per call, a chunk with
// delta.tool_calls [{index, id, type: "function", function: {name, arguments: ""}}], then
// chunks with argument fragments [{index, function: {arguments}}]. `logprobs` (if given) goes
// on the first chunk.
std::vector<nlohmann::json> tool_call_chunks(const ResponseMeta& meta, int index,
                                             const std::vector<ToolCall>& calls,
                                             bool with_usage_null,
                                             const nlohmann::json* logprobs = nullptr);
// The final usage chunk (choices: []).
nlohmann::json usage_chunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& u,
                           const SpeculativeUsage* spec = nullptr);
// OpenAI's context-length error (400 context_length_exceeded, param messages / prompt /
// max_tokens) when `status` says the request does not fit the context; nullopt otherwise.
std::optional<ApiError> context_length_error(const Status& status, Endpoint endpoint,
                                             bool max_tokens_given);
// The prediction's accepted / rejected tokens of several choices, summed.
SpeculativeUsage combined_speculative(const std::vector<Completion>& choices);

// JSON text for the wire: invalid UTF-8 in generated text is replaced, never thrown on.
std::string to_wire(const nlohmann::json& j);

}  // namespace power::server
