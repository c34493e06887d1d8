// validate/ab.h: settings files, every gate at its boundary, the decision, and the evidence
// file's signature and re-derivation. Evidence here is built by hand: run speeds are chosen
// so the ratios are known numbers (baseline 1000 tokens in 10 s = 100 tok/s; a candidate with
// ratio r takes 10 / r s).
#include "validate/ab.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/file.h"
#include "receipt/canonical_json.h"
#include "receipt/signing_key.h"

namespace power::validate {
namespace {

using json = nlohmann::json;

struct Spec {
  std::vector<double> aa_ab = {1.0, 1.0, 1.0}, aa_ba = {1.0, 1.0, 1.0};
  std::vector<double> ab = {1.1, 1.1, 1.1}, ba = {1.1, 1.1, 1.1};
  double p99_ratio = 1.0, ttft_ratio = 1.0;
  int64_t cached_candidate = 500;  // of 1000 prompt tokens; the baseline's is 500
  std::string cand_tokens = "T", cand_logits = "L";
  Policy policy;
  json quality = {{"teacher_forced", {{"mean_kld", 0.0}, {"same_top1_pct", 100.0}}}};
};

json run(const char* phase, int round, const char* order, const char* arm, double ratio,
         const Spec& s, bool candidate) {
  return {{"phase", phase},
          {"round", round},
          {"order", order},
          {"arm", arm},
          {"completion_tokens", 1000},
          {"wall_s", 10.0 / ratio},
          {"prompt_tokens", 1000},
          {"cached_prompt_tokens", candidate ? s.cached_candidate : 500},
          {"token_latency_p99_ms", candidate ? 20.0 * s.p99_ratio : 20.0},
          {"ttft_median_ms", candidate ? 50.0 * s.ttft_ratio : 50.0},
          {"token_digest", candidate ? s.cand_tokens : "T"},
          {"logits_digest", candidate ? s.cand_logits : "L"},
          {"idle", {{"other_cpu_s", 0.0}}}};
}

json evidence(const Spec& s) {
  json runs = json::array();
  auto phase = [&](const char* name, const std::vector<double>& ab, const std::vector<double>& ba,
                   bool has_candidate) {
    for (size_t r = 0; r < ab.size(); ++r) {
      const int round = static_cast<int>(r);
      runs.push_back(run(name, round, "AB", "A", 1.0, s, false));
      runs.push_back(run(name, round, "AB", "B", ab[r], s, has_candidate));
      runs.push_back(run(name, round, "BA", "B", ba[r], s, has_candidate));
      runs.push_back(run(name, round, "BA", "A", 1.0, s, false));
    }
  };
  phase("aa", s.aa_ab, s.aa_ba, false);
  phase("ab", s.ab, s.ba, true);
  for (size_t i = 0; i < runs.size(); ++i) runs[i]["index"] = i;
  return {{"schema", "power.ab-evidence.v1"},
          {"policy", policy_to_json(s.policy)},
          {"reference",
           {{"baseline", {{"token_digest", "T"}, {"logits_digest", "L"}}},
            {"candidate", {{"token_digest", s.cand_tokens}, {"logits_digest", s.cand_logits}}}}},
          {"runs", runs},
          {"quality", s.quality}};
}

json decide(const Spec& s) {
  auto d = derive(evidence(s));
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? *d : json();
}

std::string result(const json& d) {
  return d["decision"]["result"].get<std::string>();
}

bool has_reason(const json& d, const std::string& code) {
  for (const auto& r : d["decision"]["reasons"]) {
    if (r["code"] == code) return true;
  }
  return false;
}

TEST(AbGates, FasterCandidateIsSelected) {
  const json d = decide(Spec{});
  EXPECT_EQ(result(d), "candidate-selected") << d.dump(1);
  EXPECT_DOUBLE_EQ(d["derived"]["speed"]["score"].get<double>(), 1.1);
  EXPECT_EQ(d["derived"]["aa"]["noise_floor"].get<double>(), 0.0);
}

TEST(AbGates, ScoreIsTheLowerOrder) {
  Spec s;
  s.ab = {1.10, 1.10, 1.10};
  s.ba = {1.02, 1.02, 1.02};  // gains only when it runs first... in one order
  const json d = decide(s);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "speed.order_median_below_min_gain"));
  EXPECT_DOUBLE_EQ(d["derived"]["speed"]["score"].get<double>(), 1.02);
}

