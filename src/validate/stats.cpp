#include "validate/stats.h"

#include <algorithm>
#include <cmath>

namespace power::validate {

double median(std::span<const double> v) {
  if (v.empty()) return 0;
  std::vector<double> s(v.begin(), v.end());
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double percentile(std::span<const double> v, double p) {
  if (v.empty()) return 0;
  std::vector<double> s(v.begin(), v.end());
  std::sort(s.begin(), s.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(s.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t n) {
  // Reject the top partial copy of [0, n) so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t x = next();
    if (x < limit) return x % n;
  }
}

OrderScore order_score(std::span<const double> ab, std::span<const double> ba) {
  OrderScore s;
  s.median_ab = median(ab);
  s.median_ba = median(ba);
  s.score = std::min(s.median_ab, s.median_ba);
  return s;
}

Interval bootstrap_score_interval(std::span<const double> ab, std::span<const double> ba,
                                  int resamples, uint64_t seed, double level) {
  const size_t n = std::min(ab.size(), ba.size());
  if (n == 0 || resamples < 1) return {};
  SplitMix64 rng(seed);
  std::vector<double> scores;
  scores.reserve(static_cast<size_t>(resamples));
  std::vector<double> a(n), b(n);
  for (int r = 0; r < resamples; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(rng.below(n));
      a[i] = ab[k];
      b[i] = ba[k];
    }
    scores.push_back(order_score(a, b).score);
  }
  const double tail = (1.0 - level) / 2.0 * 100.0;
  return Interval{percentile(scores, tail), percentile(scores, 100.0 - tail)};
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c;
  if (n <= 0) return 1.0;
  const int64_t k = std::min(b, c);
  if (n <= 1000) {
    // Binomial coefficients by the exact recurrence C(n, i+1) = C(n, i) (n - i) / (i + 1) in
    // doubles (finite up to n = 1020), summed and scaled by 2^-n: basic IEEE operations only,
    // so the same bits everywhere.
    double term = 1, sum = 0;
    for (int64_t i = 0; i <= k; ++i) {
      sum += term;
      term = term * static_cast<double>(n - i) / static_cast<double>(i + 1);
    }
    return std::min(1.0, 2.0 * std::ldexp(sum, static_cast<int>(-n)));
  }
  // Large tables: the same sum in log space.
  double sum = 0;
  for (int64_t i = 0; i <= k; ++i) {
    sum += std::exp(
        std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
        std::lgamma(static_cast<double>(n - i) + 1) - static_cast<double>(n) * std::log(2.0));
  }
  return std::min(1.0, 2.0 * sum);
}

}  // namespace power::validate
