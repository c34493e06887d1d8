// HTTP-level tests of what `power serve` streams beyond content (docs/SERVER.md): logprobs per
// chunk (chat and completions shapes), tool calls as delta.tool_calls, and clients that
// disconnect while their request is still queued. In-process server, stories260K, raw sockets.
//
// Expected values: a streamed answer must carry exactly what the same greedy request answers
// without streaming (two code paths of the server over one deterministic generation), plus
// properties that follow from the definitions (greedy picks the most likely token, offsets
// add up the token lengths, a forced call's arguments satisfy the tool's closed enum).

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
using Clock = std::chrono::steady_clock;
constexpr const char* kModel = "stories260K-F32";

// The JSON events of an SSE body ("data: {...}" lines; [DONE] excluded, and required last).
std::vector<json> sse_events(const std::string& body, bool* done_last) {
  std::vector<json> out;
  *done_last = false;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    std::string ev = body.substr(at, end - at);
    at = end + 2;
    if (!ev.starts_with("data: ")) continue;
    std::string payload = ev.substr(6);
    if (payload == "[DONE]") {
      *done_last = at >= body.size();
      continue;
    }
    out.push_back(json::parse(payload, nullptr, false));
  }
  return out;
}

class StreamHttp : public http_test::StoriesServerTest {
 protected:
  // The same request answered whole and streamed.
  std::pair<json, std::vector<json>> both(const std::string& path, json body) {
    http_test::JsonReply whole = http_test::post_json(port_, path, body.dump());
    EXPECT_EQ(whole.status, 200) << whole.body.dump();
    body["stream"] = true;
    http_test::RawReply raw = http_test::post_raw(port_, path, body.dump());
    EXPECT_EQ(raw.status, 200) << raw.body;
    bool done_last = false;
    std::vector<json> events = sse_events(raw.body, &done_last);
    EXPECT_TRUE(done_last) << raw.body;
    for (const json& e : events) EXPECT_FALSE(e.is_discarded()) << raw.body;
    return {whole.body, events};
  }
};

json story_chat(json extra) {
  json body = {{"model", kModel},
               {"messages", json::array({{{"role", "user"}, {"content", "Tell a story"}}})},
               {"max_tokens", 24},
               {"temperature", 0}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

TEST_F(StreamHttp, ChatLogprobsRideOnTheChunksThatCarryTheirText) {
  POWER_REQUIRE_SHARED();
  auto [whole, events] =
      both("/v1/chat/completions", story_chat({{"logprobs", true}, {"top_logprobs", 3}}));
  const json& want = whole["choices"][0]["logprobs"]["content"];
  ASSERT_GT(want.size(), 0u);
  json got = json::array();
  std::string text;
  for (const json& e : events) {
    const json& ch = e["choices"][0];
    const std::string piece = ch["delta"].value("content", "");
    text += piece;
    if (ch["logprobs"].is_null()) {
      // Only the role chunk and the finish chunk carry no tokens.
      EXPECT_TRUE(piece.empty()) << e.dump();
      continue;
    }
    for (const json& entry : ch["logprobs"]["content"]) got.push_back(entry);
  }
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"]);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["token"], want[i]["token"]) << i;
    EXPECT_EQ(got[i]["bytes"], want[i]["bytes"]) << i;
    EXPECT_NEAR(got[i]["logprob"].get<double>(), want[i]["logprob"].get<double>(), 1e-5);
    ASSERT_EQ(got[i]["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_NEAR(got[i]["top_logprobs"][0]["logprob"].get<double>(), got[i]["logprob"].get<double>(),
                1e-6);
  }
}

TEST_F(StreamHttp, CompletionLogprobsInTheCompletionsShape) {
  POWER_REQUIRE_SHARED();
  json body = {{"model", kModel},
               {"prompt", "Once upon a time"},
               {"max_tokens", 16},
               {"temperature", 0},
               {"logprobs", 2}};
  auto [whole, events] = both("/v1/completions", body);
  const json& lp = whole["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << whole.dump();
  const size_t n = lp["tokens"].size();
  ASSERT_EQ(n, 16u);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    const std::string tok = lp["tokens"][i];
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size()) << i;
    joined += tok;
    const json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 2u);
    EXPECT_LE(top.size(), 3u);  // the 2 most likely, plus the sampled token if not among them
    ASSERT_TRUE(top.contains(tok)) << top.dump();
    const double chosen = lp["token_logprobs"][i];
    EXPECT_NEAR(top[tok].get<double>(), chosen, 1e-6);
    for (const auto& [t, v] : top.items()) EXPECT_LE(v.get<double>(), chosen + 1e-6);  // greedy
  }
  EXPECT_EQ(joined, whole["choices"][0]["text"]);
  // Streamed: the same lists, split over the chunks, offsets numbering on.
  json tokens = json::array(), offsets = json::array(), values = json::array();
  for (const json& e : events) {
    const json& ch = e["choices"][0];
    if (ch["logprobs"].is_null()) continue;
    for (const json& t : ch["logprobs"]["tokens"]) tokens.push_back(t);
    for (const json& t : ch["logprobs"]["text_offset"]) offsets.push_back(t);
    for (const json& t : ch["logprobs"]["token_logprobs"]) values.push_back(t);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
  ASSERT_EQ(values.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(values[i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-5);
  }
  // The field's own checks.
  body["logprobs"] = 21;
  EXPECT_EQ(http_test::post_json(port_, "/v1/completions", body.dump()).body["error"]["param"],
            "logprobs");
  body["logprobs"] = true;
  EXPECT_EQ(http_test::post_json(port_, "/v1/completions", body.dump()).status, 400);
}

const json kWeatherTools =
    json::array({{{"type", "function"},
                  {"function",
                   {{"name", "get_weather"},
                    {"parameters",
                     {{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}}}},
                      {"required", {"city"}},
                      {"additionalProperties", false}}}}}}});

