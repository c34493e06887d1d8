// Speculative decoding, the model-free parts: modes and their configuration, the n-gram
// (prompt lookup) drafter, the acceptance rule and the adaptive draft length.
//
// One speculative step for a sequence whose committed tokens are t[0..n): a drafter proposes
// d[0..k); the target model runs one pass over [t[n-1], d[0..k)] and yields k+1 logit rows;
// verify() walks them in order with the sequence's own sampler:
//  - temperature 0: the target's token for row i is the sampler's argmax (penalties
//    included); d[i] is accepted while it equals that token, and the first mismatch is
//    replaced by the target's token, so the output is the plain greedy output token for token;
//  - temperature > 0: speculative sampling (Leviathan et al. 2023; Chen et al. 2023): d[i]
//    drawn from q is accepted with probability min(1, p(d[i]) / q(d[i])), where p is the
//    distribution the sampler would draw from (its whole chain applied); on rejection the
//    token is drawn from the normalized residual max(0, p - q). A deterministic drafter
//    (n-gram) is a point mass q = 1{d[i]}: accept with probability p(d[i]), else draw from p
//    with d[i] removed. When every draft is accepted, a bonus token is drawn from row k.
// Every committed token is passed to Sampler::accept, so the penalty history and the RNG are
// exactly those of the committed sequence; the caller truncates the KV to the committed
// positions (the rollback).
// Thread-safety: none; one instance per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"

namespace power::spec {

enum class Mode { kOff, kAuto, kNgram, kDraft, kMtp };
Result<Mode> parse_mode(std::string_view name);  // off, auto, ngram, draft, mtp
std::string_view mode_name(Mode mode);

inline constexpr int kMaxDraft = 16;

struct Config {
  Mode mode = Mode::kOff;
  int k = 4;             // draft length, 1..16 (with adaptive: the upper bound)
  bool adaptive = true;  // adjust k from the running acceptance rate
  int s = 0;             // state snapshots per verify round (recurrent layers), 0..64, 0: min(k, 7)
  int ngram_min = 1;     // n-gram drafter: shortest suffix matched
  int ngram_max = 4;     // and longest, tried first
  // kInvalidArgument naming the field when out of range.
  Status validate() const;
  int snapshots() const { return s > 0 ? s : (k < 7 ? k : 7); }
};

// Prompt lookup: finds the most recent earlier occurrence of the sequence's last n tokens
// (n from ngram_max down to ngram_min) and proposes the tokens that followed it; where those
// reach the end of the sequence, the draft repeats the period between the match and the end
// (a sequence caught in a loop of p tokens drafts max_k tokens of the loop, not p).
class NgramDrafter {
 public:
  NgramDrafter(int ngram_min, int ngram_max) : min_(ngram_min), max_(ngram_max) {}
  // Appends up to max_k proposed tokens to `out`; returns how many.
  int draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out) const;

 private:
  int min_, max_;
};

struct VerifyResult {
  int accepted = 0;   // drafts committed (a prefix of the draft)
  int32_t next = -1;  // the token the target adds after them (correction or bonus)
};

// Verifies `draft` against `rows` (draft.size() + 1 rows of n_vocab logits) with the target
// sequence's sampler. `q`: draft.size() rows of the drafter's distributions, or empty for a
// deterministic drafter (point masses). `scratch` holds 2 * n_vocab floats (resized here).
VerifyResult verify(Sampler& sampler, const float* rows, int64_t n_vocab,
                    std::span<const int32_t> draft, std::span<const float> q,
                    std::vector<float>& scratch);

// The draft length to use next, from the running acceptance rate. With per-token acceptance
// a, the expected run of accepted drafts is a / (1 - a); the next k is that, rounded up,
// within [1, k_max]. The rate is an exponential moving average over verified drafts.
// Back-off: while the rate is below kPauseBelow, drafting pays for nothing (every rejected
// draft costs a verify row and the drafter's work), so take() returns 0 (decode plainly)
// except for a one-token probe every kProbeEvery steps, which keeps the rate current.
class AdaptiveK {
 public:
  static constexpr double kPauseBelow = 0.2;
  static constexpr int kProbeEvery = 8;
  AdaptiveK(int k_max, bool adaptive);
  int next() const { return k_; }
  // The draft length for this step (0: pause), advancing the probe counter.
  int take();
  void update(int drafted, int accepted);
  double rate() const { return rate_; }

 private:
  int k_max_;
  bool adaptive_;
  double rate_;
  int k_;
  int paused_steps_ = 0;
};

// Shared by the model drafters (draft model, MTP head).
//
// Sets `sampler`'s penalty history to the last penalty_last_n tokens of the committed
// sequence `tokens`; its RNG state runs on.
void reset_penalty_history(Sampler& sampler, std::span<const int32_t> tokens);

// Draws max_k draft tokens into `out`: greedy argmax at temperature 0, else a draw from the
// sampler's distribution, each distribution kept in `q` (row j for draft j) for the acceptance
// rule. `logits` holds the drafter's next-token logits; `advance(token)` runs the drafter on
// the drawn token and refreshes them before every draw but the first.
template <class Advance>
Status draw_drafts(Sampler& sampler, const std::vector<float>& logits, std::vector<float>& q,
                   int max_k, std::vector<int32_t>& out, Advance&& advance) {
  const bool greedy = sampler.params().temperature == 0.0f;
  const size_t nv = logits.size();
  for (int j = 0; j < max_k; ++j) {
    int32_t d;
    if (greedy) {
      d = sampler.sample(logits.data());
    } else {
      q.resize((static_cast<size_t>(j) + 1) * nv);
      float* qj = q.data() + static_cast<size_t>(j) * nv;
      sampler.distribution(logits.data(), qj);
      d = sampler.draw(qj);
    }
    sampler.accept(d);
    out.push_back(d);
    if (j + 1 < max_k) POWER_RETURN_IF_ERROR(advance(d));
  }
  return Status();
}

}  // namespace power::spec
