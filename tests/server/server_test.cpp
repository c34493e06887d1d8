// HTTP-level tests of the OpenAI-compatible service: a power::server::Server in this process
// on 127.0.0.1 (ephemeral port) serving stories260K, spoken to over raw sockets so that the
// exact bytes (SSE framing, chunked encoding, garbage) are what the tests see.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/api_keys.h"
#include "server/http_test_util.h"
#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;

std::string stories(const std::string& f) {
  return testing::shared_dir() + "/models/stories260K/" + f;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct HttpResponse {
  bool ok = false;  // a complete HTTP response arrived
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

// Sends `raw` bytes to 127.0.0.1:port and reads one HTTP/1.1 response (Content-Length or
// chunked), with a receive timeout so a hung server fails the test instead of blocking it.
HttpResponse http_exchange(int port, const std::string& raw, int timeout_s = 30) {
  HttpResponse r;
  int fd = http_test::connect_loopback(port, timeout_s);
  if (fd < 0) return r;
  http_test::send_all(fd, raw);
  std::string in;
  char buf[65536];
  auto have_full = [&]() -> bool {
    size_t he = in.find("\r\n\r\n");
    if (he == std::string::npos) return false;
    std::string head = in.substr(0, he);
    std::string lower = head;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string rest = in.substr(he + 4);
    if (lower.find("transfer-encoding: chunked") != std::string::npos) {
      return rest.find("0\r\n\r\n") != std::string::npos &&
             (rest.starts_with("0\r\n\r\n") || rest.find("\r\n0\r\n\r\n") != std::string::npos);
    }
    size_t cl = lower.find("content-length:");
    if (cl == std::string::npos) return true;
    size_t len = std::strtoul(lower.c_str() + cl + 15, nullptr, 10);
    return rest.size() >= len;
  };
  while (!have_full()) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t he = in.find("\r\n\r\n");
  if (he == std::string::npos || !in.starts_with("HTTP/1.1 ")) return r;
  r.status = std::atoi(in.c_str() + 9);
  std::istringstream hs(in.substr(0, he));
  std::string line;
  std::getline(hs, line);
  while (std::getline(hs, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[name] = value;
  }
  std::string rest = in.substr(he + 4);
  if (r.headers["transfer-encoding"] == "chunked") {
    size_t pos = 0;
    while (true) {
      size_t eol = rest.find("\r\n", pos);
      if (eol == std::string::npos) return r;
      size_t n = std::strtoul(rest.substr(pos, eol - pos).c_str(), nullptr, 16);
      if (n == 0) break;
      if (eol + 2 + n > rest.size()) return r;
      r.body += rest.substr(eol + 2, n);
      pos = eol + 2 + n + 2;
    }
  } else {
    r.body = rest;
    if (r.headers.count("content-length") != 0 &&
        r.body.size() != std::stoul(r.headers["content-length"])) {
      return r;
    }
  }
  r.ok = true;
  return r;
}

std::string request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& extra_headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body;
}

HttpResponse post(int port, const std::string& path, const std::string& body,
                  const std::string& headers = "") {
  return http_exchange(port, request("POST", path, body, headers));
}
HttpResponse get(int port, const std::string& path, const std::string& headers = "") {
  return http_exchange(port, request("GET", path, "", headers));
}

// Checks OpenAI's error shape and returns the parsed error object.
json expect_error(const HttpResponse& r, int status) {
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.body;
  if (j.is_discarded() || !j.contains("error")) {
    ADD_FAILURE() << "not an error body: " << r.body;
    return json::object();
  }
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param") && (e["param"].is_null() || e["param"].is_string()));
  EXPECT_TRUE(e.contains("code") && (e["code"].is_null() || e["code"].is_string()));
  return e;
}

// The first model's /api/ps entry once its streamed weights have stopped being read. A request's
// last pass asks for the next pass's first groups ahead (prefetch), and those reads finish after
// the response; /api/ps and /metrics read after them agree.
json settled_ps(int port) {
  json prev = json::parse(get(port, "/api/ps").body)["models"][0];
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    json cur = json::parse(get(port, "/api/ps").body)["models"][0];
    if (cur["weights"] == prev["weights"]) return cur;
    prev = std::move(cur);
  }
  ADD_FAILURE() << "streamed weights still being read after 5 s: " << prev["weights"].dump();
  return prev;
}

// The SSE events of a body: every event must be one "data: ..." line followed by a blank line.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event at " << pos;
    if (end == std::string::npos) break;
    std::string ev = body.substr(pos, end - pos);
    EXPECT_TRUE(ev.starts_with("data: ")) << ev;
    EXPECT_EQ(ev.find('\n'), std::string::npos) << ev;
    events.push_back(ev.substr(6));
    pos = end + 2;
  }
  return events;
}