TEST_F(StreamHttp, ForcedToolCallStreamsAsToolCallDeltas) {
  POWER_REQUIRE_SHARED();
  auto [whole, events] =
      both("/v1/chat/completions",
           story_chat({{"tools", kWeatherTools}, {"tool_choice", "required"}, {"max_tokens", 60}}));
  const json& want = whole["choices"][0];
  ASSERT_EQ(want["finish_reason"], "tool_calls") << whole.dump();
  const json& call = want["message"]["tool_calls"][0];
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Rome") << args.dump();

  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string arguments, finish;
  int name_chunks = 0;
  for (size_t i = 1; i < events.size(); ++i) {
    const json& ch = events[i]["choices"][0];
    EXPECT_EQ(ch["delta"].value("content", ""), "") << events[i].dump();  // never the call text
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    const json& tc = ch["delta"]["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    if (tc.contains("id")) {  // the opening chunk
      ++name_chunks;
      EXPECT_EQ(tc["id"], call["id"]);
      EXPECT_EQ(tc["type"], "function");
      EXPECT_EQ(tc["function"]["name"], "get_weather");
      EXPECT_EQ(tc["function"]["arguments"], "");
    } else {
      EXPECT_FALSE(tc["function"].contains("name"));
      arguments += tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(name_chunks, 1);
  EXPECT_EQ(arguments, call["function"]["arguments"]);
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(StreamHttp, AutoToolsWithoutACallStreamTheContent) {
  POWER_REQUIRE_SHARED();
  // Streamed as it came, not held to the end. Each chunk carries what was generated since the
  // writer last woke, so how many chunks a reply makes depends on timing: this tiny model
  // writes 40 tokens in a few milliseconds, and on a loaded machine (one busy loop beside the
  // test) the writer slept through all of them. So the reply is made long (end of text banned,
  // 400 tokens), each try checks the text, and one of up to 3 tries must arrive in more than one
  // chunk; a server that holds the answer to the end never sends more than one.
  int most_chunks = 0;
  for (int attempt = 0; attempt < 3 && most_chunks <= 1; ++attempt) {
    auto [whole, events] = both(
        "/v1/chat/completions",
        story_chat({{"tools", kWeatherTools}, {"max_tokens", 400}, {"logit_bias", {{"2", -100}}}}));
    const json& want = whole["choices"][0];
    ASSERT_NE(want["finish_reason"], "tool_calls") << whole.dump();  // a story, not a call
    std::string text, finish;
    int content_chunks = 0;
    for (const json& e : events) {
      const json& ch = e["choices"][0];
      const std::string piece = ch["delta"].value("content", "");
      if (!piece.empty()) ++content_chunks;
      text += piece;
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_EQ(text, want["message"]["content"]);
    EXPECT_EQ(finish, want["finish_reason"]);
    most_chunks = std::max(most_chunks, content_chunks);
  }
  EXPECT_GT(most_chunks, 1);
}

// ---- disconnects of queued requests ----

// One running sequence at a time and one waiting slot, a long context so that a request
// with EOS banned runs for seconds (thousands of tokens at ~8k positions).
class QueueHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    ServerOptions o = http_test::stories_options(testing::shared_dir(), 8192);
    o.load.max_running = 1;
    o.load.max_waiting = 1;
    Status st = server_.start(std::move(o));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  std::string metrics() { return http_test::get_raw(port_, "/metrics").body; }
  // The value of a metric line `name value` (-1 when absent).
  double metric(const std::string& text, const std::string& name) {
    size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::atof(text.c_str() + at + name.size() + 2);
  }
  // Polls /metrics until `pred` holds (true) or `timeout` passes (false).
  template <class Pred>
  bool wait_metrics(Pred pred, std::chrono::milliseconds timeout, std::string* last) {
    const auto until = Clock::now() + timeout;
    do {
      *last = metrics();
      if (pred(*last)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (Clock::now() < until);
    return false;
  }
  // Sends a generation request on its own connection and returns the socket.
  int send_request(const json& body, const std::string& path) {
    int fd = http_test::connect_loopback(port_, 60);
    const std::string b = body.dump();
    const std::string raw = "POST " + path +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " +
                            std::to_string(b.size()) + "\r\n\r\n" + b;
    if (fd >= 0) http_test::send_all(fd, raw);
    return fd;
  }
  http_test::InProcessServer server_;
  int port_ = 0;
};

TEST_F(QueueHttp, AQueuedClientThatLeavesIsCancelledBeforeItRuns) {
  POWER_REQUIRE_SHARED();
  const std::string depth = std::string("power_queue_depth{model=\"") + kModel + "\"}";
  const std::string running = std::string("power_requests_running{model=\"") + kModel + "\"}";
  // A: the long request that holds the only running slot.
  json long_body = {{"model", kModel},    {"prompt", "Once upon a time"},
                    {"max_tokens", 8000}, {"logit_bias", {{"2", -100}}},
                    {"temperature", 0},   {"stream", true}};
  int a = send_request(long_body, "/v1/completions");
  ASSERT_GE(a, 0);
  char buf[4096];
  ASSERT_GT(::recv(a, buf, sizeof buf, 0), 0);  // its stream has begun
  // The stream's headers go out when A is admitted, which may be before it leaves the queue:
  // B must not be sent until A holds the slot, or B's wait below could see A queued instead.
  std::string m;
  ASSERT_TRUE(wait_metrics(
      [&](const std::string& t) { return metric(t, running) == 1 && metric(t, depth) == 0; },
      std::chrono::seconds(10), &m))
      << m;
  const json short_body = {{"model", kModel}, {"prompt", "Once"}, {"max_tokens", 4}};
  // B (streamed), then C (not streamed): each waits in the one queue slot, then leaves.
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    json body = short_body;
    body["stream"] = stream;
    const double cancelled_before = metric(metrics(), "power_client_cancellations_queued_total");
    int b = send_request(body, "/v1/completions");
    ASSERT_GE(b, 0);
    // Queued: the slot is taken (the queue is full until B leaves).
    ASSERT_TRUE(wait_metrics([&](const std::string& t) { return metric(t, depth) == 1; },
                             std::chrono::seconds(10), &m))
        << m;
    EXPECT_EQ(http_test::post_json(port_, "/v1/completions", short_body.dump()).status, 429);
    const auto t0 = Clock::now();
    ::close(b);
    ASSERT_TRUE(wait_metrics(
        [&](const std::string& t) {
          return metric(t, "power_client_cancellations_queued_total") == cancelled_before + 1 &&
                 metric(t, depth) == 0;
        },
        std::chrono::seconds(10), &m))
        << m;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // Noticed while A still runs: it never got the slot.
    EXPECT_EQ(metric(m, running), 1) << m;
    EXPECT_EQ(metric(m, "power_active_generations"), 1) << m;
    std::printf("queued client gone -> cancelled and dequeued in %.1f ms\n", ms);
  }
  // The freed slot takes a new request again (no 429), which then waits behind A.
  int d = send_request(short_body, "/v1/completions");
  ASSERT_GE(d, 0);
  ASSERT_TRUE(wait_metrics([&](const std::string& t) { return metric(t, depth) == 1; },
                           std::chrono::seconds(10), &m))
      << m;
  ::close(d);
  ASSERT_TRUE(wait_metrics(
      [&](const std::string& t) {
        return metric(t, "power_client_cancellations_queued_total") == 3 && metric(t, depth) == 0;
      },
      std::chrono::seconds(10), &m))
      << m;
  ::close(a);
  ASSERT_TRUE(
      wait_metrics([&](const std::string& t) { return metric(t, "power_active_generations") == 0; },
                   std::chrono::seconds(20), &m))
      << m;
  // A was cut off by its own disconnect, not finished.
  EXPECT_LT(metric(m, "power_completion_tokens_total"), 8000) << m;
  EXPECT_EQ(metric(m, "power_client_cancellations_total"), 4) << m;
}

}  // namespace
}  // namespace power::server
