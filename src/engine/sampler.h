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
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/grammar.h"

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
  // The distribution sample() draws from for this row, dense over the vocabulary (the whole
  // chain applied; kept tokens renormalized, the rest 0; temperature 0: a point mass on the
  // argmax). Speculative decoding compares these (p and q). Does not touch the RNG.
  void distribution(const float* logits, float* probs);
  // Draws a token from a dense distribution (need not sum to 1; walked in id order with the
  // sampler's RNG). Returns the last token with mass when rounding runs past the end.
  int32_t draw(const float* probs);
  // A uniform draw in [0, 1) from the sampler's RNG (the acceptance test).
  float uniform() { return xorshift_f32(&rng_); }

  // Structured output (engine/grammar.h): from now on every token the matcher refuses is
  // banned (-inf) right after the bias and penalties, and accept() of a sampled token advances
  // the matcher. Only sample() feeds it; distribution()/draw() (speculation) do not.
  void set_grammar(std::shared_ptr<const grammar::Grammar> grammar,
                   std::shared_ptr<const grammar::TokenTrie> trie);
  // True once a sampled token was refused by the grammar (every token was banned).
  bool grammar_failed() const { return grammar_failed_; }
  const grammar::GrammarMatcher* grammar() const { return grammar_.get(); }
  // Logprobs: top_n >= 0 records, at accept() of each sampled token, its log-probability and
  // the top_n (<= 20) most likely tokens, from the log-softmax of the row after bias,
  // penalties and grammar mask (before temperature and truncation). -1: off.
  void set_logprobs(int top_n) { top_logprobs_ = top_n; }
  struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0;
  };
  struct SampledLogprobs {
    TokenLogprob chosen;
    std::vector<TokenLogprob> top;
  };
  // The records since the last call, oldest first.
  std::vector<SampledLogprobs> take_logprobs() { return std::exchange(logprobs_, {}); }

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
  // Copies the row into logits_ and applies the logit bias and the penalties.
  void prepare(const float* logits);
  int32_t argmax() const;  // over logits_, ties to the lowest id
  // Softmax (after temperature) into cand_, then top-k / top-p / min-p; returns the number
  // of kept candidates and sets `sorted` (false: cand_ is in id order, nothing truncated).
  // 0 when every token is banned.
  size_t candidates(bool& sorted);
  // engine/sampler_constraint.cpp: the grammar mask (end of prepare) and the bookkeeping of a
  // sampled token (start of accept).
  void apply_grammar_mask();
  void on_sampled(int32_t token);
  std::unique_ptr<grammar::GrammarMatcher> grammar_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  std::vector<uint8_t> mask_;
  bool sampled_ = false;  // prepare() ran since the last accept()
  bool grammar_failed_ = false;
  int top_logprobs_ = -1;
  std::vector<SampledLogprobs> logprobs_;

  SamplerParams params_;
  int64_t n_vocab_;
  uint64_t rng_;
  std::deque<int32_t> history_;
  std::vector<float> logits_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<int32_t> counts_;
};

}  // namespace power
