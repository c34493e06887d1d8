// `power perplexity`: perplexity of a text under a model, and the KL divergence of a model's
// next-token distributions from a base model's saved ones, computed the way llama.cpp's
// llama-perplexity computes them so the two tools' figures can be compared on the same file
// and text (docs/VALIDATION.md):
//   - the text is tokenized once, BOS first when the vocabulary adds one;
//   - it is cut into n_chunk = n_tokens / n_ctx chunks of n_ctx tokens (the rest is unused;
//     at least two chunks are needed); each chunk is one fresh sequence whose first token is
//     replaced by BOS when the vocabulary adds one;
//   - only the second half is scored: the logits at positions first = n_ctx/2 .. n_ctx-2
//     predict the chunk's tokens first+1 .. n_ctx-1 (n_ctx - 1 - first per chunk), so every
//     scored token has at least n_ctx/2 tokens of context;
//   - PPL = exp(mean NLL); its ± is PPL x the standard error of the NLLs.
// With a base (a file written by --save-logits from the base model on the same text, n_ctx
// and tokens), each scored position also gives KL(base || model) = sum_i p_base(i) *
// (log p_base(i) - log p(i)), whether the top-1 tokens agree, and Δp = p(token) -
// p_base(token) of the actual next token.
// Thread-safety: one call at a time per Runtime model, as Runtime::logits allows.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "power/runtime.h"

namespace power::validate {

// Base log-probabilities saved by --save-logits: "POWERKLD" v1 (docs/VALIDATION.md lists the
// layout): n_ctx, n_vocab, n_chunk, the text's tokens, then one float32 log-softmax row per
// scored position in order.
struct BaseLogits {
  int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
  std::vector<int32_t> tokens;
  std::vector<float> log_probs;  // scored positions x n_vocab
};
Status write_base_logits(const std::string& path, const BaseLogits& base);
// kCorrupt for a file that is not one (bad magic, version, sizes that do not add up).
Result<BaseLogits> read_base_logits(const std::string& path);

struct KldStats {
  int64_t count = 0;
  double mean = 0, mean_err = 0;  // mean KL divergence and its standard error
  double max = 0, p99_9 = 0, p99 = 0, p95 = 0, p90 = 0, median = 0, p10 = 0, p5 = 0, p1 = 0,
         p0_1 = 0, min = 0;
  double same_top_p = 0, same_top_p_err = 0;  // percent of positions whose argmax agrees
  double ppl_base = 0;                        // the base's perplexity from the saved rows
  double mean_ln_ppl_ratio = 0, mean_ln_ppl_ratio_err = 0;  // mean ln(p_base/p) = ln(PPL/PPL_base)
  double rms_dp = 0;                                        // root mean square of Δp, percent
  double max_dp = 0, min_dp = 0, median_dp = 0;             // percent
};

struct PerplexityResult {
  int32_t n_ctx = 0;
  int64_t n_tokens = 0;  // tokens of the whole text
  int32_t n_chunk = 0;
  int64_t scored = 0;  // positions scored
  double ppl = 0, ppl_err = 0;
  std::vector<double> running;  // PPL after each chunk, as llama-perplexity prints [1]..[n]
  std::optional<KldStats> kld;
};

struct PerplexityOptions {
  int32_t n_ctx = 0;
  int32_t max_chunks = -1;  // -1: all
  // Called after each chunk with (chunk index, running PPL); may print progress.
  std::function<void(int32_t, double)> on_chunk;
};

// Scores `text` under `model` (loaded with a context of at least n_ctx). With `base`, also
// the KL statistics (kInvalidArgument when its n_ctx, vocabulary size or tokens differ from
// this run's). With `save`, fills it with this run's rows for a later comparison.
Result<PerplexityResult> perplexity(Runtime& rt, const ModelHandle& model, const std::string& text,
                                    const PerplexityOptions& options, const BaseLogits* base,
                                    BaseLogits* save);

}  // namespace power::validate
