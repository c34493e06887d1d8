// POST /v1/embeddings over HTTP: a power::server::Server in this process serving the embedding
// fixture model (../shared/fixtures/embeddings) and a chat model, spoken to over raw sockets.
// Checks the OpenAI response shape, that the vectors are the exact reference's direction
// (the bert_test rule), base64, usage, the errors (chat model, dimensions, bad input, too long)
// and that concurrent HTTP clients are merged into fewer forward passes with identical results.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;

std::string emb(const std::string& f) {
  return testing::shared_dir() + "/fixtures/embeddings/" + f;
}

struct Reply {
  int status = 0;
  json body;
};

// One request on its own connection ("Connection: close"), read to EOF.
Reply post(int port, const std::string& path, const std::string& body) {
  Reply r;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return r;
  }
  const std::string raw =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  size_t sent = 0;
  while (sent < raw.size()) {
    ssize_t n = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string in;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t he = in.find("\r\n\r\n");
  if (in.size() < 12 || he == std::string::npos) return r;
  r.status = std::atoi(in.substr(9, 3).c_str());
  r.body = json::parse(in.substr(he + 4), nullptr, false);
  return r;
}

class EmbeddingsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) GTEST_SKIP() << "shared data not found";
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.log_requests = false;
    o.models = {emb("bert-mean-F16.gguf"),
                testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf"};
    o.load.n_ctx = 256;
    o.load.threads = 1;
    auto s = Server::create(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(*s);
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
    thread_ = std::thread([this] { (void)server_->wait(); });
  }
  void TearDown() override {
    if (server_) server_->shutdown();
    if (thread_.joinable()) thread_.join();
  }
  std::unique_ptr<Server> server_;
  std::thread thread_;
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
}

}  // namespace
}  // namespace power::server