TEST(AbGates, MinGainBoundary) {
  Spec s;
  s.ab = s.ba = {1.031, 1.031, 1.031};
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.ab = s.ba = {1.029, 1.029, 1.029};
  const json d = decide(s);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "speed.order_median_below_min_gain"));
  s.ab = s.ba = {1.0, 1.0, 1.0};  // a tie keeps the baseline
  EXPECT_EQ(result(decide(s)), "baseline-retained");
}

TEST(AbGates, GainMustExceedTwiceTheNoiseFloor) {
  Spec s;
  s.aa_ab = {1.05, 1.05, 1.05};  // A/A: the same setting "gains" 5 %
  s.aa_ba = {0.98, 0.98, 0.98};
  s.ab = s.ba = {1.09, 1.09, 1.09};  // 0.09 < 2 x 0.05
  json d = decide(s);
  EXPECT_NEAR(d["derived"]["aa"]["noise_floor"].get<double>(), 0.05, 1e-12);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "speed.within_noise"));
  s.ab = s.ba = {1.11, 1.11, 1.11};  // 0.11 > 0.10
  EXPECT_EQ(result(decide(s)), "candidate-selected");
}

TEST(AbGates, IntervalMustLieAboveOne) {
  Spec s;
  // Medians 1.05 in both orders, but two of five rounds lose 10 %: resamples with three or
  // more of those rounds score 0.90, so the 2.5th percentile is below 1.
  s.aa_ab = s.aa_ba = {1, 1, 1, 1, 1};
  s.ab = {1.05, 1.05, 1.05, 0.90, 0.90};
  s.ba = {1.05, 1.05, 1.05, 0.90, 0.90};
  const json d = decide(s);
  EXPECT_DOUBLE_EQ(d["derived"]["speed"]["score"].get<double>(), 1.05);
  EXPECT_LE(d["derived"]["speed"]["ci_low"].get<double>(), 1.0);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "speed.interval_includes_1"));
}

TEST(AbGates, LatencyBoundaries) {
  Spec s;
  s.p99_ratio = 1.19;
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.p99_ratio = 1.21;
  json d = decide(s);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "latency.p99_token"));
  s.p99_ratio = 1.0;
  s.ttft_ratio = 1.09;
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.ttft_ratio = 1.11;
  d = decide(s);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "latency.ttft"));
}

TEST(AbGates, PrefixHitRateBoundary) {
  Spec s;
  s.cached_candidate = 504;  // 50.4 % vs 50 %: 0.4 pp
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.cached_candidate = 506;  // 0.6 pp
  const json d = decide(s);
  EXPECT_EQ(result(d), "baseline-retained");
  EXPECT_TRUE(has_reason(d, "prefix_cache.hit_rate"));
}

TEST(AbGates, BitExactNeedsOneTokenAndOneLogitsDigest) {
  Spec s;
  s.policy.equivalence = "bit-exact";
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.cand_logits = "L2";
  json d = decide(s);
  EXPECT_EQ(result(d), "rejected");  // faster, but not the same output
  EXPECT_TRUE(has_reason(d, "output.logits_differ"));
  s.cand_tokens = "T2";
  d = decide(s);
  EXPECT_TRUE(has_reason(d, "output.tokens_differ"));
}

TEST(AbGates, TokenExactBoundaries) {
  Spec s;
  s.cand_logits = "other";  // logits may differ under token-exact
  s.quality = {{"teacher_forced", {{"mean_kld", 0.0009}, {"same_top1_pct", 99.6}}}};
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.quality = {{"teacher_forced", {{"mean_kld", 0.0011}, {"same_top1_pct", 99.6}}}};
  json d = decide(s);
  EXPECT_EQ(result(d), "rejected");
  EXPECT_TRUE(has_reason(d, "quality.kld"));
  s.quality = {{"teacher_forced", {{"mean_kld", 0.0009}, {"same_top1_pct", 99.4}}}};
  d = decide(s);
  EXPECT_EQ(result(d), "rejected");
  EXPECT_TRUE(has_reason(d, "quality.top1"));
  s.quality = json::object();
  EXPECT_TRUE(has_reason(decide(s), "quality.missing"));
  s.quality = {{"teacher_forced", {{"mean_kld", 0.0}, {"same_top1_pct", 100.0}}}};
  s.cand_tokens = "T2";
  EXPECT_TRUE(has_reason(decide(s), "output.tokens_differ"));
}

