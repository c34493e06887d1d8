// Speculative decoding, model-free: the n-gram drafter, the acceptance rule (greedy equality;
// sampling: the committed token's distribution equals the target's, by chi-square), the
// sampler's dense distribution, adaptive k and the configuration checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/speculative.h"

namespace power::spec {
namespace {

TEST(SpecNgram, ProposesWhatFollowedTheMostRecentMatch) {
  NgramDrafter d(1, 3);
  // Suffix [7 8] occurred at 1..2 (followed by 9 5) and at 5..6 (followed by 4): the most
  // recent wins; the 3-gram [3 7 8] occurs only at the end, so the 2-gram is used.
  const std::vector<int32_t> t = {1, 7, 8, 9, 5, 7, 8, 4, 6, 7, 8};
  std::vector<int32_t> out;
  EXPECT_EQ(d.draft(t, 4, out), 4);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 6, 7, 8}));
  out.clear();
  EXPECT_EQ(d.draft(t, 2, out), 2);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 6}));
}

TEST(SpecNgram, PrefersTheLongestSuffixAndRepeatsThePeriodPastTheEnd) {
  NgramDrafter d(1, 3);
  // 3-gram [1 2 3] matches at 0 (followed by 4 ...); the 1-gram [3] alone would match at 6.
  // Everything after the match up to the end (8 tokens: the period), then the period again.
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 3, 0, 1, 2, 3};
  std::vector<int32_t> out = {42};  // appended to, not replaced
  EXPECT_EQ(d.draft(t, 11, out), 11);
  EXPECT_EQ(out, (std::vector<int32_t>{42, 4, 5, 9, 3, 0, 1, 2, 3, 4, 5, 9}));
}

TEST(SpecNgram, ALoopDraftsMaxKTokensOfItself) {
  // A sequence stuck on one token: the last 2-gram [5 5] occurs one token back, whose
  // continuation is one token long; the draft repeats it (period 1) up to max_k.
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  EXPECT_EQ(d.draft(std::vector<int32_t>{3, 5, 5, 5}, 6, out), 6);
  EXPECT_EQ(out, (std::vector<int32_t>(6, 5)));
  // Period 3: in [7 8 9 7 8 9 7] the 4-gram [7 8 9 7] matches at 0, three tokens back; its
  // continuation 8 9 7 reaches the end, then 8 9 again.
  out.clear();
  EXPECT_EQ(d.draft(std::vector<int32_t>{7, 8, 9, 7, 8, 9, 7}, 5, out), 5);
  EXPECT_EQ(out, (std::vector<int32_t>{8, 9, 7, 8, 9}));
}

TEST(SpecNgram, NothingWithoutARepeat) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  EXPECT_EQ(d.draft(std::vector<int32_t>{1, 2, 3, 4, 5}, 4, out), 0);
  EXPECT_EQ(d.draft(std::vector<int32_t>{1}, 4, out), 0);
  EXPECT_EQ(d.draft(std::vector<int32_t>{1, 2, 1, 2}, 0, out), 0);
  EXPECT_TRUE(out.empty());
}

// Rows of logits with a clear argmax each.
std::vector<float> rows_with_argmax(const std::vector<int32_t>& argmax, int n_vocab) {
  std::vector<float> rows(argmax.size() * static_cast<size_t>(n_vocab), 0.0f);
  for (size_t i = 0; i < argmax.size(); ++i) rows[i * n_vocab + argmax[i]] = 5.0f;
  return rows;
}

SamplerParams greedy_params() {
  SamplerParams p;
  p.temperature = 0;
  return p;
}

TEST(SpecVerify, GreedyAcceptsTheMatchingPrefixThenCorrects) {
  const int nv = 8;
  Sampler s(greedy_params(), nv);
  std::vector<float> scratch;
  // Target argmax per row: 3 5 6 2; drafts 3 5 1: two accepted, the third replaced by 6.
  auto rows = rows_with_argmax({3, 5, 6, 2}, nv);
  std::vector<int32_t> draft = {3, 5, 1};
  VerifyResult v = verify(s, rows.data(), nv, draft, {}, scratch);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, 6);
  // All drafts right: the bonus token comes from the last row.
  draft = {3, 5, 6};
  v = verify(s, rows.data(), nv, draft, {}, scratch);
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.next, 2);
  // First draft wrong: nothing accepted, the target's own token.
  draft = {4};
  v = verify(s, rows.data(), nv, draft, {}, scratch);
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next, 3);
}

