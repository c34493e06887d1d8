#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace power {

Status SamplerParams::validate(int64_t n_vocab) const {
  auto bad = [](const char* field, double value) {
    return Status(StatusCode::kInvalidArgument, "sampling parameter out of range")
        .with("field", field)
        .with("value", value);
  };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return bad("temperature", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", min_p);
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty)) {
    return bad("repeat_penalty", repeat_penalty);
  }
  if (!std::isfinite(frequency_penalty)) return bad("frequency_penalty", frequency_penalty);
  if (!std::isfinite(presence_penalty)) return bad("presence_penalty", presence_penalty);
  if (penalty_last_n < 0) return bad("penalty_last_n", penalty_last_n);
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab) return bad("logit_bias", id);
    if (std::isnan(bias)) return bad("logit_bias", bias);
  }
  return Status();
}

uint32_t Sampler::xorshift_u32(uint64_t* state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return static_cast<uint32_t>((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

float Sampler::xorshift_f32(uint64_t* state) {
  return static_cast<float>(xorshift_u32(state) >> 8) / 16777216.0f;
}

Sampler::Sampler(const SamplerParams& params, int64_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      rng_(params.seed != 0 ? params.seed : 0x9E3779B97F4A7C15ull),
      logits_(static_cast<size_t>(n_vocab)),
      counts_(static_cast<size_t>(n_vocab), 0) {
  cand_.reserve(static_cast<size_t>(n_vocab));
}

void Sampler::accept(int32_t token) {
  if (sampled_) on_sampled(token);
  if (params_.penalty_last_n == 0) return;
  history_.push_back(token);
  while (static_cast<int32_t>(history_.size()) > params_.penalty_last_n) history_.pop_front();
}

void Sampler::prepare(const float* logits) {
  std::copy(logits, logits + n_vocab_, logits_.begin());
  for (const auto& [id, bias] : params_.logit_bias) logits_[static_cast<size_t>(id)] += bias;
  const bool penalize = params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                        params_.presence_penalty != 0.0f;
  if (penalize && !history_.empty()) {
    for (int32_t t : history_) ++counts_[static_cast<size_t>(t)];
    for (int32_t t : history_) {
      int32_t& c = counts_[static_cast<size_t>(t)];
      if (c == 0) continue;  // already applied for this token
      float& l = logits_[static_cast<size_t>(t)];
      l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
      l -= static_cast<float>(c) * params_.frequency_penalty + params_.presence_penalty;
      c = 0;
    }
  }
}

int32_t Sampler::argmax() const {
  return static_cast<int32_t>(argmax_f32(logits_.data(), n_vocab_));
}

size_t Sampler::candidates(bool& sorted) {
  sorted = false;
  // Temperature and softmax over every allowed token, summed in id order in float (as
  // llama2.c does, so seeded draws reproduce it), then sorted by probability (stable: ties
  // keep the lower id first) and cut to top-k.
  float max_logit = -INFINITY;
  for (int64_t i = 0; i < n_vocab_; ++i)
    max_logit = std::max(max_logit, logits_[static_cast<size_t>(i)]);
  cand_.clear();
  if (max_logit == -INFINITY) return 0;
  const float max = max_logit / params_.temperature;
  float sum = 0.0f;
  for (int64_t i = 0; i < n_vocab_; ++i) {
    const float l = logits_[static_cast<size_t>(i)];
    if (l == -INFINITY) continue;
    const float e = std::exp(l / params_.temperature - max);
    cand_.emplace_back(e, static_cast<int32_t>(i));
    sum += e;
  }
  for (auto& c : cand_) c.first /= sum;
  if (params_.top_k <= 0 && params_.top_p >= 1.0f && params_.min_p <= 0.0f) return cand_.size();
  sorted = true;
  std::stable_sort(cand_.begin(), cand_.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < cand_.size()) {
    cand_.resize(static_cast<size_t>(params_.top_k));
    // Renormalize over the k kept, so top-p and min-p see the top-k distribution.
    float kept = 0.0f;
    for (const auto& c : cand_) kept += c.first;
    for (auto& c : cand_) c.first /= kept;
  }
  size_t keep = cand_.size();
  if (params_.top_p < 1.0f) {
    float cum = 0.0f;
    for (size_t i = 0; i < cand_.size(); ++i) {
      cum += cand_[i].first;
      if (cum > params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float floor = params_.min_p * cand_[0].first;
    size_t n = 1;
    while (n < keep && cand_[n].first >= floor) ++n;
    keep = n;
  }
  return keep;
}

int32_t Sampler::sample(const float* logits) {
  prepare(logits);
  apply_grammar_mask();
  sampled_ = true;
  if (params_.temperature == 0.0f) return argmax();
  bool sorted = false;
  const size_t keep = candidates(sorted);
  if (keep == 0) return 0;  // every token banned: nothing better than id 0
  if (!sorted) {
    // Nothing truncated: llama2.c's sample_mult walks the distribution in id order.
    const float r = xorshift_f32(&rng_);
    float cdf = 0.0f;
    for (const auto& c : cand_) {
      cdf += c.first;
      if (r < cdf) return c.second;
    }
    return cand_.back().second;
  }
  // The walk's scale: the kept mass (llama2.c: the cumulative probability at the cut).
  float total = 0.0f;
  for (size_t i = 0; i < keep; ++i) total += cand_[i].first;
  const float r = xorshift_f32(&rng_) * total;
  float cdf = 0.0f;
  for (size_t i = 0; i < keep; ++i) {
    cdf += cand_[i].first;
    if (r < cdf) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

void Sampler::distribution(const float* logits, float* probs) {
  std::fill(probs, probs + n_vocab_, 0.0f);
  prepare(logits);
  apply_grammar_mask();
  sampled_ = true;  // the token accepted next is recorded against this row (as sample())
  if (params_.temperature == 0.0f) {
    probs[argmax()] = 1.0f;
    return;
  }
  bool sorted = false;
  const size_t keep = candidates(sorted);
  if (keep == 0) {
    probs[0] = 1.0f;  // as sample(): every token banned gives id 0
    return;
  }
  float total = 0.0f;
  for (size_t i = 0; i < keep; ++i) total += cand_[i].first;
  for (size_t i = 0; i < keep; ++i) probs[cand_[i].second] = cand_[i].first / total;
}

int32_t Sampler::draw(const float* probs) {
  double total = 0.0;
  int32_t last = 0;
  for (int64_t i = 0; i < n_vocab_; ++i) {
    if (probs[i] > 0.0f) {
      total += probs[i];
      last = static_cast<int32_t>(i);
    }
  }
  const double r = static_cast<double>(xorshift_f32(&rng_)) * total;
  double cdf = 0.0;
  for (int64_t i = 0; i < n_vocab_; ++i) {
    if (probs[i] <= 0.0f) continue;
    cdf += probs[i];
    if (r < cdf) return static_cast<int32_t>(i);
  }
  return last;
}

}  // namespace power
