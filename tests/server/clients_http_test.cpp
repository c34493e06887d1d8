// What existing clients send (issue: keep your existing clients): CORS for browsers, OpenAI's
// fields (n choices sharing the prompt KV, prompt arrays, prediction, service_tier, refusals
// with their reasons), OpenAI's error shapes, the tokenizer endpoints and Ollama's native API.
// Expected texts come from the server itself run the plain way (n = 1, one prompt, no
// prediction), so each feature is checked against the path the other tests pin to llama.cpp.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "server/cors.h"
#include "server/http_test_util.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using http_test::RawReply;
using http_test::request_raw;

constexpr const char* kModel = "stories260K-F32";

json body_of(const RawReply& r) {
  return json::parse(r.body, nullptr, false);
}

RawReply post(int port, const std::string& path, const json& body,
              const std::string& headers = "") {
  return request_raw(port, "POST", path, body.dump(), "application/json", headers);
}

json error_of(const RawReply& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = body_of(r);
  if (!j.is_object() || !j.contains("error")) {
    ADD_FAILURE() << "no error body: " << r.body;
    return json::object();
  }
  return j["error"];
}

std::string header(const RawReply& r, const std::string& name) {  // name lower-case
  const size_t at = r.head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  const size_t from = at + name.size() + 4;
  return r.head.substr(from, r.head.find("\r\n", from) - from);
}

json chat_body(const std::string& text, int max_tokens = 12) {
  return json{{"model", kModel},
              {"messages", {{{"role", "user"}, {"content", text}}}},
              {"max_tokens", max_tokens},
              {"temperature", 0}};
}

// Data lines of an SSE stream, parsed ([DONE] left out).
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string payload = body.substr(at + 6, end - at - 6);
    if (payload != "[DONE]") out.push_back(json::parse(payload, nullptr, false));
    at = end;
  }
  return out;
}

uint64_t metric(int port, const std::string& name) {
  const std::string text = http_test::get_raw(port, "/metrics").body;
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::strtoull(text.c_str() + at + name.size() + 2, nullptr, 10);
}

// ---- CORS ----

TEST(Cors, OriginRules) {
  EXPECT_TRUE(is_local_origin("http://localhost:3000"));
  EXPECT_TRUE(is_local_origin("https://127.0.0.1"));
  EXPECT_TRUE(is_local_origin("http://[::1]:8080"));
  EXPECT_FALSE(is_local_origin("http://localhost.evil.com"));
  EXPECT_FALSE(is_local_origin("http://example.com"));
  EXPECT_FALSE(is_local_origin("file://localhost"));
  EXPECT_TRUE(cors_origin_allowed({}, "http://localhost:5173"));
  EXPECT_FALSE(cors_origin_allowed({}, "https://chat.example.com"));
  EXPECT_TRUE(cors_origin_allowed({"https://chat.example.com"}, "https://chat.example.com"));
  EXPECT_FALSE(cors_origin_allowed({"https://chat.example.com"}, "https://chat.example.com:444"));
  EXPECT_FALSE(cors_origin_allowed({"https://chat.example.com"}, "http://localhost:3000"));
  EXPECT_TRUE(cors_origin_allowed({"http://10.0.0.5:*"}, "http://10.0.0.5:9999"));
  EXPECT_TRUE(cors_origin_allowed({"*"}, "https://anything.example"));
  EXPECT_FALSE(cors_origin_allowed({"*"}, ""));
  EXPECT_TRUE(validate_cors_origin("*").ok());
  EXPECT_TRUE(validate_cors_origin("https://a.example:8443").ok());
  EXPECT_FALSE(validate_cors_origin("https://a.example/path").ok());
  EXPECT_FALSE(validate_cors_origin("a.example").ok());
}

TEST(Cors, ConfigKeyTakesAStringOrAnArrayAndChecksEachOrigin) {
  ServerOptions o;
  ASSERT_TRUE(
      apply_config_json(json{{"cors_origin", {"https://a.example", "http://b:*"}}}, &o).ok());
  ASSERT_TRUE(apply_config_json(json{{"cors-origin", "*"}}, &o).ok());
  EXPECT_EQ(o.cors_origins, (std::vector<std::string>{"https://a.example", "http://b:*", "*"}));
  EXPECT_FALSE(apply_config_json(json{{"cors_origin", "https://a.example/path"}}, &o).ok());
  EXPECT_FALSE(apply_config_json(json{{"cors_origin", 5}}, &o).ok());
}

