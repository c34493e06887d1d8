// What a load balancer, Prometheus and Kubernetes see of one `power serve` in a fleet
// (docs/DEPLOY.md): readiness false while the models load and from the first moment of a
// drain, running streams finishing during the drain while new requests get 503 "draining";
// the router gauges under Power's and vLLM's names (the Gateway API Inference Extension's
// model-server protocol), consistent with the pool and with each answer's usage; the
// instance header; the warm-up generation; --print-plan's memory plan; and llama-server's
// ignore_eos.
#include <unistd.h>

#include <chrono>
#include <future>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/http_test_util.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using http_test::get_raw;
using http_test::post_raw;
using http_test::RawReply;

constexpr const char* kModel = "stories260K-F32";
constexpr int kEos = 2;  // stories260K's end-of-sequence token

std::string stories_path() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
}

std::string header(const RawReply& r, const std::string& name) {  // name lower-case
  const size_t at = r.head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  const size_t from = at + name.size() + 4;
  return r.head.substr(from, r.head.find("\r\n", from) - from);
}

// The value of one sample line of a Prometheus text page ("name{labels} value"); NaN when
// absent.
double sample(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(page.substr(at + series.size() + 2));
}

// A streamed completion on its own connection: the request is sent at construction, the
// first bytes are awaited, and finish() reads to the end and returns the de-chunked SSE text.
class Stream {
 public:
  Stream(int port, const json& body) {
    fd_ = http_test::connect_loopback(port, 60);
    const std::string b = body.dump();
    const std::string raw =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(b.size()) + "\r\n\r\n" + b;
    http_test::send_all(fd_, raw);
  }
  ~Stream() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Waits for the first generated token's event.
  bool started() {
    while (in_.find("data: {") == std::string::npos) {
      if (!read_some()) return false;
    }
    return true;
  }
  std::string finish() {
    while (read_some()) {
    }
    const size_t he = in_.find("\r\n\r\n");
    return he == std::string::npos ? std::string() : http_test::dechunk(in_.substr(he + 4));
  }

