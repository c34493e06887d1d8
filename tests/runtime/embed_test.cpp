// EmbeddingModel (include/power/embed.h) on ../shared/fixtures/embeddings: the API's vectors
// against the exact float64 reference (same rule as bert_test), normalization, truncation and
// errors, and microbatching: 64 concurrent one-sentence calls give exactly the vectors each
// gives alone, in fewer forward passes than calls (from stats()).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "power/embed.h"
#include "test_util.h"

namespace power {
namespace {

std::string emb_dir() {
  return testing::shared_dir() + "/fixtures/embeddings";
}

std::vector<std::string> sentences() {
  std::ifstream f(emb_dir() + "/sentences.txt");
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

nlohmann::json meta() {
  std::ifstream f(emb_dir() + "/meta.json");
  return nlohmann::json::parse(f, nullptr, false);
}

double max_abs(const std::vector<float>& a, const float* b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST(Embed, VectorsMatchTheExactReference) {
  POWER_REQUIRE_SHARED();
  const auto m = meta();
  for (const char* name : {"bert-mean-F16", "bert-cls-Q8_0"}) {
    SCOPED_TRACE(name);
    EmbedOptions o;
    o.threads = 2;
    auto model = EmbeddingModel::open(emb_dir() + "/" + name + ".gguf", o);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->info().kind, "embedding");
    EXPECT_EQ((*model)->info().pooling, m["files"][name]["pooling"].get<std::string>());
    EmbedRequest req;
    req.texts = sentences();
    ASSERT_EQ(req.texts.size(), 8u);
    auto res = (*model)->embed(req);
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    EXPECT_EQ(res->prompt_tokens, 225);  // README: 225 tokens in all
    const auto exact = testing::read_f32(emb_dir() + "/" + std::string(name) + ".emb-exact.f32");
    const int64_t E = res->n_embd;
    ASSERT_EQ(exact.size(), 8u * static_cast<size_t>(E));
    const double tol = 1.25 * m["files"][name]["peer_vs_exact_raw"]["max_abs"].get<double>() + 1e-4;
    for (size_t s = 0; s < 8; ++s) {
      ASSERT_EQ(res->embeddings[s].size(), static_cast<size_t>(E));
      EXPECT_LE(max_abs(res->embeddings[s], exact.data() + s * E), tol) << "sentence " << s;
    }
    // Normalized: unit length, and the direction of the exact reference.
    req.normalize = true;
    auto nres = (*model)->embed(req);
    ASSERT_TRUE(nres.ok());
    const double ntol =
        1.25 * m["files"][name]["peer_vs_exact_norm"]["max_abs"].get<double>() + 1e-4;
    for (size_t s = 0; s < 8; ++s) {
      double ss = 0, es = 0;
      for (int64_t e = 0; e < E; ++e) {
        ss += double(nres->embeddings[s][e]) * nres->embeddings[s][e];
        es += double(exact[s * E + e]) * exact[s * E + e];
      }
      EXPECT_NEAR(ss, 1.0, 1e-6);
      std::vector<float> en(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) en[e] = float(exact[s * E + e] / std::sqrt(es));
      EXPECT_LE(max_abs(nres->embeddings[s], en.data()), ntol);
    }
  }
}

TEST(Embed, TokenInputsTruncationAndErrors) {
  POWER_REQUIRE_SHARED();
  EmbedOptions o;
  o.threads = 1;
  o.n_ctx = 16;
  o.max_batch_tokens = 64;
  auto model = EmbeddingModel::open(emb_dir() + "/bert-mean-F16.gguf", o);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto texts = sentences();
  // Token input = the text's own ids: the same vector.
  EmbedRequest a, b;
  a.texts = {texts[0]};
  b.token_inputs = {(*model)->tokenize(texts[0])};
  EXPECT_EQ(b.token_inputs[0], (std::vector<int32_t>{101, 7592, 2088, 1012, 102}));
  auto ra = (*model)->embed(a), rb = (*model)->embed(b);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->embeddings[0], rb->embeddings[0]);
  // Sentence 7 has 108 tokens: too long for n_ctx 16 unless truncated.
  EmbedRequest lng;
  lng.texts = {texts[7]};
  auto r = (*model)->embed(lng);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().to_string().find("n_ctx=16"), std::string::npos) << r.status().to_string();
  lng.truncate = true;
  r = (*model)->embed(lng);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt_tokens, 16);
  // Truncation = the first 15 ids, then [SEP].
  std::vector<int32_t> cut = (*model)->tokenize(texts[7]);
  cut.resize(16);
  cut.back() = 102;
  EmbedRequest manual;
  manual.token_inputs = {cut};
  auto rm = (*model)->embed(manual);
  ASSERT_TRUE(rm.ok());
  EXPECT_EQ(rm->embeddings[0], r->embeddings[0]);
  // Bad inputs: clear errors, model keeps working.
  EmbedRequest none;
  EXPECT_EQ((*model)->embed(none).status().code(), StatusCode::kInvalidArgument);
  EmbedRequest bad_id;
  bad_id.token_inputs = {{101, 40000, 102}};
  EXPECT_EQ((*model)->embed(bad_id).status().code(), StatusCode::kInvalidArgument);
  EmbedRequest empty_tokens;
  empty_tokens.token_inputs = {{}};
  EXPECT_EQ((*model)->embed(empty_tokens).status().code(), StatusCode::kInvalidArgument);
  auto again = (*model)->embed(a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->embeddings[0], ra->embeddings[0]);
}

