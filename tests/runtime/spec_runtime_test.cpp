// Speculative decoding through the embedded runtime (GenerateRequest::speculative,
// LoadOptions::speculative / draft_model): greedy output equals plain greedy output token for
// token for every fixture model and stories260K, with the n-gram drafter and a draft model
// (the same architecture quantized lower), K in {1, 3, 7}, alone and with several requests
// in flight (some speculating, some not); errors for unavailable modes; metrics.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "power/runtime.h"
#include "test_util.h"

namespace power {
namespace {

struct Pair {
  std::string target, draft;  // draft: same vocabulary, quantized lower
};

std::vector<Pair> model_pairs() {
  const std::string f = testing::shared_dir() + "/fixtures/models/";
  const std::string s = testing::shared_dir() + "/models/stories260K/";
  std::vector<Pair> out;
  const std::map<std::string, std::string> draft_of = {
      {"llama", "llama/llama-Q2_K.gguf"},
      {"phi3", "phi3/phi3-Q4_K_M.gguf"},
      {"qwen2", "qwen2/qwen2-Q4_K_M.gguf"},
      {"qwen3", "qwen3/qwen3-Q4_K_M.gguf"},
  };
  for (const auto& [arch, draft] : draft_of) {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(f + arch)) {
      if (e.path().extension() == ".gguf") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const auto& t : files) out.push_back({t, f + draft});
  }
  for (const char* t : {"stories260K-F32.gguf", "stories260K-F16.gguf",
                        "stories260K-ftypeQ6_K_fallback-Q8_0-F16.gguf",
                        "stories260K-ftypeQ4_K_M_fallback-Q5_0-Q8_0-F16.gguf"}) {
    out.push_back({s + t, s + "stories260K-ftypeQ4_K_M_fallback-Q5_0-Q8_0-F16.gguf"});
  }
  return out;
}

LoadOptions opts(const std::string& draft, int max_running) {
  LoadOptions o;
  o.n_ctx = 256;
  o.max_running = max_running;
  o.threads = 1;
  o.prefix_reuse = false;
  o.draft_model = draft;
  return o;
}

// Prompt ids that repeat (so the n-gram drafter finds matches) within a small vocabulary.
std::vector<int32_t> prompt_ids(int64_t n_vocab, int variant) {
  std::vector<int32_t> p;
  for (int rep = 0; rep < 3; ++rep) {
    for (int i = 0; i < 6; ++i) p.push_back(static_cast<int32_t>((7 * i + 3 + variant) % n_vocab));
  }
  p.push_back(static_cast<int32_t>((11 + variant) % n_vocab));
  return p;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens,
                       std::optional<SpeculativeOptions> spec) {
  GenerateRequest r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;  // compare the whole length
  r.speculative = std::move(spec);
  return r;
}

SpeculativeOptions spec(const std::string& mode, int k, bool adaptive = false) {
  SpeculativeOptions s;
  s.mode = mode;
  s.k = k;
  s.adaptive = adaptive;
  return s;
}

Completion run_one(Runtime& rt, const ModelHandle& m, GenerateRequest req) {
  auto h = rt.submit(m, std::move(req));
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  if (!h.ok()) return {};
  return h->wait();
}

TEST(SpecRuntime, GreedyEqualsPlainForEveryFixtureModelDrafterAndK) {
  POWER_REQUIRE_SHARED();
  const int n_new = 32;
  for (const Pair& pair : model_pairs()) {
    SCOPED_TRACE(pair.target);
    auto rt = Runtime::create({});
    ASSERT_TRUE(rt.ok());
    auto m = (*rt)->load(pair.target, opts(pair.draft, 1));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto prompt = prompt_ids(m->info().n_vocab, 0);
    Completion plain = run_one(**rt, *m, greedy(prompt, n_new, std::nullopt));
    ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
    ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(n_new));
    EXPECT_EQ(plain.speculative.mode, "off");
    int64_t drafted = 0;
    for (const char* mode : {"ngram", "draft"}) {
      for (int k : {1, 3, 7}) {
        SCOPED_TRACE(std::string(mode) + " k=" + std::to_string(k));
        Completion c = run_one(**rt, *m, greedy(prompt, n_new, spec(mode, k)));
        ASSERT_TRUE(c.status.ok()) << c.status.to_string();
        EXPECT_EQ(c.tokens, plain.tokens);
        EXPECT_EQ(c.text, plain.text);
        EXPECT_EQ(c.speculative.mode, mode);
        EXPECT_LE(c.speculative.accepted, c.speculative.drafted);
        EXPECT_LE(c.speculative.drafted, c.speculative.verify_passes * k);
        // Every pass commits at least one token; together they commit the output.
        EXPECT_LE(c.speculative.target_passes, n_new);
        EXPECT_EQ(c.speculative.verify_passes > 0, c.speculative.drafted > 0);
        drafted += c.speculative.drafted;
      }
    }
    EXPECT_GT(drafted, 0);  // the drafters did propose something
  }
}