 private:
  bool read_some() {
    char buf[16384];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string in_;
};

// The usage chunk of a streamed answer (stream_options.include_usage).
json stream_usage(const std::string& sse) {
  json usage;
  size_t at = 0;
  while ((at = sse.find("data: {", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    json j = json::parse(sse.substr(at + 6, end - at - 6), nullptr, false);
    if (j.is_object() && j.contains("usage") && j["usage"].is_object()) usage = j["usage"];
    at = end;
  }
  return usage;
}

json long_stream_body(int tokens) {
  return {{"model", kModel},      {"prompt", "Once upon a time"},
          {"max_tokens", tokens}, {"ignore_eos", true},
          {"stream", true},       {"stream_options", {{"include_usage", true}}}};
}

// Polls `path` until `pred(reply)` holds (up to 10 s).
template <typename Pred>
RawReply poll_until(int port, const std::string& path, Pred pred) {
  RawReply r;
  for (int i = 0; i < 1000; ++i) {
    r = get_raw(port, path);
    if (pred(r)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return r;
}

TEST(FleetHealth, NotReadyWhileTheModelLoadsThenReady) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
  o.host = "127.0.0.1";
  o.port = 0;
  o.log_requests = false;
  // Model resolution waits for the test: the server is bound and loading meanwhile.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  o.resolve_model = [released](const std::string& m) -> Result<std::string> {
    released.wait();
    return m;
  };
  auto created = Server::create(std::move(o));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  Server& server = **created;
  std::future<Status> started = std::async(std::launch::async, [&] { return server.start(); });
  int port = 0;
  for (int i = 0; i < 1000 && port == 0; ++i) {
    port = server.port();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(port, 0);
  RawReply h = get_raw(port, "/health");
  EXPECT_EQ(h.status, 503);
  json hj = json::parse(h.body);
  EXPECT_EQ(hj["status"], "loading");
  EXPECT_EQ(hj["ready"], false);
  EXPECT_EQ(get_raw(port, "/health/ready").status, 503);
  EXPECT_EQ(get_raw(port, "/health/live").status, 200);  // alive: a liveness probe passes
  RawReply c = post_raw(port, "/v1/completions", json{{"model", kModel}, {"prompt", "x"}}.dump());
  EXPECT_EQ(c.status, 503);
  EXPECT_EQ(json::parse(c.body)["error"]["code"], "loading");
  EXPECT_EQ(header(c, "retry-after"), "1");

  release.set_value();
  Status st = started.get();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(get_raw(port, "/health/ready").status, 200);
  EXPECT_EQ(json::parse(get_raw(port, "/health").body)["status"], "ok");
  std::thread waiter([&] { (void)server.wait(); });
  server.shutdown();
  waiter.join();
}

TEST(FleetHealth, AFailedLoadStopsTheListener) {
  POWER_REQUIRE_SHARED();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.log_requests = false;
  o.models = {testing::shared_dir() + "/models/stories260K/LICENSE-llama2.c.txt"};  // not GGUF
  auto created = Server::create(std::move(o));
  ASSERT_TRUE(created.ok());
  Status st = (*created)->start();
  EXPECT_FALSE(st.ok());
  const int port = (*created)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(get_raw(port, "/health").status, 0);  // nothing listens any more
}

// One in-process server per test (http_test::InProcessServer), started with `o`.
class FleetServer : public ::testing::Test {
 protected:
  void start(ServerOptions o) {
    Status st = server_.start(std::move(o));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  http_test::InProcessServer server_;
  int port_ = 0;
};

TEST_F(FleetServer, DrainSaysDrainingAtOnceAndFinishesRunningStreams) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
  o.drain_timeout_s = 60;
  start(std::move(o));
  Stream running(port_, long_stream_body(400));
  ASSERT_TRUE(running.started());
  std::thread drainer([this] { server_.stop(); });  // shutdown(), then wait() returns
  // /health answers "draining" while the stream still runs.
  RawReply h = poll_until(port_, "/health", [](const RawReply& r) { return r.status == 503; });
  EXPECT_EQ(json::parse(h.body)["status"], "draining");
  EXPECT_EQ(get_raw(port_, "/health/ready").status, 503);
  RawReply refused =
      post_raw(port_, "/v1/completions", json{{"model", kModel}, {"prompt", "x"}}.dump());
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "draining");
  // The running stream ends normally, with every token it asked for.
  const std::string sse = running.finish();
  EXPECT_NE(sse.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_NE(sse.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(stream_usage(sse)["completion_tokens"], 400);
  drainer.join();
}

TEST_F(FleetServer, RouterGaugesFollowTheQueueAndThePool) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
  o.load.max_running = 1;  // the second stream waits
  start(std::move(o));
  const std::string m = std::string("{model_name=\"") + kModel + "\"}";
  std::string page = get_raw(port_, "/metrics").body;
  EXPECT_EQ(sample(page, "vllm:num_requests_running" + m), 0);
  EXPECT_EQ(sample(page, "vllm:num_requests_waiting" + m), 0);
  EXPECT_EQ(sample(page, "vllm:kv_cache_usage_perc" + m), 0);

  Stream first(port_, long_stream_body(480));
  ASSERT_TRUE(first.started());
  Stream second(port_, long_stream_body(8));
  RawReply r = poll_until(port_, "/metrics", [&](const RawReply& x) {
    return sample(x.body, "vllm:num_requests_waiting" + m) == 1;
  });
  page = r.body;
  EXPECT_EQ(sample(page, "vllm:num_requests_running" + m), 1);
  EXPECT_EQ(sample(page, "vllm:num_requests_waiting" + m), 1);
  EXPECT_EQ(sample(page, std::string("power_queue_depth{model=\"") + kModel + "\"}"), 1);
  // Usage is blocks used over blocks in the pool, under both names, and above zero while a
  // sequence holds blocks.
  const double used = sample(page, std::string("power_kv_blocks_used{model=\"") + kModel + "\"}");
  const double total = sample(page, std::string("power_kv_blocks_total{model=\"") + kModel + "\"}");
  ASSERT_GT(total, 0);
  EXPECT_GT(used, 0);
  EXPECT_DOUBLE_EQ(sample(page, "vllm:kv_cache_usage_perc" + m), used / total);
  EXPECT_DOUBLE_EQ(sample(page, "vllm:gpu_cache_usage_perc" + m), used / total);
  EXPECT_DOUBLE_EQ(
      sample(page, std::string("power_kv_cache_usage_ratio{model=\"") + kModel + "\"}"),
      used / total);
  // The pool's geometry: num_gpu_blocks is the pool, block_size its positions per block.
  std::smatch cfg;
  ASSERT_TRUE(
      std::regex_search(page, cfg,
                        std::regex("vllm:cache_config_info\\{model_name=\"stories260K-F32\","
                                   "block_size=\"(\\d+)\",num_gpu_blocks=\"(\\d+)\"\\} 1")))
      << page;
  const int block_size = std::stoi(cfg[1]);
  EXPECT_EQ(std::stod(cfg[2]), total);
  EXPECT_GT(block_size, 0);
  EXPECT_EQ(sample(page, std::string("power_state_slots_total{model=\"") + kModel + "\"}"), 0);
  EXPECT_NE(page.find("vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\","
                      "waiting_lora_adapters=\"\"} 0\n"),
            std::string::npos);
  const json s1 = stream_usage(first.finish()), s2 = stream_usage(second.finish());
  EXPECT_EQ(s1["completion_tokens"], 480);
  EXPECT_EQ(s2["completion_tokens"], 8);

  // Prefix-cache counters: every prompt token is a query, cached ones are hits; a repeated
  // long prompt hits whole blocks.
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The little dog ran to the park and played with a ball. ";
  json b = {{"model", kModel}, {"prompt", prompt}, {"max_tokens", 2}};
  json u1 = json::parse(post_raw(port_, "/v1/completions", b.dump()).body)["usage"];
  json u2 = json::parse(post_raw(port_, "/v1/completions", b.dump()).body)["usage"];
  const int cached = u2["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached, 0);
  EXPECT_EQ(cached % block_size, 0);
  page = get_raw(port_, "/metrics").body;
  auto cached_of = [](const json& u) {
    return u.contains("prompt_tokens_details")
               ? u["prompt_tokens_details"].value("cached_tokens", 0)
               : 0;
  };
  const int queried = s1["prompt_tokens"].get<int>() + s2["prompt_tokens"].get<int>() +
                      u1["prompt_tokens"].get<int>() + u2["prompt_tokens"].get<int>();
  EXPECT_EQ(sample(page, "vllm:prefix_cache_queries_total" + m), queried);
  EXPECT_EQ(sample(page, "vllm:prefix_cache_hits_total" + m),
            cached_of(s1) + cached_of(s2) + cached_of(u1) + cached);
  EXPECT_EQ(sample(page, std::string("power_prefix_cache_queried_tokens_total{model=\"") + kModel +
                             "\"}"),
            queried);
}

// A recurrent model's state slots: max_running x replicas in all, one held per running
// sequence; an attention-only model reports 0 / 0.
TEST_F(FleetServer, StateSlotGaugesOfARecurrentModel) {
  POWER_REQUIRE_SHARED();
  ServerOptions o;
  o.models = {testing::shared_dir() + "/fixtures/models/mamba/mamba-Q8_0.gguf"};
  o.load.n_ctx = 256;
  o.load.threads = 1;
  o.load.max_running = 3;
  o.load.replicas = 2;
  start(std::move(o));
  const std::string model =
      json::parse(get_raw(port_, "/v1/models").body)["data"][0]["id"].get<std::string>();
  const std::string used = "power_state_slots_used{model=\"" + model + "\"}";
  const std::string total = "power_state_slots_total{model=\"" + model + "\"}";
  std::string page = get_raw(port_, "/metrics").body;
  EXPECT_EQ(sample(page, total), 6);  // 3 running x 2 replicas
  EXPECT_EQ(sample(page, used), 0);
  json body = long_stream_body(200);
  body["model"] = model;
  Stream s(port_, body);
  ASSERT_TRUE(s.started());
  RawReply r =
      poll_until(port_, "/metrics", [&](const RawReply& x) { return sample(x.body, used) == 1; });
  EXPECT_EQ(sample(r.body, used), 1);
  EXPECT_EQ(stream_usage(s.finish())["completion_tokens"], 200);
}

TEST_F(FleetServer, InstanceHeaderAndHealthNameTheReplica) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
  o.instance_id = "replica-7";
  start(std::move(o));
  RawReply h = get_raw(port_, "/health");
  EXPECT_EQ(header(h, "x-power-instance"), "replica-7");
  EXPECT_EQ(json::parse(h.body)["instance"], "replica-7");
  RawReply c = post_raw(port_, "/v1/completions",
                        json{{"model", kModel}, {"prompt", "x"}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(c.status, 200);
  EXPECT_EQ(header(c, "x-power-instance"), "replica-7");
  RawReply bad = post_raw(port_, "/v1/completions", "{");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(header(bad, "x-power-instance"), "replica-7");  // errors too
}

TEST_F(FleetServer, InstanceDefaultsToHostNameAndPort) {
  POWER_REQUIRE_SHARED();
  start(http_test::stories_options(testing::shared_dir(), 512));
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(header(get_raw(port_, "/health"), "x-power-instance"),
            std::string(host) + ":" + std::to_string(port_));
}

TEST_F(FleetServer, WarmupRunsOneGenerationBeforeReady) {
  POWER_REQUIRE_SHARED();
  start(http_test::stories_options(testing::shared_dir(), 512));  // warmup is on by default
  const std::string steps = std::string("power_scheduler_steps_total{model=\"") + kModel + "\"}";
  std::string page = get_raw(port_, "/metrics").body;
  // The warm-up ran forward passes but is no user request: no generation counted.
  EXPECT_GE(sample(page, steps), 1);
  EXPECT_NE(page.find("power_generations_total 0\n"), std::string::npos);
}

TEST_F(FleetServer, NoWarmupMeansNoStepBeforeTheFirstRequest) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
  o.warmup = false;
  start(std::move(o));
  EXPECT_EQ(sample(get_raw(port_, "/metrics").body,
                   std::string("power_scheduler_steps_total{model=\"") + kModel + "\"}"),
            0);
}

// With the end-of-sequence token forced (+100 logit bias), a request stops after one token;
// with ignore_eos it runs to max_tokens.
TEST_F(FleetServer, IgnoreEosRunsToMaxTokens) {
  POWER_REQUIRE_SHARED();
  start(http_test::stories_options(testing::shared_dir(), 512));
  json b = {{"model", kModel},
            {"prompt", "Once upon a time"},
            {"max_tokens", 20},
            {"logit_bias", {{std::to_string(kEos), 100}}}};
  json stopped = json::parse(post_raw(port_, "/v1/completions", b.dump()).body);
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
  b["ignore_eos"] = true;
  json full = json::parse(post_raw(port_, "/v1/completions", b.dump()).body);
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(full["usage"]["completion_tokens"], 20);
  b["ignore_eos"] = "yes";
  RawReply bad = post_raw(port_, "/v1/completions", b.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"]["param"], "ignore_eos");
}

// --print-plan's numbers are /api/ps's for the same options, and they add up.
TEST(FleetPlan, MemoryPlanIsWhatTheServerReports) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
  o.load.replicas = 2;
  auto plan = memory_plan(o);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const json& p = (*plan)["models"][0];
  http_test::InProcessServer server;
  ASSERT_TRUE(server.start(o).ok());
  const json ps = json::parse(get_raw(server.port(), "/api/ps").body)["models"][0];
  for (const char* k :
       {"weights_bytes", "kv_cache_bytes", "state_bytes", "scratch_bytes", "size_bytes"}) {
    EXPECT_EQ(p[k], ps[k]) << k;
  }
  EXPECT_EQ(p["replicas"], 2);
  EXPECT_GT(p["kv_cache_bytes"].get<uint64_t>(), 0u);
  const uint64_t sum = p["weights_bytes"].get<uint64_t>() + p["kv_cache_bytes"].get<uint64_t>() +
                       p["state_bytes"].get<uint64_t>() + p["scratch_bytes"].get<uint64_t>();
  EXPECT_EQ(p["size_bytes"], sum);
  EXPECT_EQ((*plan)["total_bytes"], sum);
  const json& helm = (*plan)["helm_memory_plan"];
  EXPECT_EQ(helm["weightsBytes"], p["weights_bytes"]);
  EXPECT_EQ(helm["kvCacheBytes"], p["kv_cache_bytes"]);
  EXPECT_EQ(helm["stateBytes"], p["state_bytes"]);
  EXPECT_EQ(helm["scratchBytes"], p["scratch_bytes"]);

  ServerOptions bad = o;
  bad.models = {testing::shared_dir() + "/models/stories260K/LICENSE-llama2.c.txt"};
  EXPECT_FALSE(memory_plan(bad).ok());
}

TEST(FleetConfig, InstanceAndWarmupKeys) {
  ServerOptions o;
  EXPECT_TRUE(o.warmup);
  EXPECT_TRUE(o.instance_id.empty());
  ASSERT_TRUE(apply_config_json(json{{"instance-id", "r1"}, {"no_warmup", true}}, &o).ok());
  EXPECT_EQ(o.instance_id, "r1");
  EXPECT_FALSE(o.warmup);
  ASSERT_TRUE(apply_config_json(json{{"warmup", true}}, &o).ok());
  EXPECT_TRUE(o.warmup);
  EXPECT_FALSE(apply_config_json(json{{"warmup", "off"}}, &o).ok());
  EXPECT_FALSE(apply_config_json(json{{"instance_id", 3}}, &o).ok());
}

}  // namespace
}  // namespace power::server