class ServerFixture : public ::testing::Test {
 protected:
  void start(ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.log_requests = false;
    auto s = Server::create(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(*s);
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_->port();
    thread_ = std::thread([this] { (void)server_->wait(); });
  }
  void SetUp() override {
    if (!testing::shared_available()) return;
    ServerOptions o;
    o.models = {stories("stories260K-F32.gguf")};
    o.max_body_bytes = 1 << 20;
    o.load.n_ctx = 512;
    o.load.threads = 1;
    start(std::move(o));
  }
  void TearDown() override {
    if (server_) server_->shutdown();
    if (thread_.joinable()) thread_.join();
  }
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = 0;
};

constexpr const char* kModel = "stories260K-F32";

TEST_F(ServerFixture, ModelsAreListedByFileName) {
  POWER_REQUIRE_SHARED();
  auto r = get(port_, "/v1/models");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], kModel);
  EXPECT_EQ(j["data"][0]["object"], "model");
  auto one = get(port_, std::string("/v1/models/") + kModel);
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(json::parse(one.body)["id"], kModel);
  auto e = expect_error(get(port_, "/v1/models/nope"), 404);
  EXPECT_EQ(e["code"], "model_not_found");
}

// The greedy continuation of "Once upon a time" is llama.cpp's (fixture from llama-cli).
TEST_F(ServerFixture, GreedyCompletionEqualsLlamaCpp) {
  POWER_REQUIRE_SHARED();
  json body = {
      {"model", kModel}, {"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}};
  auto r = post(port_, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("cmpl-"));
  std::string text = j["choices"][0]["text"];
  const std::string expected =
      read_text(stories("expected_llama-cli_greedy_prompt-Once-upon-a-time_n64.txt"));
  EXPECT_NE(expected.find(text), std::string::npos) << text;
  EXPECT_GT(text.size(), 100u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 64);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // BOS + 4 tokens (the fixture's ids)
  EXPECT_EQ(j["usage"]["total_tokens"], 69);
  EXPECT_FALSE(r.headers["x-request-id"].empty());
}

TEST_F(ServerFixture, ChatStreamFramingMatchesNonStreamedAnswer) {
  POWER_REQUIRE_SHARED();
  json body = {{"model", kModel},
               {"messages", {{{"role", "user"}, {"content", "Tell a story"}}}},
               {"max_tokens", 40},
               {"temperature", 0}};
  auto plain = post(port_, "/v1/chat/completions", body.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  json pj = json::parse(plain.body);
  EXPECT_EQ(pj["object"], "chat.completion");
  EXPECT_EQ(pj["choices"][0]["message"]["role"], "assistant");
  const std::string want = pj["choices"][0]["message"]["content"];

  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto s = post(port_, "/v1/chat/completions", body.dump());
  ASSERT_TRUE(s.ok);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.headers["content-type"].starts_with("text/event-stream"));
  auto events = sse_events(s.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  std::string got;
  std::string finish;
  for (size_t i = 1; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["id"], first["id"]);
    if (c["choices"][0]["delta"].contains("content")) got += c["choices"][0]["delta"]["content"];
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(finish, pj["choices"][0]["finish_reason"]);
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], pj["usage"]["completion_tokens"]);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], pj["usage"]["prompt_tokens"]);
}