class ClientsServer : public ::testing::Test {
 protected:
  void start(std::vector<std::string> cors, const std::string& key_file = "") {
    if (!testing::shared_available()) return;
    ServerOptions o = http_test::stories_options(testing::shared_dir(), 512);
    o.cors_origins = std::move(cors);
    o.api_key_file = key_file;
    // An empty store of its own (/api/tags lists the store's models too).
    store_dir_ = testing::make_temp_dir("power-clients-store");
    o.store_home = store_dir_;
    Status st = server_.start(std::move(o));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  void SetUp() override { start({}); }
  void TearDown() override {
    server_.stop();
    if (!store_dir_.empty()) testing::remove_tree(store_dir_);
  }
  http_test::InProcessServer server_;
  int port_ = 0;
  std::string store_dir_;
};

TEST_F(ClientsServer, PreflightAndHeadersForLocalOriginsByDefault) {
  POWER_REQUIRE_SHARED();
  const std::string pre =
      "Origin: http://localhost:5173\r\nAccess-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: authorization, content-type, x-stainless-os\r\n";
  RawReply r = request_raw(port_, "OPTIONS", "/v1/chat/completions", "", "text/plain", pre);
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(header(r, "access-control-allow-origin"), "http://localhost:5173");
  EXPECT_NE(header(r, "access-control-allow-methods").find("post"), std::string::npos);
  EXPECT_EQ(header(r, "access-control-allow-headers"),
            "authorization, content-type, x-stainless-os");
  // Another origin: refused at the preflight, and no CORS headers on its requests.
  RawReply evil = request_raw(port_, "OPTIONS", "/v1/chat/completions", "", "text/plain",
                              "Origin: https://evil.example\r\nAccess-Control-Request-Method: "
                              "POST\r\n");
  EXPECT_EQ(error_of(evil, 403)["code"], "origin_not_allowed");
  EXPECT_TRUE(header(evil, "access-control-allow-origin").empty());
  RawReply get_evil = request_raw(port_, "GET", "/v1/models", "", "application/json",
                                  "Origin: https://evil.example\r\n");
  EXPECT_EQ(get_evil.status, 200);
  EXPECT_TRUE(header(get_evil, "access-control-allow-origin").empty());
  RawReply get_ok = request_raw(port_, "GET", "/v1/models", "", "application/json",
                                "Origin: http://127.0.0.1:3000\r\n");
  EXPECT_EQ(header(get_ok, "access-control-allow-origin"), "http://127.0.0.1:3000");
  EXPECT_NE(header(get_ok, "access-control-expose-headers").find("x-request-id"),
            std::string::npos);
  // A streamed answer carries them too.
  json b = chat_body("Hi", 3);
  b["stream"] = true;
  RawReply s = post(port_, "/v1/chat/completions", b, "Origin: http://localhost:8000\r\n");
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(header(s, "access-control-allow-origin"), "http://localhost:8000");
}

class CorsAnyWithKeys : public ClientsServer {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    dir_ = testing::make_temp_dir("power-cors");
    const std::string keys = dir_ + "/keys";
    std::ofstream(keys) << "sk-cors\n";
    start({"*"}, keys);
  }
  void TearDown() override {
    ClientsServer::TearDown();
    if (!dir_.empty()) testing::remove_tree(dir_);
  }
  std::string dir_;
};

TEST_F(CorsAnyWithKeys, PreflightNeedsNoKeyAndErrorsCarryTheHeaders) {
  POWER_REQUIRE_SHARED();
  RawReply pre = request_raw(port_, "OPTIONS", "/v1/models", "", "text/plain",
                             "Origin: https://app.example\r\nAccess-Control-Request-Method: "
                             "GET\r\n");
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(header(pre, "access-control-allow-origin"), "https://app.example");
  RawReply denied = request_raw(port_, "GET", "/v1/models", "", "application/json",
                                "Origin: https://app.example\r\n");
  EXPECT_EQ(error_of(denied, 401)["type"], "invalid_request_error");
  EXPECT_EQ(header(denied, "access-control-allow-origin"), "https://app.example");
  RawReply ok = request_raw(port_, "GET", "/v1/models", "", "application/json",
                            "Origin: https://app.example\r\nAuthorization: Bearer sk-cors\r\n");
  EXPECT_EQ(ok.status, 200);
}

// ---- OpenAI fields ----