TEST(Embed, AChatModelIsRefused) {
  POWER_REQUIRE_SHARED();
  const std::string path = testing::shared_dir() + "/fixtures/models/llama/llama-Q4_K_M.gguf";
  EXPECT_FALSE(is_embedding_model_file(path));
  auto r = EmbeddingModel::open(path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().to_string().find("llama"), std::string::npos) << r.status().to_string();
}

TEST(Embed, OptionsAreValidated) {
  POWER_REQUIRE_SHARED();
  const std::string path = emb_dir() + "/bert-cls-Q8_0.gguf";
  EmbedOptions o;
  o.max_batch_tokens = 100;  // < n_ctx 512
  EXPECT_EQ(EmbeddingModel::open(path, o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.pooling = "max";
  EXPECT_EQ(EmbeddingModel::open(path, o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.memory_budget_bytes = 1 << 20;  // 1 MiB: less than the 11.8 MB file
  auto r = EmbeddingModel::open(path, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDoesNotFit);
  EXPECT_NE(r.status().to_string().find("weights_bytes=11815264"), std::string::npos)
      << r.status().to_string();
  o = {};
  o.pooling = "none";
  o.threads = 1;
  auto pn = EmbeddingModel::open(path, o);
  ASSERT_TRUE(pn.ok());
  EmbedRequest req;
  req.texts = {"Hello world."};
  auto res = (*pn)->embed(req);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->embeddings[0].size(), 5u * 384u);  // per-token rows
  EXPECT_FALSE(is_embedding_model_file(path + ".missing"));
  EXPECT_TRUE(is_embedding_model_file(path));
}

TEST(Embed, ConcurrentCallsAreMergedAndBatchInvariant) {
  POWER_REQUIRE_SHARED();
  for (const char* name : {"bert-mean-F16", "bert-cls-Q8_0"}) {
    SCOPED_TRACE(name);
    EmbedOptions o;
    o.threads = 2;
    o.batch_window_us = 20000;  // 20 ms: wide enough to gather on a loaded machine
    auto model = EmbeddingModel::open(emb_dir() + "/" + name + ".gguf", o);
    ASSERT_TRUE(model.ok());
    const auto texts = sentences();
    // Each sentence alone, one call at a time.
    std::vector<std::vector<float>> alone;
    for (const auto& t : texts) {
      EmbedRequest r;
      r.texts = {t};
      auto res = (*model)->embed(r);
      ASSERT_TRUE(res.ok());
      alone.push_back(res->embeddings[0]);
    }
    const EmbedStats before = (*model)->stats();
    EXPECT_EQ(before.forward_passes, texts.size());
    EXPECT_EQ(before.merged_requests, 0u);
    constexpr int kClients = 64;
    std::vector<std::vector<float>> got(kClients);
    std::vector<Status> status(kClients);
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] {
        ready.fetch_add(1);
        while (ready.load() < kClients) std::this_thread::yield();
        EmbedRequest r;
        r.texts = {texts[static_cast<size_t>(c) % texts.size()]};
        auto res = (*model)->embed(r);
        if (!res.ok()) {
          status[c] = res.status();
          return;
        }
        got[c] = std::move(res->embeddings[0]);
      });
    }
    for (auto& t : threads) t.join();
    for (int c = 0; c < kClients; ++c) {
      ASSERT_TRUE(status[c].ok()) << status[c].to_string();
      const auto& want = alone[static_cast<size_t>(c) % texts.size()];
      ASSERT_EQ(got[c].size(), want.size());
      EXPECT_EQ(0, std::memcmp(got[c].data(), want.data(), want.size() * sizeof(float)))
          << "client " << c << " differs from the sentence alone";
    }
    const EmbedStats after = (*model)->stats();
    const uint64_t passes = after.forward_passes - before.forward_passes;
    EXPECT_EQ(after.requests - before.requests, static_cast<uint64_t>(kClients));
    EXPECT_LT(passes, static_cast<uint64_t>(kClients));
    EXPECT_GT(after.merged_requests, 0u);
    EXPECT_GT(after.max_pass_inputs, 1u);
    std::printf("[ %s ] 64 concurrent calls: %llu forward passes, %llu merged, max %llu/pass\n",
                name, static_cast<unsigned long long>(passes),
                static_cast<unsigned long long>(after.merged_requests),
                static_cast<unsigned long long>(after.max_pass_inputs));
  }
}

TEST(Embed, LargeRequestSpreadsOverSeveralPasses) {
  POWER_REQUIRE_SHARED();
  EmbedOptions o;
  o.threads = 1;
  o.n_ctx = 128;
  o.max_batch_tokens = 128;  // sentences total 225 tokens: at least two passes
  o.batch_window_us = 0;
  auto model = EmbeddingModel::open(emb_dir() + "/bert-mean-F16.gguf", o);
  ASSERT_TRUE(model.ok());
  EmbedRequest req;
  req.texts = sentences();
  auto res = (*model)->embed(req);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_GE((*model)->stats().forward_passes, 2u);
  EXPECT_LE((*model)->stats().max_pass_tokens, 128u);
  const auto exact = testing::read_f32(emb_dir() + "/bert-mean-F16.emb-exact.f32");
  for (size_t s = 0; s < 8; ++s) {
    EXPECT_LE(max_abs(res->embeddings[s], exact.data() + s * 384), 1e-4) << s;
  }
}

}  // namespace
}  // namespace power
