// One sequence's generation loop: prefill the prompt in batches, then sample, check end of
// generation and stop strings, and stream text that is final.
//
// Text is streamed through a callback as soon as it cannot become part of a stop string, and
// never splits a UTF-8 character (text::StreamingDetokenizer). Generation ends at an
// end-of-generation token (unless ignore_eos), a stop string (its text is not emitted), the
// token limit, the context size, or when the callback returns false.
// Memory: the model Workspace and the KvCache are the caller's, planned before the call; the
// loop allocates only its output.
// Thread-safety: one Generator per sequence and thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "host/model.h"
#include "text/tokenizer.h"

namespace power {

struct GenerateParams {
  int32_t max_tokens = -1;  // < 0: until the context is full
  std::vector<std::string> stop;
  bool ignore_eos = false;
  SamplerParams sampling;
};

enum class FinishReason { kStop, kLength, kCancelled };
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "cancelled"

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token or stop string's ids included)
  std::string text;             // the emitted text
  FinishReason finish = FinishReason::kLength;
  int64_t n_prompt = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
};

// Receives each piece of final text; return false to stop generating.
using TextCallback = std::function<bool(std::string_view)>;

class Generator {
 public:
  Generator(const Model& model, const text::Tokenizer& tokenizer, Workspace& ws, KvCache& kv)
      : model_(model), tokenizer_(tokenizer), ws_(ws), kv_(kv) {}

  Result<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateParams& params,
                                  const TextCallback& on_text);

 private:
  const Model& model_;
  const text::Tokenizer& tokenizer_;
  Workspace& ws_;
  KvCache& kv_;
};

// Splits `text` at the first stop string: returns the position of the match (npos if none)
// and, when there is none, how many trailing bytes must be held back because they could
// begin a stop string.
struct StopScan {
  size_t match = std::string::npos;
  size_t hold = 0;
};
StopScan scan_stop_strings(std::string_view text, const std::vector<std::string>& stops);

}  // namespace power
