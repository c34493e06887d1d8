#include "engine/generate.h"

#include <algorithm>
#include <chrono>

namespace power {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

StopScan scan_stop_strings(std::string_view text, const std::vector<std::string>& stops) {
  StopScan s;
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    size_t p = text.find(stop);
    if (p != std::string::npos && p < s.match) s.match = p;
  }
  if (s.match != std::string::npos) return s;
  for (const std::string& stop : stops) {
    // Longest suffix of text that is a proper prefix of stop.
    for (size_t n = std::min(stop.size() - 1, text.size()); n > s.hold; --n) {
      if (text.compare(text.size() - n, n, stop, 0, n) == 0) {
        s.hold = n;
        break;
      }
    }
  }
  return s;
}

Result<GenerateResult> Generator::generate(std::span<const int32_t> prompt,
                                           const GenerateParams& params,
                                           const TextCallback& on_text) {
  using clock = std::chrono::steady_clock;
  const ModelHparams& hp = model_.hparams();
  if (prompt.empty()) return Status(StatusCode::kInvalidArgument, "the prompt has no tokens");
  POWER_RETURN_IF_ERROR(params.sampling.validate(hp.n_vocab));
  if (static_cast<int64_t>(prompt.size()) >= ws_.n_ctx) {
    return Status(StatusCode::kOutOfRange, "the prompt does not fit the context")
        .with("prompt_tokens", prompt.size())
        .with("n_ctx", ws_.n_ctx);
  }
  GenerateResult result;
  result.n_prompt = static_cast<int64_t>(prompt.size());
  KvSequence seq(&kv_);
  Sampler sampler(params.sampling, hp.n_vocab);
  for (int32_t t : prompt) sampler.accept(t);
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));

  // Prefill in batches of at most the workspace size; logits of the last token only.
  auto t0 = clock::now();
  for (size_t begin = 0; begin < prompt.size();) {
    size_t n = std::min(prompt.size() - begin, static_cast<size_t>(ws_.max_tokens));
    ForwardChunk chunk{&seq, prompt.subspan(begin, n), false};
    POWER_RETURN_IF_ERROR(
        model_.forward(ws_, std::span<const ForwardChunk>(&chunk, 1), logits.data()));
    begin += n;
  }
  auto t1 = clock::now();
  result.prefill_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();

  text::StreamOptions so;
  so.at_sequence_start = prompt.size() == 1 && tokenizer_.special().bos == prompt[0];
  text::StreamingDetokenizer detok(tokenizer_, so);
  std::string pending;  // decoded text not yet emitted (could start a stop string)
  bool cancelled = false;
  bool stopped_by_string = false;
  auto emit = [&](std::string_view s) {
    if (s.empty() || cancelled) return;
    result.text.append(s);
    if (on_text && !on_text(s)) cancelled = true;
  };
  result.finish = FinishReason::kLength;
  for (;;) {
    if (params.max_tokens >= 0 && static_cast<int64_t>(result.tokens.size()) >= params.max_tokens) {
      break;
    }
    if (seq.n_tokens() >= ws_.n_ctx) break;
    const int32_t next = sampler.sample(logits.data());
    sampler.accept(next);
    result.tokens.push_back(next);
    if (!params.ignore_eos && tokenizer_.is_eog(next)) {
      result.finish = FinishReason::kStop;
      break;
    }
    POWER_RETURN_IF_ERROR(detok.push(next, pending));
    StopScan scan = scan_stop_strings(pending, params.stop);
    if (scan.match != std::string::npos) {
      emit(std::string_view(pending).substr(0, scan.match));
      pending.clear();
      result.finish = FinishReason::kStop;
      stopped_by_string = true;
      break;
    }
    emit(std::string_view(pending).substr(0, pending.size() - scan.hold));
    pending.erase(0, pending.size() - scan.hold);
    if (cancelled) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (params.max_tokens >= 0 && static_cast<int64_t>(result.tokens.size()) >= params.max_tokens) {
      break;
    }
    if (seq.n_tokens() >= ws_.n_ctx) break;
    const int32_t one[1] = {next};
    ForwardChunk chunk{&seq, std::span<const int32_t>(one, 1), false};
    POWER_RETURN_IF_ERROR(
        model_.forward(ws_, std::span<const ForwardChunk>(&chunk, 1), logits.data()));
  }
  if (!stopped_by_string) {
    detok.finish(pending);
    emit(pending);
  }
  result.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t1).count();
  return result;
}

}  // namespace power