json tasks(int n, int only_base, int only_cand, int both_wrong) {
  json b = json::array(), c = json::array();
  for (int i = 0; i < n; ++i) {
    bool x = true, y = true;
    if (i < only_base) {
      y = false;
    } else if (i < only_base + only_cand) {
      x = false;
    } else if (i < only_base + only_cand + both_wrong) {
      x = y = false;
    }
    b.push_back(x);
    c.push_back(y);
  }
  return {{"tasks", {{"baseline", b}, {"candidate", c}}}};
}

TEST(AbGates, LossyFlipsNonInferiorityAndMcNemar) {
  Spec s;
  s.policy.equivalence = "lossy";
  s.cand_tokens = s.cand_logits = "different";
  s.quality = tasks(100, 1, 1, 0);  // 2 % flipped, equal accuracy
  EXPECT_EQ(result(decide(s)), "candidate-selected");
  s.quality = tasks(100, 2, 1, 0);  // 3 % flipped
  json d = decide(s);
  EXPECT_EQ(result(d), "rejected");
  EXPECT_TRUE(has_reason(d, "quality.flips"));
  // 2 % flips, both losses: accuracy 0.98 vs 1.00, beyond the 1 % margin.
  s.quality = tasks(100, 2, 0, 0);
  d = decide(s);
  EXPECT_TRUE(has_reason(d, "quality.inferior"));
  // 1000 tasks, 8 losses and no wins: 0.8 % flipped and 0.8 % less accurate (within the
  // margins), but McNemar's exact p = 2 / 2^8 = 0.0078 < 0.05.
  s.quality = tasks(1000, 8, 0, 0);
  d = decide(s);
  EXPECT_EQ(result(d), "rejected");
  EXPECT_TRUE(has_reason(d, "quality.mcnemar"));
  EXPECT_FALSE(has_reason(d, "quality.flips"));
  EXPECT_FALSE(has_reason(d, "quality.inferior"));
  EXPECT_DOUBLE_EQ(d["derived"]["output"]["tasks"]["mcnemar_p"].get<double>(), 2.0 / 256.0);
}

TEST(AbGates, TimedOutputMustEqualTheUntimedPass) {
  Spec s;
  json ev = evidence(s);
  ev["runs"][21]["token_digest"] = "something else";  // one timed candidate run
  auto d = derive(ev);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)["decision"]["result"], "rejected");
  EXPECT_TRUE(has_reason(*d, "output.timed_differs_from_untimed"));
  ev = evidence(s);
  ev["runs"][9]["token_digest"] = "something else";  // one A/A control run (the baseline)
  d = derive(ev);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(has_reason(*d, "output.timed_differs_from_untimed"));
}

TEST(AbGates, IdleGate) {
  Spec s;
  json ev = evidence(s);
  ev["runs"][13]["idle"]["other_cpu_s"] = 5.0;  // 5 CPU-s of others in a ~9 s run
  auto d = derive(ev);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)["derived"]["idle"]["busy_runs"], 1);
  EXPECT_EQ((*d)["decision"]["result"], "candidate-selected");  // idle_gate flag: recorded
  s.policy.idle_gate = "refuse";
  ev["policy"] = policy_to_json(s.policy);
  d = derive(ev);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)["decision"]["result"], "baseline-retained");
  EXPECT_TRUE(has_reason(*d, "idle.busy"));
}