TEST_F(ClientsServer, NChoicesShareThePromptKv) {
  POWER_REQUIRE_SHARED();
  // A prompt longer than a KV block, so the followers find its blocks in the prefix cache.
  std::string text = "Lily and Ben went to the park to play with the big red ball.";
  for (int i = 0; i < 4; ++i) text += " They ran and laughed in the sun all day long.";
  RawReply one = post(port_, "/v1/chat/completions", chat_body(text));
  ASSERT_EQ(one.status, 200) << one.body;
  const json single = body_of(one);
  const std::string expected = single["choices"][0]["message"]["content"];

  // Two fresh prompts of the same shape: one alone (n = 1), one with n = 3.
  auto fresh = [](const std::string& who) {
    std::string t = who + " went to the shop to buy some bread and milk for the family.";
    for (int i = 0; i < 4; ++i) t += " " + who + " walked and sang a happy song on the way home.";
    return t;
  };
  const uint64_t c0 = metric(port_, "power_prompt_cache_tokens_total");
  json b = chat_body(fresh("Tom"));
  const json alone = body_of(post(port_, "/v1/chat/completions", b));
  const uint64_t c1 = metric(port_, "power_prompt_cache_tokens_total");
  b["messages"][0]["content"] = fresh("Sam");
  b["n"] = 3;
  RawReply three = post(port_, "/v1/chat/completions", b);
  ASSERT_EQ(three.status, 200) << three.body;
  const uint64_t c2 = metric(port_, "power_prompt_cache_tokens_total");
  const json j = body_of(three);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  // Choices 1 and 2 found most of choice 0's prompt in the prefix cache (all but its last,
  // partial KV block); the single request found at most the shared template prefix.
  const int64_t prompt_tokens = alone["usage"]["prompt_tokens"];
  EXPECT_GT(prompt_tokens, 64);
  EXPECT_GE(static_cast<int64_t>(c2 - c1), static_cast<int64_t>(c1 - c0) + 2 * (prompt_tokens / 2));
  // usage counts the prompt once and every choice's tokens.
  b["n"] = 1;
  EXPECT_EQ(j["usage"]["prompt_tokens"],
            body_of(post(port_, "/v1/chat/completions", b))["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3 * 12);
  // Greedy: every choice is the n = 1 text.
  json g = chat_body(text);
  g["n"] = 2;
  const json two = body_of(post(port_, "/v1/chat/completions", g));
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_EQ(two["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(two["choices"][1]["message"]["content"], expected);
}

TEST_F(ClientsServer, SampledChoicesDifferAndStreamsNumberThem) {
  POWER_REQUIRE_SHARED();
  json b = chat_body("Once upon a time", 16);
  b["temperature"] = 1.0;
  b["seed"] = 7;
  b["n"] = 2;
  const json j = body_of(post(port_, "/v1/chat/completions", b));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_NE(j["choices"][0]["message"]["content"], j["choices"][1]["message"]["content"]);
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  RawReply s = post(port_, "/v1/chat/completions", b);
  ASSERT_EQ(s.status, 200);
  std::string text[2];
  int finishes[2] = {0, 0};
  json usage;
  for (const json& e : sse_events(s.body)) {
    if (e.contains("usage") && !e["usage"].is_null()) usage = e["usage"];
    for (const json& c : e["choices"]) {
      const int i = c["index"];
      ASSERT_TRUE(i == 0 || i == 1);
      if (c["delta"].contains("content")) text[i] += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) ++finishes[i];
    }
  }
  // The same seeds give the same choices streamed or not.
  EXPECT_EQ(text[0], j["choices"][0]["message"]["content"]);
  EXPECT_EQ(text[1], j["choices"][1]["message"]["content"]);
  EXPECT_EQ(finishes[0], 1);
  EXPECT_EQ(finishes[1], 1);
  EXPECT_EQ(usage["completion_tokens"], j["usage"]["completion_tokens"]);
}

TEST_F(ClientsServer, PromptArraysGiveOneChoicePerPrompt) {
  POWER_REQUIRE_SHARED();
  auto complete = [&](json prompt, int n) {
    return body_of(post(port_, "/v1/completions",
                        json{{"model", kModel},
                             {"prompt", prompt},
                             {"max_tokens", 8},
                             {"temperature", 0},
                             {"n", n}}));
  };
  const std::string a = complete("Once upon a time", 1)["choices"][0]["text"];
  const std::string b = complete("The little dog", 1)["choices"][0]["text"];
  const json both = complete(json::array({"Once upon a time", "The little dog"}), 1);
  ASSERT_EQ(both["choices"].size(), 2u);
  EXPECT_EQ(both["choices"][0]["text"], a);
  EXPECT_EQ(both["choices"][1]["text"], b);
  // n per prompt: index = prompt * n + j.
  const json four = complete(json::array({"Once upon a time", "The little dog"}), 2);
  ASSERT_EQ(four["choices"].size(), 4u);
  EXPECT_EQ(four["choices"][1]["text"], a);
  EXPECT_EQ(four["choices"][2]["text"], b);
  EXPECT_EQ(four["choices"][3]["index"], 3);
  // Token arrays too; echo puts the prompt first.
  const json tok = body_of(post(port_, "/tokenize", json{{"content", "Once upon a time"}}));
  json e = complete(json::array({tok["tokens"]}), 1);
  EXPECT_EQ(e["choices"][0]["text"], a);
  json echo = body_of(post(port_, "/v1/completions",
                           json{{"model", kModel},
                                {"prompt", "Once upon a time"},
                                {"max_tokens", 8},
                                {"temperature", 0},
                                {"echo", true}}));
  EXPECT_EQ(echo["choices"][0]["text"], "Once upon a time" + a);
}

TEST_F(ClientsServer, PredictionDraftsAndLeavesTheOutputAlone) {
  POWER_REQUIRE_SHARED();
  json b = chat_body("Once upon a time there was", 40);
  const std::string plain =
      body_of(post(port_, "/v1/chat/completions", b))["choices"][0]["message"]["content"];
  b["prediction"] = {{"type", "content"}, {"content", plain}};
  const json j = body_of(post(port_, "/v1/chat/completions", b));
  EXPECT_EQ(j["choices"][0]["message"]["content"], plain);
  const json& d = j["usage"]["completion_tokens_details"];
  EXPECT_GT(d["accepted_prediction_tokens"].get<int64_t>(), 10);
  // A prediction that is wrong still gives the same output, with its drafts rejected.
  b["prediction"]["content"] = "zzz qqq xxx zzz qqq xxx zzz qqq xxx";
  const json w = body_of(post(port_, "/v1/chat/completions", b));
  EXPECT_EQ(w["choices"][0]["message"]["content"], plain);
  EXPECT_EQ(error_of(post(port_, "/v1/chat/completions",
                          [&] {
                            json x = b;
                            x["prediction"]["extra"] = 1;
                            return x;
                          }()),
                     400)["param"],
            "prediction.extra");
}

TEST_F(ClientsServer, FieldsAreHonouredOrRefusedWithTheirReason) {
  POWER_REQUIRE_SHARED();
  auto with = [&](const std::string& key, json value) {
    json b = chat_body("Hi", 3);
    b[key] = std::move(value);
    return post(port_, "/v1/chat/completions", b);
  };
  // Accepted (bookkeeping) or honoured.
  for (auto [k, v] :
       std::vector<std::pair<std::string, json>>{{"metadata", {{"team", "a"}}},
                                                 {"store", false},
                                                 {"user", "u1"},
                                                 {"safety_identifier", "hash"},
                                                 {"prompt_cache_key", "conv-1"},
                                                 {"prompt_cache_retention", "in_memory"},
                                                 {"modalities", {"text"}},
                                                 {"parallel_tool_calls", false},
                                                 {"max_completion_tokens", 2}}) {
    EXPECT_EQ(with(k, v).status, 200) << k;
  }
  const json tier = body_of(with("service_tier", "priority"));
  EXPECT_EQ(tier["service_tier"], "priority");
  EXPECT_EQ(body_of(with("service_tier", "auto"))["service_tier"], "default");
  // Refused, each with its own reason.
  for (const char* k : {"audio", "web_search_options", "moderation"}) {
    json e = error_of(with(k, json::object()), 400);
    EXPECT_EQ(e["param"], k);
    EXPECT_EQ(e["code"], "unsupported_field");
    EXPECT_NE(e["message"].get<std::string>().find("not supported: "), std::string::npos) << k;
  }
  EXPECT_EQ(error_of(with("modalities", {"text", "audio"}), 400)["code"], "unsupported_field");
  EXPECT_EQ(error_of(with("service_tier", "scale"), 400)["code"], "unsupported_field");
  // stories260K's template (ChatML) has no reasoning or verbosity control.
  json re = error_of(with("reasoning_effort", "low"), 400);
  EXPECT_EQ(re["param"], "reasoning_effort");
  EXPECT_NE(re["message"].get<std::string>().find("chat template"), std::string::npos);
  EXPECT_EQ(error_of(with("verbosity", "low"), 400)["param"], "verbosity");
  // Tools: unknown keys inside a tool or a function are refused; custom tools and
  // allowed_tools choices are not implemented.
  json tool = {{"type", "function"},
               {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}};
  json bad_tool = tool;
  bad_tool["function"]["frob"] = 1;
  EXPECT_EQ(error_of(with("tools", {bad_tool}), 400)["param"], "tools[0].function.frob");
  EXPECT_EQ(
      error_of(with("tools", {{{"type", "custom"}, {"custom", {{"name", "x"}}}}}), 400)["code"],
      "unsupported_field");
  EXPECT_EQ(error_of(with("tool_choice", {{"type", "allowed_tools"}}), 400)["code"],
            "unsupported_field");
  EXPECT_EQ(with("tools", {tool}).status, 200);
  // Unknown keys, at the top or nested in known objects.
  EXPECT_EQ(error_of(with("frobnicate", 1), 400)["code"], "unknown_field");
  EXPECT_EQ(
      error_of(with("response_format", {{"type", "json_object"}, {"strict", true}}), 400)["param"],
      "response_format.strict");
  EXPECT_EQ(error_of(with("stream_options", {{"include_usage", true}, {"x", 1}}), 400)["param"],
            "stream_options.x");
  // Completions-only fields.
  auto comp = [&](const std::string& key, json value) {
    json b = {{"model", kModel}, {"prompt", "Hi"}, {"max_tokens", 2}};
    b[key] = std::move(value);
    return post(port_, "/v1/completions", b);
  };
  EXPECT_EQ(comp("best_of", 1).status, 200);
  EXPECT_EQ(comp("best_of", 3).status, 200);
  // stories260K's vocabulary has no fill-in-the-middle tokens.
  json fim = error_of(comp("suffix", "end"), 400);
  EXPECT_EQ(fim["code"], "unsupported_value");
  EXPECT_NE(fim["message"].get<std::string>().find("fill-in-the-middle"), std::string::npos);
  EXPECT_EQ(comp("suffix", "").status, 200);
  EXPECT_EQ(with("prompt_cache_options", {{"mode", "implicit"}}).status, 200);
  EXPECT_EQ(error_of(with("prompt_cache_options", {{"mode", "explicit"}}), 400)["code"],
            "unsupported_field");
}

TEST_F(ClientsServer, DeprecatedFunctionsComeBackInTheirOwnShape) {
  POWER_REQUIRE_SHARED();
  const json params = {
      {"type", "object"},
      {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}}}},
      {"required", {"city"}}};
  json b = chat_body("Weather in Paris?", 60);
  b["tools"] = {
      {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}}};
  b["tool_choice"] = "required";
  const json tools = body_of(post(port_, "/v1/chat/completions", b));
  ASSERT_EQ(tools["choices"][0]["finish_reason"], "tool_calls") << tools.dump();
  const json call = tools["choices"][0]["message"]["tool_calls"][0]["function"];
  json old = chat_body("Weather in Paris?", 60);
  old["functions"] = {{{"name", "get_weather"}, {"parameters", params}}};
  old["function_call"] = {{"name", "get_weather"}};
  const json legacy = body_of(post(port_, "/v1/chat/completions", old));
  EXPECT_EQ(legacy["choices"][0]["finish_reason"], "function_call") << legacy.dump();
  EXPECT_EQ(legacy["choices"][0]["message"]["function_call"]["name"], "get_weather");
  EXPECT_EQ(legacy["choices"][0]["message"]["function_call"]["arguments"], call["arguments"]);
  EXPECT_FALSE(legacy["choices"][0]["message"].contains("tool_calls"));
  // Streamed: delta.function_call pieces that add up to the same call.
  old["stream"] = true;
  RawReply s = post(port_, "/v1/chat/completions", old);
  std::string name, args, finish;
  for (const json& e : sse_events(s.body)) {
    for (const json& c : e["choices"]) {
      if (c["delta"].contains("function_call")) {
        const json& fc = c["delta"]["function_call"];
        if (fc.contains("name")) name += fc["name"].get<std::string>();
        args += fc["arguments"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, call["arguments"]);
  EXPECT_EQ(finish, "function_call");
  // An earlier call and its result in the old shape are accepted as history.
  json hist = chat_body("x", 4);
  hist["messages"] = {
      {{"role", "user"}, {"content", "Weather?"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"function_call", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Rome\"}"}}}},
      {{"role", "function"}, {"name", "get_weather"}, {"content", "sunny"}}};
  EXPECT_EQ(post(port_, "/v1/chat/completions", hist).status, 200);
  old.erase("stream");
  old["tools"] = b["tools"];
  EXPECT_EQ(error_of(post(port_, "/v1/chat/completions", old), 400)["param"], "functions");
}

