// The sampler's grammar mask and logprob records (declared in engine/sampler.h).
#include <algorithm>
#include <cmath>

#include "engine/sampler.h"

namespace power {

void Sampler::set_grammar(std::shared_ptr<const grammar::Grammar> grammar,
                          std::shared_ptr<const grammar::TokenTrie> trie) {
  POWER_CHECK(trie && static_cast<int64_t>(trie->n_vocab()) == n_vocab_);
  grammar_ = std::make_unique<grammar::GrammarMatcher>(std::move(grammar));
  trie_ = std::move(trie);
  mask_.assign(static_cast<size_t>(n_vocab_), 0);
}

void Sampler::apply_grammar_mask() {
  if (!grammar_) return;
  grammar_->fill_token_mask(*trie_, mask_);
  for (size_t i = 0; i < mask_.size(); ++i) {
    if (!mask_[i]) logits_[i] = -INFINITY;
  }
}

void Sampler::on_sampled(int32_t token) {
  sampled_ = false;
  if (grammar_ && !grammar_->accept_token(*trie_, token)) grammar_failed_ = true;
  if (top_logprobs_ < 0) return;
  // log-softmax over the prepared row: logit - (max + log sum exp(logit - max)).
  float max = -INFINITY;
  for (float l : logits_) max = std::max(max, l);
  SampledLogprobs rec;
  rec.chosen.token = token;
  if (max == -INFINITY) {
    rec.chosen.logprob = -INFINITY;
    logprobs_.push_back(std::move(rec));
    return;
  }
  double sum = 0;
  for (float l : logits_) {
    if (l != -INFINITY) sum += std::exp(static_cast<double>(l) - max);
  }
  const double lse = max + std::log(sum);
  auto logprob = [&](int32_t t) {
    return static_cast<float>(logits_[static_cast<size_t>(t)] - lse);
  };
  rec.chosen.logprob = logprob(token);
  // Top-N by a bounded insertion (N <= 20): ties to the lower id.
  const size_t n = static_cast<size_t>(std::min(top_logprobs_, 20));
  std::vector<int32_t> top;
  top.reserve(n + 1);
  if (n > 0) {
    for (int64_t i = 0; i < n_vocab_; ++i) {
      const float l = logits_[static_cast<size_t>(i)];
      if (l == -INFINITY) continue;
      if (top.size() == n && l <= logits_[static_cast<size_t>(top.back())]) continue;
      auto pos = std::upper_bound(top.begin(), top.end(), l, [&](float v, int32_t t) {
        return v > logits_[static_cast<size_t>(t)];
      });
      top.insert(pos, static_cast<int32_t>(i));
      if (top.size() > n) top.pop_back();
    }
  }
  for (int32_t t : top) rec.top.push_back({t, logprob(t)});
  logprobs_.push_back(std::move(rec));
}

}  // namespace power
