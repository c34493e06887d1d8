// HTTP-level tests of the `speculative` request field (docs/SPECULATIVE.md) on
// /v1/chat/completions, against an in-process `power serve` with stories260K: greedy output
// with speculation equals the plain output, unavailable modes and bad shapes are 400s.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;

struct Reply {
  int status = 0;
  json body;
};

// One POST with Connection: close; reads to EOF (Content-Length bodies only).
Reply post_chat(int port, const json& body) {
  const std::string b = body.dump();
  const std::string raw =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(b.size()) + "\r\n\r\n" + b;
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
  (void)::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t he = in.find("\r\n\r\n");
  if (he == std::string::npos || !in.starts_with("HTTP/1.1 ")) return r;
  r.status = std::atoi(in.c_str() + 9);
  r.body = json::parse(in.substr(he + 4), nullptr, false);
  return r;
}

class SpecHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.log_requests = false;
    o.models = {testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf"};
    o.load.n_ctx = 512;
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
  json chat(json extra) {
    json body = {{"model", "stories260K-F32"},
                 {"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
                 {"max_tokens", 80},
                 {"temperature", 0}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(SpecHttp, GreedyWithSpeculationEqualsPlain) {
  POWER_REQUIRE_SHARED();
  Reply plain = post_chat(port_, chat({}));
  ASSERT_EQ(plain.status, 200) << plain.body.dump();
  for (const json& spec :
       {json{{"mode", "ngram"}, {"k", 4}},
        json{{"mode", "auto"}, {"k", 7}, {"adaptive", false}, {"s", 2}}, json{{"mode", "off"}}}) {
    Reply r = post_chat(port_, chat({{"speculative", spec}}));
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(r.body["choices"][0]["message"]["content"],
              plain.body["choices"][0]["message"]["content"])
        << spec.dump();
    EXPECT_EQ(r.body["usage"]["completion_tokens"], plain.body["usage"]["completion_tokens"]);
  }
}

TEST_F(SpecHttp, UnavailableModesAndBadShapesAre400) {
  POWER_REQUIRE_SHARED();
  Reply a = post_chat(port_, chat({{"speculative", {{"mode", "draft"}}}}));
  EXPECT_EQ(a.status, 400) << a.body.dump();
  EXPECT_NE(a.body["error"]["message"].get<std::string>().find("draft model"), std::string::npos)
      << a.body.dump();
  Reply b = post_chat(port_, chat({{"speculative", {{"mode", "mtp"}}}}));
  EXPECT_EQ(b.status, 400) << b.body.dump();
  Reply c = post_chat(port_, chat({{"speculative", {{"mode", "ngram"}, {"k", 17}}}}));
  EXPECT_EQ(c.status, 400);
  EXPECT_EQ(c.body["error"]["param"], "speculative.k");
  Reply d = post_chat(port_, chat({{"speculative", {{"mode", "fast"}}}}));
  EXPECT_EQ(d.status, 400);
  EXPECT_EQ(d.body["error"]["param"], "speculative.mode");
  Reply e = post_chat(port_, chat({{"speculative", {{"tree", true}}}}));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.body["error"]["param"], "speculative.tree");
  Reply f = post_chat(port_, chat({{"speculative", "ngram"}}));
  EXPECT_EQ(f.status, 400);
  // The server keeps serving.
  Reply g = post_chat(port_, chat({{"speculative", {{"mode", "ngram"}}}}));
  EXPECT_EQ(g.status, 200);
}

}  // namespace
}  // namespace power::server
