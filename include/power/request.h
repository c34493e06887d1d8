// A generation request and what comes back from it.
//
// A request names its input in one of three forms (exactly one): `prompt` text (tokenized
// with BOS unless add_bos is false or the text already starts with it), `prompt_tokens`, or
// chat `messages` rendered with the model's chat template (ChatML when the file has none).
// max_tokens < 0 means "until end of generation or the context is full"; a request whose
// prompt + max_tokens exceed the context is rejected (kDoesNotFit), never truncated.
// Scheduling: priority (high, normal, low; waiting requests age upwards so none starves) and
// an optional deadline: the latest time the request may still be waiting for memory or a
// slot; past it, it ends with kDeadlineExceeded. Once running it is not interrupted.
// Streaming: on_stream is called on the runtime's worker thread for every committed token
// with the text that became final with it (possibly empty: text that could still begin a
// stop string, or an unfinished UTF-8 character, is held back), then once more with
// token = -1 when held text is flushed at the end. Return false to cancel. on_done gets the
// Completion exactly once. Callbacks must be quick and must not wait on this request.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "power/policy.h"
#include "power/status.h"

namespace power {

enum class Priority : uint8_t { kHigh = 0, kNormal = 1, kLow = 2 };

struct SamplingOptions {
  float temperature = 0.8f;  // 0: greedy
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_last_n = 64;
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;  // 0 is a fixed seed, not a random one
};

// Speculative decoding (docs/SPECULATIVE.md): a drafter proposes up to k tokens, the model
// verifies them in one pass and only what it would have produced itself is committed
// (greedy: token for token the plain output; sampling: the same distribution).
// mode: off, auto (the draft model when one is loaded, else n-gram), ngram (prompt lookup
// over prompt + output), draft (LoadOptions::draft_model), mtp (not implemented: an error).
// A mode asked for by name that cannot run is an error, never a silent downgrade.
struct SpeculativeOptions {
  std::string mode = "off";
  int k = 4;             // draft length 1..16 (the upper bound when adaptive)
  bool adaptive = true;  // draft length from the running acceptance rate
  // State snapshots per verify round, 1..64 (0: min(k, 7)), for models with recurrent layers:
  // a rejection among the first s drafted positions restores a snapshot, one beyond them
  // replays the accepted tokens from the last snapshot. Requests get at most the s the model
  // was loaded with (LoadOptions::speculative.s sizes the snapshot pool). No effect on
  // attention-only models, whose KV cache is cut back exactly.
  int s = 0;
};

// Per request: drafted / accepted tokens, the target passes that verified drafts, every
// target pass that produced tokens for it, and the ratios.
struct SpeculativeUsage {
  std::string mode = "off";  // the mode the request ran with
  int64_t drafted = 0;
  int64_t accepted = 0;
  int64_t verify_passes = 0;
  int64_t target_passes = 0;
  // Recurrent layers: rollbacks from a snapshot, and those that replayed accepted tokens.
  int64_t restores = 0;
  int64_t replays = 0;
  int64_t replayed_tokens = 0;
  double acceptance_rate = 0;  // accepted / drafted
  double tokens_per_pass = 0;  // completion tokens / target passes
};

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  // Tool use (docs/STRUCTURED_OUTPUT.md): an assistant turn's calls as the OpenAI JSON array
  // [{"id","type":"function","function":{"name","arguments"}}] ("" for none); a tool turn's
  // tool_call_id and the tool's name.
  std::string tool_calls_json;
  std::string tool_call_id;
  std::string name;
};

// Structured output (docs/STRUCTURED_OUTPUT.md): kJsonObject constrains the output to one
// JSON object, kJsonSchema to one value valid against `schema_json` (a JSON Schema; an
// unsupported keyword makes submit() fail with kInvalidArgument naming it).
struct ResponseFormat {
  enum class Type : uint8_t { kText, kJsonObject, kJsonSchema };
  Type type = Type::kText;
  std::string schema_json;
};

// One token's log-probability: log-softmax of the logits after logit bias, penalties and
// the grammar mask, before temperature, top-k, top-p and min-p. `bytes` are the token's
// bytes (may be part of a UTF-8 character).
struct TokenLogprob {
  int32_t token = -1;
  std::string bytes;
  float logprob = 0;
};
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the top_logprobs most likely, most likely first
};