TEST_F(ServerFixture, CompletionStreamWithoutUsageEndsWithFinishAndDone) {
  POWER_REQUIRE_SHARED();
  json body = {{"model", kModel},
               {"prompt", "Once upon a time"},
               {"max_tokens", 8},
               {"temperature", 0},
               {"stream", true}};
  auto s = post(port_, "/v1/completions", body.dump());
  ASSERT_EQ(s.status, 200);
  auto events = sse_events(s.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json fin = json::parse(events[events.size() - 2]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(fin.contains("usage"));
}

TEST_F(ServerFixture, BadInputsGetOpenAiErrors) {
  POWER_REQUIRE_SHARED();
  auto chat = [&](const std::string& body) { return post(port_, "/v1/chat/completions", body); };
  expect_error(chat("{not json"), 400);
  expect_error(chat("[1,2]"), 400);
  // Invalid UTF-8 inside a JSON string.
  expect_error(chat(std::string("{\"model\":\"") + kModel +
                    "\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"),
               400);
  json ok = {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto with = [&](const std::string& key, json value) {
    json b = ok;
    b[key] = std::move(value);
    return chat(b.dump());
  };
  EXPECT_EQ(expect_error(with("frobnicate", 1), 400)["param"], "frobnicate");
  EXPECT_EQ(expect_error(with("parallel_tool_calls", "no"), 400)["param"], "parallel_tool_calls");
  EXPECT_EQ(expect_error(with("temperature", "hot"), 400)["param"], "temperature");
  EXPECT_EQ(expect_error(with("temperature", 3), 400)["param"], "temperature");
  EXPECT_EQ(expect_error(with("max_tokens", -5), 400)["param"], "max_tokens");
  EXPECT_EQ(expect_error(with("max_tokens", 1.5), 400)["param"], "max_tokens");
  EXPECT_EQ(expect_error(with("n", 0), 400)["param"], "n");
  EXPECT_EQ(expect_error(with("n", 129), 400)["param"], "n");
  EXPECT_EQ(expect_error(with("stop", 7), 400)["param"], "stop");
  EXPECT_EQ(expect_error(with("logit_bias", {{"999999", 1}}), 400)["param"], "logit_bias");
  EXPECT_EQ(expect_error(with("stream_options", {{"include_usage", true}}), 400)["param"],
            "stream_options");
  EXPECT_EQ(expect_error(with("messages", json::array()), 400)["param"], "messages");
  EXPECT_EQ(expect_error(with("messages", {{{"role", "wizard"}, {"content", "x"}}}), 400)["param"],
            "messages[0].role");
  EXPECT_EQ(
      expect_error(with("messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}),
                   400)["param"],
      "messages[0].content[0].type");
  EXPECT_EQ(expect_error(with("model", "gpt-4"), 404)["code"], "model_not_found");
  // A prompt longer than the context (512) is rejected, never truncated.
  json big = {{"model", kModel}, {"prompt", json::array()}, {"max_tokens", 10}};
  for (int i = 0; i < 600; ++i) big["prompt"].push_back(100);
  expect_error(post(port_, "/v1/completions", big.dump()), 400);
  // Embeddings: no embedding model yet.
  EXPECT_EQ(
      expect_error(post(port_, "/v1/embeddings", json{{"model", kModel}, {"input", "x"}}.dump()),
                   400)["code"],
      "not_an_embedding_model");
  expect_error(get(port_, "/no/such/route"), 404);
  // Still serving.
  EXPECT_EQ(chat(json{{"model", kModel},
                      {"messages",
                       {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}},
                      {"max_tokens", 2}}
                     .dump())
                .status,
            200);
}

TEST_F(ServerFixture, HugeBodyIs413) {
  POWER_REQUIRE_SHARED();
  std::string body = "{\"model\":\"x\",\"prompt\":\"" + std::string(2 << 20, 'a') + "\"}";
  auto e = expect_error(post(port_, "/v1/completions", body), 413);
  EXPECT_EQ(e["code"], "body_too_large");
  EXPECT_EQ(get(port_, "/health").status, 200);
}

TEST_F(ServerFixture, RequestIdIsEchoedOrGenerated) {
  POWER_REQUIRE_SHARED();
  auto r = get(port_, "/v1/models", "X-Request-ID: abc-123\r\n");
  EXPECT_EQ(r.headers["x-request-id"], "abc-123");
  auto g1 = get(port_, "/v1/models");
  auto g2 = get(port_, "/v1/models");
  EXPECT_EQ(g1.headers["x-request-id"].size(), 32u);
  EXPECT_NE(g1.headers["x-request-id"], g2.headers["x-request-id"]);
}

TEST_F(ServerFixture, HealthMetricsAndPs) {
  POWER_REQUIRE_SHARED();
  auto h = get(port_, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(json::parse(h.body)["ready"], true);
  ASSERT_EQ(post(port_, "/v1/completions",
                 json{{"model", kModel}, {"prompt", "Once"}, {"max_tokens", 3}}.dump())
                .status,
            200);
  auto m = get(port_, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("power_completion_tokens_total 3\n"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("power_time_to_first_token_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(m.body.find("power_queue_depth{model=\"stories260K-F32\"} 0"), std::string::npos);
  EXPECT_NE(m.body.find("power_kv_blocks_used{model=\"stories260K-F32\"}"), std::string::npos);
  auto ps = json::parse(get(port_, "/api/ps").body);
  ASSERT_EQ(ps["models"].size(), 1u);
  EXPECT_EQ(ps["models"][0]["name"], kModel);
  EXPECT_EQ(ps["models"][0]["digest"].get<std::string>().size(), 7u + 64u);
  EXPECT_GT(ps["models"][0]["size_bytes"].get<uint64_t>(), 1000000u);  // 1.1 MB of F32 weights
}

// A model served under a weights budget (config keys weights_budget, prefetch and mlock;
// docs/RESIDENCY.md): every matrix of stories260K streamed, the same greedy completion as the
// fully resident server, and /api/ps and /metrics say what streams and what was read.
TEST_F(ServerFixture, StreamedWeightsServeTheSameTextAndAreReported) {
  POWER_REQUIRE_SHARED();
  const json req = {
      {"model", kModel}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  auto resident = post(port_, "/v1/completions", req.dump());
  ASSERT_EQ(resident.status, 200) << resident.body;
  auto ps0 = json::parse(get(port_, "/api/ps").body)["models"][0];
  EXPECT_EQ(ps0["residency"], "mmap");
  EXPECT_EQ(ps0["weights"]["streamed_bytes"], 0);
  EXPECT_EQ(ps0["weights"]["locked_bytes"], 0);
  EXPECT_TRUE(ps0["weights"]["cache"].is_null());
  TearDown();
  ServerOptions o;
  o.models = {stories("stories260K-F32.gguf")};
  o.load.n_ctx = 512;
  o.load.threads = 1;
  o.warmup = false;  // so that the cache's lookups are this test's request's alone
  ASSERT_TRUE(apply_config_json(json::parse(R"({"weights_budget":"0%","prefetch":1,"mlock":true,
                                         "weights_cache":"64KiB","weights_cache_policy":"lfru"})"),
                                &o)
                  .ok());
  EXPECT_FALSE(apply_config_json(json::parse(R"({"prefetch":5})"), &o).ok());
  EXPECT_FALSE(apply_config_json(json::parse(R"({"mlock":"yes"})"), &o).ok());
  start(std::move(o));
  auto streamed = post(port_, "/v1/completions", req.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(json::parse(streamed.body)["choices"][0]["text"],
            json::parse(resident.body)["choices"][0]["text"]);
  auto ps = settled_ps(port_);
  EXPECT_EQ(ps["residency"], "streamed");
  const json& w = ps["weights"];
  EXPECT_GT(w["streamed_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(w["staging_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(w["plan_sha256"].get<std::string>().size(), 64u);
  // At least one pass (the prompt) and one per generated token read every streamed group.
  EXPECT_GE(w["read_bytes"].get<uint64_t>(), w["streamed_bytes"].get<uint64_t>() / 2);
  EXPECT_EQ(w["read_errors"], 0);
  // mlock: the staging slots (and the pinned norms) are locked in RAM.
  EXPECT_GT(w["locked_bytes"].get<uint64_t>(), w["staging_bytes"].get<uint64_t>());
  const std::string metrics = get(port_, "/metrics").body;
  EXPECT_NE(metrics.find("power_weights_locked_bytes{model=\"stories260K-F32\"} " +
                         std::to_string(w["locked_bytes"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("power_weights_streamed_bytes{model=\"stories260K-F32\"} " +
                         std::to_string(w["streamed_bytes"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("power_weights_read_bytes_total{model=\"stories260K-F32\"} " +
                         std::to_string(w["read_bytes"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << metrics;
  // weights_cache: the token-embedding rows went through it, one lookup per token fed in (the
  // prompt, then every generated token but the last).
  const json& c = w["cache"];
  ASSERT_TRUE(c.is_object()) << w.dump();
  const json usage = json::parse(streamed.body)["usage"];
  EXPECT_EQ(
      c["hits"].get<uint64_t>() + c["misses"].get<uint64_t>(),
      usage["prompt_tokens"].get<uint64_t>() + usage["completion_tokens"].get<uint64_t>() - 1);
  EXPECT_EQ(c["capacity_bytes"], 65536);
  EXPECT_EQ(c["read_bytes"].get<uint64_t>(), c["misses"].get<uint64_t>() * 64 * 4);
  EXPECT_NE(metrics.find("power_weights_cache_capacity_bytes 65536\n"), std::string::npos);
  EXPECT_NE(metrics.find("power_weights_cache_misses_total{model=\"stories260K-F32\"} " +
                         std::to_string(c["misses"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("power_weights_cache_hits_total{model=\"stories260K-F32\"} " +
                         std::to_string(c["hits"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << metrics;
}

// Config keys mirror_dir and mirror_bytes: the streamed weights are read from a partial mirror
// built at load; the text is the resident server's, and /api/ps and /metrics report the
// mirror's bytes and reads (none from the artifact, no fallbacks).
TEST_F(ServerFixture, MirroredWeightsServeTheSameTextAndAreReported) {
  POWER_REQUIRE_SHARED();
  const json req = {
      {"model", kModel}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  auto resident = post(port_, "/v1/completions", req.dump());
  ASSERT_EQ(resident.status, 200) << resident.body;
  EXPECT_TRUE(json::parse(get(port_, "/api/ps").body)["models"][0]["weights"]["mirror"].is_null());
  TearDown();
  const std::string dir = testing::make_temp_dir("power-server-mirror");
  ServerOptions o;
  o.models = {stories("stories260K-F32.gguf")};
  o.load.n_ctx = 512;
  o.load.threads = 1;
  ASSERT_TRUE(apply_config_json(json{{"weights_budget", "0%"},
                                     {"prefetch", 1},
                                     {"mirror_dir", dir},
                                     {"mirror_bytes", "1G"}},
                                &o)
                  .ok());
  start(std::move(o));
  auto mirrored = post(port_, "/v1/completions", req.dump());
  ASSERT_EQ(mirrored.status, 200) << mirrored.body;
  EXPECT_EQ(json::parse(mirrored.body)["choices"][0]["text"],
            json::parse(resident.body)["choices"][0]["text"]);
  auto ps = settled_ps(port_);
  const json& w = ps["weights"];
  ASSERT_TRUE(w["mirror"].is_object()) << w.dump();
  const json& mi = w["mirror"];
  EXPECT_EQ(mi["dir"].get<std::string>().rfind(dir + "/sha256-", 0), 0u) << mi.dump();
  EXPECT_GT(mi["bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(mi["group_reads"].get<uint64_t>(), 0u);
  EXPECT_GE(mi["read_bytes"].get<uint64_t>(), w["streamed_bytes"].get<uint64_t>() / 2);
  EXPECT_EQ(mi["fallbacks"], 0);
  EXPECT_EQ(w["read_bytes"], 0);
  const std::string metrics = get(port_, "/metrics").body;
  EXPECT_NE(metrics.find("power_weights_mirror_read_bytes_total{model=\"stories260K-F32\"} " +
                         std::to_string(mi["read_bytes"].get<uint64_t>()) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("power_weights_mirror_bytes{model=\"stories260K-F32\"} " +
                         std::to_string(mi["bytes"].get<uint64_t>()) + "\n"),
            std::string::npos);
  EXPECT_NE(metrics.find("power_weights_mirror_fallbacks_total{model=\"stories260K-F32\"} 0\n"),
            std::string::npos);
  // Bytes read per token: the mirror's bytes over the tokens the passes computed (the prompt and
  // 23 decoded tokens at least).
  const std::string key = "power_forward_tokens_total{model=\"stories260K-F32\"} ";
  const size_t at = metrics.find(key);
  ASSERT_NE(at, std::string::npos) << metrics;
  const double tokens = std::stod(metrics.substr(at + key.size()));
  EXPECT_GE(tokens, 24.0);
  EXPECT_DOUBLE_EQ(w["read_bytes_per_token"].get<double>(),
                   static_cast<double>(mi["read_bytes"].get<uint64_t>()) / tokens);
  TearDown();
  testing::remove_tree(dir);
}

// A client that disconnects mid-stream cancels its generation: the EOS token is banned so the
// request would otherwise run to max_tokens.
TEST_F(ServerFixture, DisconnectMidStreamCancels) {
  POWER_REQUIRE_SHARED();
  json body = {{"model", kModel},
               {"prompt", "Once upon a time"},
               {"max_tokens", 480},
               {"logit_bias", {{"2", -100}}},
               {"stream", true}};
  int fd = http_test::connect_loopback(port_, 30);
  ASSERT_GE(fd, 0);
  std::string raw = request("POST", "/v1/completions", body.dump());
  ASSERT_EQ(::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL), static_cast<ssize_t>(raw.size()));
  char buf[256];
  ASSERT_GT(::recv(fd, buf, sizeof(buf), 0), 0);  // headers / first chunk arrived
  ::close(fd);
  // The server notices on its next write and cancels; poll /metrics for the outcome.
  std::string metrics;
  for (int i = 0; i < 200; ++i) {
    metrics = get(port_, "/metrics").body;
    if (metrics.find("power_client_cancellations_total 1\n") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(metrics.find("power_client_cancellations_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("power_active_generations 0\n"), std::string::npos);
  EXPECT_EQ(metrics.find("power_completion_tokens_total 480\n"), std::string::npos);
}

TEST_F(ServerFixture, UnloadAndLoadAgain) {
  POWER_REQUIRE_SHARED();
  auto u = post(port_, "/api/unload", json{{"model", kModel}}.dump());
  ASSERT_EQ(u.status, 200) << u.body;
  EXPECT_TRUE(json::parse(get(port_, "/v1/models").body)["data"].empty());
  EXPECT_EQ(get(port_, "/health").status, 503);  // alive, but not ready: no model
  EXPECT_EQ(get(port_, "/health/live").status, 200);
  expect_error(post(port_, "/v1/completions", json{{"model", kModel}, {"prompt", "x"}}.dump()),
               404);
  expect_error(post(port_, "/api/unload", json{{"model", kModel}}.dump()), 404);
  auto l = post(port_, "/api/load", json{{"model", stories("stories260K-F32.gguf")}}.dump());
  ASSERT_EQ(l.status, 200) << l.body;
  EXPECT_EQ(json::parse(l.body)["id"], kModel);
  EXPECT_EQ(post(port_, "/v1/completions",
                 json{{"model", kModel}, {"prompt", "Once"}, {"max_tokens", 2}}.dump())
                .status,
            200);
  expect_error(post(port_, "/api/load", json{{"model", "/nonexistent.gguf"}}.dump()), 404);
}

// 1,000 garbage requests: random bytes, broken HTTP, and JSON bodies each carrying at least
// one defect. The server answers each with a well-formed error (or closes a connection whose
// bytes are not HTTP at all) and keeps serving.
TEST_F(ServerFixture, ThousandGarbageRequestsLeaveTheServerUp) {
  POWER_REQUIRE_SHARED();
  std::mt19937 rng(20261129);
  auto rand_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xff);
    return s;
  };
  const std::vector<std::string> paths = {"/v1/chat/completions",
                                          "/v1/completions",
                                          "/v1/embeddings",
                                          "/api/load",
                                          "/api/pull",
                                          "/api/chat",
                                          "/api/generate",
                                          "/api/embed",
                                          "/api/show",
                                          "/tokenize",
                                          "/detokenize"};
  const std::vector<json> bad_values = {
      json(nullptr), json(-1),       json(1e300), json("x"),
      json::array(), json::object(), json(true),  json::array({1, "a"})};
  const std::vector<std::string> keys = {
      "messages", "prompt", "max_tokens", "temperature",    "top_p", "stop",  "seed", "logit_bias",
      "n",        "stream", "model",      "stream_options", "top_k", "min_p", "user", "zzz"};
  int answered = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string raw;
    const std::string& path = paths[rng() % paths.size()];
    switch (i % 4) {
      case 0:  // not HTTP
        raw = rand_bytes(1 + rng() % 300) + "\r\n\r\n";
        break;
      case 1:  // HTTP with a random body
        raw = request("POST", path, rand_bytes(rng() % 500));
        break;
      case 2: {  // a valid request with one field made wrong
        json b = {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
        if (path == "/v1/completions") b = {{"model", kModel}, {"prompt", "hi"}};
        std::string key = keys[rng() % keys.size()];
        json v = bad_values[rng() % bad_values.size()];
        if (v.is_null() || (key == "user" && v.is_string()) || (key == "stop" && v.is_string()) ||
            (key == "seed" && v.is_number_integer()) ||
            (key == "stop" && v.is_array() && v.empty()) ||
            (key == "logit_bias" && v.is_object())) {
          key = "zzz";  // a value that would be valid: use an unknown field instead
        }
        b[key] = v;
        b["max_tokens"] = b.contains("max_tokens") ? b["max_tokens"] : json(1);
        if (key != "max_tokens") b["unknown_" + std::to_string(i)] = 1;
        raw = request("POST", path, b.dump());
        break;
      }
      default: {  // broken HTTP framing
        std::vector<std::string> heads = {
            "POST " + path + " HTTP/1.1\r\nContent-Length: abc\r\nConnection: close\r\n\r\n",
            "GET /" + rand_bytes(20) + " HTTP/1.1\r\n\r\n",
            "POST " + path + " HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "BREW " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "POST " + path + " HTTP/1.1\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{\"a\"}",
        };
        raw = heads[rng() % heads.size()];
        break;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    HttpResponse r = http_exchange(port_, raw, 10);
    auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (secs > 2)
      ADD_FAILURE() << "request " << i << " took " << secs << " s: " << raw.substr(0, 120);
    if (!r.ok) continue;  // connection closed without an answer: allowed for non-HTTP bytes
    ++answered;
    EXPECT_GE(r.status, 400) << "request " << i << ": " << raw.substr(0, 200);
    if (!r.body.empty()) {
      json j = json::parse(r.body, nullptr, false);
      // OpenAI's {"error": {"message", ...}}, or Ollama's {"error": "..."} on its routes.
      const bool ollama_route =
          path.starts_with("/api/") && path != "/api/load" && path != "/api/pull";
      EXPECT_TRUE(!j.is_discarded() && j.contains("error") &&
                  (j["error"].contains("message") || (ollama_route && j["error"].is_string())))
          << "request " << i << " got: " << r.body.substr(0, 200);
    } else {
      ADD_FAILURE() << "request " << i << ": empty error body, status " << r.status;
    }
  }
  EXPECT_GT(answered, 500);
  EXPECT_EQ(get(port_, "/health").status, 200);
  EXPECT_EQ(post(port_, "/v1/completions",
                 json{{"model", kModel}, {"prompt", "Once"}, {"max_tokens", 2}}.dump())
                .status,
            200);
}

class AuthServer : public ServerFixture {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    dir_ = testing::make_temp_dir("power_server_keys");
    std::ofstream(dir_ + "/keys")
        << "# keys\nsk-alpha\n\nsha256:"
        // sha256("sk-beta"), computed by `printf sk-beta | sha256sum`
        << "c29d79ad08b23ba5095b823d0b2e777320983be14c1150de96d07a86da5cd78c"
        << "\n";
    ServerOptions o;
    o.models = {stories("stories260K-F32.gguf")};
    o.api_key_file = dir_ + "/keys";
    o.load.threads = 1;
    start(std::move(o));
  }
  void TearDown() override {
    ServerFixture::TearDown();
    if (!dir_.empty()) testing::remove_tree(dir_);
  }
  std::string dir_;
};

TEST_F(AuthServer, BearerKeysAreChecked) {
  POWER_REQUIRE_SHARED();
  // OpenAI's two 401s: no key (code null), a wrong key (invalid_api_key).
  json missing = expect_error(get(port_, "/v1/models"), 401);
  EXPECT_TRUE(missing["code"].is_null());
  EXPECT_NE(missing["message"].get<std::string>().find("didn't provide an API key"),
            std::string::npos);
  EXPECT_EQ(
      expect_error(get(port_, "/v1/models", "Authorization: Bearer sk-wrong\r\n"), 401)["code"],
      "invalid_api_key");
  expect_error(get(port_, "/v1/models", "Authorization: Basic sk-alpha\r\n"), 401);
  EXPECT_EQ(get(port_, "/v1/models", "Authorization: Bearer sk-alpha\r\n").status, 200);
  EXPECT_EQ(get(port_, "/v1/models", "Authorization: Bearer sk-beta\r\n").status, 200);
  EXPECT_EQ(get(port_, "/health").status, 200);
}

TEST(ApiKeys, HashedLinesMatchTheirKeys) {
  // sha256("abc") from FIPS 180-2, appendix B.1.
  auto keys = ApiKeys::parse(
      "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\nplain\n");
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->check_key("abc"));
  EXPECT_TRUE(keys->check_key("plain"));
  EXPECT_FALSE(keys->check_key("abd"));
  EXPECT_FALSE(keys->check_key(""));
  EXPECT_TRUE(keys->check_header("Bearer abc"));
  EXPECT_TRUE(keys->check_header("bearer plain"));
  EXPECT_FALSE(keys->check_header("Bearer "));
  EXPECT_FALSE(ApiKeys::parse("# only a comment\n").ok());
  EXPECT_FALSE(ApiKeys::parse("sha256:zz\n").ok());
}

// A model with recurrent layers over HTTP (Mamba, ../shared's llama.cpp-made fixture): the
// second identical request continues from the prefix cache's state checkpoint
// (usage.prompt_tokens_details.cached_tokens, /metrics power_prefix_state_checkpoints) and
// answers exactly what the first did, log-probabilities included.
class MambaServer : public ServerFixture {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    ServerOptions o;
    o.models = {testing::shared_dir() + "/fixtures/models/mamba/mamba-Q8_0.gguf"};
    o.load.n_ctx = 256;
    o.load.threads = 1;
    o.load.state_checkpoints = 3;
    start(std::move(o));
  }
};

TEST_F(MambaServer, ARepeatedPromptContinuesFromAStateCheckpoint) {
  POWER_REQUIRE_SHARED();
  const std::string body = json{
      {"model", "mamba-Q8_0"},
      {"prompt",
       "Once upon a time there was a little robot who lived in a "
       "garden full of flowers and bees, and every morning it watered "
       "the roses before the sun came up over the hills"},
      {"max_tokens", 8},
      {"temperature", 0},
      {"logprobs", 5}}.dump();
  auto first = post(port_, "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  auto second = post(port_, "/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  const json a = json::parse(first.body), b = json::parse(second.body);
  const int64_t prompt_tokens = a["usage"]["prompt_tokens"].get<int64_t>();
  ASSERT_GT(prompt_tokens, 32) << first.body;
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The last full block that leaves a token to compute: 16-token blocks.
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["choices"][0]["logprobs"]["token_logprobs"],
            b["choices"][0]["logprobs"]["token_logprobs"]);
  EXPECT_EQ(a["choices"][0]["logprobs"]["top_logprobs"],
            b["choices"][0]["logprobs"]["top_logprobs"]);
  auto m = get(port_, "/metrics");
  EXPECT_NE(m.body.find("power_prefix_state_checkpoints{model=\"mamba-Q8_0\"} 1\n"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("power_preemptions_total{model=\"mamba-Q8_0\"} 0\n"), std::string::npos)
      << m.body;
}

// Speculative decoding with state snapshots over HTTP: speculative.s reaches the runner, the
// output equals the plain request's, the receipt records s in its config and the restores and
// replays in its output, and /metrics counts the same rollbacks. A logit bias confines the
// output to two tokens so that n-gram drafts are sometimes right, sometimes wrong.
TEST_F(MambaServer, SpeculationRollsTheStateBackAndTheReceiptCountsIt) {
  POWER_REQUIRE_SHARED();
  const std::string ids = read_text(testing::shared_dir() + "/fixtures/models/mamba/tokens.txt");
  json prompt = json::array();
  std::istringstream in(ids);
  for (int t; prompt.size() < 12 && in >> t;) prompt.push_back(t);
  json req = {{"model", "mamba-Q8_0"},
              {"prompt", prompt},
              {"max_tokens", 48},
              {"temperature", 0},
              {"logit_bias", {{"420", 30}, {"105", 30}}}};
  auto plain = post(port_, "/v1/completions", req.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  req["speculative"] = {{"mode", "ngram"}, {"k", 4}, {"s", 2}};
  req["power_receipt"] = true;
  auto spec = post(port_, "/v1/completions", req.dump());
  ASSERT_EQ(spec.status, 200) << spec.body;
  const json a = json::parse(plain.body), b = json::parse(spec.body);
  EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);
  const json receipt = json::parse(b["power_receipt"].get<std::string>());
  EXPECT_EQ(receipt["config"]["speculative"]["s"], 2);
  const json& out = receipt["output"]["speculative"];
  const int64_t restores = out["restores"].get<int64_t>(), replays = out["replays"].get<int64_t>();
  EXPECT_GT(out["drafted"].get<int64_t>(), 0);
  EXPECT_GT(restores + replays, 0) << out.dump();
  const std::string metrics = get(port_, "/metrics").body;
  EXPECT_NE(metrics.find("power_speculative_restores_total{model=\"mamba-Q8_0\"} " +
                         std::to_string(restores) + "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("power_speculative_replays_total{model=\"mamba-Q8_0\"} " +
                         std::to_string(replays) + "\n"),
            std::string::npos)
      << metrics;
  req["speculative"]["s"] = 65;
  auto bad = post(port_, "/v1/completions", req.dump());
  EXPECT_EQ(expect_error(bad, 400)["param"], "speculative.s");
}

TEST(ServerConfig, JsonKeysMirrorFlags) {
  ServerOptions o;
  Status st = apply_config_json(json::parse(R"({"host":"0.0.0.0","port":9000,
      "model":["a.gguf","b"],"max-running":4,"queue_timeout":3,"ctx":256})"),
                                &o);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 9000);
  EXPECT_EQ(o.models, (std::vector<std::string>{"a.gguf", "b"}));
  EXPECT_EQ(o.load.max_running, 4);
  EXPECT_EQ(o.queue_timeout_s, 3);
  EXPECT_EQ(o.load.n_ctx, 256);
  ASSERT_TRUE(apply_config_json(json::parse(R"({"state_checkpoints":5})"), &o).ok());
  EXPECT_EQ(o.load.state_checkpoints, 5);
  EXPECT_FALSE(apply_config_json(json::parse(R"({"state_checkpoints":-1})"), &o).ok());
  EXPECT_FALSE(apply_config_json(json::parse(R"({"prot":1})"), &o).ok());
  EXPECT_FALSE(apply_config_json(json::parse(R"({"port":"80"})"), &o).ok());
  EXPECT_FALSE(apply_config_json(json::parse(R"({"port":70000})"), &o).ok());
}

}  // namespace
}  // namespace power::server

namespace power::server {
namespace {

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// HTTPS with a self-signed certificate made by `openssl req`, checked with curl.
class TlsServer : public ServerFixture {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    if (std::system("command -v openssl >/dev/null && command -v curl >/dev/null") != 0) return;
    dir_ = testing::make_temp_dir("power_server_tls");
    std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout " + dir_ +
        "/key.pem -out " + dir_ + "/cert.pem >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return;
    ServerOptions o;
    o.models = {stories("stories260K-F32.gguf")};
    o.tls_cert = dir_ + "/cert.pem";
    o.tls_key = dir_ + "/key.pem";
    o.load.threads = 1;
    start(std::move(o));
  }
  void TearDown() override {
    ServerFixture::TearDown();
    if (!dir_.empty()) testing::remove_tree(dir_);
  }
  std::string dir_;
};

TEST_F(TlsServer, ServesHttpsWithTheGivenCertificate) {
  POWER_REQUIRE_SHARED();
  if (!server_) GTEST_SKIP() << "openssl or curl missing";
  ASSERT_TRUE(server_->tls());
  const std::string base = "https://127.0.0.1:" + std::to_string(port_);
  // --cacert: the server must present exactly the certificate it was given.
  std::string health = run_capture("curl -s --cacert " + dir_ + "/cert.pem " + base + "/health");
  EXPECT_NE(health.find("\"ready\":true"), std::string::npos) << health;
  std::string body = json{{"model", kModel}, {"prompt", "Once"}, {"max_tokens", 3}}.dump();
  std::string out = run_capture("curl -s --cacert " + dir_ +
                                "/cert.pem -H 'Content-Type: "
                                "application/json' -d '" +
                                body + "' " + base + "/v1/completions");
  json j = json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  // Plain HTTP to the TLS port gets no HTTP answer.
  EXPECT_FALSE(http_exchange(port_, request("GET", "/health", ""), 5).ok);
}

TEST(ServerCreate, MismatchedTlsOptionsAreRejected) {
  ServerOptions o;
  o.tls_cert = "/nonexistent/cert.pem";
  EXPECT_FALSE(Server::create(o).ok());
  o.tls_key = "/nonexistent/key.pem";
  EXPECT_FALSE(Server::create(o).ok());
}

}  // namespace
}  // namespace power::server
