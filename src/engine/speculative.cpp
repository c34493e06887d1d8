#include "engine/speculative.h"

#include <algorithm>
#include <cmath>

namespace power::spec {

Result<Mode> parse_mode(std::string_view name) {
  if (name == "off") return Mode::kOff;
  if (name == "auto") return Mode::kAuto;
  if (name == "ngram") return Mode::kNgram;
  if (name == "draft") return Mode::kDraft;
  if (name == "mtp") return Mode::kMtp;
  return Status(StatusCode::kInvalidArgument,
                "unknown speculative mode (expected off, auto, ngram, draft or mtp)")
      .with("mode", std::string(name));
}

std::string_view mode_name(Mode mode) {
  switch (mode) {
    case Mode::kOff:
      return "off";
    case Mode::kAuto:
      return "auto";
    case Mode::kNgram:
      return "ngram";
    case Mode::kDraft:
      return "draft";
    case Mode::kMtp:
      return "mtp";
  }
  return "unknown";
}

Status Config::validate() const {
  auto bad = [](const char* field, int value, const char* range) {
    return Status(StatusCode::kInvalidArgument, "speculative option out of range")
        .with("field", field)
        .with("value", value)
        .with("range", range);
  };
  if (k < 1 || k > kMaxDraft) return bad("k", k, "1..16");
  if (s < 0 || s > 64) return bad("s", s, "1..64");
  if (ngram_min < 1 || ngram_min > 64) return bad("ngram_min", ngram_min, "1..64");
  if (ngram_max < ngram_min || ngram_max > 64) return bad("ngram_max", ngram_max, "ngram_min..64");
  return Status();
}

int NgramDrafter::draft(std::span<const int32_t> tokens, int max_k,
                        std::vector<int32_t>& out) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (max_k <= 0) return 0;
  for (int len = std::min<int64_t>(max_, n - 1); len >= min_; --len) {
    const auto suffix = tokens.subspan(static_cast<size_t>(n - len));
    // Most recent earlier occurrence: its start i < n - len, scanning backwards.
    for (int64_t i = n - len - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      // The tokens after the match, up to max_k. A continuation that runs into the end of
      // the sequence goes on with the period it found (n - from tokens back): the draft's own
      // tokens, so that a loop of any length drafts max_k tokens, not one period.
      const int64_t from = i + len;  // first token after the match (< n)
      const size_t first = out.size();
      for (int64_t j = 0; j < max_k; ++j) {
        const int64_t at = from + j;
        out.push_back(at < n ? tokens[static_cast<size_t>(at)]
                             : out[first + static_cast<size_t>(at - n)]);
      }
      return max_k;
    }
  }
  return 0;
}

VerifyResult verify(Sampler& sampler, const float* rows, int64_t n_vocab,
                    std::span<const int32_t> draft, std::span<const float> q,
                    std::vector<float>& scratch) {
  const size_t nv = static_cast<size_t>(n_vocab);
  VerifyResult res;
  const bool greedy = sampler.params().temperature == 0.0f;
  if (!greedy) scratch.resize(2 * nv);
  for (size_t i = 0; i <= draft.size(); ++i) {
    const float* row = rows + i * nv;
    if (i == draft.size()) {  // every draft accepted: the bonus token
      res.next = sampler.sample(row);
      sampler.accept(res.next);
      return res;
    }
    const int32_t d = draft[i];
    if (greedy) {
      const int32_t t = sampler.sample(row);
      sampler.accept(t);
      if (t != d) {
        res.next = t;
        return res;
      }
      ++res.accepted;
      continue;
    }
    float* p = scratch.data();
    float* resid = scratch.data() + nv;
    sampler.distribution(row, p);
    const float* qi = q.empty() ? nullptr : q.data() + i * nv;
    const float qd = qi != nullptr ? qi[d] : 1.0f;
    const float pd = p[d];
    // Accept with probability min(1, p/q): u < p/q with u uniform in [0, 1).
    const float u = sampler.uniform();
    if (qd > 0.0f && u * qd < pd) {
      sampler.accept(d);
      ++res.accepted;
      continue;
    }
    // Rejected: draw from the normalized residual max(0, p - q).
    double mass = 0.0;
    for (size_t v = 0; v < nv; ++v) {
      const float qv = qi != nullptr ? qi[v] : (static_cast<int32_t>(v) == d ? 1.0f : 0.0f);
      resid[v] = std::max(0.0f, p[v] - qv);
      mass += resid[v];
    }
    // No residual mass means p <= q everywhere, i.e. p == q, where rejection has probability
    // 0; rounding can still get here, and then p itself is the right distribution.
    res.next = sampler.draw(mass > 0.0 ? resid : p);
    sampler.accept(res.next);
    return res;
  }
  return res;
}

AdaptiveK::AdaptiveK(int k_max, bool adaptive)
    : k_max_(std::clamp(k_max, 1, kMaxDraft)), adaptive_(adaptive), k_(k_max_) {
  // Start as if the rate justified k_max: a / (1 - a) = k_max.
  rate_ = static_cast<double>(k_max_) / (k_max_ + 1.0);
}

int AdaptiveK::take() {
  if (!adaptive_ || rate_ >= kPauseBelow) {
    paused_steps_ = 0;
    return k_;
  }
  if (++paused_steps_ < kProbeEvery) return 0;
  paused_steps_ = 0;
  return 1;
}

void AdaptiveK::update(int drafted, int accepted) {
  if (!adaptive_ || drafted <= 0) return;
  // Weight the update by the number of verified drafts (each is one Bernoulli sample).
  const double observed = static_cast<double>(accepted) / drafted;
  const double w = 1.0 - std::pow(0.9, drafted);
  rate_ = (1.0 - w) * rate_ + w * observed;
  const double a = std::min(rate_, 0.99);
  const double run = a / (1.0 - a);
  k_ = std::clamp(static_cast<int>(std::ceil(run)), 1, k_max_);
}

void reset_penalty_history(Sampler& sampler, std::span<const int32_t> tokens) {
  Sampler::State st = sampler.snapshot();
  st.history.clear();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t last_n = sampler.params().penalty_last_n;
  for (int64_t i = std::max<int64_t>(0, n - last_n); i < n && last_n > 0; ++i) {
    st.history.push_back(tokens[static_cast<size_t>(i)]);
  }
  sampler.restore(st);
}

}  // namespace power::spec