// A tool call parsed from the output (arguments: JSON text of an object).
struct ToolCall {
  std::string id;  // "call_<n>" unless the model wrote one
  std::string name;
  std::string arguments_json;
};

struct StreamEvent {
  int32_t token = -1;                       // the committed token id; -1 for the final flush
  std::string_view text;                    // text that became final with it
  const TokenLogprobs* logprobs = nullptr;  // this token's, when top_logprobs >= 0
};

enum class Finish : uint8_t { kStop, kLength, kCancelled, kError };
// "stop", "length", "cancelled", "error" (inline: receipts, below the runtime, use it too).
inline std::string_view finish_name(Finish f) {
  switch (f) {
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kError:
      return "error";
  }
  return "unknown";
}

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // served from the prefix cache
  int64_t completion_tokens = 0;
};

struct Timings {
  double queue_ms = 0;                // submit -> admitted
  double time_to_first_token_ms = 0;  // submit -> first token
  double prefill_ms = 0;              // admitted -> first token
  double decode_ms = 0;               // first token -> end
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;  // tokens after the first / decode_ms
};

struct Completion {
  Status status;  // ok, or why it ended early (kDeadlineExceeded, kCancelled, an error)
  Finish finish = Finish::kLength;
  std::string text;             // the emitted text (a matched stop string excluded)
  std::vector<int32_t> tokens;  // generated ids (a stop token or stop string's ids included)
  Usage usage;
  Timings timings;
  SpeculativeUsage speculative;
  std::vector<TokenLogprobs> logprobs;  // one per generated token when top_logprobs >= 0
  // Calls parsed from the output when the request passed tools (and tool_choice is not
  // "none"); `text` then holds only the content outside the calls, and OpenAI's finish_reason
  // is "tool_calls". Streaming sends the raw text (the calls included) as it is generated.
  std::vector<ToolCall> tool_calls;
  // The signed power.receipt.v1 (canonical JSON, docs/RECEIPTS.md) when the request asked for
  // one (want_receipt, or a policy with require_signature); else empty.
  std::string receipt;
};

struct GenerateRequest {
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::vector<ChatMessage> messages;
  bool add_bos = true;  // text prompts (and chat prompts whose template prints no BOS)

  SamplingOptions sampling;
  int32_t max_tokens = -1;
  // Opt-in: lower max_tokens to what the context leaves after the prompt instead of
  // rejecting the request (`power run` does this when -n is not given).
  bool max_tokens_up_to_context = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;

  // Structured output, logprobs and tools (docs/STRUCTURED_OUTPUT.md).
  ResponseFormat response_format;
  int32_t top_logprobs = -1;     // -1: no logprobs; 0..20: the chosen token's and N alternatives
  std::string tools_json;        // OpenAI `tools` array as JSON text; "" for none
  std::string tool_choice_json;  // "none" | "auto" | "required" | {"type":"function",...}; "": auto
  // false: at most one tool call in the reply (the first one the model writes is kept).
  bool parallel_tool_calls = true;
  // Extra variables for the chat template, as a JSON object ("" for none): e.g.
  // {"reasoning_effort": "low"} or {"enable_thinking": false} for templates that read them.
  std::string template_kwargs_json;

  Priority priority = Priority::kNormal;
  int replica = -1;  // which session replica runs it; -1: the least loaded
  // Speculative decoding for this request; unset: the model's LoadOptions::speculative.
  std::optional<SpeculativeOptions> speculative;
  // Predicted output (OpenAI's `prediction`): text the reply is expected to repeat largely,
  // e.g. a file being edited. It becomes a speculative draft source: the model verifies
  // stretches of it in one pass, so the output is exactly what it would be without it, only
  // sooner. "" for none. Does not apply to structured output (response_format, forced tools).
  std::string prediction;
  std::optional<std::chrono::steady_clock::time_point> deadline;

  // Receipts and acceptance (docs/RECEIPTS.md): want_receipt asks for a signed receipt in
  // Completion::receipt; a policy that the model or configuration does not meet makes
  // submit() return kPolicyRefused before any compute.
  bool want_receipt = false;
  std::optional<AcceptancePolicy> policy;

  std::function<bool(const StreamEvent&)> on_stream;
  std::function<void(const Completion&)> on_done;
};

}  // namespace power
