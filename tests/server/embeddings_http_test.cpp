// POST /v1/embeddings over HTTP: a power::server::Server in this process serving the embedding
// fixture model (../shared/fixtures/embeddings) and a chat model, spoken to over raw sockets.
// Checks the OpenAI response shape, that the vectors are the exact reference's direction
// (the bert_test rule), base64, usage, the errors (chat model, dimensions, bad input, too long)
// and that concurrent HTTP clients are merged into fewer forward passes with identical results.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/http_test_util.h"
#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using Reply = http_test::JsonReply;

Reply post(int port, const std::string& path, const std::string& body) {
  return http_test::post_json(port, path, body);
}

std::string emb(const std::string& f) {
  return testing::shared_dir() + "/fixtures/embeddings/" + f;
}

class EmbeddingsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) GTEST_SKIP() << "shared data not found";
    ServerOptions o;
    o.models = {emb("bert-mean-F16.gguf"),
                testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf"};
    o.load.n_ctx = 256;
    o.load.threads = 1;
    Status st = server_.start(std::move(o));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  http_test::InProcessServer server_;
  int port_ = 0;
};

TEST_F(EmbeddingsHttp, VectorsUsageAndErrors) {
  std::vector<std::string> sentences;
  {
    std::ifstream f(emb("sentences.txt"));
    for (std::string l; std::getline(f, l);) sentences.push_back(l);
  }
  ASSERT_EQ(sentences.size(), 8u);
  Reply r =
      post(port_, "/v1/embeddings", json{{"model", "bert-mean-F16"}, {"input", sentences}}.dump());
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["object"], "list");
  EXPECT_EQ(r.body["model"], "bert-mean-F16");
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 225);
  ASSERT_EQ(r.body["data"].size(), 8u);
  const auto exact = testing::read_f32(emb("bert-mean-F16.emb-exact.f32"));
  std::ifstream mf(emb("meta.json"));
  const json meta = json::parse(mf, nullptr, false);
  const double tol =
      1.25 * meta["files"]["bert-mean-F16"]["peer_vs_exact_norm"]["max_abs"].get<double>() + 1e-4;
  for (size_t s = 0; s < 8; ++s) {
    EXPECT_EQ(r.body["data"][s]["index"], s);
    const auto v = r.body["data"][s]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(v.size(), 384u);
    double es = 0;
    for (size_t e = 0; e < 384; ++e) es += double(exact[s * 384 + e]) * exact[s * 384 + e];
    for (size_t e = 0; e < 384; ++e) {
      ASSERT_NEAR(v[e], exact[s * 384 + e] / std::sqrt(es), tol) << s << "," << e;
    }
  }
  // base64 and token input.
  r = post(port_, "/v1/embeddings",
           json{{"model", "bert-mean-F16"},
                {"input", json::array({101, 7592, 2088, 1012, 102})},
                {"encoding_format", "base64"}}
               .dump());
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["data"][0]["embedding"].get<std::string>().size(), 4u * ((384 * 4 + 2) / 3));
  // A chat model: clear 400 naming the model parameter.
  r = post(port_, "/v1/embeddings", json{{"model", "stories260K-F32"}, {"input", "hello"}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "model") << r.body.dump();
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("not an embedding model"),
            std::string::npos);
  // The embedding model on a generation route: 400.
  r = post(port_, "/v1/completions", json{{"model", "bert-mean-F16"}, {"prompt", "hi"}}.dump());
  EXPECT_EQ(r.status, 400) << r.body.dump();
  // dimensions, bad input, too long.
  r = post(port_, "/v1/embeddings",
           json{{"model", "bert-mean-F16"}, {"input", "x"}, {"dimensions", 64}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "dimensions");
  r = post(port_, "/v1/embeddings", json{{"model", "bert-mean-F16"}, {"input", 3.5}}.dump());
  EXPECT_EQ(r.status, 400);
  std::string lng;
  for (int i = 0; i < 600; ++i) lng += "word ";
  r = post(port_, "/v1/embeddings", json{{"model", "bert-mean-F16"}, {"input", lng}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["code"], "context_length_exceeded") << r.body.dump();
  // OpenAI's sentence, not an internal status name.
  const std::string msg = r.body["error"]["message"];
  EXPECT_EQ(msg.find("out_of_range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("maximum context length is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input[0]"), std::string::npos) << msg;
}

TEST_F(EmbeddingsHttp, ConcurrentClientsGetTheirOwnVectors) {
  const std::string texts[] = {"Hello world.", "Embeddings", "Where is the station?"};
  std::vector<std::vector<float>> alone;
  for (const auto& t : texts) {
    Reply r = post(port_, "/v1/embeddings", json{{"model", "bert-mean-F16"}, {"input", t}}.dump());
    ASSERT_EQ(r.status, 200);
    alone.push_back(r.body["data"][0]["embedding"].get<std::vector<float>>());
  }
  constexpr int kClients = 24;
  std::vector<Reply> got(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      got[c] = post(port_, "/v1/embeddings",
                    json{{"model", "bert-mean-F16"}, {"input", texts[c % 3]}}.dump());
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c) {
    ASSERT_EQ(got[c].status, 200) << got[c].body.dump();
    EXPECT_EQ(got[c].body["data"][0]["embedding"].get<std::vector<float>>(), alone[c % 3])
        << "client " << c;
  }
  // /metrics counts what ran: 3 + kClients one-input requests, in at most as many passes
  // (fewer when requests were merged; how many merge depends on timing, so it is printed).
  http_test::RawReply m = http_test::get_raw(port_, "/metrics");
  ASSERT_EQ(m.status, 200);
  auto counter = [&](const std::string& name) -> int64_t {
    const std::string key = name + "{model=\"bert-mean-F16\"} ";
    const size_t at = m.body.find(key);
    if (at == std::string::npos) return -1;
    return std::atoll(m.body.c_str() + at + key.size());
  };
  EXPECT_EQ(counter("power_embedding_requests_total"), 3 + kClients) << m.body;
  EXPECT_EQ(counter("power_embedding_inputs_total"), 3 + kClients);
  const int64_t passes = counter("power_embedding_forward_passes_total");
  EXPECT_GE(passes, 1);
  EXPECT_LE(passes, 3 + kClients);
  std::printf("embeddings over HTTP: %d requests in %lld forward passes\n", 3 + kClients,
              static_cast<long long>(passes));
}

}  // namespace
}  // namespace power::server