TEST_F(ClientsServer, BestOfReturnsTheCandidateWithTheHighestMeanLogprob) {
  POWER_REQUIRE_SHARED();
  auto req = [&](int seed, json extra) {
    json b = {{"model", kModel},
              {"prompt", "Once upon a time"},
              {"max_tokens", 10},
              {"temperature", 1.0},
              {"seed", seed}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return body_of(post(port_, "/v1/completions", b));
  };
  // The candidates are the choices seeded 40, 41, 42: score each alone.
  double best = -1e9;
  std::string best_text;
  for (int j = 0; j < 3; ++j) {
    const json c = req(40 + j, {{"logprobs", 0}});
    const json& lps = c["choices"][0]["logprobs"]["token_logprobs"];
    double sum = 0;
    for (const auto& x : lps) sum += x.get<double>();
    const double mean = sum / static_cast<double>(lps.size());
    if (mean > best) {
      best = mean;
      best_text = c["choices"][0]["text"];
    }
  }
  const json r = req(40, {{"best_of", 3}});
  ASSERT_EQ(r["choices"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], best_text);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());  // not asked for
  EXPECT_EQ(r["usage"]["completion_tokens"], 30);      // every candidate's tokens count
  json s = {{"model", kModel}, {"prompt", "x"}, {"best_of", 2}, {"stream", true}};
  EXPECT_EQ(error_of(post(port_, "/v1/completions", s), 400)["param"], "best_of");
}