TEST(SpecVerify, GreedyPenaltiesSeeTheAcceptedDrafts) {
  // repeat_penalty 10 over the history: after accepting 3, row 1's logits (3: 5, 4: 1)
  // penalize 3 to 0.5, so the target says 4 there, as plain decoding would.
  const int nv = 8;
  SamplerParams p = greedy_params();
  p.repeat_penalty = 10.0f;
  Sampler s(p, nv);
  std::vector<float> rows(3 * nv, 0.0f);
  rows[0 * nv + 3] = 5.0f;
  rows[1 * nv + 3] = 5.0f;
  rows[1 * nv + 4] = 1.0f;
  rows[2 * nv + 1] = 5.0f;
  std::vector<float> scratch;
  std::vector<int32_t> draft = {3, 3};
  VerifyResult v = verify(s, rows.data(), nv, draft, {}, scratch);
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.next, 4);
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = p[i] * n;
    x2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x2;
}

std::vector<double> softmax(const std::vector<float>& l) {
  double m = -1e30, sum = 0;
  for (float x : l) m = std::max<double>(m, x);
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp(l[i] - m);
  for (double& x : p) x /= sum;
  return p;
}

SamplerParams plain_sampling(uint64_t seed) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

// Critical values of chi-square at significance 0.001: df 4 -> 18.467, df 3 -> 16.266.
constexpr double kChi2Df4 = 18.467;
constexpr double kChi2Df3 = 16.266;

TEST(SpecVerify, SampledTokenFollowsTheTargetWithADraftModel) {
  // Target p = softmax(logits); the draft distribution q differs on purpose. The first
  // committed token (accepted draft, else the residual draw) must follow p.
  const int nv = 5;
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  const std::vector<double> p = softmax(logits);
  const std::vector<float> q = {0.05f, 0.10f, 0.60f, 0.05f, 0.20f};
  Sampler target(plain_sampling(7), nv);
  Sampler drafter(plain_sampling(11), nv);
  std::vector<float> rows(2 * nv);
  std::copy(logits.begin(), logits.end(), rows.begin());
  std::copy(logits.begin(), logits.end(), rows.begin() + nv);
  std::vector<float> scratch;
  const int n = 20000;
  std::vector<int> counts(nv, 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t d = drafter.draw(q.data());
    VerifyResult v = verify(target, rows.data(), nv, std::vector<int32_t>{d}, q, scratch);
    const int32_t first = v.accepted == 1 ? d : v.next;
    ++counts[static_cast<size_t>(first)];
    accepted += v.accepted;
  }
  EXPECT_LT(chi_square(counts, p, n), kChi2Df4);
  // Acceptance probability is sum_x min(p(x), q(x)).
  double expect_acc = 0;
  for (int x = 0; x < nv; ++x) expect_acc += std::min<double>(p[x], q[x]);
  EXPECT_NEAR(static_cast<double>(accepted) / n, expect_acc, 0.02);
}

TEST(SpecVerify, SampledTokenFollowsTheTargetWithAPointMassDraft) {
  // A deterministic drafter always proposes token 1: accepted with probability p(1), else a
  // draw from p without 1; the committed token still follows p.
  const int nv = 5;
  const std::vector<float> logits = {0.3f, 1.2f, -0.4f, 0.9f, 0.0f};
  const std::vector<double> p = softmax(logits);
  Sampler target(plain_sampling(3), nv);
  std::vector<float> rows(2 * nv);
  std::copy(logits.begin(), logits.end(), rows.begin());
  std::copy(logits.begin(), logits.end(), rows.begin() + nv);
  std::vector<float> scratch;
  const int n = 20000;
  std::vector<int> counts(nv, 0);
  for (int i = 0; i < n; ++i) {
    VerifyResult v = verify(target, rows.data(), nv, std::vector<int32_t>{1}, {}, scratch);
    ++counts[static_cast<size_t>(v.accepted == 1 ? 1 : v.next)];
  }
  EXPECT_LT(chi_square(counts, p, n), kChi2Df4);
}