TEST(SpecRuntime, MixedConcurrentRequestsEqualPlain) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::shared_dir() + "/fixtures/models/";
  for (const Pair& pair :
       std::vector<Pair>{{dir + "llama/llama-F32.gguf", dir + "llama/llama-Q4_0.gguf"},
                         {dir + "qwen3/qwen3-Q8_0.gguf", dir + "qwen3/qwen3-Q4_K_M.gguf"}}) {
    SCOPED_TRACE(pair.target);
    auto rt = Runtime::create({});
    ASSERT_TRUE(rt.ok());
    auto m = (*rt)->load(pair.target, opts(pair.draft, 6));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const int64_t nv = m->info().n_vocab;
    // Alone and plain first.
    std::vector<std::vector<int32_t>> want;
    for (int v = 0; v < 6; ++v) {
      Completion c = run_one(**rt, *m, greedy(prompt_ids(nv, v), 30 + v, std::nullopt));
      ASSERT_TRUE(c.status.ok());
      want.push_back(c.tokens);
    }
    // Then all at once: plain, n-gram and draft side by side in the same steps.
    const std::vector<std::optional<SpeculativeOptions>> modes = {
        std::nullopt,           spec("ngram", 3), spec("draft", 7),
        spec("ngram", 7, true), spec("draft", 1), spec("auto", 4, true)};
    std::vector<RequestHandle> hs;
    for (int v = 0; v < 6; ++v) {
      auto h = (*rt)->submit(*m, greedy(prompt_ids(nv, v), 30 + v, modes[v]));
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      hs.push_back(*h);
    }
    for (int v = 0; v < 6; ++v) {
      Completion c = hs[v].wait();
      ASSERT_TRUE(c.status.ok()) << c.status.to_string();
      EXPECT_EQ(c.tokens, want[v]) << "request " << v;
    }
    EXPECT_EQ(hs[5].wait().speculative.mode, "draft");  // auto with a draft model loaded
    RuntimeStats st = m->stats();
    EXPECT_GT(st.spec_drafted, 0u);
    EXPECT_LE(st.spec_accepted, st.spec_drafted);
    EXPECT_GE(st.spec_verify_tokens, st.spec_verify_passes);
    EXPECT_EQ(st.spec_verify_tokens - st.spec_verify_passes, st.spec_accepted);
    EXPECT_EQ(st.kv_blocks_used, 0);  // rollbacks and ends gave every block back
  }
}

TEST(SpecRuntime, NgramOnRepetitiveTextCommitsSeveralTokensPerPass) {
  POWER_REQUIRE_SHARED();
  // stories260K greedy falls into a loop quickly; prompt lookup then predicts it.
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m =
      (*rt)->load(testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf", opts("", 1));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  GenerateRequest plain_req = greedy({}, 120, std::nullopt);
  plain_req.prompt_tokens.clear();
  plain_req.prompt = "Once upon a time";
  Completion plain = run_one(**rt, *m, plain_req);
  GenerateRequest req = plain_req;
  req.speculative = spec("ngram", 8, true);
  Completion c = run_one(**rt, *m, req);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.tokens, plain.tokens);
  EXPECT_GT(c.speculative.accepted, 0);
  EXPECT_GT(c.speculative.tokens_per_pass, 1.0);
  EXPECT_NEAR(c.speculative.tokens_per_pass,
              static_cast<double>(c.tokens.size()) / c.speculative.target_passes, 1e-9);
  EXPECT_NEAR(c.speculative.acceptance_rate,
              static_cast<double>(c.speculative.accepted) / c.speculative.drafted, 1e-9);
  EXPECT_DOUBLE_EQ(plain.speculative.tokens_per_pass, 1.0);
}