TEST_F(ClientsServer, ContextOverflowIsOpenAisError) {
  POWER_REQUIRE_SHARED();
  std::string huge;
  for (int i = 0; i < 400; ++i) huge += "The cat sat on the mat. ";
  json e = error_of(post(port_, "/v1/chat/completions", chat_body(huge)), 400);
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "messages");
  const std::string msg = e["message"];
  EXPECT_NE(msg.find("maximum context length is 512 tokens"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("does_not_fit"), std::string::npos);
  EXPECT_EQ(msg.find("out_of_range"), std::string::npos);
  json m = error_of(post(port_, "/v1/chat/completions", chat_body("Hi", 5000)), 400);
  EXPECT_EQ(m["code"], "context_length_exceeded");
  EXPECT_EQ(m["param"], "max_tokens");
  json c = error_of(
      post(port_, "/v1/completions", json{{"model", kModel}, {"prompt", huge}, {"max_tokens", 4}}),
      400);
  EXPECT_EQ(c["param"], "prompt");
  // Streaming: refused before the stream starts, the same way.
  json s = chat_body(huge);
  s["stream"] = true;
  EXPECT_EQ(error_of(post(port_, "/v1/chat/completions", s), 400)["code"],
            "context_length_exceeded");
}

// stories260K rewritten with a chat template that reads reasoning_effort and verbosity:
// each changes the rendered prompt, so prompt_tokens shows that the value reached it.
class TemplateControls : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    dir_ = testing::make_temp_dir("power-template");
    auto src = GgufFile::open(testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf");
    ASSERT_TRUE(src.ok());
    source_ = std::move(*src);
    GgufWriter w;
    for (const GgufKeyValue& kv : source_->metadata()) {
      if (kv.key != "general.alignment") w.set(kv.key, kv.value);
    }
    w.set("tokenizer.chat_template",
          GgufValue::str("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                         "{% if reasoning_effort is defined and reasoning_effort == 'high' %}"
                         " Think step by step, slowly and carefully.{% endif %}"
                         "{% if verbosity is defined and verbosity == 'high' %}"
                         " Tell a long story with many words.{% endif %}"
                         "{% if tools %}{% for t in tools %} You may call the function "
                         "{{ t['function']['name'] }}.{% endfor %}{% endif %}"));
    // Fill-in-the-middle token ids (three ordinary pieces of the vocabulary stand in).
    w.set("tokenizer.ggml.fim_pre_token_id", GgufValue::u32(10));
    w.set("tokenizer.ggml.fim_suf_token_id", GgufValue::u32(11));
    w.set("tokenizer.ggml.fim_mid_token_id", GgufValue::u32(12));
    for (const GgufTensor& t : source_->tensors()) {
      ASSERT_TRUE(w.add_tensor_view(t.name, t.type, t.ne, t.bytes()).ok());
    }
    const std::string path = dir_ + "/stories-effort.gguf";
    ASSERT_TRUE(w.write(path).ok());
    ServerOptions o;
    o.models = {path};
    o.load.n_ctx = 256;
    o.load.threads = 1;
    ASSERT_TRUE(server_.start(std::move(o)).ok());
    port_ = server_.port();
  }
  void TearDown() override {
    server_.stop();
    if (!dir_.empty()) testing::remove_tree(dir_);
  }
  int64_t prompt_tokens(const std::string& key, const std::string& value) {
    json b = {{"model", "stories-effort"},
              {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
              {"max_tokens", 1}};
    if (!key.empty()) b[key] = value;
    RawReply r = post(port_, "/v1/chat/completions", b);
    EXPECT_EQ(r.status, 200) << r.body;
    return body_of(r)["usage"]["prompt_tokens"];
  }
  std::string dir_;
  std::unique_ptr<GgufFile> source_;
  http_test::InProcessServer server_;
  int port_ = 0;
};

