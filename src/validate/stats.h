// The statistics `power ab` and `power perplexity` decide with (docs/VALIDATION.md): medians
// and percentiles, the two-order speed score with its paired bootstrap interval, the exact
// McNemar test, and the random stream those use. Everything here is deterministic: the same
// inputs give the same bits on every machine, which is what lets `power ab verify` re-derive
// an evidence file's figures and compare them exactly.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace power::validate {

// Median of `v` (mean of the two middle values for an even count); 0 for an empty span.
double median(std::span<const double> v);

// Percentile p in [0, 100] by linear interpolation between closest ranks (numpy's default,
// "linear"): rank = p/100 * (n - 1). 0 for an empty span.
double percentile(std::span<const double> v, double p);

// A random stream defined bit for bit: SplitMix64 (Steele, Lea, Flood 2014).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, n) by rejection (no modulo bias); n > 0.
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

// The two-order speed comparison. Round r ran baseline then candidate (order "AB") and
// candidate then baseline (order "BA"); ab[r] and ba[r] are candidate/baseline speed ratios
// measured within each order. The score is the lower of the two order medians, so a
// candidate that only wins when it runs second (warm caches, turbo budget, page cache) does
// not win.
struct OrderScore {
  double median_ab = 0;  // median over rounds of the AB-order ratios
  double median_ba = 0;
  double score = 0;  // min(median_ab, median_ba)
};
OrderScore order_score(std::span<const double> ab, std::span<const double> ba);

// Paired bootstrap percentile interval of the score: `resamples` times, draw rounds with
// replacement (a round keeps its AB and BA ratio together), compute order_score().score;
// the interval is the (1-level)/2 and (1+level)/2 percentiles of those scores. Round
// indices come from SplitMix64(seed).below(n).
struct Interval {
  double low = 0, high = 0;
};
Interval bootstrap_score_interval(std::span<const double> ab, std::span<const double> ba,
                                  int resamples, uint64_t seed, double level);

// Exact two-sided McNemar test on the discordant pairs: b items only the baseline got right,
// c items only the candidate got right. p = min(1, 2 * P[X <= min(b, c)]) for
// X ~ Binomial(b + c, 1/2); p = 1 when b + c = 0.
double mcnemar_exact_p(int64_t b, int64_t c);

}  // namespace power::validate
