#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace power {
namespace {

SamplerParams plain(float temp) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

// llama2.c's xorshift64*: the first outputs for state 133742, computed by hand from its
// definition (x ^= x >> 12; x ^= x << 25; x ^= x >> 27; (x * 0x2545F4914F6CDD1D) >> 32).
TEST(Sampler, XorshiftMatchesItsDefinition) {
  uint64_t ref = 133742, ours = 133742;
  for (int i = 0; i < 1000; ++i) {
    ref ^= ref >> 12;
    ref ^= ref << 25;
    ref ^= ref >> 27;
    const uint32_t want = static_cast<uint32_t>((ref * 0x2545F4914F6CDD1Dull) >> 32);
    ASSERT_EQ(Sampler::xorshift_u32(&ours), want);
  }
  uint64_t s = 7;
  for (int i = 0; i < 1000; ++i) {
    float f = Sampler::xorshift_f32(&s);
    ASSERT_GE(f, 0.0f);
    ASSERT_LT(f, 1.0f);
  }
}

TEST(Sampler, GreedyTakesTheLowestIdOnTies) {
  Sampler s(plain(0.0f), 5);
  const float logits[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, LogitBiasBansAndBoosts) {
  SamplerParams p = plain(0.0f);
  p.logit_bias = {{1, -INFINITY}, {4, 10.0f}};
  Sampler s(p, 5);
  const float logits[5] = {1.0f, 3.0f, -2.0f, 2.0f, 0.5f};
  EXPECT_EQ(s.sample(logits), 4);
}

TEST(Sampler, RepetitionPenaltyFollowsLlamaCppRule) {
  // logit 2.0 of a repeated token becomes 2.0 / 1.5 = 1.333 < 1.5, so token 1 wins.
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.5f;
  Sampler s(p, 3);
  const float logits[3] = {1.5f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);
  EXPECT_EQ(s.sample(logits), 0);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
  SamplerParams p = plain(0.0f);
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.1f;
  Sampler s(p, 2);
  const float logits[2] = {1.0f, 0.0f};
  s.accept(0);
  s.accept(0);
  // 1.0 - 2 * 0.4 - 0.1 = 0.1 > 0: still token 0; a third occurrence gives -0.3 < 0.
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);
}

// Draw frequencies follow softmax(logits / T): with 20000 draws each probability is within
// 5 standard deviations (sqrt(p(1-p)/n) <= 0.0036).
TEST(Sampler, DrawsFollowTheDistribution) {
  SamplerParams p = plain(0.7f);
  p.seed = 42;
  Sampler s(p, 4);
  const float logits[4] = {0.1f, 1.0f, -0.5f, 0.7f};
  double z = 0, prob[4];
  for (int i = 0; i < 4; ++i) z += std::exp(logits[i] / 0.7);
  for (int i = 0; i < 4; ++i) prob[i] = std::exp(logits[i] / 0.7) / z;
  int counts[4] = {0, 0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits)]++;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / double(n), prob[i], 5 * 0.0036) << i;
}

TEST(Sampler, TopKTopPMinPTruncate) {
  const float logits[5] = {3.0f, 2.9f, 1.0f, 0.0f, -1.0f};
  {
    SamplerParams p = plain(1.0f);
    p.top_k = 2;
    Sampler s(p, 5);
    for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(logits), 2);
  }
  {
    // softmax: p0 = .473, p1 = .428, p2 = .064 ...; top-p 0.5 keeps {0, 1} (0.473 < 0.5).
    SamplerParams p = plain(1.0f);
    p.top_p = 0.5f;
    Sampler s(p, 5);
    std::map<int, int> seen;
    for (int i = 0; i < 500; ++i) seen[s.sample(logits)]++;
    EXPECT_EQ(seen.size(), 2u);
  }
  {
    // min-p 0.2: keeps tokens with p >= 0.2 * 0.473 = 0.095: {0, 1}.
    SamplerParams p = plain(1.0f);
    p.min_p = 0.2f;
    Sampler s(p, 5);
    for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(logits), 2);
  }
}

TEST(Sampler, SameSeedSameSequenceAndSnapshotRestores) {
  SamplerParams p = plain(1.0f);
  p.seed = 1234;
  const float logits[6] = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f};
  Sampler a(p, 6), b(p, 6);
  std::vector<int> sa, sb;
  for (int i = 0; i < 50; ++i) {
    sa.push_back(a.sample(logits));
    sb.push_back(b.sample(logits));
  }
  EXPECT_EQ(sa, sb);
  auto snap = a.snapshot();
  std::vector<int> first, again;
  for (int i = 0; i < 20; ++i) first.push_back(a.sample(logits));
  a.restore(snap);
  for (int i = 0; i < 20; ++i) again.push_back(a.sample(logits));
  EXPECT_EQ(first, again);
}

TEST(Sampler, ValidateNamesTheField) {
  SamplerParams p;
  p.top_p = 1.5f;
  Status st = p.validate(10);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.to_string().find("top_p"), std::string::npos);
  p = SamplerParams();
  p.logit_bias = {{10, 1.0f}};
  EXPECT_NE(p.validate(10).to_string().find("logit_bias"), std::string::npos);
  EXPECT_TRUE(SamplerParams().validate(10).ok());
}

}  // namespace
}  // namespace power