TEST_F(TemplateControls, ReasoningEffortAndVerbosityReachTheTemplate) {
  POWER_REQUIRE_SHARED();
  const int64_t plain = prompt_tokens("", "");
  EXPECT_EQ(prompt_tokens("reasoning_effort", "low"), plain);
  EXPECT_GT(prompt_tokens("reasoning_effort", "high"), plain + 5);
  EXPECT_EQ(prompt_tokens("verbosity", "medium"), plain);
  EXPECT_GT(prompt_tokens("verbosity", "high"), plain + 5);
  // Ollama's think reaches the same variable ("high").
  const json o =
      body_of(post(port_, "/api/chat",
                   json{{"model", "stories-effort"},
                        {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                        {"think", "high"},
                        {"options", {{"num_predict", 1}}},
                        {"stream", false}}));
  EXPECT_EQ(o["prompt_eval_count"], prompt_tokens("reasoning_effort", "high"));
  const json caps =
      body_of(post(port_, "/api/show", json{{"model", "stories-effort"}}))["capabilities"];
  EXPECT_EQ(caps, json({"completion", "tools", "thinking"}));
  // Ollama's tools reach the template too.
  auto ollama_prompt = [&](json extra) {
    json b = {{"model", "stories-effort"},
              {"messages", {{{"role", "user"}, {"content", "Weather in Rome?"}}}},
              {"options", {{"num_predict", 1}}},
              {"stream", false}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return body_of(post(port_, "/api/chat", b))["prompt_eval_count"].get<int64_t>();
  };
  json tools = {{{"type", "function"},
                 {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
  EXPECT_GT(ollama_prompt({{"tools", tools}}), ollama_prompt(json::object()) + 5);
}

TEST_F(TemplateControls, SuffixBuildsTheFillInTheMiddlePrompt) {
  POWER_REQUIRE_SHARED();
  auto tokens = [&](const std::string& text) {
    return body_of(post(port_, "/tokenize", json{{"content", text}}))["tokens"];
  };
  // llama.cpp's infill order: BOS, FIM prefix, the prompt, FIM suffix, the suffix, FIM middle.
  json ids = json::array({1, 10});
  for (const auto& t : tokens("Once upon")) ids.push_back(t);
  ids.push_back(11);
  for (const auto& t : tokens(" the end.")) ids.push_back(t);
  ids.push_back(12);
  const json by_hand = body_of(post(
      port_, "/v1/completions",
      json{{"model", "stories-effort"}, {"prompt", ids}, {"max_tokens", 8}, {"temperature", 0}}));
  const json fim = body_of(post(port_, "/v1/completions",
                                json{{"model", "stories-effort"},
                                     {"prompt", "Once upon"},
                                     {"suffix", " the end."},
                                     {"max_tokens", 8},
                                     {"temperature", 0}}));
  EXPECT_EQ(fim["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(fim["choices"][0]["text"], by_hand["choices"][0]["text"]);
}

// ---- tokenizer and model details ----

TEST_F(ClientsServer, TokenizeDetokenizeAndModelDetails) {
  POWER_REQUIRE_SHARED();
  const json t = body_of(post(port_, "/tokenize", json{{"content", "Once upon a time"}}));
  ASSERT_TRUE(t["tokens"].is_array());
  ASSERT_FALSE(t["tokens"].empty());
  const json bos = body_of(
      post(port_, "/tokenize",
           json{{"model", kModel}, {"content", "Once upon a time"}, {"add_special", true}}));
  EXPECT_EQ(bos["tokens"].size(), t["tokens"].size() + 1);
  const json back = body_of(post(port_, "/detokenize", json{{"tokens", t["tokens"]}}));
  // SPM: the space prefix the tokenizer added is dropped again, as llama.cpp's detokenize does.
  EXPECT_EQ(back["content"], "Once upon a time");
  const json pieces =
      body_of(post(port_, "/tokenize", json{{"content", "Once"}, {"with_pieces", true}}));
  std::string joined;
  for (const json& p : pieces["tokens"]) joined += p["piece"].get<std::string>();
  EXPECT_EQ(joined, " Once");
  EXPECT_EQ(error_of(post(port_, "/detokenize", json{{"tokens", {99999999}}}), 400)["param"],
            "tokens[0]");
  EXPECT_EQ(error_of(post(port_, "/tokenize", json{{"content", "x"}, {"bogus", 1}}), 400)["param"],
            "bogus");
  const json m = body_of(http_test::get_raw(port_, std::string("/v1/models/") + kModel));
  EXPECT_EQ(m["id"], kModel);
  EXPECT_EQ(m["context_length"], 512);
  EXPECT_EQ(m["max_model_len"], 512);
  EXPECT_EQ(m["arch"], "llama");
}

// ---- Ollama's API ----

std::vector<json> ndjson(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find('\n', at);
    const std::string line =
        body.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.empty()) out.push_back(json::parse(line, nullptr, false));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

TEST_F(ClientsServer, OllamaChatAndGenerateMatchTheOpenAiPath) {
  POWER_REQUIRE_SHARED();
  const json openai =
      body_of(post(port_, "/v1/chat/completions", chat_body("Once upon a time", 10)));
  const std::string expected = openai["choices"][0]["message"]["content"];
  const json opts = {{"temperature", 0}, {"num_predict", 10}, {"repeat_penalty", 1.0}};
  json req = {{"model", kModel},
              {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
              {"options", opts},
              {"stream", false}};
  RawReply r = post(port_, "/api/chat", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = body_of(r);
  EXPECT_EQ(j["message"]["role"], "assistant");
  EXPECT_EQ(j["message"]["content"], expected);
  EXPECT_EQ(j["done"], true);
  EXPECT_EQ(j["done_reason"], "length");
  EXPECT_EQ(j["eval_count"], 10);
  EXPECT_EQ(j["prompt_eval_count"], openai["usage"]["prompt_tokens"]);
  EXPECT_GT(j["total_duration"].get<int64_t>(), 0);
  // Streaming is the default: NDJSON lines whose contents add up to the same text.
  req.erase("stream");
  RawReply s = post(port_, "/api/chat", req);
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.head.find("content-type: application/x-ndjson"), std::string::npos);
  std::string text;
  std::vector<json> lines = ndjson(s.body);
  ASSERT_GE(lines.size(), 2u);
  for (const json& l : lines) text += l["message"]["content"].get<std::string>();
  EXPECT_EQ(text, expected);
  EXPECT_EQ(lines.back()["done"], true);
  for (size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_EQ(lines[i]["done"], false);
  // /api/generate renders the prompt as a user turn, like Ollama.
  const json g = body_of(post(port_, "/api/generate",
                              json{{"model", kModel},
                                   {"prompt", "Once upon a time"},
                                   {"options", opts},
                                   {"stream", false}}));
  EXPECT_EQ(g["response"], expected);
  // raw: the prompt as it is, as /v1/completions.
  const json c = body_of(post(port_, "/v1/completions",
                              json{{"model", kModel},
                                   {"prompt", "Once upon a time"},
                                   {"max_tokens", 10},
                                   {"temperature", 0}}));
  const json raw = body_of(post(port_, "/api/generate",
                                json{{"model", kModel},
                                     {"prompt", "Once upon a time"},
                                     {"raw", true},
                                     {"options", opts},
                                     {"stream", false}}));
  EXPECT_EQ(raw["response"], c["choices"][0]["text"]);
}

TEST_F(ClientsServer, OllamaFieldsAndErrors) {
  POWER_REQUIRE_SHARED();
  auto chat = [&](json extra) {
    json b = {{"model", kModel},
              {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
              {"options", {{"num_predict", 3}}},
              {"stream", false}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return post(port_, "/api/chat", b);
  };
  auto ollama_error = [&](const RawReply& r, int status) {
    EXPECT_EQ(r.status, status) << r.body;
    json j = body_of(r);
    EXPECT_TRUE(j["error"].is_string()) << r.body;
    return j["error"].is_string() ? j["error"].get<std::string>() : std::string();
  };
  EXPECT_NE(ollama_error(chat({{"bogus", 1}}), 400).find("bogus"), std::string::npos);
  EXPECT_NE(ollama_error(chat({{"options", {{"num_ctx", 100000}}}}), 400).find("--ctx"),
            std::string::npos);
  EXPECT_NE(ollama_error(chat({{"options", {{"num_thread", 4}}}}), 400).find("loaded"),
            std::string::npos);
  EXPECT_NE(ollama_error(chat({{"options", {{"mirostat", 2}}}}), 400).find("Mirostat"),
            std::string::npos);
  EXPECT_NE(ollama_error(chat({{"options", {{"warp", 1}}}}), 400).find("unknown option"),
            std::string::npos);
  EXPECT_NE(ollama_error(chat({{"think", true}}), 400).find("template"), std::string::npos);
  ollama_error(post(port_, "/api/chat",
                    json{{"model", "nope"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}),
               404);
  EXPECT_EQ(
      chat({{"keep_alive", "5m"}, {"options", {{"num_ctx", 256}, {"seed", 3}, {"stop", {"."}}}}})
          .status,
      200);
  // An earlier call in Ollama's shape (arguments as an object) is accepted as history.
  json tools = {
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"description", "Weather in a city"},
         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  json history = {
      {"messages",
       {{{"role", "user"}, {"content", "Weather in Rome?"}},
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls",
          {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Rome"}}}}}}}}},
        {{"role", "tool"}, {"tool_name", "get_weather"}, {"content", "sunny"}}}},
      {"tools", tools}};
  EXPECT_EQ(chat(history).status, 200);
  // format json: one JSON object.
  const json f = body_of(chat({{"format", "json"}, {"options", {{"num_predict", 24}}}}));
  EXPECT_EQ(f["done"], true);
  // format as a JSON schema: the reply is an object with the required integer.
  const json schema = {{"type", "object"},
                       {"properties", {{"age", {{"type", "integer"}}}}},
                       {"required", {"age"}},
                       {"additionalProperties", false}};
  const json sch =
      body_of(chat({{"format", schema}, {"options", {{"num_predict", 40}, {"temperature", 0}}}}));
  ASSERT_EQ(sch["done_reason"], "stop") << sch.dump();
  const json parsed = json::parse(sch["message"]["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << sch.dump();
  EXPECT_TRUE(parsed["age"].is_number_integer());
  EXPECT_EQ(parsed.size(), 1u);
  // Load / unload without input.
  const json load = body_of(post(port_, "/api/generate", json{{"model", kModel}}));
  EXPECT_EQ(load["done_reason"], "load");
  // Tags, show, version, ps.
  const json tags = body_of(http_test::get_raw(port_, "/api/tags"));
  ASSERT_EQ(tags["models"].size(), 1u);
  EXPECT_EQ(tags["models"][0]["name"], kModel);
  EXPECT_EQ(tags["models"][0]["details"]["format"], "gguf");
  EXPECT_EQ(tags["models"][0]["details"]["family"], "llama");
  const json show = body_of(post(port_, "/api/show", json{{"model", kModel}}));
  EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(show["model_info"]["llama.context_length"], 128);          // the file's trained context
  EXPECT_FALSE(show["model_info"].contains("tokenizer.ggml.tokens"));  // big arrays left out
  EXPECT_EQ(show["capabilities"][0], "completion");
  EXPECT_TRUE(body_of(http_test::get_raw(port_, "/api/version"))["version"].is_string());
  const json ps = body_of(http_test::get_raw(port_, "/api/ps"));
  EXPECT_EQ(ps["models"][0]["context_length"], 512);
  EXPECT_GT(ps["models"][0]["size"].get<uint64_t>(), 0u);
  // Unload, then the next request loads it again (as Ollama does).
  const json unload =
      body_of(post(port_, "/api/generate", json{{"model", kModel}, {"keep_alive", 0}}));
  EXPECT_EQ(unload["done_reason"], "unload");
  EXPECT_TRUE(body_of(http_test::get_raw(port_, "/api/tags"))["models"].empty());
}

}  // namespace
}  // namespace power::server