TEST(SpecRuntime, UnavailableModesAreErrorsNeverDowngrades) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::shared_dir() + "/fixtures/models/";
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(dir + "llama/llama-F32.gguf", opts("", 1));
  ASSERT_TRUE(m.ok());
  const auto prompt = prompt_ids(m->info().n_vocab, 0);
  auto h = (*rt)->submit(*m, greedy(prompt, 4, spec("draft", 3)));
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("draft model"), std::string::npos);
  h = (*rt)->submit(*m, greedy(prompt, 4, spec("mtp", 3)));
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().to_string().find("nextn_predict_layers"), std::string::npos);
  h = (*rt)->submit(*m, greedy(prompt, 4, spec("turbo", 3)));
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  h = (*rt)->submit(*m, greedy(prompt, 4, spec("ngram", 0)));
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  h = (*rt)->submit(*m, greedy(prompt, 4, spec("ngram", 17)));
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  // auto without a draft model: n-gram.
  Completion c = run_one(**rt, *m, greedy(prompt, 4, spec("auto", 3)));
  EXPECT_EQ(c.speculative.mode, "ngram");
  // The runtime keeps working after the rejections.
  EXPECT_TRUE(c.status.ok());
  EXPECT_EQ(c.tokens.size(), 4u);

  // A load-time default that cannot run, and a draft model with another vocabulary.
  LoadOptions o = opts("", 1);
  o.speculative.mode = "draft";
  EXPECT_EQ((*rt)->load(dir + "llama/llama-F32.gguf", o).status().code(),
            StatusCode::kInvalidArgument);
  // A draft whose vocabulary differs in one token's text (a copy of stories260K with token
  // 300 renamed) is refused at load, naming the token.
  const std::string stories = testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  auto src = GgufFile::open(stories);
  ASSERT_TRUE(src.ok());
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "tokenizer.ggml.tokens") {
      std::vector<std::string> toks;
      for (const GgufValue& v : *kv.value.as_array()) toks.push_back(*v.as_string());
      toks[300] = "<renamed-token-300>";
      w.set(kv.key, GgufValue::string_array(toks));
    } else {
      w.set(kv.key, kv.value);
    }
  }
  for (const auto& t : (*src)->tensors()) {
    ASSERT_TRUE(w.add_tensor_view(t.name, t.type, t.ne, {t.data, t.n_bytes}).ok());
  }
  const std::string renamed = ::testing::TempDir() + "/spec_renamed_vocab.gguf";
  ASSERT_TRUE(w.write(renamed).ok());
  o = opts(renamed, 1);
  auto bad = (*rt)->load(stories, o);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("vocabulary"), std::string::npos);
  EXPECT_NE(bad.status().to_string().find("token_id=300"), std::string::npos)
      << bad.status().to_string();
  std::filesystem::remove(renamed);
  o = opts(dir + "llama/missing.gguf", 1);
  EXPECT_EQ((*rt)->load(dir + "llama/llama-F32.gguf", o).status().code(), StatusCode::kNotFound);
}

TEST(SpecRuntime, LoadDefaultAppliesToRequestsWithoutTheirOwn) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::shared_dir() + "/fixtures/models/";
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  LoadOptions o = opts(dir + "llama/llama-Q4_0.gguf", 2);
  o.speculative = spec("draft", 5, true);
  auto m = (*rt)->load(dir + "llama/llama-F32.gguf", o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto prompt = prompt_ids(m->info().n_vocab, 1);
  Completion dflt = run_one(**rt, *m, greedy(prompt, 24, std::nullopt));
  Completion off = run_one(**rt, *m, greedy(prompt, 24, spec("off", 1)));
  EXPECT_EQ(dflt.speculative.mode, "draft");
  EXPECT_GT(dflt.speculative.drafted, 0);
  EXPECT_EQ(off.speculative.mode, "off");
  EXPECT_EQ(off.speculative.drafted, 0);
  EXPECT_EQ(dflt.tokens, off.tokens);
}

}  // namespace
}  // namespace power
