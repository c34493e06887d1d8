// The sampler chain: turns a row of logits into the next token.
//
// Order (each step optional): logit bias -> repetition / frequency / presence penalties over
// the last `penalty_last_n` tokens -> (temperature 0: argmax, ties to the lowest id) ->
// top-k -> temperature -> softmax -> top-p -> min-p -> draw.
// Temperature is applied before top-p and min-p, as in Hugging Face transformers, vLLM and
// llama2.c (llama.cpp applies it after them; at temperature 1 both agree).
// Top-p keeps the most probable tokens until their cumulative probability exceeds p (the
// token that crosses p is kept). The draw uses llama2.c's xorshift64* generator and its
// inverse-CDF walk over the kept tokens sorted by probability, so a seeded run reproduces
// llama2.c's `run -t T -p P -s SEED` where the chains agree. seed 0 is replaced by a fixed
// non-zero constant (xorshift state must be non-zero); the CLI maps "no seed" to a random one.
// State (RNG and penalty history) can be snapshotted and restored exactly (speculative
// rollback). Memory: candidate buffers of n_vocab entries allocated once at construction.
// Thread-safety: one sampler per sequence, used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "base/status.h"

namespace power {

struct SamplerParams {
  float temperature = 0.8f;     // 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; logit > 0 divided by it, else multiplied
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_last_n = 64;                        // tokens of history the penalties look at
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit; -inf bans
  uint64_t seed = 0;

  // invalid_argument naming the field when a value is out of range (negative temperature,
  // top_p outside (0, 1], a logit_bias id outside the vocabulary, ...).
  Status validate(int64_t n_vocab) const;
};

class Sampler {
 public:
  Sampler(const SamplerParams& params, int64_t n_vocab);

  // Picks the next token from one row of n_vocab logits (not modified).
  int32_t sample(const float* logits);
  // Records a token of the sequence (prompt or generated) for the penalties.
  void accept(int32_t token);

  struct State {
    uint64_t rng = 0;
    std::deque<int32_t> history;
  };
  State snapshot() const { return {rng_, history_}; }
  void restore(const State& s) {
    rng_ = s.rng;
    history_ = s.history;
  }
  const SamplerParams& params() const { return params_; }

  // llama2.c's generator, exposed for tests.
  static uint32_t xorshift_u32(uint64_t* state);
  static float xorshift_f32(uint64_t* state);

 private:
  SamplerParams params_;
  int64_t n_vocab_;
  uint64_t rng_;
  std::deque<int32_t> history_;
  std::vector<float> logits_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<int32_t> counts_;
};

}  // namespace power