TEST(SpecVerify, SecondTokenAfterAnAcceptedDraftFollowsTheTarget) {
  // Two rows with different target distributions; condition on the first draft accepted and
  // look at the second committed token (the second draft or its correction).
  const int nv = 4;
  const std::vector<float> l0 = {2.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> l1 = {0.0f, 1.0f, 0.5f, -0.5f};
  const std::vector<double> p1 = softmax(l1);
  std::vector<float> rows;
  rows.insert(rows.end(), l0.begin(), l0.end());
  rows.insert(rows.end(), l1.begin(), l1.end());
  rows.insert(rows.end(), l1.begin(), l1.end());
  Sampler target(plain_sampling(99), nv);
  std::vector<float> scratch;
  const int n = 30000;
  std::vector<int> counts(nv, 0);
  int conditioned = 0;
  for (int i = 0; i < n; ++i) {
    VerifyResult v = verify(target, rows.data(), nv, std::vector<int32_t>{0, 2}, {}, scratch);
    if (v.accepted == 0) continue;
    ++conditioned;
    ++counts[static_cast<size_t>(v.accepted == 2 ? 2 : v.next)];
  }
  ASSERT_GT(conditioned, n / 2);
  EXPECT_LT(chi_square(counts, p1, conditioned), kChi2Df3);
}

TEST(SpecSampler, DistributionIsWhatSampleDrawsFrom) {
  // top_k 3 keeps {1, 3, 0} of softmax(l) and renormalizes; top_p 0.8 then cuts after the
  // token whose cumulative mass crosses 0.8.
  const std::vector<float> l = {1.0f, 2.0f, 0.0f, 1.5f, -1.0f};
  SamplerParams sp = plain_sampling(5);
  sp.top_k = 3;
  sp.top_p = 0.8f;
  Sampler s(sp, 5);
  std::vector<float> dist(5);
  s.distribution(l.data(), dist.data());
  const std::vector<double> full = softmax(l);
  const double k3 = full[1] + full[3] + full[0];
  // Sorted: 1, 3, 0 with masses full/k3; cumulative after 1 and 3 = (full1+full3)/k3 > 0.8?
  const double c2 = (full[1] + full[3]) / k3;
  ASSERT_GT(c2, 0.8);  // so the cut keeps {1, 3}
  const double kept = full[1] + full[3];
  EXPECT_NEAR(dist[1], full[1] / kept, 1e-6);
  EXPECT_NEAR(dist[3], full[3] / kept, 1e-6);
  EXPECT_EQ(dist[0], 0.0f);
  EXPECT_EQ(dist[2], 0.0f);
  EXPECT_EQ(dist[4], 0.0f);
  // And sample() follows it.
  std::vector<int> counts(5, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(l.data()))];
  std::vector<double> p(5, 0.0);
  p[1] = dist[1];
  p[3] = dist[3];
  EXPECT_LT(chi_square(counts, p, n), 10.828);  // df 1 at 0.001
  // Greedy: a point mass on the argmax.
  Sampler g(greedy_params(), 5);
  g.distribution(l.data(), dist.data());
  EXPECT_EQ(dist, (std::vector<float>{0, 1, 0, 0, 0}));
}

TEST(SpecAdaptiveK, FollowsTheAcceptanceRate) {
  AdaptiveK k(8, true);
  EXPECT_EQ(k.next(), 8);
  for (int i = 0; i < 20; ++i) k.update(k.next(), 0);
  EXPECT_EQ(k.next(), 1);
  for (int i = 0; i < 40; ++i) k.update(k.next(), k.next());
  EXPECT_EQ(k.next(), 8);
  // Half accepted: a / (1 - a) = 1.
  for (int i = 0; i < 200; ++i) k.update(4, 2);
  EXPECT_LE(k.next(), 2);
  AdaptiveK fixed(5, false);
  fixed.update(5, 0);
  EXPECT_EQ(fixed.next(), 5);
  EXPECT_EQ(fixed.take(), 5);  // never pauses
}

TEST(SpecAdaptiveK, PausesWhenNothingIsAcceptedAndProbes) {
  AdaptiveK k(4, true);
  EXPECT_EQ(k.take(), 4);
  // Rate after n all-rejected drafts of 1: (4/5) * 0.9^n; below 0.2 from n = 14 on.
  for (int i = 0; i < 14; ++i) k.update(1, 0);
  EXPECT_LT(k.rate(), AdaptiveK::kPauseBelow);
  std::vector<int> taken;
  for (int i = 0; i < 2 * AdaptiveK::kProbeEvery; ++i) taken.push_back(k.take());
  // Seven paused steps, then a one-token probe, twice.
  std::vector<int> want(2 * AdaptiveK::kProbeEvery, 0);
  want[AdaptiveK::kProbeEvery - 1] = 1;
  want[2 * AdaptiveK::kProbeEvery - 1] = 1;
  EXPECT_EQ(taken, want);
  // Accepted probes lift the rate back over the threshold: drafting resumes.
  while (k.rate() < AdaptiveK::kPauseBelow) k.update(1, 1);
  EXPECT_GE(k.take(), 1);
}

TEST(SpecConfig, ValidatesRanges) {
  Config c;
  EXPECT_TRUE(c.validate().ok());
  c.k = 0;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c.k = 17;
  EXPECT_EQ(c.validate().code(), StatusCode::kInvalidArgument);
  c.k = 16;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(parse_mode("ngram").value(), Mode::kNgram);
  EXPECT_EQ(parse_mode("auto").value(), Mode::kAuto);
  EXPECT_EQ(parse_mode("fast").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mode_name(Mode::kDraft), "draft");
}

}  // namespace
}  // namespace power::spec