TEST(AbSettings, KeysHashAndErrors) {
  auto a = parse_settings(json::parse(R"({"threads": 2, "kv-type": "f32"})"));
  auto b = parse_settings(json::parse(R"({"kv_type": "f32", "threads": 2})"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->sha256, b->sha256);  // key order and dash/underscore do not matter
  EXPECT_EQ(a->load.threads, 2);
  EXPECT_EQ(a->load.kv_type, "f32");
  auto e = parse_settings(json::parse(R"({"env": {"POWER_REPACK": "0"}, "spec": "ngram"})"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->env.at("POWER_REPACK"), "0");
  EXPECT_EQ(e->load.speculative.mode, "ngram");
  EXPECT_FALSE(parse_settings(json::parse(R"({"thread": 2})")).ok());
  EXPECT_FALSE(parse_settings(json::parse(R"({"threads": "2"})")).ok());
  EXPECT_FALSE(parse_settings(json::parse(R"({"kv_type": "q8"})")).ok());
  EXPECT_FALSE(parse_settings(json::parse(R"([1])")).ok());
  EXPECT_FALSE(policy_from_json(json::parse(R"({"equivalence": "close-enough"})")).ok());
  EXPECT_FALSE(policy_from_json(json::parse(R"({"min_gain": -1})")).ok());
}

std::unique_ptr<receipt::SigningKey> test_key(uint8_t fill) {
  std::array<uint8_t, 32> seed{};
  seed.fill(fill);
  auto k = receipt::SigningKey::from_seed(seed);
  EXPECT_TRUE(k.ok());
  return std::move(*k);
}

std::string signed_file(const receipt::SigningKey& key) {
  json ev = evidence(Spec{});
  auto d = derive(ev);
  EXPECT_TRUE(d.ok());
  ev["derived"] = (*d)["derived"];
  ev["decision"] = (*d)["decision"];
  auto text = sign_evidence(ev, key);
  EXPECT_TRUE(text.ok());
  return *text + "\n";
}

TEST(AbEvidence, SignedFileVerifies) {
  auto key = test_key(7);
  const std::string text = signed_file(*key);
  EXPECT_TRUE(verify_evidence(text, "").ok()) << verify_evidence(text, "").to_string();
  EXPECT_TRUE(verify_evidence(text, key->public_key_hex()).ok());
  auto other = test_key(8);
  EXPECT_EQ(verify_evidence(text, other->public_key_hex()).code(), StatusCode::kIntegrity);
}

TEST(AbEvidence, EveryChangedByteFails) {
  auto key = test_key(7);
  const std::string text = signed_file(*key);
  int checked = 0;
  for (size_t i = 0; i + 1 < text.size(); i += 3) {  // every third byte, the newline kept
    std::string bad = text;
    bad[i] = bad[i] == '1' ? '2' : (bad[i] == 'a' ? 'b' : '1');
    EXPECT_FALSE(verify_evidence(bad, "").ok()) << "byte " << i << " '" << text[i] << "'";
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

TEST(AbEvidence, ResignedButEditedFiguresFail) {
  // Someone edits a derived figure (or the decision) and signs again with their own key: the
  // signature checks out, re-derivation does not.
  auto key = test_key(7);
  json ev = json::parse(signed_file(*key));
  ev["decision"]["result"] = "baseline-retained";
  ev["decision"]["reasons"] = json::array();
  auto text = sign_evidence(ev, *key);
  ASSERT_TRUE(text.ok());
  Status st = verify_evidence(*text, "");
  EXPECT_EQ(st.code(), StatusCode::kIntegrity);
  EXPECT_NE(st.to_string().find("decision"), std::string::npos) << st.to_string();
  ev = json::parse(signed_file(*key));
  ev["runs"][5]["wall_s"] = 1.0;  // a raw run edited: the derived figures no longer follow
  text = sign_evidence(ev, *key);
  ASSERT_TRUE(text.ok());
  st = verify_evidence(*text, "");
  EXPECT_EQ(st.code(), StatusCode::kIntegrity);
  EXPECT_NE(st.to_string().find("derived"), std::string::npos) << st.to_string();
}

// The evidence files docs/VALIDATION.md cites (the default speculative mode) still verify.
TEST(AbEvidence, ShippedEvidenceVerifies) {
  for (const char* name : {"spec-default-stories260K.json", "spec-default-134m-q8_0.json"}) {
    auto text = read_file_text(std::string(POWER_SOURCE_DIR) + "/docs/evidence/" + name);
    ASSERT_TRUE(text.ok()) << name;
    Status st = verify_evidence(*text, "");
    EXPECT_TRUE(st.ok()) << name << ": " << st.to_string();
  }
}

TEST(AbEvidence, HostileFilesGetErrorsNotCrashes) {
  for (const char* text :
       {"", "{", "[]", "{\"schema\":5}", "{\"schema\":\"power.ab-evidence.v1\"}",
        "{\"schema\":\"power.ab-evidence.v1\",\"signature\":{\"alg\":\"ed25519\","
        "\"public_key\":7}}",
        "{\"policy\":{\"bootstrap_seed\":[1]},\"runs\":[{\"phase\":\"ab\"}],\"schema\":\"power.ab-"
        "evidence.v1\"}"}) {
    EXPECT_FALSE(verify_evidence(text, "").ok()) << text;
  }
  EXPECT_FALSE(derive(json::parse(R"({"policy":{"bootstrap_seed":[1]},"runs":[]})")).ok());
  EXPECT_FALSE(derive(json::parse(R"({"policy":{},"runs":[{"phase":"ab","order":"AB","arm":"A",
      "round":{"x":1}}]})"))
                   .ok());
}

}  // namespace
}  // namespace power::validate
