// validate/stats.h against hand arithmetic: medians, percentiles, the SplitMix64 stream
// (Vigna's reference splitmix64.c), the two-order score, the paired bootstrap and the exact
// McNemar test on small tables.
#include "validate/stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace power::validate {
namespace {

TEST(Stats, MedianOddEvenEmpty) {
  const std::vector<double> odd = {5, 1, 3};
  const std::vector<double> even = {4, 1, 3, 2};
  EXPECT_EQ(median(odd), 3.0);
  EXPECT_EQ(median(even), 2.5);  // (2 + 3) / 2
  EXPECT_EQ(median(std::vector<double>{}), 0.0);
}

TEST(Stats, PercentileInterpolatesBetweenClosestRanks) {
  const std::vector<double> v = {10, 20, 30, 40, 50};
  EXPECT_EQ(percentile(v, 0), 10.0);
  EXPECT_EQ(percentile(v, 100), 50.0);
  EXPECT_EQ(percentile(v, 50), 30.0);
  // rank = 0.9 * 4 = 3.6: 40 + 0.6 * (50 - 40) = 46
  EXPECT_DOUBLE_EQ(percentile(v, 90), 46.0);
  // rank = 0.1 * 4 = 0.4: 10 + 0.4 * 10 = 14
  EXPECT_DOUBLE_EQ(percentile(v, 10), 14.0);
}

TEST(Stats, SplitMix64MatchesTheReferenceStream) {
  // splitmix64.c (Vigna) seeded with 0 and 1234567: its first outputs.
  SplitMix64 zero(0);
  EXPECT_EQ(zero.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(zero.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(zero.next(), 0x06c45d188009454fULL);
  SplitMix64 r(1234567);
  EXPECT_EQ(r.next(), 6457827717110365317ULL);
  EXPECT_EQ(r.next(), 3203168211198807973ULL);
  SplitMix64 b(42);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(b.below(7), 7u);
}

TEST(Stats, ScoreIsTheLowerOrderMedian) {
  // AB ratios median 1.10, BA ratios median 1.02: a candidate that gains mostly when it runs
  // second scores 1.02.
  const std::vector<double> ab = {1.08, 1.10, 1.12};
  const std::vector<double> ba = {1.05, 1.00, 1.02};
  const OrderScore s = order_score(ab, ba);
  EXPECT_DOUBLE_EQ(s.median_ab, 1.10);
  EXPECT_DOUBLE_EQ(s.median_ba, 1.02);
  EXPECT_DOUBLE_EQ(s.score, 1.02);
}

TEST(Stats, BootstrapIsDeterministicAndBounded) {
  const std::vector<double> ab = {1.08, 1.10, 1.12, 1.30, 0.95, 1.11};
  const std::vector<double> ba = {1.05, 1.00, 1.02, 1.04, 1.20, 0.99};
  const Interval a = bootstrap_score_interval(ab, ba, 2000, 7, 0.95);
  const Interval b = bootstrap_score_interval(ab, ba, 2000, 7, 0.95);
  EXPECT_EQ(a.low, b.low);  // same seed: same bits
  EXPECT_EQ(a.high, b.high);
  // Every resampled score is a min of medians of values drawn from the data, so it lies
  // within [min of all ratios, max of all ratios]; low <= high.
  EXPECT_GE(a.low, 0.95);
  EXPECT_LE(a.high, 1.30);
  EXPECT_LE(a.low, a.high);
  // A single round: every resample is that round, so the interval is its score.
  const std::vector<double> one_ab = {1.2}, one_ba = {1.1};
  const Interval c = bootstrap_score_interval(one_ab, one_ba, 500, 1, 0.95);
  EXPECT_EQ(c.low, 1.1);
  EXPECT_EQ(c.high, 1.1);
  // Constant ratios: the interval collapses onto them.
  const std::vector<double> k = {1.05, 1.05, 1.05, 1.05};
  const Interval d = bootstrap_score_interval(k, k, 500, 3, 0.95);
  EXPECT_EQ(d.low, 1.05);
  EXPECT_EQ(d.high, 1.05);
}

TEST(Stats, BootstrapResamplesByRoundWithTheSeededStream) {
  // Two rounds, 1 resample: the SplitMix64(9) stream's first two below(2) draws pick the
  // rounds; recompute the score from those picks by hand.
  const std::vector<double> ab = {1.0, 2.0}, ba = {3.0, 4.0};
  SplitMix64 rng(9);
  const size_t i = rng.below(2), j = rng.below(2);
  const double want = std::min(0.5 * (ab[i] + ab[j]), 0.5 * (ba[i] + ba[j]));
  const Interval iv = bootstrap_score_interval(ab, ba, 1, 9, 0.95);
  EXPECT_EQ(iv.low, want);
  EXPECT_EQ(iv.high, want);
}

TEST(Stats, McNemarExactOnSmallTables) {
  EXPECT_EQ(mcnemar_exact_p(0, 0), 1.0);
  // b=5, c=0: 2 * P[X <= 0], X ~ Bin(5, 1/2) = 2 / 32
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(5, 0), 0.0625);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 5), 0.0625);
  // b=1, c=9: 2 * (C(10,0) + C(10,1)) / 1024 = 22 / 1024
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(1, 9), 22.0 / 1024.0);
  // b=2, c=8: 2 * (1 + 10 + 45) / 1024 = 112 / 1024
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(2, 8), 112.0 / 1024.0);
  // b=3, c=3: 2 * 42 / 64 > 1, capped
  EXPECT_EQ(mcnemar_exact_p(3, 3), 1.0);
  // b=0, c=20: 2 / 2^20
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 20), 2.0 / 1048576.0);
  // Large tables go through the log-space sum: b=600, c=700, n=1300. The exact value
  // 2 * sum_{i<=600} C(1300, i) / 2^1300 = 0.0060157938610449525, from integer arithmetic
  // (Python: 2*sum(math.comb(1300,i) for i in range(601))/2**1300).
  EXPECT_NEAR(mcnemar_exact_p(600, 700), 0.0060157938610449525, 1e-12);
}

}  // namespace
}  // namespace power::validate
